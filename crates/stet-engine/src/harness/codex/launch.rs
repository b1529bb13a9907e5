//! How the Codex CLI starts in the sandbox: its settings, the configuration written for it (one
//! model provider at stet's relay, everything that would reach elsewhere off) and the launch plan.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::credential::SecretValue;
use crate::harness::{Harness, HarnessLaunch, HarnessPlan, OutputParser, StagedFile};
use crate::runtime::{SandboxProcess, WORKSPACE_MOUNT};
use stet_sanitize::sanitize::TokenSanitizer;

use super::{CodexOutput, HARNESS};

/// The Codex CLI version the Codex dispatch image carries (`docker/dispatch/requirements-codex.lock`)
/// and this module's parser is built against (`tests/fixtures/codex`).
pub const CODEX_VERSION: &str = "0.163.0";

/// The staged instruction file, at `/outputs/task.md` in the sandbox.
pub(super) const TASK_FILE: &str = "task.md";

/// The staged Codex configuration, copied into `$HOME/.codex/config.toml` at start.
pub(super) const CONFIG_FILE: &str = "codex-config.toml";

/// The environment variable the configuration names as the provider's key (`env_key`).
pub(super) const KEY_VARIABLE: &str = "STET_MODEL_KEY";

/// The provider's id in the configuration.
const PROVIDER: &str = "stet";

/// The launch line: fixed text, no brief in it. The configuration goes into the tmpfs home Codex
/// reads it from, and the task reaches `codex exec` on its stdin (`-`); `exec` keeps one process,
/// so `stet speak` relays what Codex itself writes.
pub(super) const LAUNCH: &str = "mkdir -p \"$HOME/.codex\" && \
cp /outputs/codex-config.toml \"$HOME/.codex/config.toml\" && \
exec codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox - </outputs/task.md";

/// What the Codex harness is told by configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexSettings {
    /// The model, as the gateway's upstream names it.
    pub model: String,
    /// The Codex CLI version the dispatch image carries.
    pub version: String,
}

impl CodexSettings {
    /// Settings for `model` and the pinned [`CODEX_VERSION`].
    pub fn new(model: impl Into<String>) -> CodexSettings {
        CodexSettings {
            model: model.into(),
            version: CODEX_VERSION.to_owned(),
        }
    }
}

/// Runs `codex exec --json` in the sandbox.
#[derive(Debug)]
pub struct CodexHarness {
    settings: CodexSettings,
}

impl CodexHarness {
    /// The harness, run with `settings`.
    pub fn new(settings: CodexSettings) -> CodexHarness {
        CodexHarness { settings }
    }
}

/// Codex's `config.toml` for a run against `model` at `base_url`: the one provider, stet's relay,
/// speaking the Responses API with the key from [`KEY_VARIABLE`]; no retries of its own (the
/// gateway answers for the upstream), no update check, analytics, feedback or history, no hosted
/// web search, no sub-agents (one agent per dispatch, whose every step the transcript shows), no
/// plugins, commands run without Codex's own sandbox (the container is the sandbox) and never
/// wait for an approval.
///
/// Plugins off (`features.plugins`, on by default in Codex 0.163): with them on, Codex starts a
/// thread at launch that syncs OpenAI's curated plugin repository from GitHub (`git ls-remote`,
/// then api.github.com, then the ChatGPT backend), and its exit waits for that thread. The sandbox
/// reaches nothing but stet's relay, so every dispatch's agent lived on some 4.5 s after its last
/// word (docs/benchmarks.md, "A live Codex dispatch"), and with egress allowed it would have reached
/// for those hosts.
pub(super) fn config_toml(model: &str, base_url: &str) -> String {
    let mut provider = toml::Table::new();
    provider.insert("name".into(), "stet gateway".into());
    provider.insert("base_url".into(), base_url.into());
    provider.insert("env_key".into(), KEY_VARIABLE.into());
    provider.insert("wire_api".into(), "responses".into());
    provider.insert("request_max_retries".into(), 0.into());
    provider.insert("stream_max_retries".into(), 0.into());
    let mut providers = toml::Table::new();
    providers.insert(PROVIDER.into(), provider.into());
    let off = || {
        let mut table = toml::Table::new();
        table.insert("enabled".into(), false.into());
        toml::Value::Table(table)
    };
    let mut features = toml::Table::new();
    features.insert("multi_agent".into(), false.into());
    features.insert("plugins".into(), false.into());
    let mut history = toml::Table::new();
    history.insert("persistence".into(), "none".into());
    let mut config = toml::Table::new();
    config.insert("model".into(), model.into());
    config.insert("model_provider".into(), PROVIDER.into());
    config.insert("approval_policy".into(), "never".into());
    config.insert("sandbox_mode".into(), "danger-full-access".into());
    config.insert("check_for_update_on_startup".into(), false.into());
    config.insert("web_search".into(), "disabled".into());
    config.insert("model_providers".into(), providers.into());
    config.insert("analytics".into(), off());
    config.insert("feedback".into(), off());
    config.insert("history".into(), history.into());
    config.insert("features".into(), features.into());
    config.to_string()
}

impl Harness for CodexHarness {
    fn name(&self) -> &'static str {
        HARNESS
    }

    fn version(&self) -> Option<String> {
        Some(self.settings.version.clone())
    }

    fn model(&self) -> Option<String> {
        Some(self.settings.model.clone())
    }

    fn plan(&self, launch: &HarnessLaunch<'_>) -> crate::harness::Result<HarnessPlan> {
        let (model, access) =
            crate::harness::model_through_gateway(HARNESS, "Codex", &self.settings.model, launch)?;
        let mut env = BTreeMap::new();
        env.insert(
            KEY_VARIABLE.to_owned(),
            SecretValue::new(access.placeholder_key.clone()),
        );
        let argv = ["sh", "-c", LAUNCH].map(str::to_owned).to_vec();
        Ok(HarnessPlan {
            files: vec![
                StagedFile {
                    name: TASK_FILE.to_owned(),
                    contents: launch.instructions.as_bytes().to_vec(),
                },
                StagedFile {
                    name: CONFIG_FILE.to_owned(),
                    contents: config_toml(model, &access.base_url).into_bytes(),
                },
            ],
            processes: vec![SandboxProcess {
                argv,
                env,
                workdir: WORKSPACE_MOUNT.to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(CodexOutput::new(
            sanitizer,
            Some(self.settings.model.clone()),
        ))
    }
}
