//! `Event`: what the engine tells its consumers (the TUI and `--headless`), one type for both.
//!
//! Its serde form is the headless JSON Lines schema, versioned by `v` and documented in
//! `docs/events.md`. Every free-text payload is a [`SanitizedText`], so an event is redacted when it is
//! created and no consumer can print an unredacted one.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::SanitizedText;

use crate::state::Phase;

/// The schema version in every event's `v` field. Bumped on any incompatible change.
pub const EVENT_SCHEMA_VERSION: u32 = 4;

const DISPATCH_ID_PREFIX: &str = "stet-dispatch-";

/// Errors reading event data back.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum EventError {
    #[error("{0:?} is not a dispatch id (expected stet-dispatch-<uuid>)")]
    DispatchId(String),
}

/// The result of reading event data back.
pub type Result<T> = std::result::Result<T, EventError>;

/// `stet-dispatch-<uuid>`: names the dispatch's container, workspace, credential and run record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchId(uuid::Uuid);

impl DispatchId {
    /// A fresh id (a random UUID).
    pub fn new() -> DispatchId {
        DispatchId(uuid::Uuid::new_v4())
    }

    /// The id's 32 hex digits, for names that must stay short (the gateway's socket directory).
    pub fn hex(&self) -> String {
        self.0.simple().to_string()
    }

    /// The dispatch whose [`DispatchId::hex`] is `text`.
    pub fn from_hex(text: &str) -> Option<DispatchId> {
        let uuid = uuid::Uuid::try_parse(text).ok()?;
        (uuid.simple().to_string() == text).then_some(DispatchId(uuid))
    }
}

impl Default for DispatchId {
    fn default() -> Self {
        DispatchId::new()
    }
}

impl fmt::Display for DispatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DISPATCH_ID_PREFIX}{}", self.0)
    }
}

impl FromStr for DispatchId {
    type Err = EventError;

    fn from_str(s: &str) -> Result<DispatchId> {
        s.strip_prefix(DISPATCH_ID_PREFIX)
            .and_then(|rest| uuid::Uuid::parse_str(rest).ok())
            .filter(|uuid| s.ends_with(&uuid.hyphenated().to_string()))
            .map(DispatchId)
            .ok_or_else(|| EventError::DispatchId(s.to_owned()))
    }
}

impl Serialize for DispatchId {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DispatchId {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One thing that happened to one dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The schema version ([`EVENT_SCHEMA_VERSION`]).
    pub v: u32,
    /// When the engine made the event.
    pub ts: DateTime<Utc>,
    /// The dispatch it is about.
    pub dispatch: DispatchId,
    /// The brief's id (its file stem).
    pub brief: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event stamped now, in the current schema version.
    pub fn new(dispatch: DispatchId, brief: &str, kind: EventKind) -> Event {
        Event {
            v: EVENT_SCHEMA_VERSION,
            ts: Utc::now(),
            dispatch,
            brief: brief.to_owned(),
            kind,
        }
    }

