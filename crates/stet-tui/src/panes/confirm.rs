//! The confirmation dialog: every irreversible request (dispatch, cancel, quit with dispatches
//! running) says exactly what it will do before `y` makes it happen.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use stet_sanitize::display::one_line;

use crate::app::{App, Confirm, InboxRow};
use crate::keymap::{Context, KEYMAP};
use crate::panes::{centred, pane_block};

/// The dialog's title and lines for `confirm`.
pub fn lines(confirm: &Confirm, app: &App) -> (String, Vec<Line<'static>>) {
    let theme = app.theme();
    let field = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:<8}"), theme.muted()),
            Span::raw(value),
        ])
    };
    match confirm {
        Confirm::Dispatch(id) => {
            let brief = app.rows().iter().find_map(|row| match row {
                InboxRow::Brief(brief) if brief.id == *id => Some(brief),
                _ => None,
            });
            let mut lines = Vec::new();
            if let Some(brief) = brief {
                lines.push(Line::styled(one_line(&brief.title), theme.title()));
                lines.push(field("repo", one_line(&brief.target.repo)));
                lines.push(field("base", one_line(&brief.target.base)));
                let branch = brief
                    .target
                    .branch
                    .as_deref()
                    .map_or_else(|| "chosen by stet at dispatch".to_owned(), one_line);
                lines.push(field("branch", branch));
                lines.push(field("items", brief.items.len().to_string()));
            }
            if let Some(plan) = app.newest(id).and_then(|view| view.plan.as_ref()) {
                lines.push(field("image", one_line(plan.image.as_str())));
                lines.push(field("harness", one_line(plan.harness.as_str())));
            }
            if let Some(ceiling) = app.cost_ceiling() {
                lines.push(field("ceiling", format!("${ceiling:.2}")));
            }
            (format!("Dispatch {}?", one_line(id)), lines)
        }
        Confirm::Cancel(dispatch) => {
            let view = app.dispatch(*dispatch);
            let mut lines = vec![Line::raw(dispatch.to_string())];
            if let Some(view) = view {
                lines.push(field("phase", view.phase.label().to_owned()));
            }
            lines.push(Line::styled(
                "The agent is stopped and the sandbox torn down.",
                theme.muted(),
            ));
            let brief = view.map_or_else(String::new, |view| one_line(&view.brief));
            (format!("Cancel {brief}?"), lines)
        }
        Confirm::Approve(dispatch) => {
            let view = app.dispatch(*dispatch);
            let mut lines = Vec::new();
            if let Some(plan) = view.and_then(|view| view.plan.as_ref()) {
                lines.push(field("branch", one_line(plan.branch.as_str())));
                lines.push(field(
                    "to",
                    format!(
                        "{}@{}",
                        one_line(plan.repo.as_str()),
                        one_line(plan.base.as_str())
                    ),
                ));
            }
            if let Some(collected) = view.and_then(|view| view.collected.as_ref()) {
                lines.push(field(
                    "changes",
                    format!(
                        "{} file(s), +{} −{}",
                        collected.files.len() + collected.files_not_listed,
                        collected.insertions,
                        collected.deletions
                    ),
                ));
                let secrets = collected.secrets.len() + collected.secrets_not_listed;
                if secrets > 0 {
                    lines.push(Line::styled(
                        format!("✖ {secrets} secret(s) go out in clear"),
                        theme.error(),
                    ));
                }
                let held =
                    collected.held.len().max(collected.protected.len()) + collected.held_not_listed;
                if held > 0 {
                    lines.push(Line::styled(
                        format!("⚠ {held} path(s) held for your approval"),
                        theme.warning(),
                    ));
                }
            }
            lines.push(Line::styled(
                "Pushes the branch and opens a pull request.",
                theme.muted(),
            ));
            lines.push(Line::styled("This cannot be undone.", theme.muted()));
            let brief = view.map_or_else(String::new, |view| one_line(&view.brief));
            (format!("Push {brief}?"), lines)
        }
        Confirm::Discard(dispatch) => {
            let view = app.dispatch(*dispatch);
            let lines = vec![
                Line::raw(dispatch.to_string()),
                Line::styled(
                    "Nothing is pushed: the result is thrown away.",
                    theme.muted(),
                ),
            ];
            let brief = view.map_or_else(String::new, |view| one_line(&view.brief));
            (format!("Discard the result of {brief}?"), lines)
        }
        Confirm::Quit => {
            let running = app.running_count();
            let lines = vec![
                Line::raw(format!("{running} dispatch(es) still running.")),
                Line::styled(
                    "Quitting cancels them and waits for every teardown.",
                    theme.muted(),
                ),
            ];
            ("Quit stet?".to_owned(), lines)
        }
    }
}

/// Draws the dialog asking `confirm` into `area`.
pub fn render(frame: &mut Frame, area: Rect, confirm: &Confirm, app: &App) {
    let theme = app.theme();
    let (title, mut lines) = lines(confirm, app);
    lines.push(Line::raw(""));
    let mut keys = Vec::new();
    for binding in KEYMAP.iter().filter(|b| b.context == Context::Confirm) {
        if !keys.is_empty() {
            keys.push(Span::raw(" · "));
        }
        keys.push(Span::styled(binding.keys, theme.key()));
        keys.push(Span::raw(format!(" {}", binding.description)));
    }
    lines.push(Line::from(keys));
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let dialog = centred(area, 56, height);
    frame.render_widget(Clear, dialog);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(pane_block(title, true, theme)),
        dialog,
    );
}
