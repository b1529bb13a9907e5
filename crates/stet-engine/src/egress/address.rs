//! Which addresses the egress proxy may connect to: none that reaches this machine or its
//! neighbours. Loopback, private, link-local, shared (CGNAT), multicast, reserved and the cloud
//! metadata addresses are refused whatever name led there, and an IPv6 address that carries an IPv4
//! one (mapped, NAT64, 6to4) is judged by the IPv4 address it carries. The documentation and
//! benchmarking ranges are not refused: no host or neighbour answers on them, and fake-IP resolvers
//! (these machines', and the proxies of many corporate and home networks) hand them out for every
//! public name, so refusing them would refuse every registry there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not one the proxy connects to.
pub fn refused(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(address) => refused_v4(address),
        IpAddr::V6(address) => refused_v6(address),
    }
}

/// Whether `address` is this machine's loopback (the only refusal a test may lift): `127/8`, `::1`
/// and the IPv4-mapped `::ffff:127.x.y.z`, never an address that only carries `127.x.y.z` to
/// another network (NAT64, 6to4).
pub fn is_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(address) => address.is_loopback(),
        IpAddr::V6(address) => {
            address.is_loopback()
                || address
                    .to_ipv4_mapped()
                    .is_some_and(|inner| inner.is_loopback())
        }
    }
}

fn refused_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = address.octets();
    let reason = if address.is_unspecified() || a == 0 {
        "an address of this network (0.0.0.0/8)"
    } else if address.is_loopback() {
        "a loopback address"
    } else if address.is_private() {
        "a private address"
    } else if address.is_link_local() {
        "a link-local address (the cloud metadata service among them)"
    } else if a == 100 && (64..128).contains(&b) {
        "a shared address (CGNAT, 100.64.0.0/10)"
    } else if a == 192 && b == 0 && c == 0 {
        "an IETF protocol address (192.0.0.0/24)"
    } else if address.is_multicast() {
        "a multicast address"
    } else if a >= 240 {
        "a reserved or broadcast address"
    } else {
        return None;
    };
    Some(reason)
}

fn refused_v6(address: Ipv6Addr) -> Option<&'static str> {
    if let Some(inner) = embedded_v4(address) {
        return refused_v4(inner);
    }
    let first = address.segments()[0];
    let reason = if address.is_unspecified() {
        "the unspecified address"
    } else if address.is_loopback() {
        "a loopback address"
    } else if first & 0xfe00 == 0xfc00 {
        "a unique local address (fc00::/7, the cloud metadata service's fd00:ec2::254 among them)"
    } else if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
        "a link-local or site-local address"
    } else if first & 0xff00 == 0xff00 {
        "a multicast address"
    } else if first == 0x2001 && address.segments()[1] == 0 {
        "a Teredo address"
    } else if first & 0xe000 != 0x2000 {
        "an address outside global unicast (2000::/3)"
    } else {
        return None;
    };
    Some(reason)
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = address.segments();
    let octets = address.octets();
    let last_four = Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    if segments[..5] == [0; 5]
        && (segments[5] == 0xffff || segments[5] == 0)
        && !address.is_loopback()
        && !address.is_unspecified()
    {
        return Some(last_four);
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(last_four);
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_address_a_host_or_its_neighbours_answer_on_is_refused() {
        for address in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.170",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:0::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::10.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:a00:1::",
            "2002:7f00:1::",
            "100::1",
        ] {
            let parsed: IpAddr = address.parse().unwrap();
            assert!(refused(parsed).is_some(), "{address} was not refused");
        }
    }

    /// Fake-IP resolvers answer public names with these ranges (this machine gives pypi.org
    /// 203.0.113.80); nothing on the host or its network answers on them.
    #[test]
    fn public_unicast_and_the_ranges_fake_ip_resolvers_hand_out_are_allowed() {
        for address in [
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.80",
            "198.18.0.1",
            "198.19.255.254",
            "2001:db8::1",
            "::ffff:203.0.113.80",
            "1.1.1.1",
            "151.101.0.223",
            "172.32.0.1",
            "100.128.0.1",
            "2a04:4e42::223",
            "::ffff:151.101.0.223",
            "64:ff9b::151.101.0.223",
        ] {
            let parsed: IpAddr = address.parse().unwrap();
            assert_eq!(refused(parsed), None, "{address}");
        }
    }

    #[test]
    fn loopback_is_known_in_each_spelling() {
        for address in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(address.parse().unwrap()), "{address}");
        }
        assert!(!is_loopback("10.0.0.1".parse().unwrap()));
    }
}
