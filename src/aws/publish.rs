//! Publishing: every rendered artifact, every chart tarball and the secret
//! bundle go to `s3URI/<cluster>/…` under keys that carry their sha256, so an
//! object that exists already is skipped (HEAD first) and a half-finished
//! publish is harmless. Every object is written with SSE.
//!
//! Keys (relative to `s3URI/<cluster>/`), as docs/rendered-layout.md sets them:
//! - a cloud-config `userdata/ROLE.cloud-config` → `userdata/ROLE/<sha256>.cloud-config`
//!   (the key render names in the stub);
//! - any other rendered file `DIR/NAME` → `DIR/<sha256>/NAME` (e.g. `stacks/<hex>/network.json`);
//! - a chart tarball → `charts/<hex>.tgz` (the plan's `chartObject`);
//! - the secret bundle → `secrets/<hex>/bundle.json`, plus `secrets/bundle.json`, the
//!   latest one, read back on the next publish so secrets stay stable.
//!
//! References between stacks: a stack template that names another stack by its
//! relative path (`stacks/network.json`), preceded by `/`, a quote, whitespace
//! or the start, has that path rewritten to the content-addressed one before its
//! own hash is taken (leaves first, so a change in a nested stack changes the
//! root template). Render writes
//! `"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}`.
//! Other files are never rewritten: the cloud-configs name node paths such as
//! `/etc/kube-aws/addons/plan.json` that must stay as they are.
//!
//! The root stack gets these parameters when its template declares them:
//! `ArtifactBaseURL` (HTTPS URL of `s3URI/<cluster>`), `ArtifactS3URI`
//! (`s3://bucket/prefix/<cluster>`), `ArtifactBucket`, `ArtifactPrefix`
//! (`prefix/<cluster>`), and `CACertHash`: kubeadm's hash of the cluster CA
//! the bundle carries (generated at the first publish, src/pki.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ServerSideEncryption;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::secrets::{self, SecretBundle, SecretValue};
use super::wait::ExpectedAddon;
use super::{sdk_error, AwsError, Clients};
use crate::config::{parse_s3_uri, ClusterConfig};
use crate::render::plan::Plan;

pub use crate::render::layout::{content_addressed, ADDON_PLAN, ROOT_TEMPLATE, SECRET_BUNDLE};

/// A chart tarball from the content-addressed cache.
#[derive(Debug, Clone)]
pub struct ChartTarball {
    pub digest: Sha256Digest,
    pub path: PathBuf,
}

/// What to publish.
#[derive(Debug)]
pub struct PublishInput<'a> {
    pub rendered_dir: &'a Path,
    pub charts: &'a [ChartTarball],
    pub cluster: &'a ClusterConfig,
    /// Plugin parameters marked `secret: true`.
    pub secrets: &'a [SecretValue],
}

/// Where a cluster's objects live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub bucket: String,
    /// `prefix/<cluster>`, no leading or trailing slash.
    pub prefix: String,
}

impl Location {
    pub fn new(cluster: &ClusterConfig) -> Result<Location, AwsError> {
        let (bucket, prefix) = parse_s3_uri(&cluster.s3_uri)
            .map_err(|why| AwsError::WorkTree(format!("s3URI {:?} is not usable: {why}", cluster.s3_uri)))?;
        let prefix = if prefix.is_empty() {
            cluster.cluster_name.clone()
        } else {
            format!("{prefix}/{}", cluster.cluster_name)
        };
        Ok(Location { bucket, prefix })
    }

    /// The full key of a key relative to the cluster prefix.
    pub fn key(&self, rel: &str) -> String {
        format!("{}/{rel}", self.prefix)
    }

    pub fn s3_uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

/// A file to upload, with its final key (relative to the cluster prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Path in the rendered directory (or `charts/…`, `secrets/…`).
    pub source: String,
    pub key: String,
    pub sha256: String,
    pub body: Vec<u8>,
}

/// One object, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PublishedObject {
    pub source: String,
    pub key: String,
    pub sha256: String,
    pub size: usize,
    /// False when the object existed already and was skipped.
    pub uploaded: bool,
}

/// The result of a publish.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    pub location: Location,
    pub root_template_url: String,
    /// The rewritten root template, to compare with the live one.
    #[serde(skip)]
    pub root_template_body: String,
    pub parameters: Vec<(String, String)>,
    pub objects: Vec<PublishedObject>,
    pub addons: Vec<ExpectedAddon>,
}

use crate::digest::{sha256_hex, Sha256Digest};

