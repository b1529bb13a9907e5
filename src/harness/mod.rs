//! Harnesses: the adapters that know how one agent program is started in the sandbox and how its
//! output reads (DESIGN §2 "harness"). Each one turns its agent's own output format into stet's
//! transcript items, an outcome and, where the agent records it, the run's usage.

pub mod openhands;
pub mod replay;
