//! The single rules of cluster.yaml values, each a pure function that says
//! why a value is refused: names, regions, label keys and values, flag
//! values, S3 URIs, OCI references, Helm version constraints, AMI IDs,
//! controller counts. Plugins use the same ones.

use std::sync::LazyLock;

use regex::Regex;

static DNS_LABEL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$").unwrap());
static REGION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$").unwrap());
static BUCKET: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$").unwrap());
pub(super) static KMS_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key/[A-Za-z0-9-]+|alias/[A-Za-z0-9/_-]+)$").unwrap()
});
pub(super) static VPC_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^vpc-[0-9a-f]{8,17}$").unwrap());
pub(super) static SUBNET_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^subnet-[0-9a-f]{8,17}$").unwrap());
// Kubernetes' own patterns (k8s.io/apimachinery/pkg/util/validation):
// qualifiedNameFmt, labelValueFmt and dns1123SubdomainFmt.
static QUALIFIED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap());
static LABEL_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").unwrap());
static DNS_SUBDOMAIN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap());

const NAME_HINT: &str = "use lowercase letters, digits and '-', starting and ending with a letter or digit";

/// Is `s` a DNS-1123 label of at most `max` characters?
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && DNS_LABEL.is_match(s)
}

/// Is `s` a DNS-1123 subdomain of at most `max` characters (a service account's name)?
pub fn is_dns_subdomain(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && DNS_SUBDOMAIN.is_match(s)
}

/// An OIDC issuer IAM accepts: `https://` with a host, no query, fragment,
/// user or port, and nothing a flag value may not hold.
pub fn check_issuer_url(s: &str) -> Result<(), String> {
    let u = url::Url::parse(s).map_err(|e| e.to_string())?;
    if u.scheme() != "https" {
        return Err("it must start with https://".into());
    }
    if u.host_str().is_none_or(str::is_empty) || u.port().is_some() || !u.username().is_empty() {
        return Err("it needs a host, and no port or user".into());
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err("it may not have a query or fragment".into());
    }
    check_flag_value(s)
}

/// Is `s` a well-formed AWS region name?
pub fn is_region(s: &str) -> bool {
    REGION.is_match(s)
}

/// A label or taint key exactly as Kubernetes checks it (`IsQualifiedName`):
/// an optional DNS-1123 subdomain prefix of at most 253 characters and `/`,
/// then a name of at most 63 letters, digits, '-', '_' and '.', starting and
/// ending with a letter or digit. The error says why, without a location.
pub fn check_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !DNS_SUBDOMAIN.is_match(p) {
            return Err(format!(
                "its prefix {p:?} must be a DNS subdomain of at most 253 characters \
                 (lowercase letters, digits, '-' and '.', e.g. \"example.com\")"
            ));
        }
    }
    if name.is_empty() || name.len() > 63 || !QUALIFIED_NAME.is_match(name) {
        return Err(format!(
            "its name {name:?} must be 1 to 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit (and at most one '/')"
        ));
    }
    Ok(())
}

