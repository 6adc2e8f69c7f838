//! One chart entry to one [`Release`]: the single check of a `ChartSpec`,
//! used by cluster.yaml's `charts[i]` and by a plugin's `spec.charts[i]`.
//! The entry's name, source (exactly one of repo, oci and path), version,
//! namespace and timeout follow the same rules wherever they are written;
//! only what `path:` is relative to differs, so the caller resolves it.

use std::time::Duration;

use super::model::ChartSpec;
use super::resolve::{default_chart_name, ChartSource, Origin, Release, DEFAULT_NAMESPACE, DEFAULT_TIMEOUT};
use super::rules::{chart_name_problem, check_version_constraint, name_problem, oci_reference_problem};

/// One thing wrong with a chart entry: the key under the entry (empty for
/// the entry itself, e.g. `repo`) and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartProblem {
    pub key: &'static str,
    pub message: String,
}

impl ChartProblem {
    /// The problem's key path under the entry at `base` (e.g. `charts[0]`).
    pub fn path(&self, base: &str) -> String {
        if self.key.is_empty() {
            base.to_string()
        } else {
            format!("{base}.{}", self.key)
        }
    }
}

/// Checks `spec` and makes it a release with `values_files`; `path` turns
/// a `path:` source into the path the release uses (relative to the work
/// tree), or says why it cannot. Every problem is reported, not just the first.
pub fn chart_release(
    spec: &ChartSpec,
    origin: Origin,
    values_files: Vec<String>,
    path: impl Fn(&str) -> Result<String, String>,
) -> Result<Release, Vec<ChartProblem>> {
    let mut problems = Vec::new();
    let mut problem = |key: &'static str, message: String| problems.push(ChartProblem { key, message });
    if let Some(why) = name_problem(&spec.name, 53) {
        problem("name", why);
    }
    match [&spec.repo, &spec.oci, &spec.path]
        .iter()
        .filter(|s| s.is_some())
        .count()
    {
        0 => problem(
            "",
            format!(
                "release {:?} has no chart source (set one of repo, oci or path)",
                spec.name
            ),
        ),
        1 => {}
        _ => problem(
            "",
            format!(
                "release {:?} sets more than one of repo, oci and path (keep one)",
                spec.name
            ),
        ),
    }
    // Each source set is checked, so one run reports them all.
    let mut sources = Vec::new();
    if let Some(repo) = &spec.repo {
        match url::Url::parse(repo) {
            Ok(u) if u.scheme() == "http" || u.scheme() == "https" => sources.push(ChartSource::Repo(repo.clone())),
            Ok(u) if u.scheme() == "oci" => problem(
                "repo",
                format!("{repo:?} is an OCI reference (use oci: instead of repo:)"),
            ),
            _ => problem(
                "repo",
                format!("{repo:?} is not an http(s) URL (for example \"https://charts.example.com\")"),
            ),
        }
    }
    if let Some(oci) = &spec.oci {
        match oci_reference_problem(oci) {
            Some(why) => problem("oci", why),
            None => sources.push(ChartSource::Oci(oci.clone())),
        }
    }
    if let Some(p) = &spec.path {
        match path(p) {
            Ok(p) => sources.push(ChartSource::Path(p)),
            Err(why) => problem("path", why),
        }
    }
    if let Some(why) = spec.chart.as_deref().and_then(chart_name_problem) {
        problem("chart", why);
    }
    if let Some(v) = &spec.version {
        if let Err(why) = check_version_constraint(v) {
            problem("version", format!("{v:?} is not a version or constraint: {why}"));
        }
    }
    if let Some(ns) = &spec.namespace {
        if let Some(why) = name_problem(ns, 63) {
            problem("namespace", why);
        }
    }
    if let Some(v) = &spec.replicas_value {
        if !value_path_ok(v) {
            problem(
                "replicasValue",
                format!(
                    "{v:?} is not a chart value's key path (for example \"replicaCount\" or \"controller.replicas\")"
                ),
            );
        }
    }
    let timeout = match spec.timeout.as_deref().map(|t| (t, humantime::parse_duration(t))) {
        None => DEFAULT_TIMEOUT,
        Some((_, Ok(d))) if d.as_secs() > 0 => d,
        Some((t, Ok(_))) => {
            problem("timeout", format!("{t:?} is zero (use for example \"5m\")"));
            Duration::ZERO
        }
        Some((t, Err(_))) => {
            problem(
                "timeout",
                format!("{t:?} is not a duration (use for example \"90s\", \"5m\" or \"1h\")"),
            );
            DEFAULT_TIMEOUT
        }
    };
    match sources.pop() {
        Some(source) if problems.is_empty() => Ok(Release {
            name: spec.name.clone(),
            chart: spec
                .chart
                .clone()
                .unwrap_or_else(|| default_chart_name(&source, &spec.name)),
            source,
            version: spec.version.clone(),
            namespace: spec.namespace.clone().unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            values_files,
            set: spec.set.clone(),
            depends_on: spec.depends_on.clone(),
            timeout,
            create_namespace: spec.create_namespace.unwrap_or(true),
            bootstrap: spec.bootstrap,
            replicas_value: spec.replicas_value.clone(),
            origin,
            declared: None,
        }),
        _ => Err(problems),
    }
}