/// Reads every file under the rendered directory, by relative path with `/`.
pub fn read_rendered(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, AwsError> {
    if !dir.join(ROOT_TEMPLATE).is_file() {
        return Err(AwsError::WorkTree(format!(
            "{} is missing: run `kube-aws render` first",
            dir.join(ROOT_TEMPLATE).display()
        )));
    }
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| AwsError::WorkTree(format!("cannot read {}: {e}", d.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| AwsError::WorkTree(format!("cannot read {}: {e}", d.display())))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue; // temporaries of write_atomic, editor files
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .map_err(|_| AwsError::WorkTree(format!("{} is outside {}", path.display(), dir.display())))?
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().to_string())
                    .collect::<Vec<_>>()
                    .join("/");
                let bytes = std::fs::read(&path)
                    .map_err(|e| AwsError::WorkTree(format!("cannot read {}: {e}", path.display())))?;
                out.insert(rel, bytes);
            }
        }
    }
    Ok(out)
}

// Only stack templates refer to other files by their rendered path.
use crate::render::layout::is_stack;

fn is_path_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// The other files a text names, with their byte ranges.
fn references(text: &str, names: &[&str], matcher: &regex::Regex) -> Vec<(usize, usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(m) = matcher.find_at(text, at) {
        let before_ok = m.start() == 0 || {
            let b = bytes[m.start() - 1];
            !is_path_char(b)
                && (b == b'/' || b == b'"' || b == b'\'' || b.is_ascii_whitespace() || b == b'=' || b == b':')
        };
        let after_ok = m.end() == bytes.len() || !(is_path_char(bytes[m.end()]) || bytes[m.end()] == b'/');
        if before_ok && after_ok && names.contains(&m.as_str()) {
            out.push((m.start(), m.end(), m.as_str().to_string()));
            at = m.end();
        } else {
            at = m.start() + 1;
        }
    }
    out
}

/// Plans the upload of rendered files: rewrites references to content-addressed
/// keys (leaves first) and hashes each result. Pure.
pub fn plan_artifacts(files: &BTreeMap<String, Vec<u8>>) -> Result<Vec<Artifact>, AwsError> {
    let mut names: Vec<&str> = files.keys().map(String::as_str).filter(|n| is_stack(n)).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let alternation = names.iter().map(|n| regex::escape(n)).collect::<Vec<_>>().join("|");
    let matcher = regex::Regex::new(&format!("(?:{alternation})"))
        .map_err(|e| AwsError::WorkTree(format!("cannot index the rendered files: {e}")))?;

    // Who refers to whom.
    let mut refs: BTreeMap<&str, Vec<(usize, usize, String)>> = BTreeMap::new();
    for (name, bytes) in files {
        let found = match std::str::from_utf8(bytes) {
            Ok(text) if !names.is_empty() && is_stack(name) => references(text, &names, &matcher)
                .into_iter()
                .filter(|(_, _, r)| r != name)
                .collect(),
            _ => Vec::new(),
        };
        refs.insert(name.as_str(), found);
    }

    // Leaves first (Kahn); a cycle cannot be content-addressed.
    let mut done: BTreeMap<String, String> = BTreeMap::new(); // rel → key
    let mut out = Vec::new();
    let mut remaining: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .copied()
            .filter(|n| refs[n].iter().all(|(_, _, r)| done.contains_key(r)))
            .collect();
        if ready.is_empty() {
            let cycle: Vec<&str> = remaining.iter().copied().collect();
            return Err(AwsError::WorkTree(format!(
                "rendered files refer to each other in a cycle ({}): they cannot be published under content-addressed keys",
                cycle.join(", ")
            )));
        }
        for name in ready {
            let body = match std::str::from_utf8(&files[name]) {
                Ok(text) if !refs[name].is_empty() => {
                    let mut s = String::with_capacity(text.len() + 64 * refs[name].len());
                    let mut last = 0;
                    for (start, end, r) in &refs[name] {
                        s.push_str(&text[last..*start]);
                        s.push_str(&done[r]);
                        last = *end;
                    }
                    s.push_str(&text[last..]);
                    s.into_bytes()
                }
                _ => files[name].clone(),
            };
            let sha = sha256_hex(&body);
            let key = content_addressed(name, &sha);
            done.insert(name.to_string(), key.clone());
            out.push(Artifact {
                source: name.to_string(),
                key,
                sha256: sha,
                body,
            });
            remaining.remove(name);
        }
    }
    Ok(out)
}

