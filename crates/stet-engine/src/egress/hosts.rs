//! The lines of an egress allowlist, read once into rules that match a host name or an IP literal
//! exactly as written (`pypi.org`, `*.pythonhosted.org`, `10.1.2.3`, each with an optional `:port`),
//! so that what a person reads in their configuration is what the proxy lets through.

use std::fmt;
use std::net::IpAddr;

/// The longest host name DNS carries.
const MAX_HOST_BYTES: usize = 253;

/// The longest label of a host name.
const MAX_LABEL_BYTES: usize = 63;

/// What a rule's host part names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host name and no other (lower case, no trailing dot).
    Exact(String),
    /// Every host name strictly below this domain (`*.example.org`: `a.example.org`, not
    /// `example.org`).
    Below(String),
    /// This address, written as a literal.
    Literal(IpAddr),
}

/// One allowlist line: a host pattern and, when written, the one port it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// The hosts it covers.
    pub host: HostPattern,
    /// The port written after the host, if any; without one the policy's default ports apply.
    pub port: Option<u16>,
}

/// A line of an allowlist stet cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the egress rule {line:?} {reason}")]
pub struct RuleError {
    /// The line as written (control characters removed).
    pub line: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl AllowRule {
    /// Reads one line: `host`, `*.domain`, an IPv4 literal, `[v6]`, each with an optional `:port`.
    pub fn parse(line: &str) -> Result<AllowRule, RuleError> {
        let refused = |reason| RuleError {
            line: line.chars().filter(|c| !c.is_control()).take(300).collect(),
            reason,
        };
        let (host, port) = split_port(line).map_err(refused)?;
        if let Some(domain) = host.strip_prefix("*.") {
            let domain = host_name(domain).map_err(refused)?;
            if !domain.contains('.') {
                return Err(refused(
                    "allows every host under a top-level domain; name a domain of its own",
                ));
            }
            return Ok(AllowRule {
                host: HostPattern::Below(domain),
                port,
            });
        }
        if let Some(address) = literal(host) {
            return Ok(AllowRule {
                host: HostPattern::Literal(address),
                port,
            });
        }
        Ok(AllowRule {
            host: HostPattern::Exact(host_name(host).map_err(refused)?),
            port,
        })
    }

    /// Whether this rule covers `host` (already normalized by [`host_name`] or an address).
    pub fn covers(&self, host: &Target) -> bool {
        match (&self.host, host) {
            (HostPattern::Exact(name), Target::Name(asked)) => name == asked,
            (HostPattern::Below(domain), Target::Name(asked)) => asked
                .strip_suffix(domain.as_str())
                .is_some_and(|label| label.len() > 1 && label.ends_with('.')),
            (HostPattern::Literal(address), Target::Address(asked)) => address == asked,
            _ => false,
        }
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(name) => write!(formatter, "{name}")?,
            HostPattern::Below(domain) => write!(formatter, "*.{domain}")?,
            HostPattern::Literal(IpAddr::V6(address)) => write!(formatter, "[{address}]")?,
            HostPattern::Literal(address) => write!(formatter, "{address}")?,
        }
        match self.port {
            Some(port) => write!(formatter, ":{port}"),
            None => Ok(()),
        }
    }
}

/// A host a request names, read as stet matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A host name, lower case, without a trailing dot.
    Name(String),
    /// An IP literal.
    Address(IpAddr),
}

impl Target {
    /// Reads the host part of a request's target: a name, an IPv4 literal or a bracketed IPv6.
    pub fn parse(host: &str) -> Result<Target, &'static str> {
        match literal(host) {
            Some(address) => Ok(Target::Address(address)),
            None => host_name(host).map(Target::Name),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(name) => write!(formatter, "{name}"),
            Target::Address(IpAddr::V6(address)) => write!(formatter, "[{address}]"),
            Target::Address(address) => write!(formatter, "{address}"),
        }
    }
}

