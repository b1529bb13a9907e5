//! Egress through the host (DESIGN §5 row 20, issue 30): a per-dispatch proxy on a unix socket that
//! lets the agent reach the hosts a person allowed and nothing else, while its container stays on no
//! network at all. This module holds the policy — deny by default, the forge's and the model's
//! hosts never, an IP literal only when allowed as one — and the proxy that applies it.

pub mod address;
pub mod head;
pub mod hosts;
pub mod presets;
pub mod proxy;

use self::hosts::{AllowRule, HostPattern, Target};
use self::proxy::EgressBounds;

/// A dispatch's egress, as configured: what the proxy lets through, its bounds, and the upload past
/// which a result waits for a person's review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSettings {
    /// What the proxy allows.
    pub policy: EgressPolicy,
    /// What one dispatch's proxy allows in all.
    pub bounds: EgressBounds,
    /// Bytes uploaded past which the result is held at review, the hosts named.
    pub review_upload_bytes: u64,
    /// The certificate authorities the sandbox's clients trust (`network.sandbox_ca_bundle`).
    pub sandbox_ca: Option<SandboxCa>,
}

/// A PEM file of certificate authorities, read and checked, that stet copies into the sandbox and
/// names to its TLS clients, for hosts behind a private CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCa {
    /// The file it was read from.
    pub path: std::path::PathBuf,
    /// Its content, as read.
    pub pem: Vec<u8>,
    /// How many certificates it holds.
    pub certificates: usize,
}

/// What a person allowed, read from their configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// The allowed hosts, each with where it came from (`allow` or `preset <name>`).
    pub rules: Vec<(AllowRule, String)>,
    /// Hosts removed from what `rules` allow (a repository's `[network] deny`), each with where it
    /// came from.
    pub deny: Vec<(AllowRule, String)>,
    /// Whether a rule without a port also allows port 80 (plain HTTP).
    pub allow_http: bool,
    /// Host names never reached through the proxy whatever the rules say: the forge's and the
    /// model endpoint's, whose credentials stet holds.
    pub never: Vec<String>,
    /// Lets loopback addresses through: for tests only, flagged by `stet doctor`.
    pub loopback_for_tests: bool,
}

/// The policy's answer for one host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by a rule.
    Allowed {
        /// The rule as written, with where it came from.
        rule: String,
        /// Whether a `*.` rule allowed it: the labels below the domain are the agent's choice, and
        /// resolving the name sends them out, so they count as uploaded.
        chosen: bool,
    },
    /// Refused.
    Refused {
        /// Why, naming the host and port.
        reason: String,
        /// Where a rule would allow it, what to add to the configuration.
        hint: Option<String>,
    },
}

impl EgressPolicy {
    /// Whether `target` on `port` may be reached (before its name is resolved).
    pub fn decide(&self, target: &Target, port: u16) -> Verdict {
        let asked = canonical(target);
        if self
            .never
            .iter()
            .any(|never| never_target(never).as_ref().map(canonical) == Some(asked.clone()))
        {
            return Verdict::Refused {
                reason: format!(
                    "{target} is the forge's or the model's host, which the agent never reaches through the proxy (stet holds its credentials)"
                ),
                hint: None,
            };
        }
        let default_port = port == 443 || (self.allow_http && port == 80);
        if let Some((rule, origin)) = self
            .deny
            .iter()
            .find(|(rule, _)| rule.port.is_none_or(|denied| denied == port) && rule.covers(target))
        {
            return Verdict::Refused {
                reason: format!("{target}:{port} is removed by \"{rule}\" in {origin}"),
                hint: None,
            };
        }
        for (rule, origin) in &self.rules {
            let port_allowed = match rule.port {
                Some(allowed) => allowed == port,
                None => default_port,
            };
            if port_allowed && rule.covers(target) {
                return Verdict::Allowed {
                    rule: format!("{rule} ({origin})"),
                    chosen: matches!(rule.host, HostPattern::Below(_)),
                };
            }
        }
        let line = if port == 443 {
            target.to_string()
        } else {
            format!("{target}:{port}")
        };
        let reason = match target {
            Target::Address(_) => format!("{line} is an IP address no rule allows as a literal"),
            Target::Name(_) => format!("{line} is not in [network] allow"),
        };
        Verdict::Refused {
            reason,
            hint: Some(format!(
                "add \"{line}\" to [network] allow in your config.toml"
            )),
        }
    }
}

/// A host never reached, read as a request's target is (lower case, no trailing dot, an address
/// in any spelling as the address it is), so that no other spelling of it gets through.
fn never_target(host: &str) -> Option<Target> {
    let bare = host.trim_matches(['[', ']']);
    match bare.parse::<std::net::IpAddr>() {
        Ok(address) => Some(Target::Address(address)),
        Err(_) => Target::parse(host).ok(),
    }
}

