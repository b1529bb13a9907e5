//! The timeline pane: every phase a dispatch went through with its start and duration, the current
//! one live, then how it ended and how its sandbox was torn down — the story of one dispatch. When
//! the pane is short the oldest phases scroll off, so the current one is always visible.

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::{DispatchView, ImagePullProgress};
use crate::panes::{clock, duration, pane_block, text};
use crate::theme::Theme;

const SPINNER: [char; 4] = ['◐', '◓', '◑', '◒'];

/// `text` wrapped to `width` columns as lines in `style`, the first behind `lead`, the rest
/// indented as deep, so a reason is read whole however narrow the pane.
fn wrapped(text: &str, lead: &str, width: usize, style: Style) -> Vec<Line<'static>> {
    let indent = text::char_width_of(lead);
    text::wrap_words(text, width.saturating_sub(indent))
        .into_iter()
        .enumerate()
        .map(|(index, row)| {
            let lead = if index == 0 {
                lead.to_owned()
            } else {
                " ".repeat(indent)
            };
            Line::styled(format!("{lead}{row}"), style)
        })
        .collect()
}

/// The lines of the timeline for a pane `width` columns wide, without the block. Reasons wrap; when
/// the pane is too narrow for the clock beside each phase, the clock gives way to the duration.
pub fn lines(
    view: &DispatchView,
    now: DateTime<Utc>,
    width: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let last = view.timeline.len().saturating_sub(1);
    let label_width = view
        .timeline
        .iter()
        .map(|span| span.phase.label().len())
        .max()
        .unwrap_or(0);
    // Marker, label, clock and the longest duration (`59m59s…`), each with its space.
    let with_clock = width >= 2 + label_width + 1 + 8 + 2 + 7;
    for (index, span) in view.timeline.iter().enumerate() {
        let current = index == last;
        let (marker, style) = if current && view.in_flight() {
            let frame = usize::try_from(now.timestamp().rem_euclid(4)).unwrap_or(0);
            (SPINNER[frame], theme.title())
        } else if current && span.phase.is_terminal() {
            let style = if span.phase == stet_protocol::state::Phase::Done {
                theme.success()
            } else {
                theme.error()
            };
            ('■', style)
        } else {
            ('✓', theme.muted())
        };
        let took = if current && view.in_flight() {
            format!("{}…", duration(span.elapsed(now)))
        } else if span.phase.is_terminal() {
            String::new()
        } else {
            duration(span.elapsed(now))
        };
        let mut row = vec![Span::styled(
            format!("{marker} {:<label_width$} ", span.phase.label()),
            style,
        )];
        if with_clock {
            row.push(Span::styled(clock(span.started), theme.muted()));
            row.push(Span::raw("  "));
        }
        row.push(Span::raw(took));
        lines.push(Line::from(row));
        if let Some(reason) = &span.reason {
            lines.extend(wrapped(
                &one_line(reason.as_str()),
                "  ↳ ",
                width,
                theme.error(),
            ));
        }
        if current
            && view.in_flight()
            && span.phase == stet_protocol::state::Phase::Provisioning
            && let Some(pull) = &view.image_pull
        {
            lines.extend(wrapped(&image_pull(pull), "    ", width, theme.muted()));
        }
    }
    if let Some(outcome) = &view.outcome {
        let mut said = format!(
            "outcome: {} (exit {})",
            outcome.phase.label(),
            outcome.exit_code
        );
        // A reason the timeline already shows under the phase it led to is not said twice.
        let said_above = view
            .timeline
            .iter()
            .any(|span| span.reason == outcome.reason);
        if let Some(reason) = outcome.reason.as_ref().filter(|_| !said_above) {
            said.push_str(": ");
            said.push_str(&one_line(reason.as_str()));
        }
        let style = if outcome.phase == stet_protocol::state::Phase::Done {
            theme.success()
        } else {
            theme.error()
        };
        lines.extend(wrapped(&said, "", width, style));
    }
    if let Some(pushed) = &view.pushed {
        let said = format!(
            "pushed {} → {}",
            one_line(pushed.branch.as_str()),
            one_line(pushed.remote.as_str())
        );
        lines.extend(wrapped(&said, "", width, Style::new()));
    }
    if let Some(pull_request) = &view.pull_request {
        let said = format!(
            "PR #{} {}: {}",
            pull_request.number,
            match pull_request.action {
                stet_protocol::event::PullRequestAction::Opened => "opened",
                stet_protocol::event::PullRequestAction::Updated => "updated",
            },
            one_line(pull_request.url.as_str())
        );
        lines.extend(wrapped(&said, "", width, theme.success()));
    }
    match &view.teardown {
        Some(teardown) => {
            lines.push(Line::raw(format!("teardown ({} ms):", teardown.millis)));
            for step in &teardown.steps {
                let resource = one_line(step.resource.as_str());
                lines.extend(match &step.failure {
                    None => wrapped(&resource, "  ✓ ", width, theme.success()),
                    Some(failure) => wrapped(
                        &format!("{resource}: {}", one_line(failure.as_str())),
                        "  ✗ ",
                        width,
                        theme.error(),
                    ),
                });
            }
        }
        None if view.phase.is_terminal() && !view.provisioned() => {
            lines.extend(wrapped(
                "nothing to tear down (no sandbox was provisioned)",
                "teardown: ",
                width,
                theme.muted(),
            ));
        }
        None if view.phase.is_terminal() && view.in_flight() => {
            lines.push(Line::styled("teardown: in progress", theme.muted()));
        }
        None => {}
    }
    if let Some(latest) = view.warnings.items().back() {
        let said = format!(
            "{} warning(s), latest: {}",
            view.warnings.len() as u64 + view.warnings.dropped(),
            one_line(latest.as_str())
        );
        lines.extend(wrapped(&said, "⚠ ", width, theme.warning()));
    }
    lines
}

fn image_pull(pull: &ImagePullProgress) -> String {
    let mut said = format!(
        "    pulling {}: {}",
        one_line(pull.image.as_str()),
        one_line(pull.status.as_str())
    );
    if let (Some(current), Some(total)) = (pull.current_bytes, pull.total_bytes)
        && total > 0
    {
        said.push_str(&format!(
            " {:.1}/{:.1} MB ({}%)",
            current as f64 / 1e6,
            total as f64 / 1e6,
            current.saturating_mul(100) / total
        ));
    }
    said
}

/// Draws `view`'s timeline into `area`, the current phase timed up to `now`.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    view: &DispatchView,
    now: DateTime<Utc>,
    theme: Theme,
) {
    let block = pane_block("Timeline".to_owned(), false, theme);
    let lines = lines(view, now, usize::from(area.width.saturating_sub(2)), theme);
    let hidden = lines
        .len()
        .saturating_sub(usize::from(area.height.saturating_sub(2)));
    let paragraph = Paragraph::new(lines)
        .block(block)
        .scroll((u16::try_from(hidden).unwrap_or(u16::MAX), 0));
    frame.render_widget(paragraph, area);
}