    /// The event as one JSON Lines record (no trailing newline).
    pub fn to_json_line(&self) -> std::result::Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

/// What happened. The `kind` field of the JSON form names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The dispatch was accepted and waits in `queued` for a concurrency slot: what it will do.
    Dispatched {
        /// The brief's title.
        title: SanitizedText,
        /// The repository, `owner/name`.
        repo: SanitizedText,
        /// The branch the result is based on.
        base: SanitizedText,
        /// The branch the result is pushed to.
        branch: SanitizedText,
        /// The harness that runs the agent.
        harness: SanitizedText,
        /// The sandbox image, by reference.
        image: SanitizedText,
        /// The cost ceiling the gateway holds this dispatch's model spend to, in dollars; absent when
        /// there is none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_ceiling_usd: Option<f64>,
    },
    /// The dispatch moved to another phase; `reason` explains failures.
    Phase {
        /// The phase left.
        from: Phase,
        /// The phase entered.
        to: Phase,
        /// Why, for a failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<SanitizedText>,
    },
    /// One normalized item of the agent's transcript.
    Transcript(TranscriptItem),
    /// Model usage: this request's share and the dispatch's running total.
    Usage(Usage),
    /// Progress of pulling the sandbox image.
    ImagePull {
        /// The image being pulled.
        image: SanitizedText,
        /// The layer this progress is about, when it is about one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        layer: Option<SanitizedText>,
        /// The engine's status text.
        status: SanitizedText,
        /// Bytes pulled so far, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        current_bytes: Option<u64>,
        /// Bytes to pull in all, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total_bytes: Option<u64>,
    },
    /// The model gateway refused one of the agent's requests under its request policy (DESIGN §5
    /// row 24): where in the request, the kind of value there and the rule, never the value.
    GatewayRefusal {
        /// The wire API: `Chat Completions`, `Responses`, `Anthropic Messages`.
        api: SanitizedText,
        /// Where in the request: `tools[0].type`, `model`, `(body)`.
        field: SanitizedText,
        /// The JSON kind of the value there: `string`, `object`, ….
        value_kind: SanitizedText,
        /// The rule: `provider_tool`, `plugin`, `undocumented_field`, `duplicate_key`, ….
        rule: SanitizedText,
        /// The setting that would allow it, when one can.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        setting: Option<SanitizedText>,
    },
    /// The model gateway forwarded a request enabling a provider-executed tool (`[model]
    /// provider_tools`): the provider may act on the network for the agent, billed per call. The
    /// host is the one the request names for the tool (a remote MCP server's), never a path or
    /// query, which may carry the user's data.
    GatewayEgress {
        /// The wire API: `Chat Completions`, `Responses`, `Anthropic Messages`.
        api: SanitizedText,
        /// The tool or field as the configuration enables it: `mcp`, `web_search_options`.
        tool: SanitizedText,
        /// The host the request names for it, when it names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<SanitizedText>,
        /// The configured price of one call, in dollars.
        price_usd: f64,
    },
    /// A connection the agent made through the dispatch's egress proxy (`[network] allow`), allowed
    /// or refused: the host and port it asked for, the address stet connected to, and the bytes
    /// each way. The proxy sees host names, never paths.
    Egress {
        /// The host as the agent asked for it.
        host: SanitizedText,
        /// The port it asked for.
        port: u16,
        /// The address stet resolved and connected to, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<String>,
        /// Whether the policy allowed it.
        allowed: bool,
        /// `allowed by <rule>; <how it ended>` or `refused: <reason>`.
        outcome: SanitizedText,
        /// For a refusal a rule would lift, the line to add to the configuration.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<SanitizedText>,
        /// Bytes the agent sent through it.
        up: u64,
        /// Bytes it received through it.
        down: u64,
        /// How long it lasted, in milliseconds.
        millis: u64,
    },
    /// What the dispatch's egress proxy saw in all, once the agent's work is over: the counts, the
    /// bytes each way and the hosts reached (the first [`MAX_LISTED`]).
    EgressSummary {
        /// Connections allowed.
        allowed: u64,
        /// Connections refused.
        refused: u64,
        /// Bytes the agent sent out.
        uploaded: u64,
        /// Bytes it received.
        downloaded: u64,
        /// The hosts it reached, as `host:port`.
        hosts: Vec<SanitizedText>,
        /// How many more hosts it reached than `hosts` lists.
        #[serde(default, skip_serializing_if = "is_zero")]
        hosts_not_listed: usize,
        /// Connections whose `egress` event was not sent live (too many at once); they are counted here.
        #[serde(default, skip_serializing_if = "is_zero")]
        not_shown: usize,
    },
    /// Something a person should know that did not stop the dispatch (e.g. a teardown step failed).
    Warning {
        /// What the person should know.
        message: SanitizedText,
    },
    /// stet imported the agent's work into a trusted commit, kept at `reference` in the repository.
    /// `protected` lists changed paths held for review as `path (rule)`, `held` the same with the
    /// rule apart, and `secrets` what the scan of the added content found; the patch is in the run
    /// record's `diff.patch`. Each list holds its first [`MAX_LISTED`] entries (and at most
    /// [`MAX_LISTED_BYTES`] of paths); a `*_not_listed` count says how many more there are.
    Collected {
        /// The trusted commit stet made of the agent's work.
        commit: CommitSha,
        /// Where it is kept: `refs/stet/<dispatch id>`.
        reference: SanitizedText,
        /// The changed files, in path order, up to the bound.
        files: Vec<ChangedPath>,
        /// Changed files past the bound, counted but not listed.
        #[serde(default, skip_serializing_if = "is_zero")]
        files_not_listed: usize,
        /// Lines added in all.
        insertions: usize,
        /// Lines removed in all.
        deletions: usize,
        /// What the review gate found (boxed: most results hold nothing, and events stay small).
        #[serde(flatten)]
        gate: Box<GateFindings>,
    },
    /// stet pushed the result commit to the forge.
    Pushed {
        /// The branch pushed to.
        branch: SanitizedText,
        /// The commit the branch now points at.
        sha: CommitSha,
        /// The remote, without credentials.
        remote: SanitizedText,
    },
    /// stet opened or updated the pull request.
    PullRequest {
        /// Whether the pull request was opened or updated.
        action: PullRequestAction,
        /// The pull request's number.
        number: u64,
        /// Where a person sees it.
        url: SanitizedText,
    },
    /// The sandbox was torn down: each step (container, workspace, outputs, credential) and how it went.
    TornDown {
        /// Each step, in the order it ran.
        steps: Vec<TeardownStepReport>,
        /// How long the teardown took.
        millis: u64,
    },
    /// The dispatch ended; `outcome` is its terminal phase and `exit_code` the headless exit code.
    Finished {
        /// The terminal phase.
        outcome: Phase,
        /// The exit code `--headless` ends with for it (`docs/events.md`).
        exit_code: u8,
        /// Why, when it did not succeed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<SanitizedText>,
    },
}

impl EventKind {
    /// The `kind` tag of this variant, as it appears in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Dispatched { .. } => "dispatched",
            EventKind::Phase { .. } => "phase",
            EventKind::Transcript(_) => "transcript",
            EventKind::Usage(_) => "usage",
            EventKind::ImagePull { .. } => "image_pull",
            EventKind::GatewayRefusal { .. } => "gateway_refusal",
            EventKind::GatewayEgress { .. } => "gateway_egress",
            EventKind::Egress { .. } => "egress",
            EventKind::EgressSummary { .. } => "egress_summary",
            EventKind::Warning { .. } => "warning",
            EventKind::Collected { .. } => "collected",
            EventKind::Pushed { .. } => "pushed",
            EventKind::PullRequest { .. } => "pull_request",
            EventKind::TornDown { .. } => "torn_down",
            EventKind::Finished { .. } => "finished",
        }
    }
}