/// The rendered addon plan, typed; None when the render has none.
pub fn read_plan(files: &BTreeMap<String, Vec<u8>>) -> Result<Option<Plan>, AwsError> {
    files.get(ADDON_PLAN).map(|b| parse_plan(b, ADDON_PLAN)).transpose()
}

/// Parses a rendered addon plan; `shown` names it in the error.
pub fn parse_plan(bytes: &[u8], shown: &str) -> Result<Plan, AwsError> {
    Plan::from_json(bytes).map_err(|e| {
        AwsError::WorkTree(format!(
            "{shown} is not a valid addon plan: {e}: run `kube-aws render` again"
        ))
    })
}

/// The addons the plan lists, and their WaitConditions when it names them.
pub fn expected_addons(files: &BTreeMap<String, Vec<u8>>) -> Result<Vec<ExpectedAddon>, AwsError> {
    Ok(read_plan(files)?.map(|p| addons_of(&p)).unwrap_or_default())
}

/// The plan's releases as the wait sees them.
pub fn addons_of(plan: &Plan) -> Vec<ExpectedAddon> {
    plan.releases
        .iter()
        .map(|r| ExpectedAddon {
            release: r.name.clone(),
            wait_condition: Some(r.wait_condition.clone()).filter(|w| !w.is_empty()),
        })
        .collect()
}

/// Parameters for the root stack: the known ones its template declares, plus
/// one secrets version per node stack (see [`secrets_versions`]).
pub fn root_parameters(
    root_template: &[u8],
    clients_url: &str,
    location: &Location,
    bundle: &SecretBundle,
) -> Result<Vec<(String, String)>, AwsError> {
    let template: serde_json::Value = serde_json::from_slice(root_template).unwrap_or_default();
    let declared: BTreeSet<String> = template
        .get("Parameters")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let mut out: Vec<(String, String)> = [
        ("ArtifactBaseURL", clients_url.to_string()),
        ("ArtifactS3URI", location.s3_uri()),
        ("ArtifactBucket", location.bucket.clone()),
        ("ArtifactPrefix", location.prefix.clone()),
    ]
    .into_iter()
    .filter(|(k, _)| declared.contains(*k))
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if declared.contains(crate::render::cfn::CA_CERT_HASH) {
        let hash = bundle
            .certificates
            .get(crate::pki::CA_CERT)
            .map(|pem| crate::pki::ca_cert_hash(pem))
            .transpose()
            .map_err(|e| AwsError::WorkTree(format!("the published cluster CA: {e}")))?
            .ok_or_else(|| AwsError::WorkTree("the secret bundle has no cluster CA certificate".into()))?;
        out.push((crate::render::cfn::CA_CERT_HASH.to_string(), hash));
    }
    out.extend(
        secrets_versions(&template, bundle)?
            .into_iter()
            .filter(|(k, _)| declared.contains(k)),
    );
    Ok(out)
}

/// For each parameter the root metadata lists, a hash of the ciphertexts of
/// the entries it covers: it changes exactly when one of those secrets
/// changes (unchanged secrets keep their ciphertext), and tells nothing about
/// the values.
pub fn secrets_versions(
    template: &serde_json::Value,
    bundle: &SecretBundle,
) -> Result<Vec<(String, String)>, AwsError> {
    let Some(covered) = template
        .pointer(&format!("/Metadata/{}", crate::render::cfn::SECRETS_METADATA))
        .and_then(|m| m.as_object())
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (param, names) in covered {
        let mut h = Sha256::new();
        for name in names.as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
            let ct = bundle.secrets.get(name).ok_or_else(|| {
                AwsError::WorkTree(format!(
                    "the rendered stacks use the secret {name:?}, which is not among the secrets to publish: \
                     run `kube-aws render` again (or drop --use-rendered)"
                ))
            })?;
            h.update(name.as_bytes());
            h.update([0]);
            h.update(ct.as_bytes());
            h.update([b'\n']);
        }
        out.push((param.clone(), hex::encode(h.finalize())[..16].to_string()));
    }
    Ok(out)
}

/// The AMI parameters the root template declares, each with the SSM public
/// parameter it is resolved from (the root metadata `kube-aws:amis`). Pure.
pub fn ami_sources(root_template: &str) -> Vec<(String, String)> {
    let t: serde_json::Value = serde_json::from_str(root_template).unwrap_or_default();
    t.pointer(&format!("/Metadata/{}", crate::render::cfn::AMI_METADATA))
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The nested stacks (root logical IDs) whose `ImageId` is the root parameter `param`.
pub fn stacks_using(root_template: &str, param: &str) -> Vec<String> {
    let t: serde_json::Value = serde_json::from_str(root_template).unwrap_or_default();
    t["Resources"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, r)| r["Properties"]["Parameters"]["ImageId"]["Ref"] == param)
        .map(|(id, _)| id.clone())
        .collect()
}

