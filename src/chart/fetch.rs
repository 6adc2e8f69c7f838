//! Network access for charts: an HTTP client with timeouts and retries,
//! Helm repository indexes, OCI registries (distribution API, anonymous
//! bearer tokens), and verified downloads into the cache, many at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::chart::cache::ChartCache;

/// How downloads behave.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Downloads at the same time.
    pub concurrency: usize,
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    pub read_timeout: Duration,
    /// Retries after the first attempt (429, 5xx, connection errors only).
    pub retries: u32,
    /// The first retry's delay; each later one doubles.
    pub backoff: Duration,
    /// Draw a progress bar (only ever on a TTY).
    pub progress: bool,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            concurrency: 8,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(250),
            progress: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("GET {url}: HTTP {status}{hint}")]
    Status { url: String, status: u16, hint: String },
    #[error("chart {chart:?} {version}: digest mismatch for {url}: expected sha256:{expected}, got sha256:{actual}; nothing was cached (if the repository republished the chart, run `kube-aws charts lock --update`)")]
    DigestMismatch {
        chart: String,
        version: String,
        url: String,
        expected: String,
        actual: String,
    },
    #[error("OCI {reference}: {reason}")]
    Oci { reference: String, reason: String },
    #[error("chart cache {path}: {source}")]
    Cache { path: String, source: std::io::Error },
}

impl FetchError {
    fn retryable(&self) -> bool {
        match self {
            FetchError::Unreachable { .. } => true,
            FetchError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// An HTTP client shared by one run: counts requests, caches OCI tokens.
pub struct Http {
    client: reqwest::Client,
    opts: FetchOptions,
    requests: AtomicUsize,
    tokens: Mutex<HashMap<String, String>>,
}

fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

impl Http {
    pub fn new(opts: FetchOptions) -> Result<Http, FetchError> {
        let client = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            .read_timeout(opts.read_timeout)
            .user_agent(concat!("kube-aws/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Unreachable {
                url: String::new(),
                reason: describe(&e),
            })?;
        Ok(Http {
            client,
            opts,
            requests: AtomicUsize::new(0),
            tokens: Mutex::new(HashMap::new()),
        })
    }

    pub fn options(&self) -> &FetchOptions {
        &self.opts
    }

    /// Requests sent so far (retries included).
    pub fn request_count(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Runs `attempt` with exponential backoff while it fails retryably.
    async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T, FetchError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, FetchError>>,
    {
        let mut delay = self.opts.backoff;
        let mut n = 0;
        loop {
            match attempt().await {
                Err(e) if e.retryable() && n < self.opts.retries => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    n += 1;
                }
                other => return other,
            }
        }
    }

    async fn send(&self, url: &str, headers: &[(&str, String)]) -> Result<reqwest::Response, FetchError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.client.get(url);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.map_err(|e| FetchError::Unreachable {
            url: url.to_string(),
            reason: describe(&e),
        })
    }

    fn status_error(url: &str, status: reqwest::StatusCode) -> FetchError {
        let hint = match status.as_u16() {
            404 => " (not found: check the repository URL, chart name and version)".to_string(),
            401 | 403 => " (access denied: kube-aws reads public repositories only)".to_string(),
            _ => String::new(),
        };
        FetchError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            hint,
        }
    }

    /// GETs a whole body, with retries.
    pub async fn get_bytes(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        self.retry(|| async {
            let resp = self.send(url, &[]).await?;
            if !resp.status().is_success() {
                return Err(Self::status_error(url, resp.status()));
            }
            // Chunks go straight into one buffer sized from Content-Length, so a
            // 16 MB index costs 16 MB (no doubling while the body grows).
            let mut resp = resp;
            let mut body = Vec::with_capacity(resp.content_length().unwrap_or(0).min(1 << 30) as usize);
            while let Some(chunk) = resp.chunk().await.map_err(|e| FetchError::Unreachable {
                url: url.to_string(),
                reason: describe(&e),
            })? {
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        })
        .await
    }

    /// A repository's index.yaml text.
    pub async fn get_index(&self, repo_url: &str) -> Result<String, FetchError> {
        let url = format!("{}/index.yaml", repo_url.trim_end_matches('/'));
        let bytes = self.get_bytes(&url).await?;
        String::from_utf8(bytes).map_err(|_| FetchError::Status {
            url,
            status: 200,
            hint: ": the index is not UTF-8 text".into(),
        })
    }

    /// Downloads `url` (https or an `oci://` chart reference) into the cache,
    /// checking its sha256 against `expected` before it enters the cache.
    pub async fn download_verified(
        &self,
        cache: &ChartCache,
        chart: &str,
        version: &str,
        url: &str,
        expected: &str,
    ) -> Result<std::path::PathBuf, FetchError> {
        let cache_err = |source: std::io::Error| FetchError::Cache {
            path: cache.root().display().to_string(),
            source,
        };
        self.retry(|| async {
            let resp = if url.starts_with("oci://") {
                let r = OciRef::parse(url)?;
                self.oci_get(&r, &format!("blobs/sha256:{expected}"), "*/*").await?
            } else {
                let resp = self.send(url, &[]).await?;
                if !resp.status().is_success() {
                    return Err(Self::status_error(url, resp.status()));
                }
                resp
            };
            let tmp = cache.temp_file().map_err(cache_err)?;
            let mut file = tokio::fs::File::from_std(tmp.reopen().map_err(cache_err)?);
            let mut hasher = Sha256::new();
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| FetchError::Unreachable {
                    url: url.to_string(),
                    reason: describe(&e),
                })?;
                hasher.update(&chunk);
                file.write_all(&chunk).await.map_err(cache_err)?;
            }
            file.flush().await.map_err(cache_err)?;
            file.sync_all().await.map_err(cache_err)?;
            drop(file);
            let actual = hex::encode(hasher.finalize());
            if actual != expected {
                // The temporary file is deleted on drop: nothing enters the cache.
                return Err(FetchError::DigestMismatch {
                    chart: chart.into(),
                    version: version.into(),
                    url: url.into(),
                    expected: expected.into(),
                    actual,
                });
            }
            cache.commit(tmp, expected).map_err(cache_err)
        })
        .await
    }

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
            .and_then(crate::chart::index::normalize_digest)
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
        let path = path.split('@').next().unwrap_or(path);
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

/// Runs jobs with at most `limit` at a time, keeping input order in the output.
pub async fn bounded<T, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Vec<Fut::Output>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future,
{
    let mut out: Vec<(usize, Fut::Output)> = futures::stream::iter(items.into_iter().enumerate().map(|(i, t)| {
        let fut = f(t);
        async move { (i, fut.await) }
    }))
    .buffer_unordered(limit.max(1))
    .collect()
    .await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}

/// Inputs of `fetch_charts`.
#[derive(Debug, Clone)]
pub struct FetchChartsOptions {
    /// The work tree (for `path:` charts).
    pub dir: std::path::PathBuf,
    pub charts: Vec<crate::chart::lock::LockedChart>,
    pub fetch: FetchOptions,
    pub cache_dir: std::path::PathBuf,
}

/// What `fetch_charts` did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchReport {
    /// Charts downloaded now.
    pub downloaded: Vec<String>,
    /// Charts already in the cache (no request made).
    pub cached: Vec<String>,
    /// Chart directories, which are read in place.
    pub local: Vec<String>,
    pub requests: usize,
}

