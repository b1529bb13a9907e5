//! The theater: the terminal UI over the engine's event stream (DESIGN §3), split so the state and its
//! `update` are pure and tested without a terminal. It depends on no engine: it reads events
//! (stet-protocol) and asks through [`engine::EngineHandle`].

pub mod app;
pub mod engine;
pub mod event_loop;
pub mod form;
pub mod keymap;
pub mod panes;
pub mod theme;
pub mod view;
