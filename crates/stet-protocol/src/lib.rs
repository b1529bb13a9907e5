//! stet's wire format, shared by the engine that posts it and every consumer that reads it (the
//! theater, `--headless`, the run record):
//!
//! * [`state`]: the dispatch state machine, its phases and the one function that moves between them;
//! * [`event`]: the versioned events, every free-text payload already sanitized (`docs/events.md`).

pub mod event;
pub mod state;
