//! The engine ↔ sandbox contract: the places, names and addresses the host's engine sets up and the
//! `stet-sandbox` executable inside the container relies on, kept in one module both sides import so
//! neither can drift from the other (and the engine needs nothing of the sandbox's code).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Where the private copy of the code is mounted in the container, and where the agent works.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// Where the directory holding the gateway's unix socket is mounted in the container.
pub const GATEWAY_MOUNT: &str = "/run/stet";

/// The gateway socket's name in its directory, which the sandbox sees at [`GATEWAY_MOUNT`].
pub const SOCKET_NAME: &str = "model.sock";

/// The relay's address on the container's loopback.
pub const RELAY_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4141);

/// The environment variable holding the model's OpenAI-style base URL, such as
/// `http://127.0.0.1:4141/v1`.
pub const MODEL_URL_ENV: &str = "STET_MODEL_URL";

/// The environment variable holding the bearer token sent to the model (a dummy in the sandbox:
/// the gateway adds the real key on the host).
pub const MODEL_KEY_ENV: &str = "STET_MODEL_KEY";

/// The base URL an agent in the sandbox uses: `http://127.0.0.1:4141/v1`.
pub fn model_base_url() -> String {
    format!("http://{RELAY_ADDR}/v1")
}