/// `host[:port]` or `[v6][:port]`, the port a decimal number from 1 to 65535.
pub fn split_port(text: &str) -> Result<(&str, Option<u16>), &'static str> {
    let (host, port) = if text.starts_with('[') {
        let Some(end) = text.find(']') else {
            return Err("opens an IPv6 address with '[' and never closes it");
        };
        match &text[end + 1..] {
            "" => (&text[..=end], None),
            rest => match rest.strip_prefix(':') {
                Some(port) => (&text[..=end], Some(port)),
                None => return Err("has something after its IPv6 address that is not a port"),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        None => None,
        Some(port) => {
            let valid = !port.is_empty()
                && port.len() <= 5
                && port.bytes().all(|byte| byte.is_ascii_digit());
            match port.parse::<u16>() {
                Ok(number) if valid && number > 0 => Some(number),
                _ => return Err("has a port that is not a number from 1 to 65535"),
            }
        }
    };
    Ok((host, port))
}

/// An IPv4 literal in dotted decimal (four parts, no leading zeros), or an IPv6 literal in brackets.
fn literal(host: &str) -> Option<IpAddr> {
    if let Some(inner) = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        return inner.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A host name as DNS carries it: letters, digits and hyphens in labels of 1 to 63 bytes, no label
/// starting or ending with a hyphen, at most 253 bytes; returned in lower case without a trailing
/// dot. Anything else — an address in another spelling (`0x7f.1`, `2130706433`), a name holding
/// `_`, `@`, `%` or a non-ASCII character — is refused, so that no resolver can read it otherwise.
pub fn host_name(host: &str) -> Result<String, &'static str> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err("names no host");
    }
    if host.len() > MAX_HOST_BYTES {
        return Err("names a host longer than DNS carries (253 bytes)");
    }
    let mut last = "";
    for label in host.split('.') {
        let valid = !label.is_empty()
            && label.len() <= MAX_LABEL_BYTES
            && label
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !valid {
            return Err(
                "names a host that is not a DNS name (letters, digits and hyphens in dot-separated labels)",
            );
        }
        last = label;
    }
    let hex = last
        .get(..2)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("0x"));
    if last.bytes().all(|byte| byte.is_ascii_digit()) || hex {
        return Err("names a host that reads as a number: write an address as four decimal parts");
    }
    Ok(host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(host: &str) -> Target {
        Target::parse(host).unwrap()
    }

    #[test]
    fn exact_and_below_rules_cover_what_they_say_and_nothing_more() {
        let exact = AllowRule::parse("PyPI.org").unwrap();
        assert_eq!(exact.to_string(), "pypi.org");
        assert!(exact.covers(&name("pypi.org")));
        assert!(exact.covers(&name("PYPI.ORG.")));
        assert!(!exact.covers(&name("evilpypi.org")));
        assert!(!exact.covers(&name("pypi.org.evil.com")));
        assert!(!exact.covers(&name("a.pypi.org")));

        let below = AllowRule::parse("*.pythonhosted.org:443").unwrap();
        assert_eq!(below.port, Some(443));
        assert!(below.covers(&name("files.pythonhosted.org")));
        assert!(below.covers(&name("a.b.pythonhosted.org")));
        assert!(!below.covers(&name("pythonhosted.org")));
        assert!(!below.covers(&name("evilpythonhosted.org")));
        assert!(!below.covers(&name("pythonhosted.org.evil.com")));
    }

    #[test]
    fn literals_match_only_as_literals() {
        let four = AllowRule::parse("192.0.2.7:8443").unwrap();
        assert!(four.covers(&name("192.0.2.7")));
        assert!(!four.covers(&name("192.0.2.8")));
        let six = AllowRule::parse("[2001:db8::1]").unwrap();
        assert_eq!(six.to_string(), "[2001:db8::1]");
        assert!(six.covers(&name("[2001:db8:0::1]")));
        assert!(
            !AllowRule::parse("example.org")
                .unwrap()
                .covers(&name("192.0.2.7"))
        );
    }

    #[test]
    fn lines_that_are_not_hosts_are_refused_with_their_reason() {
        for (line, reason) in [
            ("", "names no host"),
            ("*.org", "top-level domain"),
            ("*.com:443", "top-level domain"),
            ("pypi.org:0", "port"),
            ("pypi.org:65536", "port"),
            ("pypi.org:+443", "port"),
            ("pypi.org:", "port"),
            ("user@pypi.org", "not a DNS name"),
            ("pypi_org", "not a DNS name"),
            ("pypi.org/simple", "not a DNS name"),
            ("exa mple.org", "not a DNS name"),
            ("bücher.de", "not a DNS name"),
            ("-a.org", "not a DNS name"),
            ("a..org", "not a DNS name"),
            ("2130706433", "reads as a number"),
            ("0x7f.0x1", "reads as a number"),
            ("127.1", "reads as a number"),
            ("[::1", "never closes"),
            ("[::1]x", "not a port"),
        ] {
            let error = AllowRule::parse(line).unwrap_err();
            assert!(error.reason.contains(reason), "{line:?}: {error}");
        }
        let long = format!("{}.org", "a".repeat(64));
        assert!(AllowRule::parse(&long).is_err());
        let control = AllowRule::parse("a\u{1b}[31m.org").unwrap_err();
        assert!(!control.to_string().contains('\u{1b}'), "{control}");
    }
}
