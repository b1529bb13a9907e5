//! The timeline pane: every phase a dispatch went through with its start and duration, the current
//! one live, then how it ended and how its sandbox was torn down — the story of one dispatch. When
//! the pane is short the oldest phases scroll off, so the current one is always visible.

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::{DispatchView, ImagePullProgress};
use crate::panes::{clock, duration, pane_block};
use crate::theme::Theme;

const SPINNER: [char; 4] = ['◐', '◓', '◑', '◒'];

/// The lines of the timeline, without the block.
pub fn lines(view: &DispatchView, now: DateTime<Utc>, theme: Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let last = view.timeline.len().saturating_sub(1);
    let label_width = view
        .timeline
        .iter()
        .map(|span| span.phase.label().len())
        .max()
        .unwrap_or(0);
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
        lines.push(Line::from(vec![
            Span::styled(
                format!("{marker} {:<label_width$} ", span.phase.label()),
                style,
            ),
            Span::styled(clock(span.started), theme.muted()),
            Span::raw(format!("  {took}")),
        ]));
        if let Some(reason) = &span.reason {
            lines.push(Line::styled(
                format!("    ↳ {}", one_line(reason.as_str())),
                theme.error(),
            ));
        }
        if current
            && view.in_flight()
            && span.phase == stet_protocol::state::Phase::Provisioning
            && let Some(pull) = &view.image_pull
        {
            lines.push(Line::styled(image_pull(pull), theme.muted()));
        }
    }
    if let Some(outcome) = &view.outcome {
        let mut said = format!(
            "outcome: {} (exit {})",
            outcome.phase.label(),
            outcome.exit_code
        );
        if let Some(reason) = &outcome.reason {
            said.push_str(": ");
            said.push_str(&one_line(reason.as_str()));
        }
        let style = if outcome.phase == stet_protocol::state::Phase::Done {
            theme.success()
        } else {
            theme.error()
        };
        lines.push(Line::styled(said, style));
    }
    if let Some(pushed) = &view.pushed {
        lines.push(Line::raw(format!(
            "pushed {} → {}",
            one_line(pushed.branch.as_str()),
            one_line(pushed.remote.as_str())
        )));
    }
    if let Some(pull_request) = &view.pull_request {
        lines.push(Line::styled(
            format!(
                "PR #{} {}: {}",
                pull_request.number,
                match pull_request.action {
                    stet_protocol::event::PullRequestAction::Opened => "opened",
                    stet_protocol::event::PullRequestAction::Updated => "updated",
                },
                one_line(pull_request.url.as_str())
            ),
            theme.success(),
        ));
    }
    match &view.teardown {
        Some(teardown) => {
            lines.push(Line::raw(format!("teardown ({} ms):", teardown.millis)));
            for step in &teardown.steps {
                let resource = one_line(step.resource.as_str());
                lines.push(match &step.failure {
                    None => Line::styled(format!("  ✓ {resource}"), theme.success()),
                    Some(failure) => Line::styled(
                        format!("  ✗ {resource}: {}", one_line(failure.as_str())),
                        theme.error(),
                    ),
                });
            }
        }
        None if !view.in_flight() || view.phase.is_terminal() => {
            lines.push(Line::styled("teardown: in progress", theme.muted()));
        }
        None => {}
    }
    if let Some(latest) = view.warnings.items().back() {
        lines.push(Line::styled(
            format!(
                "⚠ {} warning(s), latest: {}",
                view.warnings.len() as u64 + view.warnings.dropped(),
                one_line(latest.as_str())
            ),
            theme.warning(),
        ));
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
    let lines = lines(view, now, theme);
    let hidden = lines
        .len()
        .saturating_sub(usize::from(area.height.saturating_sub(2)));
    let paragraph = Paragraph::new(lines)
        .block(block)
        .scroll((u16::try_from(hidden).unwrap_or(u16::MAX), 0));
    frame.render_widget(paragraph, area);
}
