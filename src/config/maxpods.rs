//! The kubelet's max-pods per EC2 instance type under the Amazon VPC CNI.
//!
//! With the VPC CNI every pod gets a secondary IPv4 address of one of the
//! node's ENIs, so a node can only run as many pods as its ENIs hold
//! addresses. The kubelet does not know this: left at its default (110) it
//! schedules pods that stay in ContainerCreating for want of an address.
//!
//! Source: the EKS AMI's `eni-max-pods.txt` (awslabs/amazon-eks-ami,
//! templates/shared/runtime/eni-max-pods.txt, checked 2026-11-30), which
//! computes, from the EC2 API's MaximumNetworkInterfaces and
//! Ipv4AddressesPerInterface of the default network card:
//!
//! ```text
//! max pods = ENIs * (IPv4 per ENI - 1) + 2
//! ```
//!
//! (the first address of each ENI is the node's own; +2 for the host-network
//! pods aws-node and kube-proxy). The table below holds the two EC2 limits,
//! not the result, so the formula is checked by the tests against the
//! published numbers. Instance types outside the table need a per-pool
//! `maxPods`: kube-aws refuses to guess (see `max_pods`).
//!
//! With prefix delegation (the aws-vpc-cni plugin's `enablePrefixDelegation`)
//! each address slot of an ENI holds a /28 prefix of 16 addresses instead of
//! one address, and the number that fits is no longer the kubelet's limit:
//! the EKS AMI's max-pods calculator (awslabs/amazon-eks-ami,
//! templates/al2/runtime/max-pods-calculator.sh, checked 2026-12-01) gives
//!
//! ```text
//! max pods = ENIs * ((IPv4 per ENI - 1) * 16) + 2
//! ```
//!
//! and recommends at most 110 pods on an instance type with 30 vCPUs or fewer
//! and 250 above (`if [ "$CPU_COUNT" -gt 30 ]`: 250, else 110), the limits of
//! the kubelet's own resource reservations. kube-aws uses that recommendation
//! when `maxPods` is unset, and lets `maxPods` go up to what the prefixes
//! address. Prefix delegation needs a Nitro instance; every family in the
//! table is Nitro. The cap applies with prefixes only: with secondary
//! addresses the EKS AMI's own table (uncapped) stays the default.

/// The ENI limits of one instance type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EniLimits {
    /// MaximumNetworkInterfaces of the default network card.
    pub enis: u32,
    /// Ipv4AddressesPerInterface.
    pub ipv4_per_eni: u32,
}

impl EniLimits {
    /// `ENIs * (IPv4 per ENI - 1) + 2`.
    pub fn max_pods(self) -> u32 {
        self.enis * self.ipv4_per_eni.saturating_sub(1) + 2
    }

    /// With prefix delegation, every slot a /28 of 16 addresses:
    /// `ENIs * ((IPv4 per ENI - 1) * 16) + 2`.
    pub fn max_pods_with_prefixes(self) -> u32 {
        self.enis * (self.ipv4_per_eni.saturating_sub(1) * IPS_PER_PREFIX) + 2
    }
}

/// Addresses in one delegated IPv4 prefix (a /28).
pub const IPS_PER_PREFIX: u32 = 16;
/// The calculator's recommended ceiling at 30 vCPUs or fewer, and above.
pub const MAX_PODS_LOW_CPU: u32 = 110;
pub const MAX_PODS_HIGH_CPU: u32 = 250;
/// Above this many vCPUs the higher ceiling applies (`-gt 30`).
pub const HIGH_CPU_ABOVE: u32 = 30;

/// How the cluster's pods get their addresses, which decides the kubelet's max-pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodAddressing {
    /// Another CNI (an overlay): pods take no VPC addresses.
    Overlay,
    /// The VPC CNI with one secondary address per pod.
    VpcSecondaryIps,
    /// The VPC CNI with prefix delegation (`ENABLE_PREFIX_DELEGATION`).
    VpcPrefixes,
}

/// The default vCPUs of `instance_type` in the table's families (EC2
/// DescribeInstanceTypes VCpuInfo.DefaultVCpus): 4 per "xlarge" step, 2 for
/// large, 1 for the Graviton medium; the burstable sizes up to large have 2.
pub fn vcpus(instance_type: &str) -> Option<u32> {
    eni_limits(instance_type)?;
    let (family, size) = instance_type.split_once('.')?;
    if family.starts_with('t') {
        return Some(match size {
            "xlarge" => 4,
            "2xlarge" => 8,
            _ => 2,
        });
    }
    Some(match size {
        "medium" => 1,
        "large" => 2,
        "xlarge" => 4,
        "metal-24xl" => 96,
        "metal-48xl" => 192,
        "metal" => match family {
            "m7g" | "c6g" | "c7g" => 64,
            "m5" | "c5" | "r5" => 96,
            "m6a" => 192,
            _ => 128,
        },
        other => 4 * other.strip_suffix("xlarge")?.parse::<u32>().ok()?,
    })
}