/// Checks a chart tarball against its digest and returns its artifact.
pub fn chart_artifact(chart: &ChartTarball) -> Result<Artifact, AwsError> {
    let want = chart.digest.hex();
    let body = std::fs::read(&chart.path).map_err(|e| {
        AwsError::WorkTree(format!(
            "chart tarball sha256:{want} is not readable at {}: {e} (run `kube-aws charts lock` to fetch it)",
            chart.path.display()
        ))
    })?;
    let got = sha256_hex(&body);
    if got != want {
        return Err(AwsError::WorkTree(format!(
            "chart tarball {} has sha256:{got}, the lock says sha256:{want}: delete it and run `kube-aws charts lock` to fetch it again",
            chart.path.display()
        )));
    }
    Ok(Artifact {
        source: chart.path.display().to_string(),
        key: crate::render::layout::chart_object(&got),
        sha256: got,
        body,
    })
}

fn content_type(key: &str) -> &'static str {
    match key.rsplit('.').next() {
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("tgz") => "application/gzip",
        Some("sh") => "text/x-shellscript",
        _ => "text/plain",
    }
}

/// Fails with a clear message when the bucket is missing; never creates it.
pub async fn check_bucket(clients: &Clients, bucket: &str) -> Result<(), AwsError> {
    match clients.s3.head_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Err(AwsError::BucketMissing {
            bucket: bucket.to_string(),
        }),
        Err(e) => Err(sdk_error("s3:HeadBucket", e)),
    }
}

async fn exists(clients: &Clients, bucket: &str, key: &str) -> Result<bool, AwsError> {
    match clients.s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
        Err(e) => Err(sdk_error("s3:HeadObject", e)),
    }
}

async fn put(clients: &Clients, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), AwsError> {
    clients
        .s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type(content_type(key))
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| sdk_error("s3:PutObject", e))?;
    Ok(())
}

