//! The theater's panes, one module each, and what they share: agent text made inert before it
//! reaches a `Span`, durations and times written one way, and the bordered block every pane sits in.

pub mod confirm;
pub mod form;
pub mod help;
pub mod inbox;
pub mod meter;
pub mod review;
pub mod salvaged;
pub mod text;
pub mod timeline;
pub mod transcript;

#[cfg(test)]
mod screens;
#[cfg(test)]
mod sizes;

/// `insta::assert_snapshot!` with the snapshot kept in `tests/snapshots/`, beside the suite's; the
/// path is absolute because insta finds the workspace with `cargo metadata`, which an account
/// without cargo (the CI's non-root lane) cannot run.
#[cfg(test)]
macro_rules! assert_screen {
    ($shown:expr) => {
        insta::with_settings!({ snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/snapshots") }, {
            insta::assert_snapshot!($shown)
        })
    };
    ($name:expr, $shown:expr) => {
        insta::with_settings!({ snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/snapshots") }, {
            insta::assert_snapshot!($name, $shown)
        })
    };
}
#[cfg(test)]
pub(crate) use assert_screen;

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::Span;
use ratatui::widgets::{Block, BorderType};

use crate::theme::Theme;

/// The bordered block a pane sits in, its title bold and its border marked when focused.
pub fn pane_block(title: String, focused: bool, theme: Theme) -> Block<'static> {
    let border_type = if focused {
        BorderType::Thick
    } else {
        BorderType::Plain
    };
    Block::bordered()
        .border_type(border_type)
        .border_style(theme.border(focused))
        .title(Span::styled(format!(" {title} "), theme.title()))
}

/// A rectangle of `width` × `height` centred in `area`, clipped to it.
pub fn centred(area: Rect, width: u16, height: u16) -> Rect {
    let [row] = Layout::vertical([Constraint::Length(height.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [cell] = Layout::horizontal([Constraint::Length(width.min(area.width))])
        .flex(Flex::Center)
        .areas(row);
    cell
}

/// A duration as a person reads it: `42s`, `3m05s`, `1h02m`.
pub fn duration(delta: TimeDelta) -> String {
    let seconds = delta.num_seconds().max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A wall-clock time on the timeline (UTC, so every machine shows the record's times alike).
pub fn clock(time: DateTime<Utc>) -> String {
    time.format("%H:%M:%S").to_string()
}

/// `n` with thousands separators.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_counts_read_naturally() {
        assert_eq!(duration(TimeDelta::seconds(42)), "42s");
        assert_eq!(duration(TimeDelta::seconds(185)), "3m05s");
        assert_eq!(duration(TimeDelta::seconds(3720)), "1h02m");
        assert_eq!(duration(TimeDelta::seconds(-5)), "0s");
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