/// The prefix formula capped at the calculator's recommendation, and the
/// uncapped number the prefixes address.
fn prefix_limits(instance_type: &str, limits: EniLimits) -> (u32, u32) {
    let addressable = limits.max_pods_with_prefixes();
    let ceiling = match vcpus(instance_type) {
        Some(n) if n > HIGH_CPU_ABOVE => MAX_PODS_HIGH_CPU,
        _ => MAX_PODS_LOW_CPU,
    };
    (addressable.min(ceiling), addressable)
}

const fn l(enis: u32, ipv4_per_eni: u32) -> EniLimits {
    EniLimits { enis, ipv4_per_eni }
}

/// Sizes shared by the Nitro general-purpose, compute and memory families:
/// medium 2x4, large 3x10, xlarge and 2xlarge 4x15, 4xlarge to 12xlarge 8x30,
/// 16xlarge and larger (and metal) 15x50.
fn nitro_size(size: &str) -> Option<EniLimits> {
    Some(match size {
        "medium" => l(2, 4),
        "large" => l(3, 10),
        "xlarge" | "2xlarge" => l(4, 15),
        "4xlarge" | "8xlarge" | "9xlarge" | "12xlarge" => l(8, 30),
        "16xlarge" | "18xlarge" | "24xlarge" | "32xlarge" | "48xlarge" | "metal" | "metal-24xl" | "metal-48xl" => {
            l(15, 50)
        }
        _ => return None,
    })
}

/// The burstable families (t3, t3a, t4g): nano and micro 2x2, small 3x4
/// (t3a.small 2x4), medium 3x6, large 3x12, xlarge and 2xlarge 4x15.
fn burstable_size(family: &str, size: &str) -> Option<EniLimits> {
    Some(match size {
        "nano" | "micro" => l(2, 2),
        "small" if family == "t3a" => l(2, 4),
        "small" => l(3, 4),
        "medium" => l(3, 6),
        "large" => l(3, 12),
        "xlarge" | "2xlarge" => l(4, 15),
        _ => return None,
    })
}

/// The families in the table and the sizes EC2 offers of each.
pub const FAMILIES: &[(&str, &[&str])] = &[
    (
        "m5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "metal",
        ],
    ),
    (
        "m6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge", "metal",
        ],
    ),
    (
        "m6a",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge",
            "48xlarge", "metal",
        ],
    ),
    (
        "m7i",
        &[
            "large",
            "xlarge",
            "2xlarge",
            "4xlarge",
            "8xlarge",
            "12xlarge",
            "16xlarge",
            "24xlarge",
            "48xlarge",
            "metal-24xl",
            "metal-48xl",
        ],
    ),
    (
        "m7g",
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal",
        ],
    ),
    (
        "c5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge", "metal",
        ],
    ),
    (
        "c6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge", "metal",
        ],
    ),
    (
        "c6g",
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal",
        ],
    ),
    (
        "c7g",
        &[
            "medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal",
        ],
    ),
    (
        "r5",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "metal",
        ],
    ),
    (
        "r6i",
        &[
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge", "metal",
        ],
    ),
    (
        "t3",
        &["nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"],
    ),
    (
        "t3a",
        &["nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"],
    ),
    (
        "t4g",
        &["nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"],
    ),
];

/// The ENI limits of `instance_type`, when the table has it.
pub fn eni_limits(instance_type: &str) -> Option<EniLimits> {
    let (family, size) = instance_type.split_once('.')?;
    let (_, sizes) = FAMILIES.iter().find(|(f, _)| *f == family)?;
    if !sizes.contains(&size) {
        return None;
    }
    if family.starts_with('t') {
        burstable_size(family, size)
    } else {
        nitro_size(size)
    }
}

