//! OCI registries: `oci://` chart references and the distribution API
//! (tags, manifests, blobs) with anonymous bearer tokens.

use std::collections::HashMap;

use super::http::{describe, FetchError, Http};

impl Http {
    /// GET `/v2/<repository>/<path>`, answering a bearer challenge with an
    /// anonymous token when the registry asks for one.
    pub async fn oci_get(&self, r: &OciRef, path: &str, accept: &str) -> Result<reqwest::Response, FetchError> {
        let url = format!("{}/v2/{}/{}", r.base_url(), r.repository, path);
        let scope_key = format!("{}/{}", r.registry, r.repository);
        self.retry(|| async {
            let mut headers = vec![("Accept", accept.to_string())];
            let token = self.tokens.lock().ok().and_then(|t| t.get(&scope_key).cloned());
            if let Some(t) = &token {
                headers.push(("Authorization", format!("Bearer {t}")));
            }
            let resp = self.send(&url, &headers).await?;
            if resp.status() == reqwest::StatusCode::UNAUTHORIZED && token.is_none() {
                let challenge = resp
                    .headers()
                    .get("www-authenticate")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let t = self.oci_token(r, &challenge).await?;
                if let Ok(mut map) = self.tokens.lock() {
                    map.insert(scope_key.clone(), t.clone());
                }
                headers.push(("Authorization", format!("Bearer {t}")));
                let resp = self.send(&url, &headers).await?;
                if !resp.status().is_success() {
                    return Err(Self::status_error(&url, resp.status()));
                }
                return Ok(resp);
            }
            if !resp.status().is_success() {
                return Err(Self::status_error(&url, resp.status()));
            }
            Ok(resp)
        })
        .await
    }

    async fn oci_token(&self, r: &OciRef, challenge: &str) -> Result<String, FetchError> {
        let oci_err = |reason: String| FetchError::Oci {
            reference: r.to_string(),
            reason,
        };
        let params = parse_challenge(challenge)
            .ok_or_else(|| oci_err(format!("unsupported authentication challenge {challenge:?}")))?;
        let realm = params
            .get("realm")
            .ok_or_else(|| oci_err(format!("no realm in challenge {challenge:?}")))?;
        let mut token_url = url::Url::parse(realm).map_err(|e| oci_err(format!("bad token realm {realm:?}: {e}")))?;
        {
            let mut q = token_url.query_pairs_mut();
            if let Some(s) = params.get("service") {
                q.append_pair("service", s);
            }
            let scope = params
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", r.repository));
            q.append_pair("scope", &scope);
        }
        let body = self.get_bytes(token_url.as_str()).await?;
        let json: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| oci_err(format!("token response is not JSON: {e}")))?;
        json.get("token")
            .or_else(|| json.get("access_token"))
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| oci_err("the token response holds no token".into()))
    }

    /// The tags of an OCI repository.
    pub async fn oci_tags(&self, r: &OciRef) -> Result<Vec<String>, FetchError> {
        let resp = self.oci_get(r, "tags/list", "application/json").await?;
        let json: serde_json::Value = resp.json().await.map_err(|e| FetchError::Oci {
            reference: r.to_string(),
            reason: format!("bad tag list: {}", describe(&e)),
        })?;
        Ok(json
            .get("tags")
            .and_then(|t| t.as_array())
            .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
            .unwrap_or_default())
    }

    /// The sha256 (hex) of a tag's chart layer: what Helm's digest is.
    pub async fn oci_chart_digest(&self, r: &OciRef, tag: &str) -> Result<String, FetchError> {
        let accept = "application/vnd.oci.image.manifest.v1+json";
        let resp = self.oci_get(r, &format!("manifests/{tag}"), accept).await?;
        let json: serde_json::Value = resp.json().await.map_err(|e| FetchError::Oci {
            reference: r.to_string(),
            reason: format!("bad manifest: {}", describe(&e)),
        })?;
        let layers = json
            .get("layers")
            .and_then(|l| l.as_array())
            .cloned()
            .unwrap_or_default();
        layers
            .iter()
            .find(|l| {
                l.get("mediaType").and_then(|m| m.as_str())
                    == Some("application/vnd.cncf.helm.chart.content.v1.tar+gzip")
            })
            .and_then(|l| l.get("digest")?.as_str())
            .and_then(crate::digest::Sha256Digest::parse)
            .map(crate::digest::Sha256Digest::into_hex)
            .ok_or_else(|| FetchError::Oci {
                reference: format!("{r}:{tag}"),
                reason: "the manifest has no Helm chart layer (is this a Helm chart?)".into(),
            })
    }
}

