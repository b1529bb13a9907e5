//! stet's text seams, one crate with no runtime so every sink can use them and a reviewer finds
//! them in one place:
//!
//! * [`sanitize`]: `TokenSanitizer`, which masks secrets by shape and by known value before any byte
//!   reaches a sink (ADR-0018 row 2);
//! * [`display`]: the one display policy for agent text — invisible characters removed, forge-bound
//!   Markdown made inert (DESIGN §5 row 19);
//! * [`branch`]: `BranchValidator` and `CommitSha`, checked before anything is pushed (ADR-0018 row 5).

pub mod branch;
pub mod display;
pub mod sanitize;