/// A target with an IPv4-mapped IPv6 address read as the IPv4 address it is.
fn canonical(target: &Target) -> Target {
    match target {
        Target::Address(address) => Target::Address(address.to_canonical()),
        Target::Name(name) => Target::Name(name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(lines: &[&str], allow_http: bool) -> EgressPolicy {
        EgressPolicy {
            rules: lines
                .iter()
                .map(|line| (AllowRule::parse(line).unwrap(), "allow".to_owned()))
                .collect(),
            deny: Vec::new(),
            allow_http,
            never: vec![
                "api.github.com".into(),
                "models.example.org".into(),
                "192.0.2.9".into(),
                "2001:db8::9".into(),
            ],
            loopback_for_tests: false,
        }
    }

    fn target(host: &str) -> Target {
        Target::parse(host).unwrap()
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let verdict = EgressPolicy::default().decide(&target("pypi.org"), 443);
        assert_eq!(
            verdict,
            Verdict::Refused {
                reason: "pypi.org is not in [network] allow".into(),
                hint: Some("add \"pypi.org\" to [network] allow in your config.toml".into())
            }
        );
    }

    #[test]
    fn a_rule_without_a_port_allows_443_and_80_only_with_allow_http() {
        let strict = policy(&["pypi.org"], false);
        assert!(matches!(
            strict.decide(&target("pypi.org"), 443),
            Verdict::Allowed { .. }
        ));
        assert!(matches!(
            strict.decide(&target("pypi.org"), 80),
            Verdict::Refused { .. }
        ));
        assert!(matches!(
            strict.decide(&target("pypi.org"), 22),
            Verdict::Refused { .. }
        ));
        let plain = policy(&["pypi.org"], true);
        assert!(matches!(
            plain.decide(&target("pypi.org"), 80),
            Verdict::Allowed { .. }
        ));
        let ported = policy(&["git.example.org:8443"], true);
        assert!(matches!(
            ported.decide(&target("git.example.org"), 8443),
            Verdict::Allowed { .. }
        ));
        assert!(matches!(
            ported.decide(&target("git.example.org"), 443),
            Verdict::Refused { .. }
        ));
        let Verdict::Refused { hint, .. } = ported.decide(&target("git.example.org"), 22) else {
            panic!("allowed");
        };
        assert_eq!(
            hint.as_deref(),
            Some("add \"git.example.org:22\" to [network] allow in your config.toml")
        );
    }

    #[test]
    fn the_forge_and_model_hosts_are_never_allowed_even_when_listed() {
        let listed = policy(
            &[
                "api.github.com",
                "*.example.org",
                "192.0.2.9",
                "[2001:db8::9]",
            ],
            false,
        );
        for host in [
            "api.github.com",
            "API.GitHub.com.",
            "models.example.org",
            "192.0.2.9",
            "[2001:db8::9]",
        ] {
            let Verdict::Refused { reason, hint } = listed.decide(&target(host), 443) else {
                panic!("{host} allowed");
            };
            assert!(reason.contains("never reaches"), "{reason}");
            assert_eq!(hint, None);
        }
        assert!(matches!(
            listed.decide(&target("pkg.example.org"), 443),
            Verdict::Allowed { .. }
        ));
    }

    #[test]
    fn a_deny_rule_removes_what_an_allow_rule_covers() {
        let mut listed = policy(&["*.example.org", "pypi.org"], false);
        listed.deny = vec![(
            AllowRule::parse("upload.example.org").unwrap(),
            "the repository's stet.toml".to_owned(),
        )];
        let Verdict::Refused { reason, hint } = listed.decide(&target("upload.example.org"), 443)
        else {
            panic!("allowed");
        };
        assert_eq!(
            reason,
            "upload.example.org:443 is removed by \"upload.example.org\" in the repository's stet.toml"
        );
        assert_eq!(hint, None);
        assert!(matches!(
            listed.decide(&target("pkg.example.org"), 443),
            Verdict::Allowed { .. }
        ));
    }

    #[test]
    fn an_ip_literal_needs_a_literal_rule() {
        let names = policy(&["*.example.org"], false);
        let Verdict::Refused { reason, .. } = names.decide(&target("192.0.2.1"), 443) else {
            panic!("allowed");
        };
        assert!(reason.contains("IP address"), "{reason}");
        let literal = policy(&["192.0.2.1"], false);
        assert!(matches!(
            literal.decide(&target("192.0.2.1"), 443),
            Verdict::Allowed { .. }
        ));
    }
}