/// How a file differs between the parent commit and the collected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The file is new.
    Added,
    /// The file's content changed.
    Modified,
    /// The file is gone.
    Deleted,
    /// A file became a link, a link a file, and so on.
    TypeChanged,
}

/// One changed file of a collected result (paths are agent-chosen, so sanitized and bounded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedPath {
    /// The path, as the agent named it.
    pub path: SanitizedText,
    /// How it changed.
    pub change: ChangeKind,
    /// Lines added.
    pub insertions: usize,
    /// Lines removed.
    pub deletions: usize,
    /// Whether git reads the content as binary (no line counts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// Whether the diff stet shows leaves part or all of it out (past the review's text budget).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// What the review gate found in a collected result; each list is left out of the JSON when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateFindings {
    /// Each held path as `path (rule)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<SanitizedText>,
    /// Each held path with its rule apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldPathReport>,
    /// What the scan of the added content found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretReport>,
    /// Held paths past the bound of `protected` and `held`, counted but not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_not_listed: usize,
    /// Findings past the bound of `secrets`, counted but not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub secrets_not_listed: usize,
}

/// The most entries each list of a `collected` event holds: a result of many files (up to
/// `import.max_files`) cannot make an event, a run record or the theater hold megabytes of paths.
pub const MAX_LISTED: usize = 1000;

/// The most bytes of paths each list of a `collected` event holds (paths run to 4 KiB each).
pub const MAX_LISTED_BYTES: usize = 256 << 10;

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// A changed path held for a person's approval, and the rule (or rules) holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPathReport {
    /// The held path.
    pub path: SanitizedText,
    /// The rule (or rules) holding it.
    pub rule: SanitizedText,
}