/// A key path `helm --set` takes as one value: dot-separated names of
/// letters, digits, `_` and `-` (no `,`, `=`, `[` or escapes).
fn value_path_ok(v: &str) -> bool {
    !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ChartSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn problems(yaml: &str) -> Vec<(&'static str, String)> {
        let origin = Origin::Cluster { index: 0 };
        match chart_release(&spec(yaml), origin, Vec::new(), |p| Ok(p.to_string())) {
            Ok(_) => Vec::new(),
            Err(p) => p.into_iter().map(|p| (p.key, p.message)).collect(),
        }
    }

    #[test]
    fn a_good_entry_is_a_release() {
        let origin = Origin::Cluster { index: 2 };
        let spec = spec("{name: app, oci: \"oci://r.example.com/charts/app:1.0.0\", timeout: 90s}");
        let r = chart_release(&spec, origin.clone(), vec!["v.yaml".into()], |_| Err("unused".into())).unwrap();
        assert_eq!(r.chart, "app");
        assert_eq!(r.namespace, DEFAULT_NAMESPACE);
        assert_eq!(r.timeout, Duration::from_secs(90));
        assert_eq!(r.values_files, ["v.yaml"]);
        assert_eq!(r.origin, origin);
    }

    #[test]
    fn every_problem_is_reported_at_its_key() {
        let got = problems("{name: Bad_Name, repo: \"oci://r.example.com/x\", namespace: A, timeout: 0s}");
        let keys: Vec<&str> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["name", "repo", "namespace", "timeout"], "{got:?}");
        assert!(got[1].1.contains("use oci: instead of repo:"), "{got:?}");
        assert!(got[3].1.contains("is zero"), "{got:?}");
        let got = problems("{name: a, repo: \"https://c.example.com\", path: x}");
        assert_eq!(got[0].0, "");
        assert!(got[0].1.contains("more than one"), "{got:?}");
        let got = problems("{name: a, oci: \"oci://r.example.com/x@sha256:00\"}");
        assert!(got[0].1.contains("pins a manifest digest"), "{got:?}");
    }

    #[test]
    fn the_replicas_value_is_one_set_key_path() {
        let spec = spec("{name: a, repo: \"https://c.example.com\", replicasValue: controller.replicaCount}");
        let r = chart_release(
            &spec,
            Origin::Cluster { index: 0 },
            Vec::new(),
            |_| Err("unused".into()),
        )
        .unwrap();
        assert_eq!(r.replicas_value.as_deref(), Some("controller.replicaCount"));
        for bad in ["\"a=1\"", "\"a,b\"", "\"a..b\"", "\"\"", "\"a[0]\""] {
            let got = problems(&format!(
                "{{name: a, repo: \"https://c.example.com\", replicasValue: {bad}}}"
            ));
            assert_eq!(got.len(), 1, "{bad}: {got:?}");
            assert_eq!(got[0].0, "replicasValue");
            assert!(got[0].1.contains("is not a chart value's key path"), "{got:?}");
        }
    }

    #[test]
    fn the_caller_resolves_paths() {
        let spec = spec("{name: a, path: charts/a}");
        let r = chart_release(&spec, Origin::Cluster { index: 0 }, Vec::new(), |p| {
            Ok(format!("x/{p}"))
        })
        .unwrap();
        assert_eq!(r.source, ChartSource::Path("x/charts/a".into()));
        let e = chart_release(&spec, Origin::Cluster { index: 0 }, Vec::new(), |_| Err("nope".into())).unwrap_err();
        assert_eq!(
            e,
            [ChartProblem {
                key: "path",
                message: "nope".into()
            }]
        );
    }
}
