//! stet: dispatch an AI coding agent into a locked-down container and watch it work.
//!
//! The library holds the engine and its pure cores; `main.rs` is only the command line on top.

pub use stet_protocol::{brief, inbox};

pub mod agent;
pub mod config;
pub mod demo;
pub mod dispatch;
pub mod doctor;
pub mod engine;
pub mod forge;
pub mod gateway;
pub mod git;
pub mod harness;
pub mod headless;
pub mod host_file;
pub mod image;
pub mod logging;
pub mod private_files;
pub mod probe;
pub mod relay;
pub mod runtime;
pub mod scripted_model;
pub mod state_dir;
pub mod workflow;
