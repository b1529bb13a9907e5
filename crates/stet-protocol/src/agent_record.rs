//! The JSON Lines protocol the scripted agent (`stet agent`, inside the sandbox) prints on stdout,
//! shared with the `script` harness that reads it on the host, so the two sides cannot drift apart:
//! one record per line, its kind in the field `type`. Also the one line `stet speak`, the process every
//! harness program runs under, writes on its stderr when the harness left its output held open
//! ([`SpeakerReport`]).

use serde::{Deserialize, Serialize};

/// One line of the scripted agent's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentRecord {
    /// The agent talking to the person.
    Message {
        /// The words, as the agent wrote them.
        text: String,
    },
    /// The agent's reasoning.
    Thought {
        /// The reasoning, as the agent wrote it.
        text: String,
    },
    /// A command the agent runs or an edit it makes, described for display.
    Command {
        /// The description.
        text: String,
    },
    /// One line of what a command printed, or other output.
    Output {
        /// The line.
        text: String,
    },
    /// Something went wrong, as the agent reports it.
    Error {
        /// The agent's account of what went wrong.
        text: String,
    },
    /// Model usage of one (pretended) request.
    Usage {
        /// The model the request went to.
        model: String,
        /// Prompt tokens, cache reads included.
        input_tokens: u64,
        /// Completion tokens.
        output_tokens: u64,
        /// Prompt tokens read from the provider's cache.
        #[serde(default)]
        cached_tokens: u64,
        /// What the request cost, when the agent knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// The agent declares the task finished.
    Finish {
        /// What the agent says it did.
        summary: String,
    },
}

/// One of a harness program's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessStream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// What `stet speak` writes as its last stderr line, on a line of its own, when another process than
/// the harness program it ran (one the harness started) wrote on the program's stdout or stderr, or
/// still held them open when the program exited: nothing such a process wrote was relayed. It is
/// written only then, by `stet speak` itself, after it stopped relaying; the engine turns it into a
/// warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeakerReport {
    /// The streams still held open when the harness program exited.
    pub held_open_after_exit: Vec<HarnessStream>,
    /// The streams another process wrote on (passed over, never relayed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written_by_others: Vec<HarnessStream>,
}

impl SpeakerReport {
    /// The report as one JSON line, without its newline.
    pub fn to_line(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }

    /// The report a line holds, when it holds exactly one and nothing else.
    pub fn from_line(line: &[u8]) -> Option<SpeakerReport> {
        serde_json::from_slice(line.trim_ascii())
            .ok()
            .filter(|report: &SpeakerReport| {
                !(report.held_open_after_exit.is_empty() && report.written_by_others.is_empty())
            })
    }
}

impl AgentRecord {
    /// The record as one JSON line, without its newline.
    pub fn to_line(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_tagged_by_type_and_read_back_unchanged() {
        let records = [
            AgentRecord::Message { text: "hi".into() },
            AgentRecord::Thought { text: "hm".into() },
            AgentRecord::Command {
                text: "stet agent check".into(),
            },
            AgentRecord::Output { text: "ok".into() },
            AgentRecord::Error {
                text: "broken".into(),
            },
            AgentRecord::Usage {
                model: "demo-model".into(),
                input_tokens: 10,
                output_tokens: 2,
                cached_tokens: 1,
                cost_usd: Some(0.5),
            },
            AgentRecord::Finish {
                summary: "done".into(),
            },
        ];
        for record in records {
            let line = record.to_line().unwrap();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(serde_json::from_str::<AgentRecord>(&line).unwrap(), record);
        }
        assert_eq!(
            AgentRecord::Message { text: "hi".into() }
                .to_line()
                .unwrap(),
            r#"{"type":"message","text":"hi"}"#
        );
    }

    #[test]
    fn a_speaker_report_reads_back_and_nothing_else_reads_as_one() {
        let report = SpeakerReport {
            held_open_after_exit: vec![HarnessStream::Stdout, HarnessStream::Stderr],
            written_by_others: Vec::new(),
        };
        let line = report.to_line().unwrap();
        assert_eq!(line, r#"{"held_open_after_exit":["stdout","stderr"]}"#);
        assert_eq!(SpeakerReport::from_line(line.as_bytes()), Some(report));
        for other in [
            r#"{"held_open_after_exit":["stdout"],"text":"more"}"#,
            r#"{"held_open_after_exit":["stdin"]}"#,
            r#"{"held_open_after_exit":[]}"#,
            r#"{"type":"finish","summary":"done"}"#,
            "held_open_after_exit",
        ] {
            assert_eq!(SpeakerReport::from_line(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn usage_reads_without_its_optional_fields() {
        let record: AgentRecord = serde_json::from_str(
            r#"{"type":"usage","model":"m","input_tokens":3,"output_tokens":4}"#,
        )
        .unwrap();
        assert_eq!(
            record,
            AgentRecord::Usage {
                model: "m".into(),
                input_tokens: 3,
                output_tokens: 4,
                cached_tokens: 0,
                cost_usd: None
            }
        );
        let line = record.to_line().unwrap();
        assert!(!line.contains("cost_usd"), "{line}");
    }
}
