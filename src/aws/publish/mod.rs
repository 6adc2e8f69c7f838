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
//! - the secret bundle → `secrets/<hex>/bundle.json` (the root's `SecretBundleKey`,
//!   which the next `update` reads back so secrets stay stable: src/aws/publish/previous.rs),
//!   plus `secrets/bundle.json`, the latest one, written with the issuer's
//!   documents only once the change is confirmed ([`publish_confirmed`]).
//!
//! References between stacks come from the render's own names
//! (`Rendered::stack_refs`: the root names each nested stack by its
//! `TemplateURL`, `"${ArtifactBaseURL}/stacks/network.json"`,
//! render/layout.rs `template_url`). Each is rewritten, as that whole JSON
//! string, to the content-addressed key before the naming template's own hash
//! is taken (leaves first, so a change in a nested stack changes the root
//! template); a declared reference the template does not hold is refused.
//! No other text is rewritten: the cloud-configs name node paths such as
//! `/etc/kube-aws/addons/plan.json` that must stay as they are. The publish
//! takes the render as `update` made it, in memory; `--use-rendered` and a
//! post-render hook's output are read back from `rendered/`
//! ([`read_rendered`]), their references found by the same text
//! (render/layout.rs `named_stacks`).
//!
//! The root stack gets these parameters when its template declares them:
//! `ArtifactBaseURL` (HTTPS URL of `s3URI/<cluster>`), `ArtifactS3URI`
//! (`s3://bucket/prefix/<cluster>`), `ArtifactBucket`, `ArtifactPrefix`
//! (`prefix/<cluster>`), and `CACertHash`: kubeadm's hash of the cluster CA
//! the bundle carries (generated at the first publish, src/pki.rs), and
//! `KubernetesVersion`, the version record (its rendered default), and
//! `DecryptKmsKeyARNs`: the bundle's key and its retired keys (key rotation,
//! src/aws/publish/secrets.rs), comma-separated, which the node roles may decrypt with.

pub mod ami;
pub mod issuer;
pub mod previous;
pub mod secrets;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::aws::services::s3::{check_bucket, exists, get_object, put, Location};
use crate::aws::wait::ExpectedAddon;
use crate::aws::{AwsError, BundleError, Clients, RenderedError};
use crate::config::ClusterConfig;
use crate::render::plan::Plan;
use previous::PreviousBundle;
use secrets::{NamedSecret, SecretBundle};

pub use crate::render::layout::{content_addressed, ADDON_PLAN, ROOT_TEMPLATE, SECRET_BUNDLE};
use crate::render::layout::{is_stack, template_url_json};
use crate::render::Rendered;

/// A chart tarball from the content-addressed cache.
#[derive(Debug, Clone)]
pub struct ChartTarball {
    pub digest: Sha256Digest,
    pub path: PathBuf,
}

/// What to publish.
#[derive(Debug)]
pub struct PublishInput<'a> {
    /// The render to publish (its files and their stack references).
    pub rendered: &'a Rendered,
    pub charts: &'a [ChartTarball],
    pub cluster: &'a ClusterConfig,
    /// Plugin parameters marked `secret: true`.
    pub secrets: &'a [NamedSecret],
    /// Where the previous secret bundle comes from (src/aws/publish/previous.rs).
    pub previous: PreviousBundle,
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
    /// Every stack template as published, by its key under the cluster's
    /// prefix (`stacks/<sha256>/network.json`): what the root's `TemplateURL`s
    /// name, for the update's preview of what rolls (src/aws/lifecycle/rolls.rs).
    #[serde(skip)]
    pub stack_templates: BTreeMap<String, String>,
    /// The secret bundle (ciphertexts) as published.
    #[serde(skip)]
    pub bundle: SecretBundle,
}

use crate::digest::{sha256_hex, Sha256Digest, Sha256Stream};

