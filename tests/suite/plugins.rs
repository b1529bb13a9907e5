//! Every plug-in kind walked from its `ALL` list along the whole way that chooses it: named in a
//! configuration file, made by its registry as itself, and, for a harness, offered by `stet
//! transcript --harness`. A kind added to its enum without a line in its registry does not compile
//! (each registry matches every kind); one that configuration or the command line cannot reach fails
//! here.

use std::process::Command;

use stet_engine::config::{Config, ConfigFile, FileRole};
use stet_engine::harness::{HarnessKind, from_settings};
use stet_engine::runtime::RuntimeKind;

const STET: &str = env!("CARGO_BIN_EXE_stet");

/// The configuration a trusted repository file holding `text` (and the model every harness that
/// needs one reads) resolves to.
fn configured(text: &str) -> Config {
    let text = format!(
        "{text}\n[harness.openhands]\nmodel = \"openai/gpt-4.1\"\n[harness.codex]\nmodel = \"gpt-5.1-codex\"\n\
         [harness.claude]\nmodel = \"claude-sonnet-4-5\"\n"
    );
    Config::from_files(&[ConfigFile::new(
        "/plugins-test/stet.toml",
        text,
        FileRole::TrustedRepository,
    )])
    .unwrap()
}

#[test]
fn every_harness_kind_is_configured_and_built_by_the_registry_as_itself() {
    assert!(HarnessKind::ALL.len() >= 2, "{:?}", HarnessKind::ALL);
    for kind in HarnessKind::ALL {
        let config = configured(&format!("[harness]\nkind = \"{}\"", kind.as_str()));
        assert_eq!(config.harness.kind, *kind);
        let settings = config.harness.settings().unwrap();
        assert_eq!(settings.kind(), *kind);
        assert_eq!(from_settings(settings).name(), kind.as_str());
    }
}

#[test]
fn every_runtime_kind_is_configured_and_made_by_the_registry_as_itself() {
    assert!(!RuntimeKind::ALL.is_empty());
    for kind in RuntimeKind::ALL {
        let config = configured(&format!("[runtime]\nkind = \"{}\"", kind.as_str()));
        assert_eq!(config.runtime.kind, *kind);
        let runtime = stet_engine::runtime::unconnected(config.runtime.choice()).unwrap();
        assert_eq!(runtime.kind(), *kind);
    }
    assert_eq!(configured("").runtime.kind, RuntimeKind::default());
}

/// The command line takes its harness names from the registry's list: a name it does not know is
/// refused with exactly that list.
#[test]
fn stet_transcript_offers_every_harness_kind_and_no_other() {
    let output = Command::new(STET)
        .args(["transcript", "-", "--harness", "no-such-harness"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let names: Vec<&str> = HarnessKind::ALL.iter().map(|kind| kind.as_str()).collect();
    assert!(
        stderr.contains(&format!("[possible values: {}]", names.join(", "))),
        "{stderr}"
    );
}
