//! One human line for an event: what `stet demo` prints for a person, and `stet --headless` on stderr
//! when stderr is a terminal. Every consumer that shows progress as text reads the same lines, and
//! each passes the display policy, because every field of an event came from outside.

use stet_sanitize::display;

use crate::event::{Event, EventKind, ItemKind, PullRequestAction};
use crate::state::Phase;

/// The longest transcript text a progress line shows.
const PROGRESS_TEXT_CHARS: usize = 160;

/// One human line for an event, or `None` for events a person does not need to read line by line.
pub fn progress_line(event: &Event) -> Option<String> {
    let who = &event.brief;
    let text = match &event.kind {
        EventKind::Dispatched {
            title,
            repo,
            base,
            branch,
            harness,
            ..
        } => format!(
            "dispatched {:?}: {}@{} -> {}, agent {}",
            title.as_str(),
            name(repo.as_str()),
            name(base.as_str()),
            name(branch.as_str()),
            name(harness.as_str())
        ),
        EventKind::Phase { to, reason, .. } => match reason {
            Some(reason) => format!("{to}: {}", progress_text(reason.as_str())),
            None => format!("{to}"),
        },
        EventKind::Transcript(item) => {
            let mark = match item.item {
                ItemKind::Message => "says",
                ItemKind::Thought => "thinks",
                ItemKind::Command => "$",
                ItemKind::Output => "|",
                ItemKind::Error => "error:",
                ItemKind::Finish => "finished:",
                ItemKind::Other => "·",
            };
            format!("  {mark} {}", progress_text(item.text.as_str()))
        }
        EventKind::Usage(usage) => format!(
            "  usage: {} in / {} out tokens, ${:.4} so far",
            usage.input_tokens, usage.output_tokens, usage.total_cost_usd
        ),
        EventKind::ImagePull { status, .. } => {
            format!("  pulling image: {}", progress_text(status.as_str()))
        }
        EventKind::GatewayRefusal {
            api,
            field,
            value_kind,
            rule,
            setting,
        } => {
            let allow = setting
                .as_ref()
                .map(|setting| format!("; {setting} would allow it"))
                .unwrap_or_default();
            format!(
                "  gateway refused a {api} request: `{}` ({value_kind}): {rule}{allow}",
                progress_text(field.as_str())
            )
        }
        EventKind::GatewayEgress {
            api,
            tool,
            host,
            price_usd,
        } => {
            let host = host
                .as_ref()
                .map(|host| format!(" reaching {}", progress_text(host.as_str())))
                .unwrap_or_default();
            format!(
                "  gateway forwarded a {api} request with the provider tool `{}`{host}, ${price_usd:.4} a call",
                progress_text(tool.as_str())
            )
        }
        EventKind::Egress {
            host,
            port,
            allowed,
            outcome,
            hint,
            up,
            down,
            ..
        } => {
            let host = progress_text(host.as_str());
            match (allowed, hint) {
                (true, _) => format!("  network: {host}:{port} ({up} B up, {down} B down)"),
                (false, Some(hint)) => format!(
                    "  network refused {host}:{port}: {}",
                    progress_text(hint.as_str())
                ),
                (false, None) => format!(
                    "  network refused {host}:{port}: {}",
                    progress_text(outcome.as_str())
                ),
            }
        }
        EventKind::EgressSummary {
            allowed,
            refused,
            uploaded,
            downloaded,
            ..
        } => format!(
            "  network: {allowed} connection(s) allowed, {refused} refused, {uploaded} B up, {downloaded} B down"
        ),
        EventKind::Warning { message } => format!("warning: {}", progress_text(message.as_str())),
        EventKind::Collected {
            files,
            files_not_listed,
            insertions,
            deletions,
            reference,
            gate,
            ..
        } => {
            let mut line = format!(
                "collected {} file(s), +{insertions} -{deletions}, kept at {reference}",
                files.len() + files_not_listed
            );
            let held = gate.held.len() + gate.held_not_listed;
            let secrets = gate.secrets.len() + gate.secrets_not_listed;
            if held > 0 || secrets > 0 {
                line.push_str(&format!(
                    "; held for approval: {held} path(s), {secrets} secret(s)"
                ));
            }
            line
        }
        EventKind::Pushed { branch, sha, .. } => {
            format!("pushed {} at {sha}", name(branch.as_str()))
        }
        EventKind::PullRequest {
            action,
            number,
            url,
        } => {
            let action = match action {
                PullRequestAction::Opened => "opened",
                PullRequestAction::Updated => "updated",
            };
            format!("pull request #{number} {action}: {}", name(url.as_str()))
        }
        EventKind::TornDown { steps, millis } => {
            let failed = steps.iter().filter(|s| s.failure.is_some()).count();
            if failed == 0 {
                format!("torn down: {} step(s) in {millis} ms", steps.len())
            } else {
                format!(
                    "torn down with {failed} failed step(s) of {} (see the warnings)",
                    steps.len()
                )
            }
        }
        EventKind::Finished {
            outcome, reason, ..
        } => match (outcome, reason) {
            (Phase::Done, None) => "finished: done".to_owned(),
            (outcome, Some(reason)) => {
                format!("finished: {outcome} ({})", progress_text(reason.as_str()))
            }
            (outcome, None) => format!("finished: {outcome}"),
        },
    };
    // Every field came from outside (a brief, the agent, the engine, a forge): names are shown with
    // what the display policy hides escaped, and the whole line passes the policy once more.
    Some(display::one_line(&format!("[{}] {text}", name(who))))
}

