//! OpenHands as a stet harness: how its headless CLI starts in the sandbox ([`OpenHandsHarness`]) and
//! how its output reads into stet's terms: transcript items, the run's outcome, its usage.
//!
//! The harness stages the rendered instructions as `/outputs/task.md` and runs
//! `openhands --headless --json --override-with-envs -f /outputs/task.md` in `/workspace`: the brief
//! never travels on a command line (ADR-0018 row 4). The model and its endpoint go in the environment
//! (`LLM_MODEL`, `LLM_BASE_URL`, `LLM_API_KEY`, read by `--override-with-envs`): the endpoint is stet's
//! relay on the sandbox's loopback and the key a placeholder, since the gateway on the host holds the
//! real one (DESIGN §5 row 13); without a gateway the harness refuses to plan. The CLI
//! keeps its conversations under `$OPENHANDS_CONVERSATIONS_DIR` (by default `~/.openhands/conversations`,
//! which in the sandbox is a tmpfs that dies with the container); the harness points it at
//! `/outputs/conversations`, so the state file with the run's usage survives for the host to read.
//!
//! `openhands --headless --json` (1.16, SDK 1.21) prints one JSON object per line for each conversation
//! event, mixed with lines meant for a person: a Rich warning, ANSI status lines, a summary box,
//! "Goodbye!". Only a line that parses as a JSON object with a string `kind` is an event. The other
//! lines produce no transcript item: they repeat what the events already say, and they are not the
//! agent's words; they are logged at debug level. What the CLI writes to stderr is shown as it is.
//!
//! The process exits 0 whatever happened, so the outcome comes from the events: the run succeeded when
//! the agent called `finish` and no `ConversationErrorEvent` arrived. Its first `finish` is the one
//! that counts (the engine's [`crate::harness::AgentVoice`] keeps it; a later one is a warning). Usage never appears in the stream;
//! OpenHands writes its totals to `base_state.json` in the conversation's persistence directory, which
//! [`final_usage`] finds under a root it walks without following links.
//!
//! Apart from that one bounded read and debug logging, this module is pure. Every text goes the same way:
//! escape sequences and control characters are removed first (so a colour code can neither split a
//! token the sanitizer must see whole nor reach a terminal), then the sanitizer runs, then the result
//! is cut to a bound, so no cut can leave part of a secret unrecognised.

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::harness::HarnessOutcome;
use crate::harness::text;
pub use launch::{OPENHANDS_VERSION, OpenHandsHarness, OpenHandsSettings};
pub use parser::{OpenHandsOutput, OpenHandsParser};
pub use state::final_usage;
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// The harness's name in events, run records and pull requests.
const HARNESS: &str = "openhands";

/// The longest text of one transcript item, in bytes, the "… (N bytes more)" note included.
pub const MAX_ITEM_BYTES: usize = 64 * 1024;

/// The longest event line that is read; a longer one becomes a note saying it was skipped.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// The most JSON values (counted by their separators) an event line may hold to be parsed: a tree of
/// values costs tens of bytes each on the host, whatever few bytes each took on the line.
pub const MAX_EVENT_VALUES: usize = 128 * 1024;

/// The largest `base_state.json` that is read.
pub const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;

/// The most bytes of `base_state.json` files one search reads, all of them together: every file
/// read is held until the search ends, and one file hard-linked into many directories costs the
/// agent no disk.
pub const MAX_STATES_BYTES: u64 = MAX_STATE_BYTES;

/// The short rendering of an event or action kind this module does not know.
const MAX_RENDERING_BYTES: usize = 1024;

/// The reason of a failed outcome.
const MAX_REASON_BYTES: usize = 4 * 1024;

/// How deep under the given root a conversation directory is looked for.
const MAX_SEARCH_DEPTH: usize = 6;

/// How many directory entries the search lists before giving up.
const MAX_SEARCH_ENTRIES: usize = 50_000;

/// What can go wrong reading OpenHands' persisted state.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum OpenHandsError {
    #[error("reading {path:?}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path:?} is {size} bytes; an OpenHands state file is read only up to {limit} bytes")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },

    #[error("{path:?} is not a usable OpenHands state file: {problem}")]
    Malformed { path: PathBuf, problem: String },

    #[error(
        "{root:?} holds more than {limit} entries; stopped looking for OpenHands' base_state.json"
    )]
    TooManyEntries { root: PathBuf, limit: usize },

    #[error(
        "the OpenHands state files under {root:?} add up to more than {limit} bytes; stopped reading them"
    )]
    StatesTooLarge { root: PathBuf, limit: u64 },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, OpenHandsError>;

/// `text` made safe to show: escape sequences and control characters removed (newlines and tabs
/// kept, a lone carriage return read as a newline), secrets masked, and cut to `limit` bytes with a
/// note saying how many more there were.
fn bounded_text(sanitizer: &Arc<TokenSanitizer>, text: &str, limit: usize) -> SanitizedText {
    bounded_text_of(sanitizer, text, limit, 0)
}

/// [`bounded_text`] of the start of a longer text: `unread` more bytes followed `text` and were never
/// read; the note counts them too.
fn bounded_text_of(
    sanitizer: &Arc<TokenSanitizer>,
    text: &str,
    limit: usize,
    unread: usize,
) -> SanitizedText {
    text::bounded_text(sanitizer, text, limit, unread)
}

mod launch;
mod parser;
mod state;
mod stderr;
#[cfg(test)]
mod tests;
