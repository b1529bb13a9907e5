//! Claude Code as a stet harness: how `claude -p --output-format stream-json` starts in the
//! sandbox ([`ClaudeHarness`]) and how its JSON Lines read into stet's terms: transcript items, the
//! run's outcome, its usage ([`ClaudeOutput`]).
//!
//! The harness stages the rendered instructions as `/outputs/task.md`; a fixed launch line runs
//! `claude -p --output-format stream-json --verbose --dangerously-skip-permissions` in `/workspace`
//! with the task on its stdin: the brief never travels on a command line (ADR-0018 row 4), and the
//! model is named by the environment (`ANTHROPIC_MODEL`), not the line. Claude Code reaches its model
//! at `ANTHROPIC_BASE_URL`, stet's relay on the sandbox's loopback speaking the Messages API, with a
//! placeholder `ANTHROPIC_API_KEY` (the gateway on the host holds the real key and sends it as
//! `x-api-key`, DESIGN §5 row 13). Every model alias it may ask for (the small, fast model of its
//! background work, sub-agents) names the configured model, so no request asks the gateway for
//! another. Autoupdate, telemetry, error reporting and all other non-essential traffic are off; the
//! repository's own settings (`--setting-sources user`: project settings could name hooks, an API
//! key helper or another endpoint) and MCP servers (`--strict-mcp-config`) are not read; the
//! provider's own web tools (WebSearch, billed by the provider, and WebFetch) are not offered; no
//! session is saved. Its configuration and state live in the sandbox's tmpfs home.
//!
//! Claude Code asks for each tool use's permission unless told not to; the container is the
//! sandbox, so the harness bypasses them (`--dangerously-skip-permissions`, which Claude Code
//! refuses as root: the sandbox user is not root), and every command it runs shows as a `Bash`
//! tool use (docs/security.md).
//!
//! `claude -p --output-format stream-json --verbose` (2.1.327, `tests/fixtures/claude`) prints one
//! JSON object per line, tagged by `type`: `system` (subtype `init`: session, model, tools,
//! permission mode; others, such as `thinking_tokens`, are progress), `assistant` (one line per
//! content block of a model reply: `text`, `thinking`, `tool_use`; every line of one reply repeats
//! its `message.id` and its usage, which is the reply's start: its input, not yet its output),
//! `user` (`tool_result` blocks) and a last `result` (`subtype`, `is_error`, `terminal_reason`,
//! `result`, `num_turns`, the run's `usage` and `total_cost_usd`, the CLI's own estimate from its own
//! price table). The exit code says little (1 after an API error, 0 otherwise), and `subtype` is
//! `success` even when the run ended on an API error, so the outcome comes from the `result` tree:
//! the run succeeded when `is_error` is false, its subtype is `success` and its terminal reason (when
//! given) `completed`; the pushed tree is the proof either way. Usage is the `result`'s totals, once
//! per run, with the CLI's cost: with the gateway (always, for this harness) it only reconciles with
//! the gateway's ledger, which counts every request itself. A run cut before its `result` reports
//! the usage of each distinct reply it printed, each counted once whatever number of lines repeat
//! its id.
//!
//! Every text is cleaned of escape sequences and invisible characters, sanitized, then bounded
//! ([`crate::harness::text`]); a line is read only up to [`MAX_EVENT_BYTES`] and
//! [`MAX_EVENT_VALUES`] values, and JSON nested deeper than serde_json's limit is not read.

pub use launch::{CLAUDE_VERSION, ClaudeHarness, ClaudeSettings};
pub use parser::ClaudeOutput;

/// The harness's name in events, run records and pull requests.
const HARNESS: &str = "claude";

/// The longest text of one transcript item, in bytes, the "… (N bytes more)" note included.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;

/// The bounds of one event line, as for every JSON Lines harness.
pub use super::json_lines::{MAX_EVENT_BYTES, MAX_EVENT_VALUES};

/// The short rendering of an event or block type this module does not know, and of a failure.
const MAX_RENDERING_BYTES: usize = 4 * 1024;

mod launch;
mod parser;
#[cfg(test)]
mod tests;
