//! Version resolution the way Helm reads a version: an exact string match
//! first, then the newest version matching a Masterminds semver constraint.
//! Pre-releases only match comparators that name a pre-release themselves.

use semver::{Comparator, Op, Prerelease, Version, VersionReq};

use crate::config::normalize_constraint;

/// A parsed constraint: alternatives (`||`) of comparator sets (AND).
#[derive(Debug, Clone)]
pub struct Constraint {
    alternatives: Vec<Vec<Comparator>>,
}

/// Parses a version the lenient way Helm does: a leading `v`, and missing
/// minor/patch parts (`1.2` is `1.2.0`).
pub fn parse_version(s: &str) -> Option<Version> {
    let s = s.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    if let Ok(v) = Version::parse(s) {
        return Some(v);
    }
    let split = s.find(['-', '+']).unwrap_or(s.len());
    let (core, rest) = s.split_at(split);
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let mut padded = parts.join(".");
    for _ in parts.len()..3 {
        padded.push_str(".0");
    }
    Version::parse(&format!("{padded}{rest}")).ok()
}

impl Constraint {
    /// Parses a Helm constraint (`~1.2`, `^1.2`, `1.2.x`, `>=1 <2`, `a || b`).
    /// A bare version means exactly that version, as in Helm.
    pub fn parse(c: &str) -> Result<Constraint, String> {
        let mut alternatives = Vec::new();
        for alt in c.split("||") {
            let normalized = normalize_constraint(alt);
            let explicit: Vec<String> = normalized
                .split(", ")
                .filter(|p| !p.is_empty())
                .map(pad_prerelease)
                .map(|p| {
                    if p.starts_with(|ch: char| ch.is_ascii_digit()) && !p.contains(['x', 'X', '*']) {
                        format!("={p}")
                    } else {
                        p.to_string()
                    }
                })
                .collect();
            if explicit.is_empty() || explicit == ["*"] {
                alternatives.push(Vec::new());
                continue;
            }
            let req = VersionReq::parse(&explicit.join(", ")).map_err(|e| format!("{c:?}: {e}"))?;
            alternatives.push(req.comparators);
        }
        Ok(Constraint { alternatives })
    }

    /// Does the constraint allow pre-release versions at all?
    pub fn wants_prerelease(&self) -> bool {
        self.alternatives.iter().flatten().any(|c| !c.pre.is_empty())
    }

    pub fn matches(&self, v: &Version) -> bool {
        self.alternatives.iter().any(|set| {
            if set.is_empty() {
                return v.pre.is_empty();
            }
            set.iter().all(|c| comparator_matches(c, v))
        })
    }
}

/// `>= 1.16-0` is `>=1.16.0-0` to Masterminds semver (Helm), which pads a
/// partial version that carries a pre-release; the semver crate refuses a
/// pre-release after a partial version. aws-node-termination-handler 0.27.6's
/// `kubeVersion` is `>= 1.16-0`.
fn pad_prerelease(p: &str) -> String {
    let start = p.find(|ch: char| ch.is_ascii_digit()).unwrap_or(p.len());
    let (op, version) = p.split_at(start);
    let Some(dash) = version.find('-') else {
        return p.to_string();
    };
    let (core, pre) = version.split_at(dash);
    let parts = core.split('.').count();
    if parts >= 3 || !core.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return p.to_string();
    }
    format!("{op}{core}{}{pre}", ".0".repeat(3 - parts))
}

fn comparator_matches(c: &Comparator, v: &Version) -> bool {
    // Masterminds: a pre-release version only satisfies comparators that carry one.
    if !v.pre.is_empty() && c.pre.is_empty() {
        return false;
    }
    let mut v = v.clone();
    v.build = semver::BuildMetadata::EMPTY;
    let base = Version {
        major: c.major,
        minor: c.minor.unwrap_or(0),
        patch: c.patch.unwrap_or(0),
        pre: c.pre.clone(),
        build: semver::BuildMetadata::EMPTY,
    };
    let next = |major: u64, minor: u64, patch: u64| Version::new(major, minor, patch);
    // The first version past a partial version: `1.2` → 1.3.0, `1` → 2.0.0.
    let past_partial = match (c.minor, c.patch) {
        (None, _) => next(c.major + 1, 0, 0),
        (Some(m), None) => next(c.major, m + 1, 0),
        (Some(m), Some(p)) => {
            let mut x = next(c.major, m, p);
            x.pre = Prerelease::EMPTY;
            x.patch += 1;
            x
        }
    };
    let full = c.minor.is_some() && c.patch.is_some();
    match c.op {
        Op::Exact | Op::Wildcard => {
            if full {
                v == base
            } else {
                v >= base && v < past_partial
            }
        }
        Op::Greater => {
            if full {
                v > base
            } else {
                v >= past_partial
            }
        }
        Op::GreaterEq => v >= base,
        Op::Less => v < base,
        Op::LessEq => {
            if full {
                v <= base
            } else {
                v < past_partial
            }
        }
        Op::Tilde => {
            let upper = match c.minor {
                Some(m) => next(c.major, m + 1, 0),
                None => next(c.major + 1, 0, 0),
            };
            v >= base && v < upper
        }
        Op::Caret => {
            let upper = match (c.major, c.minor, c.patch) {
                (0, None, _) => next(1, 0, 0),
                (0, Some(0), None) => next(0, 1, 0),
                (0, Some(0), Some(p)) => next(0, 0, p + 1),
                (0, Some(m), _) => next(0, m + 1, 0),
                (major, _, _) => next(major + 1, 0, 0),
            };
            v >= base && v < upper
        }
        _ => false,
    }
}

