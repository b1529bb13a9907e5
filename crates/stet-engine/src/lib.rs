//! stet's dispatch engine: everything between a brief and a pull request — the sandbox and its
//! runtime, the agent harnesses, the model gateway, the forges, git, the journal, the run record —
//! and nothing of terminals (ARCHITECTURE.md). The executable (`src/main.rs`, `src/cli/`) assembles it
//! and hands the theater its handle.

pub use stet_protocol::{brief, inbox};

pub mod check;
pub mod config;
pub mod credential;
pub mod demo;
pub mod dispatch;
pub mod doctor;
pub mod egress;
pub mod engine;
mod error_chain;
pub mod forge;
pub mod gateway;
pub mod git;
pub mod harness;
mod https;
mod human;
pub mod image;
mod kinds;
pub mod logging;
pub mod private_files;
pub mod runtime;
pub mod state_dir;
pub mod unix_server;
pub mod untrusted_tar;
pub mod untrusted_tree;
pub mod workflow;
