//! The engine ↔ sandbox contract (with the relay's channels, [`crate::channel`], and the scenario
//! format, [`crate::scenario`]): the places and names the host's engine sets up and the
//! `stet-sandbox` executable inside the container relies on, kept in one module both sides import
//! so neither can drift from the other (and the engine needs nothing of the sandbox's code).

/// Where the private copy of the code is mounted in the container, and where the agent works.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// Where the directory holding the host's unix sockets, one per channel of the relay
/// ([`crate::channel`]), is mounted in the container.
pub const GATEWAY_MOUNT: &str = "/run/stet";

/// The environment variable holding the model's OpenAI-style base URL, such as
/// `http://127.0.0.1:4141/v1`.
pub const MODEL_URL_ENV: &str = "STET_MODEL_URL";

/// The environment variable holding the bearer token sent to the model (a dummy in the sandbox:
/// the gateway adds the real key on the host).
pub const MODEL_KEY_ENV: &str = "STET_MODEL_KEY";
