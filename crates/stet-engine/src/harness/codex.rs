//! The Codex CLI as a stet harness: how `codex exec --json` starts in the sandbox
//! ([`CodexHarness`]) and how its JSON Lines read into stet's terms: transcript items, the run's
//! outcome, its usage ([`CodexOutput`]).
//!
//! The harness stages the rendered instructions as `/outputs/task.md` and Codex's configuration as
//! `/outputs/codex-config.toml`; a fixed launch line copies the configuration into `$HOME/.codex`
//! (the sandbox's tmpfs home) and runs `codex exec --json --skip-git-repo-check
//! --dangerously-bypass-approvals-and-sandbox -` in `/workspace` with the task on its stdin: the
//! brief never travels on a command line (ADR-0018 row 4). The configuration names one model
//! provider, stet's relay on the sandbox's loopback speaking the Responses API, whose key is a
//! placeholder read from the environment (the gateway on the host holds the real one, DESIGN §5
//! row 13); no update check, no analytics, no feedback, no history, no hosted web search.
//!
//! Codex's own sandbox (bubblewrap, seccomp) cannot run in a container without capabilities or
//! user namespaces; the container is the sandbox, so the harness tells Codex to run commands
//! without one (`--dangerously-bypass-approvals-and-sandbox`, `sandbox_mode =
//! "danger-full-access"`, `approval_policy = "never"`): there is nothing weaker for it to fall back
//! to, and every command it runs shows as a `command_execution` item (docs/security.md).
//!
//! Codex does not make itself non-dumpable (DESIGN §5 row 21); the Codex dispatch image's `codex`
//! is execute-only for the sandbox user, so the kernel starts it non-dumpable and no command it
//! runs can read its memory or ptrace it (docs/security.md item 49).
//!
//! `codex exec --json` (0.163, `tests/fixtures/codex`) prints one JSON object per line, tagged by
//! `type`: `thread.started`, `turn.started`, `turn.completed {usage}`, `turn.failed {error}`,
//! `error {message}`, and `item.started|updated|completed {item}` whose item is an
//! `agent_message`, `reasoning`, `command_execution`, `file_change`, `mcp_tool_call`,
//! `web_search`, `todo_list` or `error`. The exit code says little (0 whether or not the agent
//! achieved anything), so the outcome comes from the events: the run succeeded when its turn
//! completed (the last agent message is the summary) and failed on `turn.failed` or when the output
//! ended before the turn did; the pushed tree is the proof either way. Usage is the thread's running
//! total, with no cost: each `turn.completed` is reported as what it adds to the previous total.
//!
//! Every text is cleaned of escape sequences and invisible characters, sanitized, then bounded
//! ([`crate::harness::text`]); a line is read only up to [`MAX_EVENT_BYTES`] and
//! [`MAX_EVENT_VALUES`] values, and JSON nested deeper than serde_json's limit is not read.

pub use launch::{CODEX_VERSION, CodexHarness, CodexSettings};
pub use parser::CodexOutput;

/// The harness's name in events, run records and pull requests.
const HARNESS: &str = "codex";

/// The longest text of one transcript item, in bytes, the "… (N bytes more)" note included.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;

/// The bounds of one event line, as for every JSON Lines harness.
pub use super::json_lines::{MAX_EVENT_BYTES, MAX_EVENT_VALUES};

/// The short rendering of an event or item type this module does not know, and of a failure.
const MAX_RENDERING_BYTES: usize = 4 * 1024;

mod launch;
mod parser;
#[cfg(test)]
mod tests;
