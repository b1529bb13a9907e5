//! How Claude Code starts in the sandbox: its settings, its environment (the relay as its
//! endpoint, a placeholder key, everything that would reach elsewhere off) and the launch plan.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::credential::SecretValue;
use crate::harness::{Harness, HarnessLaunch, HarnessPlan, OutputParser, StagedFile};
use crate::runtime::{SandboxProcess, WORKSPACE_MOUNT};
use stet_sanitize::sanitize::TokenSanitizer;

use super::{ClaudeOutput, HARNESS};

/// The Claude Code version the Claude Code dispatch image carries
/// (`docker/dispatch/requirements-claude.lock`) and this module's parser is built against
/// (`tests/fixtures/claude`).
pub const CLAUDE_VERSION: &str = "2.1.327";

/// The staged instruction file, at `/outputs/task.md` in the sandbox: Claude Code's prompt, read on
/// its stdin.
pub(super) const TASK_FILE: &str = "task.md";

/// The launch line: fixed text, no brief and no model in it. `exec` keeps one process, so `stet
/// speak` relays what Claude Code itself writes.
pub(super) const LAUNCH: &str = "exec claude -p --output-format stream-json --verbose \
--dangerously-skip-permissions --setting-sources user --strict-mcp-config --no-session-persistence \
--disallowedTools WebSearch,WebFetch </outputs/task.md";

/// The environment variable holding the placeholder key.
pub(super) const KEY_VARIABLE: &str = "ANTHROPIC_API_KEY";

/// The variables naming a model: the session's, and every alias Claude Code may ask for on its own
/// (its small, fast model, the family defaults, sub-agents), all set to the configured model.
const MODEL_VARIABLES: &[&str] = &[
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
];

/// Switches that keep Claude Code from reaching anything but its model: no autoupdate, telemetry,
/// error reporting or other non-essential traffic.
const QUIET: &[&str] = &[
    "DISABLE_AUTOUPDATER",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
];

/// What the Claude Code harness is told by configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeSettings {
    /// The model, as the gateway's upstream names it.
    pub model: String,
    /// The Claude Code version the dispatch image carries.
    pub version: String,
}

impl ClaudeSettings {
    /// Settings for `model` and the pinned [`CLAUDE_VERSION`].
    pub fn new(model: impl Into<String>) -> ClaudeSettings {
        ClaudeSettings {
            model: model.into(),
            version: CLAUDE_VERSION.to_owned(),
        }
    }
}

/// Runs `claude -p --output-format stream-json` in the sandbox.
#[derive(Debug)]
pub struct ClaudeHarness {
    settings: ClaudeSettings,
}

impl ClaudeHarness {
    /// The harness, run with `settings`.
    pub fn new(settings: ClaudeSettings) -> ClaudeHarness {
        ClaudeHarness { settings }
    }
}

/// `ANTHROPIC_BASE_URL` for the relay at `base_url`: Claude Code adds `/v1/messages` itself, so
/// the relay's `/v1` is left off.
pub(super) fn anthropic_base_url(base_url: &str) -> &str {
    let base_url = base_url.trim_end_matches('/');
    base_url.strip_suffix("/v1").unwrap_or(base_url)
}

/// Claude Code's environment for a run against `model` at the relay `base_url`, the key a
/// placeholder.
pub(super) fn environment(
    model: &str,
    base_url: &str,
    placeholder_key: &str,
) -> BTreeMap<String, SecretValue> {
    let mut env = BTreeMap::new();
    env.insert(
        "ANTHROPIC_BASE_URL".to_owned(),
        SecretValue::new(anthropic_base_url(base_url).to_owned()),
    );
    env.insert(
        KEY_VARIABLE.to_owned(),
        SecretValue::new(placeholder_key.to_owned()),
    );
    for variable in MODEL_VARIABLES {
        env.insert((*variable).to_owned(), SecretValue::new(model.to_owned()));
    }
    for variable in QUIET {
        env.insert((*variable).to_owned(), SecretValue::new("1".to_owned()));
    }
    env
}

impl Harness for ClaudeHarness {
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
        let (model, access) = crate::harness::model_through_gateway(
            HARNESS,
            "Claude Code",
            &self.settings.model,
            launch,
        )?;
        let argv = ["sh", "-c", LAUNCH].map(str::to_owned).to_vec();
        Ok(HarnessPlan {
            files: vec![StagedFile {
                name: TASK_FILE.to_owned(),
                contents: launch.instructions.as_bytes().to_vec(),
            }],
            processes: vec![SandboxProcess {
                argv,
                env: environment(model, &access.base_url, &access.placeholder_key),
                workdir: WORKSPACE_MOUNT.to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(ClaudeOutput::new(
            sanitizer,
            Some(self.settings.model.clone()),
        ))
    }
}
