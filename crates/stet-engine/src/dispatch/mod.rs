//! The dispatch engine: one run of one brief, and the security seams every run passes through.

pub mod channel_stream;
pub mod channels;
pub mod copy_mode;
pub mod disk_watch;
pub mod dispatcher;
pub mod error;
pub mod gate;
pub mod journal;
pub mod order;
pub mod record;
pub mod remove_tree;
pub mod run;
pub mod salvage;
pub mod sandbox;
pub mod service;
pub mod socket_dir;
