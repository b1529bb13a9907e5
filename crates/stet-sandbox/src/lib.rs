//! What stet runs inside the sandbox container, and nothing else: the scripted agent ([`agent`]),
//! the process every harness program runs under, the one that speaks as the agent ([`speaker`]),
//! the relay of the model port to the host's gateway ([`relay`]) and the probe the tests ask what the
//! sandbox allows ([`probe`]), behind the command line of the `stet-sandbox` executable ([`cli`]).
//! The sandbox image carries that executable as `/usr/local/bin/stet`; it depends on the protocol
//! alone, so no engine, forge, credential or terminal code is in the image.

pub mod agent;
pub mod cli;
pub mod probe;
pub mod relay;
pub mod speaker;