/// A secret in the content a result adds: where, and of what kind. Never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretReport {
    /// The file the secret is in.
    pub path: SanitizedText,
    /// The line of the new file; absent when the secret is in the path's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The shape rule's label, or the known value's.
    pub kind: SanitizedText,
    /// A value stet itself handles: the result is never pushed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub known: bool,
}

/// One teardown step: the resource reclaimed and, when it failed, why (the rest still ran).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeardownStepReport {
    /// What was reclaimed: `container`, `workspace`, `outputs` or `credential`.
    pub resource: SanitizedText,
    /// Why reclaiming it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<SanitizedText>,
}

/// Whether a pull request was created or an existing one received the new head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullRequestAction {
    /// A new pull request.
    Opened,
    /// An existing pull request received the new head.
    Updated,
}

/// One transcript line, normalized across harnesses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptItem {
    /// What the item is.
    pub item: ItemKind,
    /// Its text, sanitized and bounded.
    pub text: SanitizedText,
}

/// What a transcript item is, for styling and filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// The agent talking to the person.
    Message,
    /// The agent's reasoning.
    Thought,
    /// A command or tool call the agent issued.
    Command,
    /// What a command or tool returned.
    Output,
    /// An error the agent or its harness reported.
    Error,
    /// The agent declared the task finished.
    Finish,
    /// Anything the harness could not classify (shown, never dropped).
    Other,
}

/// Model usage of one request, and the running total of the dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// The model the request named.
    pub model: SanitizedText,
    /// Tokens sent to the model.
    pub input_tokens: u64,
    /// Tokens the model answered with.
    pub output_tokens: u64,
    /// Tokens of the input the endpoint served from its cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// This request's cost; `None` when neither the endpoint nor the price table knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The dispatch's spend so far, this request included.
    pub total_cost_usd: f64,
    /// How long the request took through the gateway, from its arrival to the response's last byte;
    /// `None` for usage the agent reported itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use stet_sanitize::sanitize::TokenSanitizer;

    #[test]
    fn dispatch_ids_round_trip_and_reject_lookalikes() {
        let id = DispatchId::new();
        let text = id.to_string();
        assert!(text.starts_with("stet-dispatch-"));
        assert_eq!(text.parse::<DispatchId>().unwrap(), id);
        for bad in [
            "stet-dispatch-",
            "dispatch-1",
            "stet-dispatch-not-a-uuid",
            &text.to_uppercase(),
            &format!("{text}x"),
            &text.replace('-', ""),
        ] {
            assert!(bad.parse::<DispatchId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_event_serialises_flat_with_its_kind_tag() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let event = Event::new(
            DispatchId::new(),
            "fix-login",
            EventKind::Transcript(TranscriptItem {
                item: ItemKind::Command,
                text: sanitizer.sanitize("ls -la"),
            }),
        );
        let json: serde_json::Value = serde_json::from_str(&event.to_json_line().unwrap()).unwrap();
        assert_eq!(json["v"], 4);
        assert_eq!(json["kind"], "transcript");
        assert_eq!(json["item"], "command");
        assert_eq!(json["text"], "ls -la");
        assert_eq!(json["brief"], "fix-login");
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }

    /// The examples in docs/events.md parse, and every kind has one.
    #[test]
    fn the_documented_examples_cover_every_kind_and_parse() {
        let doc = include_str!("../../../docs/events.md");
        let mut kinds = BTreeSet::new();
        for line in doc.lines().filter(|l| l.starts_with("{\"v\":")) {
            let event: Event = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(event.v, EVENT_SCHEMA_VERSION);
            let again = event.to_json_line().unwrap();
            assert_eq!(again, line, "the documented line is the exact serde form");
            kinds.insert(event.kind.name());
        }
        let all: BTreeSet<&str> = [
            "dispatched",
            "collected",
            "phase",
            "transcript",
            "usage",
            "image_pull",
            "warning",
            "gateway_refusal",
            "gateway_egress",
            "egress",
            "egress_summary",
            "pushed",
            "pull_request",
            "torn_down",
            "finished",
        ]
        .into();
        assert_eq!(kinds, all);
    }
}