/// Reads a rendered directory back: every file, by relative path with `/`,
/// and the stacks each stack template names ([`crate::render::layout::named_stacks`]).
pub fn read_rendered(dir: &Path) -> Result<Rendered, AwsError> {
    if !dir.join(ROOT_TEMPLATE).is_file() {
        return Err(RenderedError::Missing {
            path: dir.join(ROOT_TEMPLATE),
        }
        .into());
    }
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|source| RenderedError::Read {
            path: d.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| RenderedError::Read {
                path: d.clone(),
                source,
            })?;
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
                    .map_err(|_| RenderedError::Outside {
                        path: path.clone(),
                        dir: dir.to_path_buf(),
                    })?
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().to_string())
                    .collect::<Vec<_>>()
                    .join("/");
                let bytes = std::fs::read(&path).map_err(|source| RenderedError::Read {
                    path: path.clone(),
                    source,
                })?;
                out.insert(rel, bytes);
            }
        }
    }
    Ok(Rendered {
        stack_refs: crate::render::layout::named_stacks(&out),
        files: out,
        iam: Vec::new(),
    })
}

/// Plans the upload of rendered files: rewrites each stack reference `refs`
/// declares (from → to) to its content-addressed key (leaves first) and
/// hashes each result. Pure.
pub fn plan_artifacts(
    files: &BTreeMap<String, Vec<u8>>,
    refs: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<Artifact>, AwsError> {
    for (from, names) in refs {
        let Some(text) = files.get(from) else {
            return Err(RenderedError::Missing {
                path: PathBuf::from(from),
            }
            .into());
        };
        for to in names {
            if !files.contains_key(to) {
                return Err(RenderedError::UnknownReference {
                    from: from.clone(),
                    to: to.clone(),
                }
                .into());
            }
            let needle = template_url_json(to);
            if !std::str::from_utf8(text).is_ok_and(|t| t.contains(&needle)) {
                return Err(RenderedError::ReferenceNotNamed {
                    from: from.clone(),
                    to: to.clone(),
                    text: needle,
                }
                .into());
            }
        }
    }
    let none = BTreeSet::new();
    let refs_of = |name: &str| refs.get(name).unwrap_or(&none);

    // Leaves first (Kahn); a cycle cannot be content-addressed.
    let mut done: BTreeMap<String, String> = BTreeMap::new(); // rel → key
    let mut out = Vec::new();
    let mut remaining: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .copied()
            .filter(|n| refs_of(n).iter().all(|r| done.contains_key(r)))
            .collect();
        if ready.is_empty() {
            let cycle: Vec<&str> = remaining.iter().copied().collect();
            return Err(RenderedError::Cycle {
                files: cycle.iter().map(|f| f.to_string()).collect(),
            }
            .into());
        }
        for name in ready {
            let body = match std::str::from_utf8(&files[name]) {
                Ok(text) if !refs_of(name).is_empty() => {
                    let mut text = text.to_string();
                    for r in refs_of(name) {
                        text = text.replace(&template_url_json(r), &template_url_json(&done[r]));
                    }
                    text.into_bytes()
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
        RenderedError::BadPlan {
            file: shown.to_string(),
            detail: e.to_string(),
        }
        .into()
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
            wait_timeout_secs: Some(r.wait_timeout_seconds).filter(|t| *t > 0),
        })
        .collect()
}

/// Parameters for the root stack: the known ones its template declares, plus
/// one secrets version per node stack (see [`secrets_versions`]).
/// `bundle_key` is the published bundle's content-addressed key, relative to
/// the cluster's prefix (`secrets/<sha256>/bundle.json`).
pub fn root_parameters(
    root_template: &[u8],
    clients_url: &str,
    location: &Location,
    bundle: &SecretBundle,
    bundle_key: &str,
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
        (crate::render::cfn::SECRET_BUNDLE_KEY, bundle_key.to_string()),
        (crate::render::cfn::DECRYPT_KMS_KEYS, bundle.decrypt_keys().join(",")),
    ]
    .into_iter()
    .filter(|(k, _)| declared.contains(*k))
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // The version record: the rendered default, passed explicitly so the live
    // stack's parameters always show it.
    if let Some(v) = template
        .pointer(&format!(
            "/Parameters/{}/Default",
            crate::render::cfn::KUBERNETES_VERSION
        ))
        .and_then(|v| v.as_str())
    {
        out.push((crate::render::cfn::KUBERNETES_VERSION.to_string(), v.to_string()));
    }
    if declared.contains(crate::render::cfn::CA_CERT_HASH) {
        let hash = bundle
            .certificates
            .get(crate::pki::CA_CERT)
            .map(|pem| crate::pki::ca_cert_hash(pem))
            .transpose()
            .map_err(|source| BundleError::BadCaCert { source })?
            .ok_or(BundleError::NoCaCert)?;
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
/// changes (unchanged secrets keep their ciphertext, and a value re-encrypted
/// under a new key is hashed by its origin, the ciphertext it was first
/// published under), and tells nothing about the values.
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
        let mut h = Sha256Stream::default();
        for name in names.as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
            let ct = bundle
                .secrets
                .get(name)
                .ok_or_else(|| RenderedError::SecretNotPublished { name: name.to_string() })?;
            let ct = bundle.origins.get(name).unwrap_or(ct);
            h.update(name.as_bytes());
            h.update(&[0]);
            h.update(ct.as_bytes());
            h.update(b"\n");
        }
        out.push((param.clone(), h.finish().hex()[..16].to_string()));
    }
    Ok(out)
}