/// A name (a branch, a repository, a URL) under the display policy: what it hides escaped, so two
/// names never look alike.
fn name(text: &str) -> String {
    display::escaped_invisible(text).into_owned()
}

/// Text on one line under the display policy, cut at [`PROGRESS_TEXT_CHARS`].
fn progress_text(text: &str) -> String {
    let mut line: String = display::one_line(text)
        .chars()
        .take(PROGRESS_TEXT_CHARS)
        .collect();
    if text.chars().count() > PROGRESS_TEXT_CHARS {
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stet_sanitize::sanitize::TokenSanitizer;

    use super::*;
    use crate::event::{DispatchId, TranscriptItem};

    #[test]
    fn progress_lines_are_single_lines_without_control_characters() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let event = Event::new(
            DispatchId::new(),
            "b",
            EventKind::Transcript(TranscriptItem {
                item: ItemKind::Output,
                text: sanitizer.sanitize(&format!("a\u{1b}[2J\nb{}", "x".repeat(500))),
            }),
        );
        let line = progress_line(&event).unwrap();
        assert!(line.starts_with("[b]   | a b"), "{line}");
        assert!(!line.chars().any(char::is_control));
        assert!(line.ends_with('…'));
    }

    #[test]
    fn progress_lines_escape_what_names_hide_and_show_no_hidden_character() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let hostile = "fix\u{202e}nigol\u{9d}52;c;aGk=\u{9c}";
        let text = |value: &str| sanitizer.sanitize(value);
        let event = Event::new(
            DispatchId::new(),
            "b\u{2066}",
            EventKind::Dispatched {
                title: text("T"),
                repo: text("octo/app"),
                base: text(hostile),
                branch: text(&format!("stet/{hostile}")),
                harness: text("script"),
                image: text("image"),
                cost_ceiling_usd: None,
            },
        );
        let line = progress_line(&event).unwrap();
        // The sanitizer already left the hidden characters out of the event's text; the brief id
        // is shown with them escaped.
        assert!(
            line.contains("octo/app@fixnigol -> stet/fixnigol"),
            "{line}"
        );
        assert!(line.starts_with(r"[b\u{2066}]"), "{line}");
        assert!(
            !line
                .chars()
                .any(|c| display::treatment(c) != display::Treatment::Keep),
            "{line:?}"
        );
    }
}
