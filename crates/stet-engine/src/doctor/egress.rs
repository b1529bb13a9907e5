//! `stet doctor`'s egress checks (issue 30): whether the agent reaches any host, whether each host
//! `[network]` allows resolves to an address the proxy would connect to and answers from this
//! machine, and a loud warning when the test-only loopback override is on.

use std::net::SocketAddr;
use std::time::Duration;

use crate::check::{Check, Status};
use crate::config::Config;
use crate::egress::EgressSettings;
use crate::egress::address;
use crate::egress::hosts::HostPattern;

/// How long one host may take to resolve and answer.
const PROBE_TIME: Duration = Duration::from_secs(3);

/// The most hosts one run of the doctor tries.
const MAX_PROBED: usize = 32;

/// The egress checks for `config`; `user_file`: where the settings go, for the fixes.
pub(super) async fn egress_checks(config: &Config, user_file: &str) -> Vec<Check> {
    let Some(egress) = &config.network.egress else {
        return vec![Check::ok(
            "egress",
            "off: the agent reaches no host (nothing in [network] allow or presets)".to_owned(),
        )];
    };
    let mut checks = Vec::new();
    if egress.policy.loopback_for_tests {
        checks.push(Check::problem(
            "egress",
            Status::Warn,
            "network.loopback_for_tests is on: the agent can reach this machine's loopback services through the egress proxy".to_owned(),
            &format!("remove network.loopback_for_tests from {user_file}: it is for stet's own tests"),
        ));
    }
    checks.push(Check::ok(
        "egress",
        format!(
            "{} rule(s) allow hosts through the host's proxy; uploads bounded at {} bytes, held for review past {}",
            egress.policy.rules.len(),
            egress.bounds.max_upload_bytes,
            egress.review_upload_bytes
        ),
    ));
    let probes = probes(egress);
    let answers = futures_util::future::join_all(
        probes
            .iter()
            .map(|(host, port)| answer(host, *port, egress)),
    )
    .await;
    for ((host, port), answered) in probes.iter().zip(answers) {
        checks.push(match answered {
            Ok(address) => Check::ok("egress host", format!("{host}:{port} answers at {address}")),
            Err(why) => Check::problem(
                "egress host",
                Status::Warn,
                format!("{host}:{port} {why}"),
                &format!(
                    "check the host in [network] allow in {user_file}, or this machine's network"
                ),
            ),
        });
    }
    checks
}

/// The hosts and ports to try: every rule naming one host (a wildcard names none), its port or 443.
fn probes(egress: &EgressSettings) -> Vec<(String, u16)> {
    let mut probes: Vec<(String, u16)> = Vec::new();
    for (rule, _) in &egress.policy.rules {
        let host = match &rule.host {
            HostPattern::Exact(name) => name.clone(),
            HostPattern::Literal(address) => address.to_string(),
            HostPattern::Below(_) => continue,
        };
        let probe = (host, rule.port.unwrap_or(443));
        if !probes.contains(&probe) {
            probes.push(probe);
        }
    }
    probes.truncate(MAX_PROBED);
    probes
}

/// Resolves `host` as the proxy would and connects to the first address it would allow.
async fn answer(host: &str, port: u16, egress: &EgressSettings) -> Result<SocketAddr, String> {
    let tried = tokio::time::timeout(PROBE_TIME, async {
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|err| format!("does not resolve: {err}"))?
            .collect();
        let mut why = "resolves to no address".to_owned();
        for address in addresses {
            let lifted = egress.policy.loopback_for_tests && address::is_loopback(address.ip());
            if let Some(reason) = address::refused(address.ip()).filter(|_| !lifted) {
                why = format!(
                    "resolves to {}, {reason}, which the proxy never connects to",
                    address.ip()
                );
                continue;
            }
            match tokio::net::TcpStream::connect(address).await {
                Ok(_) => return Ok(address),
                Err(err) => why = format!("does not answer at {address}: {err}"),
            }
        }
        Err(why)
    })
    .await;
    tried.unwrap_or_else(|_| Err(format!("gave no answer within {}s", PROBE_TIME.as_secs())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::EgressPolicy;
    use crate::egress::hosts::AllowRule;
    use crate::egress::proxy::EgressBounds;

    fn settings(rules: &[&str], loopback_for_tests: bool) -> EgressSettings {
        EgressSettings {
            policy: EgressPolicy {
                rules: rules
                    .iter()
                    .map(|line| (AllowRule::parse(line).unwrap(), "allow".to_owned()))
                    .collect(),
                loopback_for_tests,
                ..EgressPolicy::default()
            },
            bounds: EgressBounds::default(),
            review_upload_bytes: 1,
            sandbox_ca: None,
        }
    }

    #[tokio::test]
    async fn a_host_that_answers_passes_and_a_refused_address_is_named() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let lifted = settings(&[&format!("localhost:{port}")], true);
        assert!(answer("localhost", port, &lifted).await.is_ok());
        let strict = settings(&[&format!("localhost:{port}")], false);
        let why = answer("localhost", port, &strict).await.unwrap_err();
        assert!(why.contains("which the proxy never connects to"), "{why}");
        assert_eq!(
            probes(&settings(
                &["*.example.org", "pypi.org", "pypi.org:443", "10.0.0.1:8080"],
                false
            )),
            [("pypi.org".to_owned(), 443), ("10.0.0.1".to_owned(), 8080)]
        );
    }
}
