//! `stet --headless`: dispatches briefs without the terminal UI, prints the engine's event stream as
//! JSON Lines on stdout (the schema in `docs/events.md`) and exits with the code of DESIGN §6. Human
//! progress goes to stderr, and only when stderr is a terminal; `stet demo` without `--headless`
//! prints the same progress lines on stdout instead of JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use tokio::sync::mpsc;

use crate::brief::Brief;
use crate::dispatch::dispatcher::DispatchHandle;
use crate::dispatch::order::Delivery;
use stet_protocol::event::{DispatchId, Event, EventKind, ItemKind};
use stet_protocol::state::Phase;

/// Exit code when the run was interrupted by SIGINT/SIGTERM or its terminal hung up (every dispatch
/// cancelled).
pub const EXIT_CANCELLED: u8 = 3;
/// Exit code for usage and configuration errors, including a refused dispatch.
pub const EXIT_USAGE: u8 = 2;

/// The longest transcript text a progress line shows.
const PROGRESS_TEXT_CHARS: usize = 160;

/// How the event stream is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// JSON Lines on the writer (stdout), and, when `progress`, human lines on stderr.
    JsonLines {
        /// Also show human progress lines on stderr.
        progress: bool,
    },
    /// Human lines on the writer (stdout); for `stet demo` until the theater has a UI.
    Human,
}

/// Dispatches `briefs`, consumes `events` until every accepted dispatch finished, and returns the
/// exit code: the highest code among the dispatches (0 when all are done), 2 when one was refused,
/// 3 when `interrupted` fired (everything is cancelled and torn down first).
pub async fn run(
    handle: DispatchHandle,
    mut events: mpsc::Receiver<Event>,
    briefs: Vec<Brief>,
    delivery: Delivery,
    output: Output,
    out: &mut dyn Write,
    interrupted: impl Future<Output = ()>,
) -> u8 {
    let mut code = 0u8;
    let mut pending: BTreeSet<DispatchId> = BTreeSet::new();
    for brief in briefs {
        let id = brief.id.clone();
        match handle.dispatch(brief, delivery).await {
            Ok(dispatch) => {
                pending.insert(dispatch);
            }
            Err(error) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: brief {}: {}",
                    stet_sanitize::display::escaped_invisible(&id),
                    stet_sanitize::display::without_invisible(&error.to_string()).text
                );
                code = code.max(EXIT_USAGE);
            }
        }
    }
    let mut outcomes: BTreeMap<DispatchId, u8> = BTreeMap::new();
    let mut stopping = false;
    let mut writing = true;
    tokio::pin!(interrupted);
    let mut shutdown = None;
    while !pending.is_empty() {
        tokio::select! {
            () = &mut interrupted, if !stopping => {
                stopping = true;
                let _ = writeln!(
                    std::io::stderr(),
                    "stet: interrupted; cancelling and tearing down every dispatch (interrupt again to exit at once)"
                );
                let handle = handle.clone();
                shutdown = Some(tokio::spawn(async move { handle.shutdown().await }));
            }
            event = events.recv() => {
                let Some(event) = event else { break };
                if let EventKind::Finished { exit_code, .. } = &event.kind {
                    pending.remove(&event.dispatch);
                    outcomes.insert(event.dispatch, *exit_code);
                }
                if writing && let Err(error) = show(&event, output, out) {
                    // The reader went away: nobody is watching, so nothing should go on.
                    writing = false;
                    tracing::warn!(%error, "stdout closed; cancelling every dispatch");
                    if !stopping {
                        stopping = true;
                        let handle = handle.clone();
                        shutdown = Some(tokio::spawn(async move { handle.shutdown().await }));
                    }
                }
            }
        }
    }
    if let Some(shutdown) = shutdown {
        let _ = shutdown.await;
    }
    if stopping && writing {
        return EXIT_CANCELLED;
    }
    outcomes.values().fold(code, |worst, code| worst.max(*code))
}

fn show(event: &Event, output: Output, out: &mut dyn Write) -> std::io::Result<()> {
    match output {
        Output::JsonLines { progress } => {
            let line = event.to_json_line().map_err(std::io::Error::other)?;
            writeln!(out, "{line}")?;
            out.flush()?;
            if progress && let Some(line) = progress_line(event) {
                // stderr may be a closed pipe: progress is best effort, never a panic.
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
        Output::Human => {
            if let Some(line) = progress_line(event) {
                writeln!(out, "{line}")?;
                out.flush()?;
            }
        }
    }
    Ok(())
}

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
                stet_protocol::event::PullRequestAction::Opened => "opened",
                stet_protocol::event::PullRequestAction::Updated => "updated",
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
    Some(stet_sanitize::display::one_line(&format!(
        "[{}] {text}",
        name(who)
    )))
}

/// A name (a branch, a repository, a URL) under the display policy: what it hides escaped, so two
/// names never look alike.
fn name(text: &str) -> String {
    stet_sanitize::display::escaped_invisible(text).into_owned()
}

/// Text on one line under the display policy, cut at [`PROGRESS_TEXT_CHARS`].
fn progress_text(text: &str) -> String {
    let mut line: String = stet_sanitize::display::one_line(text)
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

    use super::*;
    use stet_protocol::event::TranscriptItem;
    use stet_sanitize::sanitize::TokenSanitizer;

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
                .any(|c| stet_sanitize::display::treatment(c)
                    != stet_sanitize::display::Treatment::Keep),
            "{line:?}"
        );
    }
}
