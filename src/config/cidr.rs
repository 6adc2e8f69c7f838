//! IPv4 CIDRs in cluster.yaml, parsed with `ipnet`: four decimal octets and
//! a `/0`..`/32` prefix, host bits allowed (the rules say when they are not).

use std::net::Ipv4Addr;

pub use ipnet::Ipv4Net;

/// An IPv4 CIDR, host bits kept (`10.1.2.3/16` stays as written).
pub fn cidr(s: &str) -> Option<Ipv4Net> {
    s.parse().ok()
}

/// Is `s` an IPv4 CIDR?
pub fn is_cidr(s: &str) -> bool {
    cidr(s).is_some()
}

/// An IPv4 CIDR as (address, prefix length); see [`cidr`].
pub fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    cidr(s).map(|n| (u32::from(n.addr()), u32::from(n.prefix_len())))
}

/// The network address of a CIDR (its host bits cleared).
pub fn cidr_network(addr: u32, bits: u32) -> u32 {
    u8::try_from(bits)
        .ok()
        .and_then(|b| Ipv4Net::new(Ipv4Addr::from(addr), b).ok())
        .map_or(addr, |n| u32::from(n.network()))
}

/// Does `c` have host bits set (`10.0.0.1/24`)?
pub fn has_host_bits(c: &Ipv4Net) -> bool {
    c.addr() != c.network()
}

/// Is CIDR `inner` entirely inside CIDR `outer`?
pub fn cidr_within(inner: &Ipv4Net, outer: &Ipv4Net) -> bool {
    outer.contains(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_nest() {
        assert_eq!(parse_cidr("10.1.2.3/16"), Some((0x0a01_0203, 16)));
        assert_eq!(parse_cidr("0.0.0.0/0"), Some((0, 0)));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "256.0.0.0/8",
            "10.0.0/8",
            " 10.0.0.0/8",
            "10.0.0.0/-1",
            "10.0.0.256/16",
            "10.0.0.0/16 ",
            "::/0",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
            assert!(!is_cidr(bad), "{bad}");
        }
        assert!(is_cidr("10.0.0.0/16"));
        assert_eq!(cidr_network(0x0a01_0203, 16), 0x0a01_0000);
        assert_eq!(cidr_network(0xffff_ffff, 0), 0);
        assert_eq!(cidr_network(0x0a01_0203, 32), 0x0a01_0203);
        let c = |s: &str| cidr(s).unwrap();
        assert!(has_host_bits(&c("10.0.0.1/24")));
        assert!(!has_host_bits(&c("10.0.0.0/24")));
        assert!(cidr_within(&c("10.0.5.0/24"), &c("10.0.0.0/16")));
        assert!(cidr_within(&c("10.0.0.0/16"), &c("10.0.0.0/16")));
        assert!(!cidr_within(&c("10.0.0.0/8"), &c("10.0.0.0/16")));
        assert!(!cidr_within(&c("10.1.0.0/24"), &c("10.0.0.0/16")));
        assert!(!cidr_within(&c("0.0.0.0/0"), &c("10.0.0.0/16")));
        // A CIDR with host bits nests by its network, as before.
        assert!(cidr_within(&c("10.0.5.7/24"), &c("10.0.0.0/16")));
    }
}
