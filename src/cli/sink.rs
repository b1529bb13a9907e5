//! Where a run without the theater shows the engine's events: the command picks one [`EventSink`]
//! (JSON Lines for scripts, progress lines for a person) and the watch loop hands it every event, so
//! the engine only publishes events and never decides how they look.

use std::io::Write;

use stet_protocol::event::Event;
use stet_protocol::progress::progress_line;

/// Shows each event of a run as it comes.
pub(crate) trait EventSink {
    /// Shows `event`; an error means the reader went away, and nothing should go on.
    fn show(&mut self, event: &Event) -> std::io::Result<()>;
}

/// Every event as one JSON line (the schema in `docs/events.md`) on `out`, flushed at once; when
/// `progress`, its progress line on stderr for the person at the terminal; and, whatever stderr is
/// (a terminal, a CI log, a file), a dispatch that did not succeed ends with its whole reason on one
/// line there.
pub(crate) struct JsonLines<W> {
    out: W,
    progress: bool,
}

impl<W: Write> JsonLines<W> {
    /// JSON Lines on `out`; progress lines on stderr too when `progress`.
    pub(crate) fn new(out: W, progress: bool) -> Self {
        JsonLines { out, progress }
    }
}

impl<W: Write> EventSink for JsonLines<W> {
    fn show(&mut self, event: &Event) -> std::io::Result<()> {
        let line = event.to_json_line().map_err(std::io::Error::other)?;
        writeln!(self.out, "{line}")?;
        self.out.flush()?;
        // stderr may be a closed pipe: what goes there is best effort, never a panic.
        if let Some(reason) = final_reason(event) {
            let _ = writeln!(std::io::stderr(), "{reason}");
        } else if self.progress
            && let Some(line) = progress_line(event)
        {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        Ok(())
    }
}

/// The one line that says why a dispatch did not succeed, its reason whole (a progress line cuts
/// it): `None` for every other event, and for a dispatch that finished done.
pub(crate) fn final_reason(event: &Event) -> Option<String> {
    use stet_protocol::event::EventKind;
    use stet_sanitize::display::{escaped_invisible, one_line};
    let EventKind::Finished {
        outcome,
        exit_code,
        reason,
    } = &event.kind
    else {
        return None;
    };
    if *exit_code == 0 {
        return None;
    }
    let why = reason
        .as_ref()
        .map_or_else(String::new, |reason| format!(": {}", reason.as_str()));
    // The brief's id and the reason came from outside: one line under the display policy.
    Some(one_line(&format!(
        "stet: brief {}: {outcome} (exit {exit_code}){why}",
        escaped_invisible(&event.brief)
    )))
}

/// The progress line of each event a person needs to read on `out` (`stet demo` without
/// `--headless`); the others are left out.
pub(crate) struct HumanProgress<W> {
    out: W,
}

impl<W: Write> HumanProgress<W> {
    /// Progress lines on `out`.
    pub(crate) fn new(out: W) -> Self {
        HumanProgress { out }
    }
}

impl<W: Write> EventSink for HumanProgress<W> {
    fn show(&mut self, event: &Event) -> std::io::Result<()> {
        if let Some(line) = progress_line(event) {
            writeln!(self.out, "{line}")?;
            self.out.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use stet_protocol::event::{DispatchId, EventKind};

    use super::*;

    fn warning(text: &str) -> Event {
        Event::new(
            DispatchId::new(),
            "b",
            EventKind::Warning {
                message: std::sync::Arc::new(
                    stet_sanitize::sanitize::TokenSanitizer::new().unwrap(),
                )
                .sanitize(text),
            },
        )
    }

    #[test]
    fn json_lines_write_each_event_as_its_json_line() {
        let event = warning("slow disk");
        let mut sink = JsonLines::new(Vec::new(), false);
        sink.show(&event).unwrap();
        sink.show(&event).unwrap();
        let line = event.to_json_line().unwrap();
        assert_eq!(
            String::from_utf8(sink.out).unwrap(),
            format!("{line}\n{line}\n")
        );
    }

    #[test]
    fn human_progress_writes_the_progress_line_only() {
        let event = warning("slow disk");
        let mut sink = HumanProgress::new(Vec::new());
        sink.show(&event).unwrap();
        assert_eq!(
            String::from_utf8(sink.out).unwrap(),
            format!("{}\n", progress_line(&event).unwrap())
        );
    }

    /// A writer whose reader went away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_reader_is_an_error_of_either_sink() {
        let event = warning("slow disk");
        assert!(JsonLines::new(Closed, false).show(&event).is_err());
        assert!(HumanProgress::new(Closed).show(&event).is_err());
    }
}