/// Why resolution failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveFailure {
    BadConstraint(String),
    /// No version matched; the newest few versions, newest first.
    NoMatch {
        newest: Vec<String>,
    },
}

/// Picks a version among `versions`, by its position: `wanted` None means
/// the newest stable version; an exact string match wins over a constraint.
pub fn pick_version<S: AsRef<str>>(versions: &[S], wanted: Option<&str>) -> Result<usize, ResolveFailure> {
    let wanted = wanted.map(str::trim).filter(|w| !w.is_empty());
    if let Some(w) = wanted {
        if let Some(exact) = versions.iter().position(|v| v.as_ref() == w) {
            return Ok(exact);
        }
    }
    let constraint = Constraint::parse(wanted.unwrap_or("*")).map_err(ResolveFailure::BadConstraint)?;
    let mut best: Option<(Version, usize)> = None;
    for (i, s) in versions.iter().enumerate() {
        let Some(v) = parse_version(s.as_ref()) else { continue };
        if constraint.matches(&v) && best.as_ref().is_none_or(|(b, _)| v.cmp_precedence(b).is_gt()) {
            best = Some((v, i));
        }
    }
    best.map(|(_, i)| i).ok_or_else(|| ResolveFailure::NoMatch {
        newest: newest_versions(versions.iter().map(AsRef::as_ref), 5),
    })
}

/// The newest `n` distinct versions, newest first.
pub fn newest_versions<'a>(versions: impl Iterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut parsed: Vec<(Version, &str)> = versions.filter_map(|s| Some((parse_version(s)?, s))).collect();
    parsed.sort_by(|a, b| b.0.cmp_precedence(&a.0));
    parsed.dedup_by(|a, b| a.1 == b.1);
    parsed.into_iter().take(n).map(|(_, s)| s.to_string()).collect()
}

/// Does `version` satisfy `constraint`? (Used for the lock check and kubeVersion.)
pub fn version_satisfies(version: &str, constraint: &str) -> Result<bool, String> {
    if version.trim() == constraint.trim() {
        return Ok(true);
    }
    let c = Constraint::parse(constraint)?;
    let v = parse_version(version).ok_or_else(|| format!("{version:?} is not a semantic version"))?;
    Ok(c.matches(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(list: &[&str], wanted: Option<&str>) -> Result<String, ResolveFailure> {
        pick_version(list, wanted).map(|i| list[i].to_string())
    }

    /// A partial version with a pre-release, as aws-node-termination-handler's
    /// `kubeVersion: ">= 1.16-0"` (Masterminds pads it to 1.16.0-0).
    #[test]
    fn partial_version_with_prerelease_is_padded() {
        assert_eq!(version_satisfies("1.35", ">= 1.16-0"), Ok(true));
        assert_eq!(version_satisfies("1.35.2", ">=1.16-0"), Ok(true));
        assert_eq!(version_satisfies("1.15.9", ">= 1.16-0"), Ok(false));
        assert_eq!(version_satisfies("1.16.0", ">=1-0 <1.17-0"), Ok(true));
        assert_eq!(pad_prerelease(">=1.17.0-0"), ">=1.17.0-0");
    }

    const LIST: &[&str] = &[
        "1.1.0",
        "1.2.0",
        "1.2.5",
        "1.3.0-rc.1",
        "1.3.0",
        "2.0.0",
        "2.1.0-beta.1",
        "v0.9",
    ];

    #[test]
    fn helm_constraint_syntax() {
        assert_eq!(pick(LIST, None).unwrap(), "2.0.0");
        assert_eq!(pick(LIST, Some("~1.2")).unwrap(), "1.2.5");
        assert_eq!(pick(LIST, Some("^1.2")).unwrap(), "1.3.0");
        assert_eq!(pick(LIST, Some("1.2.x")).unwrap(), "1.2.5");
        assert_eq!(pick(LIST, Some(">=1 <2")).unwrap(), "1.3.0");
        assert_eq!(pick(LIST, Some(">=1.0.0, <1.2.0")).unwrap(), "1.1.0");
        assert_eq!(pick(LIST, Some("~1.1 || ~1.2")).unwrap(), "1.2.5");
        assert_eq!(pick(LIST, Some("1.2.0")).unwrap(), "1.2.0");
        assert_eq!(pick(LIST, Some("v0.9")).unwrap(), "v0.9");
        assert_eq!(pick(LIST, Some("0.9.0")).unwrap(), "v0.9");
    }

    #[test]
    fn prereleases_only_when_asked() {
        assert_eq!(pick(LIST, Some(">=2.0.0")).unwrap(), "2.0.0");
        assert_eq!(pick(LIST, Some(">=2.0.0-0")).unwrap(), "2.1.0-beta.1");
        assert_eq!(pick(LIST, Some("1.3.0-rc.1")).unwrap(), "1.3.0-rc.1");
        assert_eq!(
            pick(&["1.0.0-rc.1"], None),
            Err(ResolveFailure::NoMatch {
                newest: vec!["1.0.0-rc.1".into()]
            })
        );
    }

    #[test]
    fn no_match_lists_newest() {
        match pick(LIST, Some("~5")) {
            Err(ResolveFailure::NoMatch { newest }) => assert_eq!(newest[0], "2.1.0-beta.1"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(pick(LIST, Some(">>1")), Err(ResolveFailure::BadConstraint(_))));
    }

    #[test]
    fn kube_version_style() {
        assert!(version_satisfies("1.31.0", ">=1.17.0-0").unwrap());
        assert!(!version_satisfies("1.31.0", "<1.30.0-0").unwrap());
        assert!(version_satisfies("1.31", ">= 1.25.0-0, < 1.32.0-0").unwrap());
    }
}
