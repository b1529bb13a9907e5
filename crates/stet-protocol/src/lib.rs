//! stet's shared vocabulary, used by the engine that acts on it and by every consumer that shows it
//! (the theater, `--headless`, the run record):
//!
//! * [`brief`]: what a person asks for — the task, the target repository, base and branch — read
//!   from an untrusted file and checked before anything acts on it;
//! * [`inbox`]: the briefs of a repository (`.stet/briefs/*.toml`);
//! * [`state`]: the dispatch state machine, its phases and the one function that moves between them;
//! * [`event`]: the versioned events, every free-text payload already sanitized (`docs/events.md`);
//! * [`progress`]: one human line for an event, what `stet demo` and a terminal watching
//!   `--headless` read;
//! * [`agent_record`]: the JSON Lines the scripted agent prints inside the sandbox and the `script`
//!   harness reads back on the host;
//! * [`sandbox`]: the engine ↔ sandbox contract: mount points and the environment an agent reaches
//!   the model by;
//! * [`channel`]: the relay's table of channels, each a port on the sandbox's loopback led to a
//!   socket of the host's;
//! * [`channel_stream`]: the frames that carry those channels over the engine's exec stream
//!   instead (copy mode), and the rules the host reads them by;
//! * [`scenario`]: the scenario format the scripted agent acts out and the `script` harness checks;
//! * [`host_file`]: how a problem in a file of the user's is named: by place and kind, never by its
//!   text.

pub mod agent_record;
pub mod brief;
pub mod channel;
pub mod channel_stream;
pub mod event;
pub mod host_file;
pub mod inbox;
pub mod progress;
pub mod sandbox;
pub mod scenario;
pub mod state;
pub mod toml_marks;
