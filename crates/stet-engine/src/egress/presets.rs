//! The named sets of hosts a person can allow in one word (`presets = ["python"]`): each package
//! ecosystem's registry and the host its files are served from, and nothing that accepts uploads
//! beyond what publishing a package takes (docs/network.md says why each host is there).

use super::hosts::{AllowRule, HostPattern};

/// Each preset's name and hosts (all on port 443).
pub const PRESETS: &[(&str, &[&str])] = &[
    // The index (pypi.org/simple) and the files it links to.
    ("python", &["pypi.org", "files.pythonhosted.org"]),
    // The sparse index, the crate files, and rustup's toolchains.
    (
        "rust",
        &[
            "index.crates.io",
            "static.crates.io",
            "crates.io",
            "static.rust-lang.org",
        ],
    ),
    // npm's registry, which serves the metadata and the tarballs.
    ("node", &["registry.npmjs.org"]),
    // The module proxy and the checksum database.
    ("go", &["proxy.golang.org", "sum.golang.org"]),
    // Debian's archive and its security updates (apt over HTTPS).
    ("debian", &["deb.debian.org", "security.debian.org"]),
];

/// The rules of the preset named `name`, or `None` when there is no such preset.
pub fn rules(name: &str) -> Option<Vec<AllowRule>> {
    let (_, hosts) = PRESETS.iter().find(|(preset, _)| *preset == name)?;
    Some(
        hosts
            .iter()
            .map(|host| AllowRule {
                host: HostPattern::Exact((*host).to_owned()),
                port: None,
            })
            .collect(),
    )
}

/// The names of the presets, for an error that lists them.
pub fn names() -> String {
    PRESETS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_host_is_a_rule_stet_would_read_the_same() {
        for (name, hosts) in PRESETS {
            let rules = rules(name).unwrap();
            assert_eq!(rules.len(), hosts.len());
            for (rule, host) in rules.iter().zip(hosts.iter()) {
                assert_eq!(&AllowRule::parse(host).unwrap(), rule, "{name}: {host}");
            }
        }
        assert_eq!(rules("cobol"), None);
        assert_eq!(names(), "python, rust, node, go, debian");
    }
}