/// The kubelet's max-pods for a node of `instance_type` under the VPC CNI:
/// the table's limit, or `wanted` when it is at most that limit. An instance
/// type outside the table needs `wanted` (kube-aws refuses to guess: a value
/// too high leaves pods without an address). The error says what to change,
/// without its location.
pub fn max_pods(instance_type: &str, wanted: Option<u32>) -> Result<u32, String> {
    match (eni_limits(instance_type), wanted) {
        (Some(limits), None) => Ok(limits.max_pods()),
        (Some(limits), Some(w)) if w <= limits.max_pods() => Ok(w),
        (Some(limits), Some(w)) => Err(format!(
            "maxPods {w} is above what {instance_type} can address with the VPC CNI: {} \
             ({} ENIs * ({} IPv4 per ENI - 1) + 2); use at most {} or a larger instance type",
            limits.max_pods(),
            limits.enis,
            limits.ipv4_per_eni,
            limits.max_pods()
        )),
        (None, Some(w)) => Ok(w),
        (None, None) => Err(format!(
            "instance type {instance_type:?} is not in kube-aws's max-pods table (families: {}); \
             set maxPods to its ENIs * (IPv4 per ENI - 1) + 2 (see `aws ec2 describe-instance-types`)",
            FAMILIES.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The kubelet's max-pods with prefix delegation: the prefix formula capped
/// at 110 (30 vCPUs or fewer) or 250, or `wanted` up to what the prefixes
/// address. Types outside the table need `wanted`, as in `max_pods`.
pub fn max_pods_with_prefixes(instance_type: &str, wanted: Option<u32>) -> Result<u32, String> {
    let Some(limits) = eni_limits(instance_type) else {
        return max_pods(instance_type, wanted);
    };
    let (recommended, addressable) = prefix_limits(instance_type, limits);
    match wanted {
        None => Ok(recommended),
        Some(w) if w <= addressable => Ok(w),
        Some(w) => Err(format!(
            "maxPods {w} is above what {instance_type} can address with VPC CNI prefix delegation: {addressable} \
             ({} ENIs * (({} IPv4 per ENI - 1) * {IPS_PER_PREFIX}) + 2); use at most {addressable} \
             (kube-aws's default is {recommended})",
            limits.enis, limits.ipv4_per_eni
        )),
    }
}

/// The kubelet's max-pods on a node: with the VPC CNI the table's limit or a
/// `wanted` value within it (see `max_pods`, and `max_pods_with_prefixes`
/// with prefix delegation); with another CNI pods do not take VPC addresses,
/// so only a `wanted` value is set and the kubelet's default (110) applies
/// otherwise.
pub fn kubelet_max_pods(
    addressing: PodAddressing,
    instance_type: &str,
    wanted: Option<u32>,
) -> Result<Option<u32>, String> {
    match addressing {
        PodAddressing::Overlay => Ok(wanted),
        PodAddressing::VpcSecondaryIps => max_pods(instance_type, wanted).map(Some),
        PodAddressing::VpcPrefixes => max_pods_with_prefixes(instance_type, wanted).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of the EKS AMI's eni-max-pods.txt (see the module header).
    const UPSTREAM: &str = "\
c5.large 29\nc5.9xlarge 234\nc5.18xlarge 737\nc5.metal 737\nc6g.medium 8\nc6g.16xlarge 737\n\
c6i.xlarge 58\nc6i.32xlarge 737\nc7g.medium 8\nc7g.8xlarge 234\nm5.large 29\nm5.4xlarge 234\n\
m5.24xlarge 737\nm6a.48xlarge 737\nm6a.large 29\nm6i.large 29\nm6i.xlarge 58\nm6i.2xlarge 58\n\
m6i.12xlarge 234\nm6i.16xlarge 737\nm7g.large 29\nm7g.metal 737\nm7i.metal-24xl 737\nm7i.48xlarge 737\n\
r5.2xlarge 58\nr6i.8xlarge 234\nt3.nano 4\nt3.micro 4\nt3.small 11\nt3.medium 17\nt3.large 35\n\
t3.2xlarge 58\nt3a.small 8\nt3a.medium 17\nt4g.small 11\nt4g.xlarge 58\n";

    #[test]
    fn the_formula_gives_the_published_numbers() {
        let mut checked = 0;
        for line in UPSTREAM.lines() {
            let (t, n) = line.split_once(' ').unwrap();
            let want: u32 = n.parse().unwrap();
            let got = eni_limits(t).unwrap_or_else(|| panic!("{t} missing")).max_pods();
            assert_eq!(got, want, "{t}");
            checked += 1;
        }
        assert_eq!(checked, UPSTREAM.lines().count());
    }

    #[test]
    fn every_listed_size_resolves() {
        for (family, sizes) in FAMILIES {
            for size in *sizes {
                let t = format!("{family}.{size}");
                let limits = eni_limits(&t).unwrap_or_else(|| panic!("{t} has no limits"));
                assert!(limits.max_pods() >= 4 && limits.max_pods() <= 737, "{t}");
            }
        }
    }

    #[test]
    fn unknown_types_and_sizes_are_not_guessed() {
        for t in ["m6i.nano", "x9.large", "m6i", "", "c5.medium", "t3.metal"] {
            assert_eq!(eni_limits(t), None, "{t}");
        }
    }

    #[test]
    fn overrides_are_capped_by_the_table() {
        assert_eq!(max_pods("m6i.large", None), Ok(29));
        assert_eq!(max_pods("m6i.large", Some(20)), Ok(20));
        let e = max_pods("m6i.large", Some(30)).unwrap_err();
        assert!(e.contains("maxPods 30") && e.contains("at most 29"), "{e}");
        assert_eq!(max_pods("g5.xlarge", Some(58)), Ok(58));
        let e = max_pods("g5.xlarge", None).unwrap_err();
        assert!(
            e.contains("\"g5.xlarge\" is not in") && e.contains("set maxPods"),
            "{e}"
        );
    }

    #[test]
    fn other_cnis_keep_the_kubelet_default() {
        use PodAddressing::*;
        assert_eq!(kubelet_max_pods(Overlay, "g5.xlarge", None), Ok(None));
        assert_eq!(kubelet_max_pods(Overlay, "m6i.large", Some(200)), Ok(Some(200)));
        assert_eq!(kubelet_max_pods(VpcSecondaryIps, "m6i.large", None), Ok(Some(29)));
        assert!(kubelet_max_pods(VpcSecondaryIps, "m6i.large", Some(200)).is_err());
    }

    /// What the EKS AMI's max-pods-calculator.sh prints with
    /// `--cni-prefix-delegation-enabled` (recommended) and with
    /// `--show-max-allowed` too (addressable), from the same EC2 limits.
    #[test]
    fn prefix_delegation_follows_the_prefix_formula() {
        use PodAddressing::VpcPrefixes;
        for (t, vcpu, addressable, recommended) in [
            // 3 * (9 * 16) + 2 = 434, 2 vCPUs: 110.
            ("m6i.large", 2, 434, 110),
            // 4 * (14 * 16) + 2 = 898, 4 vCPUs: 110.
            ("m6i.xlarge", 4, 898, 110),
            // 8 * (29 * 16) + 2 = 3714, 16 vCPUs: 110; 32 vCPUs: 250.
            ("m6i.4xlarge", 16, 3714, 110),
            ("m6i.8xlarge", 32, 3714, 250),
            ("c5.9xlarge", 36, 3714, 250),
            ("m5.metal", 96, 15 * 49 * 16 + 2, 250),
            // Small types stay under the ceiling: 2 * (3 * 16) + 2 = 98, 2 * (1 * 16) + 2 = 34.
            ("c6g.medium", 1, 98, 98),
            ("t3a.small", 2, 98, 98),
            ("t3.micro", 2, 34, 34),
            ("t3.medium", 2, 242, 110),
        ] {
            assert_eq!(vcpus(t), Some(vcpu), "{t}");
            let l = eni_limits(t).unwrap();
            assert_eq!(l.max_pods_with_prefixes(), addressable, "{t}");
            assert_eq!(kubelet_max_pods(VpcPrefixes, t, None), Ok(Some(recommended)), "{t}");
            // Up to what the prefixes address when asked for; not one more.
            assert_eq!(
                kubelet_max_pods(VpcPrefixes, t, Some(addressable)),
                Ok(Some(addressable)),
                "{t}"
            );
            let e = kubelet_max_pods(VpcPrefixes, t, Some(addressable + 1)).unwrap_err();
            assert!(
                e.contains("prefix delegation") && e.contains(&format!("at most {addressable}")),
                "{e}"
            );
        }
        // Without prefixes the same type keeps the secondary-address limit.
        assert_eq!(
            kubelet_max_pods(PodAddressing::VpcSecondaryIps, "m6i.large", None),
            Ok(Some(29))
        );
        // Outside the table: maxPods is required either way.
        assert!(kubelet_max_pods(VpcPrefixes, "g5.xlarge", None).is_err());
        assert_eq!(kubelet_max_pods(VpcPrefixes, "g5.xlarge", Some(110)), Ok(Some(110)));
    }

    #[test]
    fn every_listed_size_has_vcpus() {
        for (family, sizes) in FAMILIES {
            for size in *sizes {
                let t = format!("{family}.{size}");
                let n = vcpus(&t).unwrap_or_else(|| panic!("{t} has no vCPUs"));
                assert!((1..=192).contains(&n), "{t}: {n}");
            }
        }
    }
}