/// Reads an object, None when it does not exist.
pub async fn get_object(clients: &Clients, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, AwsError> {
    match clients.s3.get_object().bucket(bucket).key(key).send().await {
        Ok(out) => {
            let data = out.body.collect().await.map_err(|e| AwsError::Network {
                operation: "s3:GetObject".into(),
                detail: e.to_string(),
            })?;
            Ok(Some(data.into_bytes().to_vec()))
        }
        Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
        Err(e) => Err(sdk_error("s3:GetObject", e)),
    }
}

/// Publishes everything. The secret bundle joins the rendered files as
/// `secrets/bundle.json` so templates can refer to it.
pub async fn publish(clients: &Clients, input: &PublishInput<'_>) -> Result<Published, AwsError> {
    let location = Location::new(input.cluster)?;
    let mut files = read_rendered(input.rendered_dir)?;
    let addons = expected_addons(&files)?;
    let charts = input.charts.iter().map(chart_artifact).collect::<Result<Vec<_>, _>>()?;
    let kms_key = input.cluster.kms_key_arn.as_deref().ok_or_else(|| {
        AwsError::WorkTree(
            "kmsKeyARN is not set in cluster.yaml: kube-aws encrypts the kubeadm bootstrap token and \
             the cluster CA keys with KMS before uploading them; set kmsKeyARN: arn:aws:kms:REGION:ACCOUNT:key/ID"
                .into(),
        )
    })?;
    check_bucket(clients, &location.bucket).await?;

    let previous: Option<SecretBundle> = get_object(clients, &location.bucket, &location.key(SECRET_BUNDLE))
        .await?
        .and_then(|b| serde_json::from_slice(&b).ok());
    let bundle = secrets::build_bundle(
        clients,
        kms_key,
        &input.cluster.cluster_name,
        previous.as_ref(),
        input.secrets,
    )
    .await?;
    let bundle_bytes = serde_json::to_vec_pretty(&bundle)
        .map_err(|e| AwsError::WorkTree(format!("cannot serialize the secret bundle: {e}")))?;
    files.insert(SECRET_BUNDLE.to_string(), bundle_bytes.clone());

    let mut artifacts = plan_artifacts(&files)?;
    artifacts.extend(charts);
    let root = artifacts
        .iter()
        .find(|a| a.source == ROOT_TEMPLATE)
        .ok_or_else(|| AwsError::WorkTree(format!("{ROOT_TEMPLATE} is missing: run `kube-aws render`")))?
        .clone();

    let mut objects = Vec::new();
    for a in artifacts {
        let key = location.key(&a.key);
        let uploaded = if exists(clients, &location.bucket, &key).await? {
            false
        } else {
            put(clients, &location.bucket, &key, a.body.clone()).await?;
            true
        };
        objects.push(PublishedObject {
            source: a.source,
            key,
            sha256: a.sha256,
            size: a.body.len(),
            uploaded,
        });
    }
    // The latest bundle, at a stable key, for the next publish.
    if previous.as_ref() != Some(&bundle) {
        put(clients, &location.bucket, &location.key(SECRET_BUNDLE), bundle_bytes).await?;
    }
    // The service-account issuer's discovery documents (src/aws/issuer.rs).
    objects.extend(super::issuer::publish_issuer(clients, input.cluster, &location, &bundle).await?);

    let base_url = clients.object_url(&location.bucket, &location.prefix);
    let parameters = root_parameters(&root.body, &base_url, &location, &bundle)?;
    Ok(Published {
        root_template_url: clients.object_url(&location.bucket, &location.key(&root.key)),
        root_template_body: String::from_utf8_lossy(&root.body).to_string(),
        location,
        parameters,
        objects,
        addons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn stack_references_are_rewritten_leaves_first() {
        let f = files(&[
            (
                "stacks/root.json",
                r#"{"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}}"#,
            ),
            (
                "stacks/network.json",
                r#"{"UserData": "aws s3 cp ${S3}/userdata/controller.cloud-config -"}"#,
            ),
            ("userdata/controller.cloud-config", "#cloud-config\n"),
        ]);
        let plan = plan_artifacts(&f).unwrap();
        let by: BTreeMap<&str, &Artifact> = plan.iter().map(|a| (a.source.as_str(), a)).collect();
        // The cloud-config sits at the key render's stub names.
        let cc = by["userdata/controller.cloud-config"];
        assert_eq!(cc.key, format!("userdata/controller/{}.cloud-config", cc.sha256));
        // Only stacks are references: the network stack's text stays as it is.
        let net = std::str::from_utf8(&by["stacks/network.json"].body).unwrap();
        assert_eq!(
            net,
            r#"{"UserData": "aws s3 cp ${S3}/userdata/controller.cloud-config -"}"#
        );
        let root = std::str::from_utf8(&by["stacks/root.json"].body).unwrap();
        assert!(
            root.contains(&format!("/{}\"", by["stacks/network.json"].key)),
            "{root}"
        );
        assert_eq!(by["stacks/root.json"].sha256, sha256_hex(root.as_bytes()));

        // A change in a nested stack changes the root that leads to it.
        let mut g = f.clone();
        g.insert("stacks/network.json".into(), b"{}".to_vec());
        let plan2 = plan_artifacts(&g).unwrap();
        let root2 = plan2.iter().find(|a| a.source == "stacks/root.json").unwrap();
        assert_ne!(root2.sha256, by["stacks/root.json"].sha256);
    }

    #[test]
    fn node_paths_in_cloud_configs_are_never_rewritten() {
        let cc = "#cloud-config\nwrite_files:\n  - path: /etc/kube-aws/addons/plan.json\n";
        let f = files(&[("addons/plan.json", "{}"), ("userdata/controller.cloud-config", cc)]);
        let plan = plan_artifacts(&f).unwrap();
        let got = plan
            .iter()
            .find(|a| a.source == "userdata/controller.cloud-config")
            .unwrap();
        assert_eq!(got.body, cc.as_bytes());
    }

    #[test]
    fn partial_names_are_not_references() {
        let f = files(&[
            ("stacks/x.json", "{}"),
            (
                "stacks/y.json",
                "see stacks/x.json.bak, xstacks/x.json, stacks/x.jsonl and \"stacks/x.json\"",
            ),
        ]);
        let plan = plan_artifacts(&f).unwrap();
        let x = plan.iter().find(|a| a.source == "stacks/x.json").unwrap();
        let y = plan.iter().find(|a| a.source == "stacks/y.json").unwrap();
        assert_eq!(
            std::str::from_utf8(&y.body).unwrap(),
            format!(
                "see stacks/x.json.bak, xstacks/x.json, stacks/x.jsonl and \"{}\"",
                x.key
            )
        );
    }

    #[test]
    fn reference_cycles_are_refused() {
        let f = files(&[("stacks/x.json", "/stacks/y.json"), ("stacks/y.json", "/stacks/x.json")]);
        let err = plan_artifacts(&f).unwrap_err().to_string();
        assert!(err.contains("cycle (stacks/x.json, stacks/y.json)"), "{err}");
    }

    #[test]
    fn chart_digests_are_verified() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.tgz");
        std::fs::write(&p, b"chart bytes").unwrap();
        let good = sha256_hex(b"chart bytes");
        let a = chart_artifact(&ChartTarball {
            digest: Sha256Digest::parse(&format!("sha256:{good}")).unwrap(),
            path: p.clone(),
        })
        .unwrap();
        assert_eq!(a.key, format!("charts/{good}.tgz"));
        let err = chart_artifact(&ChartTarball {
            digest: Sha256Digest::parse(&"0".repeat(64)).unwrap(),
            path: p,
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("has sha256:{good}")), "{err}");
    }

    #[test]
    fn root_parameters_are_those_declared() {
        let loc = Location {
            bucket: "b".into(),
            prefix: "p/demo".into(),
        };
        let t = br#"{"Parameters": {"ArtifactBaseURL": {"Type": "String"}, "Other": {"Type": "String"}}}"#;
        assert_eq!(
            root_parameters(t, "http://x/b/p/demo", &loc, &bundle(&[])).unwrap(),
            vec![("ArtifactBaseURL".to_string(), "http://x/b/p/demo".to_string())]
        );
    }

    #[test]
    fn the_ca_hash_parameter_comes_from_the_bundles_ca() {
        let loc = Location {
            bucket: "b".into(),
            prefix: "p/demo".into(),
        };
        let t = br#"{"Parameters": {"CACertHash": {"Type": "String"}}}"#;
        let pki = crate::pki::generate("demo", time::OffsetDateTime::now_utc()).unwrap();
        let mut b = bundle(&[]);
        b.certificates = pki.public.clone();
        let params = root_parameters(t, "http://x", &loc, &b).unwrap();
        assert_eq!(params, vec![("CACertHash".to_string(), pki.ca_cert_hash().unwrap())]);
        let err = root_parameters(t, "http://x", &loc, &bundle(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no cluster CA certificate"), "{err}");
    }

    fn bundle(entries: &[(&str, &str)]) -> SecretBundle {
        SecretBundle {
            api_version: "kube-aws/v1".into(),
            kind: "SecretBundle".into(),
            kms_key_arn: "arn:aws:kms:us-west-2:111122223333:key/k".into(),
            encryption_context: Default::default(),
            secrets: entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            certificates: Default::default(),
        }
    }

    #[test]
    fn secrets_versions_change_only_with_their_own_entries() {
        let t: serde_json::Value = serde_json::from_str(
            r#"{"Metadata": {"kube-aws:secretsVersions": {
                "ControlPlaneSecretsVersion": ["kubeadm/bootstrap-token", "kube-aws-secret.dex.pw"],
                "NodePoolGeneralSecretsVersion": ["kubeadm/bootstrap-token"]}}}"#,
        )
        .unwrap();
        let v = |b: &SecretBundle| -> Vec<String> {
            secrets_versions(&t, b).unwrap().into_iter().map(|(_, v)| v).collect()
        };
        let before = v(&bundle(&[
            ("kubeadm/bootstrap-token", "AAAA"),
            ("kube-aws-secret.dex.pw", "BBBB"),
        ]));
        let after = v(&bundle(&[
            ("kubeadm/bootstrap-token", "AAAA"),
            ("kube-aws-secret.dex.pw", "CCCC"),
        ]));
        assert_eq!(before.len(), 2);
        assert!(before
            .iter()
            .all(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit())));
        assert_ne!(before[0], after[0], "the controller's secret changed");
        assert_eq!(before[1], after[1], "the pool does not use it");
        let err = secrets_versions(&t, &bundle(&[("kubeadm/bootstrap-token", "AAAA")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"kube-aws-secret.dex.pw\"") && err.contains("render"),
            "{err}"
        );
    }

    #[test]
    fn plan_lists_expected_addons() {
        let f = files(&[(
            ADDON_PLAN,
            r#"{"releases": [{"name": "dex", "waitCondition": "AddonDexReady"}, {"name": "cm"}]}"#,
        )]);
        let a = expected_addons(&f).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].wait_condition.as_deref(), Some("AddonDexReady"));
        assert_eq!(a[1].release, "cm");
    }
}