/// `Bearer realm="…",service="…",scope="…"` → its parameters.
fn parse_challenge(h: &str) -> Option<HashMap<String, String>> {
    let rest = h
        .trim()
        .strip_prefix("Bearer ")
        .or_else(|| h.trim().strip_prefix("bearer "))?;
    let mut out = HashMap::new();
    let re = regex::Regex::new(r#"(\w+)="([^"]*)""#).ok()?;
    for c in re.captures_iter(rest) {
        out.insert(c[1].to_string(), c[2].to_string());
    }
    Some(out)
}

/// `oci://host[:port]/path/name[:tag]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
}

impl std::fmt::Display for OciRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)
    }
}

impl OciRef {
    pub fn parse(s: &str) -> Result<OciRef, FetchError> {
        let bad = |reason: &str| FetchError::Oci {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        let rest = s.strip_prefix("oci://").ok_or_else(|| bad("must start with oci://"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected oci://host/path/name"))?;
        if registry.is_empty() || path.is_empty() {
            return Err(bad("expected oci://host/path/name"));
        }
        // A manifest digest is refused, not dropped (the rule is config's).
        if path.contains('@') {
            let why = crate::config::oci_reference_problem(s).unwrap_or_default();
            return Err(FetchError::Oci {
                reference: s.to_string(),
                reason: why,
            });
        }
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), Some(tag.to_string())),
            _ => (path.to_string(), None),
        };
        Ok(OciRef {
            registry: registry.to_string(),
            repository,
            tag,
        })
    }

    /// Registries on the loopback interface speak plain HTTP (like Helm's
    /// `--plain-http`, which tests with a local registry need); all others HTTPS.
    pub fn base_url(&self) -> String {
        let host = self
            .registry
            .rsplit_once(':')
            .map_or(self.registry.as_str(), |(h, _)| h);
        let plain = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
        format!("{}://{}", if plain { "http" } else { "https" }, self.registry)
    }

    /// The chart name: the last path segment.
    pub fn name(&self) -> &str {
        self.repository.rsplit('/').next().unwrap_or(&self.repository)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_references() {
        let r = OciRef::parse("oci://127.0.0.1:5000/charts/app:1.2.3").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "charts/app");
        assert_eq!(r.tag.as_deref(), Some("1.2.3"));
        assert_eq!(r.base_url(), "http://127.0.0.1:5000");
        assert_eq!(r.name(), "app");
        let r = OciRef::parse("oci://ghcr.io/org/chart").unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.base_url(), "https://ghcr.io");
        assert!(OciRef::parse("oci://host").is_err());
        // A manifest digest is never silently dropped.
        let pinned = format!("oci://ghcr.io/org/chart@sha256:{}", "a".repeat(64));
        let err = OciRef::parse(&pinned).unwrap_err().to_string();
        assert!(
            err.contains("pins a manifest digest") && err.contains("oci://ghcr.io/org/chart:1.2.3"),
            "{err}"
        );
    }

    #[test]
    fn bearer_challenge() {
        let p =
            parse_challenge(r#"Bearer realm="https://auth/token",service="reg",scope="repository:a/b:pull""#).unwrap();
        assert_eq!(p["realm"], "https://auth/token");
        assert_eq!(p["scope"], "repository:a/b:pull");
        assert!(parse_challenge("Basic realm=x").is_none());
    }
}