/// A label value (also a taint value) exactly as Kubernetes checks it
/// (`IsValidLabelValue`): empty, or at most 63 letters, digits, '-', '_' and
/// '.', starting and ending with a letter or digit. This also keeps ',' and
/// '=' out of the kubelet's `--node-labels`, which joins labels with them.
pub fn check_label_value(s: &str) -> Result<(), String> {
    if s.len() > 63 || !LABEL_VALUE.is_match(s) {
        return Err(
            "a label value must be empty or at most 63 letters, digits, '-', '_' or '.', \
                    starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A flag value that reaches a command line. kubeadm writes kubelet flags
/// into one double-quoted environment variable (`KUBELET_KUBEADM_ARGS` in
/// /var/lib/kubelet/kubeadm-flags.env) that systemd splits at whitespace, so
/// `110 --anonymous-auth=true` would add a flag; quotes and backslashes would
/// end or escape the quoting. Control-plane flags are refused the same
/// characters, so no flag value can ever carry another flag.
pub fn check_flag_value(s: &str) -> Result<(), String> {
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\'))
    {
        return Err(format!(
            "contains {c:?}: a flag value may not hold whitespace, control characters, quotes or \
             backslashes (the kubelet's command line is split at whitespace, so it would add flags)"
        ));
    }
    Ok(())
}

/// Why `value` is not a DNS-1123 label name of at most `max` characters, or None.
pub fn name_problem(value: &str, max: usize) -> Option<String> {
    if is_dns_label(value, max) {
        return None;
    }
    let hint = if value.len() > max {
        format!("at most {max} characters")
    } else {
        NAME_HINT.to_string()
    };
    Some(format!("{value:?} is not a valid name ({hint})"))
}

/// Why an `oci:` chart reference is refused, or None. It is
/// `oci://host/path/name[:tag]`; a manifest digest (`@sha256:…`) is refused,
/// never dropped: the lock pins the chart archive's own sha256, which a
/// manifest digest is not. The chart stage (src/chart/oci.rs) applies the same rule.
pub fn oci_reference_problem(oci: &str) -> Option<String> {
    let ok = oci
        .strip_prefix("oci://")
        .map(|rest| rest.contains('/') && !rest.ends_with('/'))
        .unwrap_or(false);
    if !ok {
        return Some(format!(
            "{oci:?} is not an OCI chart reference (use oci://host/path/name)"
        ));
    }
    let (name, digest) = oci.split_once('@')?;
    Some(format!(
        "{oci:?} pins a manifest digest ({digest:?}), which kube-aws does not resolve: \
         use a tag ({name}:1.2.3) or set version; `kube-aws charts lock` then pins the chart's sha256"
    ))
}

/// Splits `s3://bucket/prefix` into bucket and prefix (without slashes at the ends).
pub fn parse_s3_uri(uri: &str) -> Result<(String, String), String> {
    let rest = uri.strip_prefix("s3://").ok_or("it must start with s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("the bucket name is missing".into());
    }
    if !BUCKET.is_match(bucket) || bucket.contains("..") {
        return Err(format!(
            "{bucket:?} is not a valid bucket name (3-63 lowercase letters, digits, '.' and '-')"
        ));
    }
    let prefix = prefix.trim_matches('/');
    // S3's "safe" key characters (letters, digits and `!-_.*'()/`), without
    // `*`, `(` and `)`: the prefix reaches IAM resource ARNs (where `*` is a
    // wildcard), CloudFormation `Fn::Sub` strings and node data files, so no
    // `$`, `{`, space or shell-looking `$(…)` may ride along.
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | '_' | '.' | '\'' | '/')))
    {
        return Err(format!(
            "the prefix {prefix:?} contains {c:?} (use letters, digits and ! - _ . ' /)"
        ));
    }
    if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
        return Err(format!("the prefix {prefix:?} has empty, '.' or '..' segments"));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// Accepts what Helm accepts: an exact version or a semver constraint.
/// Helm's `~1.2`, `^1.2`, `1.2.x` and space- or comma-separated ranges are
/// mapped onto the semver crate's syntax.
pub fn check_version_constraint(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err("it is empty".into());
    }
    for alternative in v.split("||") {
        let normalized = normalize_constraint(alternative);
        semver::VersionReq::parse(&normalized).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Rewrites a Helm (Masterminds) constraint into the semver crate's syntax:
/// space-separated comparators become comma-separated, a leading `v` goes.
pub fn normalize_constraint(c: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let tokens: Vec<&str> = c.split([' ', ',']).filter(|t| !t.is_empty()).collect();
    let mut i = 0;
    while i < tokens.len() {
        let mut t = tokens[i].to_string();
        // "> = 1.2" or ">= 1.2": join an operator with the version after it.
        if t.chars().all(|ch| "<>=~^!".contains(ch)) && i + 1 < tokens.len() {
            t.push_str(tokens[i + 1]);
            i += 1;
        }
        let op_len = t.find(|ch: char| !"<>=~^!".contains(ch)).unwrap_or(t.len());
        let (op, ver) = t.split_at(op_len);
        let ver = ver.strip_prefix('v').unwrap_or(ver);
        parts.push(format!("{op}{ver}"));
        i += 1;
    }
    parts.join(", ")
}

/// The shortest and longest etcd backup intervals (`etcd.backup.interval`).
pub const BACKUP_INTERVAL_MIN: std::time::Duration = std::time::Duration::from_secs(5 * 60);
pub const BACKUP_INTERVAL_MAX: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Why `t` cannot be an EC2 instance type, with the nearest type of the
/// max-pods table suggested, or None. The shape is `family.size`: a family of
/// lowercase letters, digits and `-` with a generation digit (`m5`, `c7gn`,
/// `u-6tb1`), and a size (`nano` … `xlarge`, `Nxlarge`, `metal`,
/// `metal-Nxl`), as in https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html.
/// A type of that shape the table lacks is accepted (maxPods then says more).
pub fn instance_type_problem(t: &str) -> Option<String> {
    static SHAPE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[a-z][a-z0-9-]{0,15}\.(nano|micro|small|medium|large|[0-9]{0,3}xlarge|metal|metal-[0-9]{1,3}xl)$")
            .expect("valid regex")
    });
    let family_has_digit = t
        .split('.')
        .next()
        .is_some_and(|f| f.chars().any(|c| c.is_ascii_digit()));
    if t.len() <= 32 && SHAPE.is_match(t) && family_has_digit {
        return None;
    }
    let known: Vec<String> = super::maxpods::FAMILIES
        .iter()
        .flat_map(|(f, sizes)| sizes.iter().map(move |s| format!("{f}.{s}")))
        .collect();
    // A family alone (`m5`): its usual size.
    let family_only = super::maxpods::FAMILIES
        .iter()
        .find(|(f, _)| *f == t)
        .map(|(f, sizes)| {
            let size = sizes
                .iter()
                .find(|s| **s == "large")
                .or(sizes.first())
                .copied()
                .unwrap_or("large");
            format!("{f}.{size}")
        });
    let hint = match family_only.or_else(|| crate::located::closest(t, &known)) {
        Some(best) => format!(" (did you mean {best:?}?)"),
        None => " (for example \"m5.large\" or \"c7g.2xlarge\")".to_string(),
    };
    Some(format!(
        "{t:?} is not an EC2 instance type (a family and a size, family.size){hint}"
    ))
}

