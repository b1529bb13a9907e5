//! The cost meter pane: what the dispatch has spent against its ceiling, its tokens and its rate,
//! coloured as it nears the ceiling — and "no usage reported" when the harness gave none.

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use stet_sanitize::display::one_line;

use crate::app::DispatchView;
use crate::panes::{count, pane_block, text};
use crate::theme::Theme;

/// Dollars, to the tenth of a cent below one dollar (where a run's cost usually is).
fn usd(amount: f64) -> String {
    if amount.abs() < 1.0 {
        format!("${amount:.3}")
    } else {
        format!("${amount:.2}")
    }
}

/// The lines of the meter for a gauge `width` columns wide, without the block.
pub fn lines(
    view: &DispatchView,
    ceiling: Option<f64>,
    now: DateTime<Utc>,
    width: usize,
    theme: Theme,
) -> Vec<Line<'static>> {
    let refused = view.last_refusal.as_ref().map(|(field, rule)| {
        Line::from(vec![
            Span::styled("refused ", theme.muted()),
            Span::raw(format!("{}: {rule}", one_line(field.as_str()))),
        ])
    });
    let refused: Vec<Line<'static>> = refused
        .into_iter()
        .chain(network_lines(view, width, theme))
        .collect();
    let Some(cost) = &view.cost else {
        let mut lines = vec![Line::styled("no usage reported", theme.muted())];
        if let Some(ceiling) = ceiling {
            lines.push(Line::styled(
                format!("ceiling {}", usd(ceiling)),
                theme.muted(),
            ));
        }
        lines.extend(refused);
        return lines;
    };
    let spent = cost.total_cost_usd;
    let mut lines = Vec::new();
    match ceiling {
        Some(ceiling) => {
            let fraction = (spent / ceiling).max(0.0);
            let label = format!(
                " {} / {} ({:.0}%)",
                usd(spent),
                usd(ceiling),
                fraction * 100.0
            );
            // The figures never give way to the bar: on a narrow pane the bar goes below them.
            let beside = width >= label.chars().count() + 4;
            let bar_width = if beside {
                width - label.chars().count()
            } else {
                width.max(4)
            };
            let filled = ((fraction.min(1.0) * bar_width as f64).round() as usize).min(bar_width);
            let bar = vec![
                Span::styled("█".repeat(filled), theme.spend(fraction)),
                Span::styled("░".repeat(bar_width - filled), theme.muted()),
            ];
            let label = Span::styled(label, theme.spend(fraction));
            if beside {
                let mut row = bar;
                row.push(label);
                lines.push(Line::from(row));
            } else {
                lines.push(Line::from(label));
                lines.push(Line::from(bar));
            }
        }
        None => lines.push(Line::from(vec![
            Span::raw(format!("spent {}", usd(spent))),
            Span::styled("  (no ceiling set)", theme.muted()),
        ])),
    }
    let field = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:<7}"), theme.muted()),
            Span::raw(value),
        ])
    };
    let tokens = format!(
        "in {} · out {}",
        count(cost.input_tokens),
        count(cost.output_tokens)
    );
    if 7 + tokens.chars().count() <= width {
        lines.push(field("tokens", tokens));
    } else {
        lines.push(field("in", count(cost.input_tokens)));
        lines.push(field("out", count(cost.output_tokens)));
    }
    lines.push(field("cached", count(cost.cached_tokens)));
    let rate = view
        .usd_per_minute(now)
        .map_or_else(|| "—".to_owned(), |rate| format!("{}/min", usd(rate)));
    lines.push(field("rate", rate));
    let model = one_line(cost.model.as_str());
    let requests = count(cost.requests);
    if 7 + model.chars().count() + requests.chars().count() + 8 <= width {
        lines.push(field("model", format!("{model} ({requests} req.)")));
    } else {
        lines.push(field(
            "model",
            text::truncate(&model, width.saturating_sub(7)),
        ));
        lines.push(field("req.", requests));
    }
    if cost.unpriced_requests > 0 {
        let said = format!(
            "⚠ {} request(s) unpriced: the total is a lower bound",
            count(cost.unpriced_requests)
        );
        lines.extend(
            text::wrap_words(&said, width)
                .into_iter()
                .map(|row| Line::styled(row, theme.warning())),
        );
    }
    lines.extend(refused);
    lines
}

/// The network line, when the agent reached out through the egress proxy: the counts, then the
/// last refused host and the line that would allow it, wrapped to the pane.
fn network_lines(view: &DispatchView, width: usize, theme: Theme) -> Vec<Line<'static>> {
    let Some(network) = &view.network else {
        return Vec::new();
    };
    let mut lines = vec![Line::from(vec![
        Span::styled("network ", theme.muted()),
        Span::raw(format!(
            "{} ok · {} refused",
            count(network.allowed),
            count(network.refused)
        )),
    ])];
    if let Some((host, port, why)) = &network.last_refused {
        let said = format!(
            "refused {}:{port}: {}",
            one_line(host.as_str()),
            one_line(why.as_str())
        );
        lines.extend(
            text::wrap_words(&said, width)
                .into_iter()
                .map(|row| Line::styled(row, theme.warning())),
        );
    }
    lines
}

/// Draws `view`'s cost meter into `area`, against `ceiling` dollars when there is one.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    view: &DispatchView,
    ceiling: Option<f64>,
    now: DateTime<Utc>,
    theme: Theme,
) {
    let width = usize::from(area.width.saturating_sub(2));
    let paragraph = Paragraph::new(lines(view, ceiling, now, width, theme)).block(pane_block(
        "Cost".to_owned(),
        false,
        theme,
    ));
    frame.render_widget(paragraph, area);
}
