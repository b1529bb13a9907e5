//! The model gateway (DESIGN §5 row 13): the only way a sandboxed agent reaches a model.
//!
//! The container keeps `--network none`. Per dispatch, stet serves HTTP/1.1 on a unix socket in the
//! dispatch's state directory, bind-mounted into the container, where an in-sandbox relay forwards a
//! loopback port to it byte for byte. The gateway forwards the routes of its wire APIs (OpenAI's
//! Chat Completions and Responses, Anthropic's Messages: [`wire`]) to the configured upstream,
//! adding the model API key, in the header its API reads it from, that never enters the container. Under a cost
//! ceiling each request reserves its worst case on the dispatch's [`ledger::CostLedger`] first and
//! is refused when that does not fit (the per-call price of the provider-executed tools it enables
//! included, [`tool_calls`]); every response settles its reservation with its cost (the
//! upstream's own report first, stet's [`prices::PriceTable`] as the fallback). What it reports
//! comes out as [`GatewayEvent`]s, sanitized and free of request and response bodies.

pub mod ledger;
pub mod policy;
pub mod prices;
mod reply;
mod server;
pub mod tool_calls;
pub mod usage;
pub mod wire;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use server::{
    DEFAULT_MAX_CONCURRENT_REQUESTS, Gateway, GatewayConfig, GatewayEvent, GatewayLimits,
};

/// Everything that can go wrong starting the gateway or reading a price table. Messages never contain
/// the API key or a URL's userinfo.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum GatewayError {
    #[error("model upstream {url} refused: {reason}")]
    Upstream { url: String, reason: String },
    #[error(
        "the model API key cannot be sent as an HTTP header (it contains characters a header may not hold)"
    )]
    ApiKey,
    #[error(
        "gateway socket path {path} is {len} bytes long; a unix socket path holds at most {max} bytes",
        max = server::MAX_SOCKET_PATH
    )]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("gateway socket path {0} already exists; refusing to replace it")]
    SocketExists(PathBuf),
    #[error("gateway socket directory {0} does not exist")]
    SocketDir(PathBuf),
    #[error("cannot bind the gateway socket {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot restrict the gateway socket {path} to its owner: {source}")]
    SocketMode {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("price table {source_name}: {detail}")]
    PriceSyntax { source_name: String, detail: String },
    #[error("price table {source_name}: line {line}: field `{field}` {detail}")]
    PriceEntry {
        source_name: String,
        line: usize,
        field: &'static str,
        detail: &'static str,
    },
}
