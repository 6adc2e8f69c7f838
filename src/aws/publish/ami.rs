//! The AMIs a cluster's instances boot: each root `ImageId` parameter is
//! pinned at `up` (the SSM public parameter resolved once), kept by
//! `update`, resolved again on `--refresh-ami`, and overridden by an explicit
//! cluster.yaml `ami`. Which groups roll when it changes is decided with
//! every other change's, from the templates (src/aws/lifecycle/rolls.rs).

use crate::aws::publish::Published;
use crate::aws::services::stack::StackInfo;
use crate::aws::{sdk_error, AwsError, Clients};
use serde::Serialize;

/// One pinned AMI: the root parameter, and its value before (None at `up`, or
/// when the live stack predates pinning) and now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinnedAmi {
    pub parameter: String,
    pub before: Option<String>,
    pub after: String,
    /// The image is cluster.yaml's `ami`, not the SSM public parameter's.
    pub explicit: bool,
}

impl PinnedAmi {
    /// "AMI ImageIdX86: ami-a → ami-b", or None when unchanged. Which groups
    /// roll for it is the preview's `rolls:` line (src/aws/lifecycle/rolls.rs).
    pub fn describe_change(&self) -> Option<String> {
        let before = self.before.as_deref()?;
        let why = if self.explicit {
            " (set in cluster.yaml ami)"
        } else {
            ""
        };
        (before != self.after).then(|| format!("AMI {}: {before} → {}{why}", self.parameter, self.after))
    }
}

/// The AMI a root parameter gets: the live stack's while it has one and no
/// refresh is asked for, else what `resolve` finds in the SSM public
/// parameter (only called when needed).
pub async fn pin_amis<F, Fut>(
    published: &mut Published,
    live: Option<&StackInfo>,
    refresh: bool,
    resolve: F,
) -> Result<Vec<PinnedAmi>, AwsError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, AwsError>>,
{
    let mut out = Vec::new();
    for (param, source) in ami_sources(&published.root_template_body) {
        let before = live
            .and_then(|l| l.parameters.iter().find(|(k, _)| *k == param))
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty());
        // An explicit image (cluster.yaml `ami`, rendered into the metadata
        // as it is) wins over the pinned one and is never resolved.
        let explicit = crate::config::is_ami_id(&source);
        let after = match (&before, refresh) {
            _ if explicit => source.clone(),
            (Some(v), false) => v.clone(),
            _ => resolve(source.clone()).await?,
        };
        published.parameters.retain(|(k, _)| *k != param);
        published.parameters.push((param.clone(), after.clone()));
        out.push(PinnedAmi {
            parameter: param,
            before,
            after,
            explicit,
        });
    }
    Ok(out)
}

/// Reads an SSM public parameter (the Amazon Linux 2023 AMI ID).
pub async fn resolve_ami(clients: &Clients, name: String) -> Result<String, AwsError> {
    let out = clients
        .ssm
        .get_parameter()
        .name(&name)
        .send()
        .await
        .map_err(|e| sdk_error("ssm:GetParameter", e))?;
    out.parameter()
        .and_then(|p| p.value())
        .filter(|v| v.starts_with("ami-"))
        .map(str::to_string)
        .ok_or(AwsError::NoAmi { parameter: name })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::services::s3::Location;

    fn published(root: &str) -> Published {
        Published {
            location: Location {
                bucket: "b".into(),
                prefix: "p".into(),
            },
            root_template_url: String::new(),
            root_template_body: root.into(),
            parameters: vec![("ArtifactBaseURL".into(), "u".into())],
            objects: vec![],
            addons: vec![],
            stack_templates: Default::default(),
            bundle: Default::default(),
        }
    }

    fn live(params: &[(&str, &str)]) -> StackInfo {
        StackInfo {
            name: "demo".into(),
            stack_id: "id".into(),
            status: "CREATE_COMPLETE".into(),
            reason: None,
            outputs: vec![],
            parameters: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    const ROOT: &str = r#"{"Metadata": {"kube-aws:amis": {"ImageIdX86": "/aws/service/x86"}},
        "Resources": {"ControlPlane": {"Properties": {"Parameters": {"ImageId": {"Ref": "ImageIdX86"}}}},
                      "Network": {"Properties": {}}}}"#;

    #[test]
    fn amis_are_resolved_at_up_kept_by_updates_and_refreshed_on_request() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let asked = std::cell::Cell::new(0);
        let resolve = |name: String| {
            asked.set(asked.get() + 1);
            async move {
                assert_eq!(name, "/aws/service/x86");
                Ok::<_, AwsError>("ami-new".to_string())
            }
        };
        // up: resolved.
        let mut p = published(ROOT);
        let got = rt.block_on(pin_amis(&mut p, None, false, resolve)).unwrap();
        assert_eq!(got[0].after, "ami-new");
        assert!(p.parameters.contains(&("ImageIdX86".into(), "ami-new".into())));
        assert_eq!(asked.get(), 1);
        // update: the live value, SSM not even asked.
        let mut p = published(ROOT);
        let got = rt
            .block_on(pin_amis(
                &mut p,
                Some(&live(&[("ImageIdX86", "ami-old")])),
                false,
                resolve,
            ))
            .unwrap();
        assert_eq!((got[0].after.as_str(), asked.get()), ("ami-old", 1));
        assert_eq!(got[0].describe_change(), None);
        assert!(p.parameters.contains(&("ImageIdX86".into(), "ami-old".into())));
        // update --refresh-ami: a newer one, and which stacks roll for it.
        let mut p = published(ROOT);
        let got = rt
            .block_on(pin_amis(
                &mut p,
                Some(&live(&[("ImageIdX86", "ami-old")])),
                true,
                resolve,
            ))
            .unwrap();
        assert_eq!(
            got[0].describe_change().as_deref(),
            Some("AMI ImageIdX86: ami-old → ami-new")
        );
        // --refresh-ami with nothing newer: no change to describe.
        let mut p = published(ROOT);
        let got = rt
            .block_on(pin_amis(
                &mut p,
                Some(&live(&[("ImageIdX86", "ami-new")])),
                true,
                resolve,
            ))
            .unwrap();
        assert_eq!(got[0].describe_change(), None);
        assert_eq!(got[0].before.as_deref(), Some("ami-new"));
    }

    #[test]
    fn an_explicit_ami_overrides_the_pinned_one_and_says_why_groups_roll() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let resolve = |name: String| async move { Err::<String, _>(AwsError::NoAmi { parameter: name }) };
        let root = ROOT.replace("/aws/service/x86", "ami-0123456789abcdef0");
        for refresh in [false, true] {
            let mut p = published(&root);
            let got = rt
                .block_on(pin_amis(
                    &mut p,
                    Some(&live(&[("ImageIdX86", "ami-old")])),
                    refresh,
                    resolve,
                ))
                .unwrap();
            assert!(got[0].explicit);
            assert_eq!(
                got[0].describe_change().as_deref(),
                Some("AMI ImageIdX86: ami-old → ami-0123456789abcdef0 (set in cluster.yaml ami)")
            );
            assert!(p
                .parameters
                .contains(&("ImageIdX86".into(), "ami-0123456789abcdef0".into())));
        }
        // The same image again: nothing rolls.
        let mut p = published(&root);
        let got = rt
            .block_on(pin_amis(
                &mut p,
                Some(&live(&[("ImageIdX86", "ami-0123456789abcdef0")])),
                false,
                resolve,
            ))
            .unwrap();
        assert_eq!(got[0].describe_change(), None);
    }
}