/// Makes sure every locked chart is in the cache, downloading the missing
/// ones at most `concurrency` at a time. The first failure is returned after
/// the others finish; a failed chart never enters the cache.
pub fn fetch_charts(opts: FetchChartsOptions) -> Result<FetchReport, FetchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| FetchError::Cache {
            path: "tokio runtime".into(),
            source: e,
        })?;
    rt.block_on(fetch_charts_async(opts))
}

/// The async body of `fetch_charts`.
pub async fn fetch_charts_async(opts: FetchChartsOptions) -> Result<FetchReport, FetchError> {
    let http = Http::new(opts.fetch.clone())?;
    let cache = ChartCache::new(&opts.cache_dir);
    let mut report = FetchReport {
        downloaded: Vec::new(),
        cached: Vec::new(),
        local: Vec::new(),
        requests: 0,
    };
    let mut todo = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in &opts.charts {
        let label = format!("{} {}", c.chart, c.version);
        let Some(hex) = c.digest.clone() else {
            report.local.push(label);
            continue;
        };
        if cache.contains(&hex) {
            report.cached.push(label);
        } else if seen.insert(hex.clone()) {
            todo.push((c.clone(), hex, label));
        }
    }
    let progress = crate::progress::Progress::new(todo.len() as u64, "fetching charts", opts.fetch.progress);
    let results = bounded(todo, opts.fetch.concurrency, |(c, hex, label)| {
        let (http, cache, progress, dir) = (&http, &cache, &progress, &opts.dir);
        async move {
            let res = if let Some(p) = c.source.strip_prefix("path:") {
                store_local(cache, dir, p, &c, &hex)
            } else {
                match c.urls.first() {
                    Some(url) => http
                        .download_verified(cache, &c.chart, &c.version, url, &hex)
                        .await
                        .map(|_| ()),
                    None => Err(FetchError::Oci {
                        reference: c.source.clone(),
                        reason: format!("chart {:?} {} has no download URL in the lock", c.chart, c.version),
                    }),
                }
            };
            progress.inc();
            res.map(|_| label)
        }
    })
    .await;
    progress.finish();
    report.requests = http.request_count();
    for r in results {
        report.downloaded.push(r?);
    }
    Ok(report)
}

fn store_local(
    cache: &ChartCache,
    dir: &std::path::Path,
    rel: &str,
    c: &crate::chart::lock::LockedChart,
    hex: &str,
) -> Result<(), FetchError> {
    let path = dir.join(rel);
    let bytes = crate::reader::read_bytes(
        dir,
        std::path::Path::new(rel),
        std::path::Path::new(rel),
        &crate::reader::ARCHIVE_LIMIT,
    )
    .map_err(|e| FetchError::Cache {
        path: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let actual = crate::chart::cache::sha256_hex(&bytes);
    if actual != hex {
        return Err(FetchError::DigestMismatch {
            chart: c.chart.clone(),
            version: c.version.clone(),
            url: path.display().to_string(),
            expected: hex.into(),
            actual,
        });
    }
    cache.store(&bytes).map(|_| ()).map_err(|e| FetchError::Cache {
        path: cache.root().display().to_string(),
        source: e,
    })
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
