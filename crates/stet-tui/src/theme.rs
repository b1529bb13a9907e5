//! The theater's colours in one place, with a plain variant so `NO_COLOR` (no-color.org) is honoured
//! by every pane at once: plain keeps only bold, reverse and underline, which need no colour.

use ratatui::style::{Color, Modifier, Style};

use crate::app::view::Badge;
use stet_protocol::event::ItemKind;

/// Which palette the panes draw with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Theme {
    /// Colours (the default).
    #[default]
    Colour,
    /// No colour at all, for `NO_COLOR` and for terminals that cannot show it.
    Plain,
}

impl Theme {
    /// `Plain` when the `NO_COLOR` environment variable is set to anything non-empty.
    pub fn from_env() -> Theme {
        Theme::for_no_color(std::env::var_os("NO_COLOR").as_deref())
    }

    /// The theme for a given value of `NO_COLOR` (`None` when unset).
    pub fn for_no_color(value: Option<&std::ffi::OsStr>) -> Theme {
        match value {
            Some(value) if !value.is_empty() => Theme::Plain,
            _ => Theme::Colour,
        }
    }

    fn fg(self, colour: Color) -> Style {
        match self {
            Theme::Colour => Style::new().fg(colour),
            Theme::Plain => Style::new(),
        }
    }

    /// Pane titles, and the focused pane's border.
    pub fn title(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    /// A pane's border, brighter when the pane has the focus.
    pub fn border(self, focused: bool) -> Style {
        match (self, focused) {
            (Theme::Colour, true) => Style::new().fg(Color::Cyan),
            (Theme::Colour, false) => Style::new().fg(Color::DarkGray),
            (Theme::Plain, true) => Style::new().add_modifier(Modifier::BOLD),
            (Theme::Plain, false) => Style::new(),
        }
    }

    /// The selected inbox row.
    pub fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// Secondary text: times, targets, hints.
    pub fn muted(self) -> Style {
        self.fg(Color::DarkGray)
    }

    /// Errors and failed outcomes.
    pub fn error(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    /// Warnings and stopped-short outcomes.
    pub fn warning(self) -> Style {
        self.fg(Color::Yellow)
    }

    /// Success: a pull request, a done dispatch.
    pub fn success(self) -> Style {
        self.fg(Color::Green)
    }

    /// A key name in the footer and the help overlay.
    pub fn key(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    /// A `[REDACTED:…]` marker: it must stand out as such, colour or not.
    pub fn redaction(self) -> Style {
        self.fg(Color::Magenta)
            .add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }

    /// Text the transcript search matched.
    pub fn search_match(self) -> Style {
        match self {
            Theme::Colour => Style::new().fg(Color::Black).bg(Color::Yellow),
            Theme::Plain => Style::new().add_modifier(Modifier::REVERSED),
        }
    }

    /// A transcript item of `kind`.
    pub fn item(self, kind: ItemKind) -> Style {
        match kind {
            ItemKind::Message => Style::new(),
            ItemKind::Thought => self.fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
            ItemKind::Command => self.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ItemKind::Output => self.fg(Color::Gray),
            ItemKind::Error => self.error(),
            ItemKind::Finish => self.success().add_modifier(Modifier::BOLD),
            ItemKind::Other => self.muted(),
        }
    }

    /// An inbox badge.
    pub fn badge(self, badge: Badge) -> Style {
        match badge {
            Badge::New | Badge::Done | Badge::Discarded => self.muted(),
            Badge::Queued | Badge::Running(_) => self.fg(Color::Cyan),
            Badge::AwaitingReview => self.warning().add_modifier(Modifier::BOLD),
            Badge::PullRequest(_) => self.success(),
            Badge::Failed | Badge::Cancelled | Badge::TimedOut | Badge::CeilingHit => self.error(),
        }
    }

    /// The cost gauge at `fraction` of the ceiling: green, then yellow from 60 %, red from 85 %.
    pub fn spend(self, fraction: f64) -> Style {
        if fraction >= 0.85 {
            self.fg(Color::Red).add_modifier(Modifier::BOLD)
        } else if fraction >= 0.6 {
            self.fg(Color::Yellow)
        } else {
            self.fg(Color::Green)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn no_color_set_to_anything_means_plain() {
        assert_eq!(Theme::for_no_color(None), Theme::Colour);
        assert_eq!(Theme::for_no_color(Some(OsStr::new(""))), Theme::Colour);
        assert_eq!(Theme::for_no_color(Some(OsStr::new("1"))), Theme::Plain);
    }

    #[test]
    fn plain_draws_no_colour() {
        let theme = Theme::Plain;
        for style in [
            theme.error(),
            theme.spend(0.9),
            theme.item(ItemKind::Command),
            theme.redaction(),
            theme.badge(Badge::Failed),
        ] {
            assert_eq!(style.fg, None);
            assert_eq!(style.bg, None);
        }
    }
}