/// Checks a chart tarball against its digest and returns its artifact.
pub fn chart_artifact(chart: &ChartTarball) -> Result<Artifact, AwsError> {
    let want = chart.digest.hex();
    let body = std::fs::read(&chart.path).map_err(|source| RenderedError::ChartUnreadable {
        digest: want.to_string(),
        path: chart.path.clone(),
        source,
    })?;
    let got = sha256_hex(&body);
    if got != want {
        return Err(RenderedError::ChartDigest {
            path: chart.path.clone(),
            got,
            want: want.to_string(),
        }
        .into());
    }
    Ok(Artifact {
        source: chart.path.display().to_string(),
        key: crate::render::layout::chart_object(&got),
        sha256: got,
        body,
    })
}

/// Before an update: when `kmsKeyARN` differs from the live bundle's (the
/// one the stack's `SecretBundleKey` names), checks that the caller can
/// encrypt under it (src/aws/publish/secrets.rs `check_key_change`) and returns the
/// previous key. Writes nothing; a bundle that cannot be read is left for
/// the publish to refuse, naming it.
pub async fn check_kms_key(clients: &Clients, cluster: &ClusterConfig) -> Result<Option<String>, AwsError> {
    let location = Location::new(cluster)?;
    let kms_key = cluster.kms_key_arn.as_deref().ok_or(AwsError::NoKmsKey)?;
    let previous = match crate::aws::services::stack::describe_stack(clients, &cluster.cluster_name).await? {
        Some(live) => PreviousBundle::for_update(&live.parameters, false),
        None => PreviousBundle::Latest,
    };
    let previous = crate::aws::publish::previous::load(clients, &location, &previous)
        .await
        .ok()
        .flatten();
    secrets::check_key_change(clients, kms_key, &cluster.cluster_name, previous.as_ref()).await
}

/// A publish planned: the secret bundle built (KMS calls only) and every
/// object and root parameter known; nothing written to S3 yet, so a check of
/// the result ([`crate::aws::publish::previous::check_ca`]) can still refuse it.
#[derive(Debug)]
pub struct Prepared {
    location: Location,
    artifacts: Vec<Artifact>,
    root: Artifact,
    bundle: SecretBundle,
    parameters: Vec<(String, String)>,
    addons: Vec<ExpectedAddon>,
}

impl Prepared {
    /// The root stack's parameters the publish would pass.
    pub fn parameters(&self) -> &[(String, String)] {
        &self.parameters
    }

    /// The root template as it would be published (references rewritten).
    pub fn root_template(&self) -> String {
        String::from_utf8_lossy(&self.root.body).into_owned()
    }
}

/// The bundle as published (the same bytes each time: its maps are ordered).
fn bundle_bytes(bundle: &SecretBundle) -> Result<Vec<u8>, AwsError> {
    serde_json::to_vec_pretty(bundle).map_err(|e| BundleError::Serialize { detail: e.to_string() }.into())
}