/// Why `c` cannot be a chart's name, with the nearest name that can be, or
/// None: letters, digits, `.`, `_` and `-`, starting with a letter or digit,
/// at most 250 characters (helm's own rule for chart names,
/// pkg/chartutil/create.go `chartName` in helm/helm v3; pkg/chart/metadata.go
/// refuses path separators, `.` and `..`).
pub fn chart_name_problem(c: &str) -> Option<String> {
    static SHAPE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,249}$").expect("valid regex"));
    if SHAPE.is_match(c) {
        return None;
    }
    let mut near = String::new();
    for ch in c.chars() {
        if ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-') {
            near.push(ch);
        } else if !near.ends_with('-') {
            near.push('-');
        }
    }
    let near: String = near
        .trim_matches(|ch: char| !ch.is_ascii_alphanumeric())
        .chars()
        .take(250)
        .collect();
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {near:?}?)")
    };
    Some(format!(
        "{c:?} is not a chart name (letters, digits, '.', '_' and '-', starting with a letter or digit){hint}"
    ))
}

/// An EC2 image ID: `ami-` and 8 (older) or 17 lowercase hex digits.
pub fn is_ami_id(s: &str) -> bool {
    s.strip_prefix("ami-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17) && h.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

/// The controller counts etcd keeps quorum with: an odd number, at most 5
/// (etcd's FAQ: an even member count adds no failure tolerance, and more than
/// five members slows every write; https://etcd.io/docs/v3.5/faq/).
pub const CONTROLLER_COUNTS: [u32; 3] = [1, 3, 5];

/// Why `count` controllers cannot be, naming the nearest counts that can.
pub fn controller_count_error(count: u32) -> Option<String> {
    if CONTROLLER_COUNTS.contains(&count) {
        return None;
    }
    let near: Vec<String> = CONTROLLER_COUNTS
        .iter()
        .filter(|c| c.abs_diff(count) <= 1 || (count > 5 && **c == 5))
        .map(|c| c.to_string())
        .collect();
    let near = if near.is_empty() {
        "1".to_string()
    } else {
        near.join(" or ")
    };
    Some(if count == 0 {
        "0 controllers cannot run a cluster; use 1, 3 or 5".to_string()
    } else if count.is_multiple_of(2) {
        format!(
            "{count} controllers: etcd needs an odd count to keep quorum ({count} members tolerate no more \
             failures than {}); use {near}",
            count - 1
        )
    } else {
        format!("{count} controllers: at most 5 (every etcd member slows down writes); use {near}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("general-1", 63));
        assert!(!is_dns_label("Pool_1", 63));
        assert!(!is_dns_label("-a", 63));
        assert!(!is_dns_label("a-", 63));
        assert!(!is_dns_label("", 63));
        assert!(!is_dns_label(&"a".repeat(64), 63));
    }

    #[test]
    fn s3_uris() {
        assert_eq!(
            parse_s3_uri("s3://my-bucket/kube-aws").unwrap(),
            ("my-bucket".into(), "kube-aws".into())
        );
        assert_eq!(parse_s3_uri("s3://my-bucket").unwrap(), ("my-bucket".into(), "".into()));
        assert!(parse_s3_uri("https://my-bucket/x").is_err());
        assert!(parse_s3_uri("s3://My_Bucket/x").is_err());
        assert!(parse_s3_uri("s3:///x").is_err());
        assert!(parse_s3_uri("s3://b-1/a/../b").is_err());
        assert!(parse_s3_uri("s3://b-1/team_a/it's-1.0!").is_ok());
        for bad in ["a b", "a*", "$(id)", "${AWS::Region}", "a(1)", "x\ny", "ü"] {
            let e = parse_s3_uri(&format!("s3://b-1/{bad}")).unwrap_err();
            assert!(e.contains("contains"), "{bad}: {e}");
        }
    }

    #[test]
    fn kubernetes_names_and_values() {
        for ok in [
            "a",
            "kube-aws.io/pool",
            "node.kubernetes.io/lifecycle",
            "A_b.c-1",
            &"x".repeat(63),
        ] {
            assert!(check_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "a,b",
            "a=b",
            "/a",
            "a/",
            "a/b/c",
            "Upper.io/a",
            "a..b/c",
            &"x".repeat(64),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_qualified_name(&format!("{}/a", "p".repeat(254))).is_err());
        for ok in ["", "general", "v1.2_3-x", &"x".repeat(63)] {
            assert!(check_label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["a,b=c", "a=b", "a b", "-a", "a.", "a\nb", &"x".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_values_cannot_carry_flags() {
        for ok in [
            "110",
            "https://dex.example.com",
            "A=true,B=false",
            "/etc/k/x.yaml",
            "--x",
        ] {
            assert!(check_flag_value(ok).is_ok(), "{ok}");
        }
        for bad in [
            "110 --anonymous-auth=true --authorization-mode=AlwaysAllow",
            "a\nb",
            "a\tb",
            "a\"b",
            "a'b",
            "a\\b",
            "a\u{0}",
        ] {
            assert!(check_flag_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn helm_constraints() {
        for ok in [
            "3.12.1",
            "~3.12",
            "^1.2",
            ">=1.2 <2.0",
            ">= 1.2, < 2",
            "1.2.x",
            "*",
            "v1.2.3",
            "1.2 || 2.x",
        ] {
            assert!(check_version_constraint(ok).is_ok(), "{ok}");
        }
        for bad in ["", "banana", ">=>1"] {
            assert!(check_version_constraint(bad).is_err(), "{bad}");
        }
    }
}