/// Plans a publish: the rendered files and the previous bundle
/// (`input.previous`, src/aws/publish/previous.rs), the new bundle and the
/// root parameters. Writes nothing.
pub async fn prepare(clients: &Clients, input: &PublishInput<'_>) -> Result<Prepared, AwsError> {
    let mut files = input.rendered.files.clone();
    let location = Location::new(input.cluster)?;
    let addons = expected_addons(&files)?;
    let charts = input.charts.iter().map(chart_artifact).collect::<Result<Vec<_>, _>>()?;
    let kms_key = input.cluster.kms_key_arn.as_deref().ok_or(AwsError::NoKmsKey)?;
    check_bucket(clients, &location.bucket).await?;

    let previous = crate::aws::publish::previous::load(clients, &location, &input.previous).await?;
    let bundle = secrets::build_bundle(
        clients,
        kms_key,
        &input.cluster.cluster_name,
        previous.as_ref(),
        input.secrets,
        secrets::retired_key_lifetime(&input.cluster.etcd.backup.retention),
        input.previous.rotates_ca(),
    )
    .await?;
    files.insert(SECRET_BUNDLE.to_string(), bundle_bytes(&bundle)?);

    let mut artifacts = plan_artifacts(&files, &input.rendered.stack_refs)?;
    artifacts.extend(charts);
    let root = artifacts
        .iter()
        .find(|a| a.source == ROOT_TEMPLATE)
        .ok_or(RenderedError::NoRootTemplate { file: ROOT_TEMPLATE })?
        .clone();
    let bundle_key = artifacts
        .iter()
        .find(|a| a.source == SECRET_BUNDLE)
        .map(|a| a.key.clone())
        .unwrap_or_default();
    let base_url = clients.object_url(&location.bucket, &location.prefix);
    let parameters = root_parameters(&root.body, &base_url, &location, &bundle, &bundle_key)?;
    Ok(Prepared {
        location,
        artifacts,
        root,
        bundle,
        parameters,
        addons,
    })
}

/// Uploads what [`prepare`] planned, each object under its content-addressed
/// key (skipped when it exists). The latest bundle and the issuer's documents
/// wait for [`publish_confirmed`].
pub async fn upload(clients: &Clients, prepared: Prepared) -> Result<Published, AwsError> {
    let Prepared {
        location,
        artifacts,
        root,
        bundle,
        parameters,
        addons,
    } = prepared;
    let stack_templates = artifacts
        .iter()
        .filter(|a| is_stack(&a.source))
        .map(|a| (a.key.clone(), String::from_utf8_lossy(&a.body).into_owned()))
        .collect();
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
    Ok(Published {
        root_template_url: clients.object_url(&location.bucket, &location.key(&root.key)),
        root_template_body: String::from_utf8_lossy(&root.body).to_string(),
        location,
        parameters,
        objects,
        addons,
        stack_templates,
        bundle,
    })
}

/// Publishes everything but what waits for confirmation ([`publish_confirmed`]).
pub async fn publish(clients: &Clients, input: &PublishInput<'_>) -> Result<Published, AwsError> {
    upload(clients, prepare(clients, input).await?).await
}

/// Once the change is confirmed (`up` creates; `update`'s change set is
/// accepted): the latest bundle at `secrets/bundle.json`, read by the next
/// `up` of a destroyed cluster and by `kube-aws kubeconfig`, and the
/// service-account issuer's discovery documents (src/aws/publish/issuer.rs), so a
/// declined update leaves both as they were. Returns the issuer's objects.
pub async fn publish_confirmed(
    clients: &Clients,
    cluster: &ClusterConfig,
    published: &Published,
) -> Result<Vec<PublishedObject>, AwsError> {
    let location = &published.location;
    let latest = location.key(SECRET_BUNDLE);
    let body = bundle_bytes(&published.bundle)?;
    if get_object(clients, &location.bucket, &latest).await?.as_deref() != Some(body.as_slice()) {
        put(clients, &location.bucket, &latest, body).await?;
    }
    crate::aws::publish::issuer::publish_issuer(clients, cluster, location, &published.bundle).await
}

#[cfg(test)]
mod tests;
