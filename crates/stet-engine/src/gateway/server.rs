//! The gateway's lifecycle and shared state: the unix socket, the accept loop, the cost ledger and
//! the event channel. Request handling lives in `forward`, response metering in `metered`.

mod errors;
mod forward;
mod intake;
mod metered;
mod replies;
mod route;
mod scan;

use std::convert::Infallible;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Full;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::GatewayError;
use super::ledger::{Reporter, SharedLedger, Totals};
use super::policy::{ProviderCall, Refusal as PolicyRefusal, RequestPolicy, WireApi};
use super::prices::PriceTable;
use super::reply::shown_text;
use crate::credential::SecretValue;
use crate::gateway::usage::UsageReport;
use crate::unix_server::{self, BindError};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

/// The longest socket path `sun_path` holds (108 bytes including the terminating NUL).
pub(super) const MAX_SOCKET_PATH: usize = unix_server::MAX_SOCKET_PATH;

/// Events the receiver may fall behind by before further `Usage` and `Error` events are dropped (and
/// counted); `CeilingReached` has a slot of its own and is never dropped.
const EVENT_CAPACITY: usize = 1024;

/// How long an idle upstream connection is kept for reuse.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// How a dispatch's gateway bounds what one agent can make the host hold: connections (each a file
/// descriptor), requests in flight, request bytes buffered, and how long a request's head and body
/// may take to arrive. Every bound is per gateway, so per dispatch: one dispatch's agent cannot take
/// another's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayLimits {
    /// Connections served at once; a further connection waits in the socket's backlog, costing stet
    /// nothing, until one closes.
    pub max_connections: usize,
    /// Requests in flight at once; a further one is answered 429 with `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Request body bytes held at once, across the dispatch's requests; a request that would pass it
    /// is answered 503 with `Retry-After`.
    pub max_bytes_in_flight: usize,
    /// How long a request's head (request line and headers) may take, and how long a kept-alive
    /// connection may sit idle: a slow or silent client is disconnected.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive, from its head.
    pub body_timeout: Duration,
}

impl Default for GatewayLimits {
    fn default() -> GatewayLimits {
        GatewayLimits {
            max_connections: 16,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_bytes_in_flight: 64 * 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The default cap on one dispatch's model requests in flight (`model.max_concurrent_requests`).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 4;

/// The largest request head (request line and headers) read.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The upstream client: HTTPS on the machine's network (its proxy and CA bundle, as the forges'), or
/// plain HTTP (loopback only, checked at start, never through the proxy).
type UpstreamClient = crate::https::HttpsClient<Full<Bytes>>;

/// What a gateway needs to know for one dispatch.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// OpenAI-compatible upstream base URL, e.g. `https://litellm.example/v1` or `http://127.0.0.1:9/v1`.
    /// Requests for `/v1/<rest>` go to `<upstream>/<rest>`. Plain `http` only to a loopback host; a URL
    /// with userinfo, a query or a fragment is refused at start (the error never echoes the userinfo).
    pub upstream: String,
    /// Sent upstream as `Authorization: Bearer <key>`, or as `x-api-key: <key>` on Anthropic's
    /// Messages routes; `None` sends no key.
    pub api_key: Option<SecretValue>,
    /// The fallback when a response carries no `x-litellm-response-cost` header.
    pub prices: Arc<PriceTable>,
    /// Per-dispatch ceiling in dollars; `None` = no ceiling. Under one, each request reserves its
    /// worst case on the [`CostLedger`](super::ledger::CostLedger) before it is forwarded (its
    /// output capped to what is left), a model the table does not price is refused until the
    /// endpoint reports costs itself, and a response whose cost is never learnt counts its whole
    /// reservation. Once nothing more fits, every further request is answered 402 without reaching
    /// the upstream.
    pub ceiling_usd: Option<f64>,
    /// Whole-request bound (connect + response head + body); a slow upstream becomes an error, never a
    /// hang. It bounds streamed responses too, so it must cover the longest generation allowed.
    pub request_timeout: Duration,
    /// What one agent can make the host hold.
    pub limits: GatewayLimits,
    /// Which models and provider-executed tools the user allows (DESIGN §5 row 24).
    pub policy: Arc<RequestPolicy>,
}

/// What the gateway reports to the engine. Every text in it has passed the sanitizer, and none holds
/// a request or response body.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayEvent {
    /// One settled request: its usage (tokens of zero when its cost was counted at its reservation)
    /// and the ledger after it.
    Usage {
        /// The request's usage as metered.
        report: UsageReport,
        /// The ledger after it settled.
        totals: Totals,
        /// From the request's arrival to the response's last byte.
        latency: Duration,
        /// The response was a server-sent event stream.
        streamed: bool,
    },
    /// Something the agent's request ran into (upstream down, 429 + Retry-After, 5xx, malformed
    /// JSON, SSE cut, refused path, ceiling refusal): one line saying what and which request path.
    Error {
        /// What happened, naming the request path.
        message: SanitizedText,
    },
    /// The request policy refused a request before it reached the upstream: where, what kind of
    /// value and why, never the value.
    Refused {
        /// The refusal; its `shown` value is not repeated by events.
        refusal: PolicyRefusal,
    },
    /// A request the gateway forwards enables a provider-executed tool: the provider may act on the
    /// network for the agent, at the price the configuration gives per call. The host is the one
    /// the request names for it (a remote MCP server's), never its path or query.
    Egress {
        /// The wire API of the request.
        api: WireApi,
        /// The tool or field, as the configuration enabled it (`mcp`, `web_search_options`).
        tool: SanitizedText,
        /// The host the request names for it, when it names one.
        host: Option<SanitizedText>,
        /// Dollars per call.
        price_usd: f64,
    },
    /// Accumulated cost reached the ceiling (sent once); the engine then ends the dispatch as
    /// `CostCeilingHit`.
    CeilingReached {
        /// Dollars settled when it was reached.
        spent_usd: f64,
        /// The ceiling, in dollars.
        ceiling_usd: f64,
        /// The least the request refused for it would have cost, when a refusal reached it (the
        /// figure the agent was told).
        needed_usd: Option<f64>,
    },
}

/// A running gateway: one per dispatch. Dropping it stops serving and removes the socket, like
/// [`Gateway::shutdown`] without waiting for the connections to be torn down.
#[derive(Debug)]
pub struct Gateway {
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    accept: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Binds a unix socket at `socket` (its parent directory must exist; refused if `socket` exists or
    /// is longer than the 107-byte `sun_path` limit), restricts it to its owner (mode 0600) and serves
    /// HTTP/1.1 on it in a background task. Returns the gateway and the receiver of its events.
    ///
    /// The receiver is bounded: when it falls 1024 events behind, further `Usage` and
    /// `Error` events are dropped and counted ([`Gateway::dropped_events`]) rather than slowing the
    /// agent's requests; `CeilingReached` has a reserved slot and always arrives.
    pub async fn start(
        socket: &Path,
        config: GatewayConfig,
        sanitizer: Arc<TokenSanitizer>,
    ) -> Result<(Gateway, mpsc::Receiver<GatewayEvent>), GatewayError> {
        let network = crate::https::Network::current().map_err(|err| GatewayError::Upstream {
            url: shown_url(&config.upstream),
            reason: err.to_string(),
        })?;
        Gateway::start_on(socket, config, sanitizer, &network).await
    }

    /// [`Gateway::start`] with the upstream reached on `network` (its proxy and trusted CAs).
    pub(crate) async fn start_on(
        socket: &Path,
        config: GatewayConfig,
        sanitizer: Arc<TokenSanitizer>,
        network: &crate::https::Network,
    ) -> Result<(Gateway, mpsc::Receiver<GatewayEvent>), GatewayError> {
        let upstream = Upstream::parse(&config.upstream)?;
        let keys = match &config.api_key {
            Some(key) => Some(Keys::of(key)?),
            None => None,
        };
        let listener = bind(socket)?;

        let (events, receiver) = mpsc::channel(EVENT_CAPACITY + 1);
        let ledger = SharedLedger::new(config.ceiling_usd, &events);
        let connector = network.connector().map_err(|err| GatewayError::Upstream {
            url: upstream.base.clone(),
            reason: err.to_string(),
        })?;
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(connector);
        let shared = Arc::new(Shared {
            client,
            upstream,
            keys,
            prices: config.prices,
            ceiling_usd: config.ceiling_usd,
            request_timeout: config.request_timeout,
            limits: config.limits,
            policy: config.policy,
            requests: Arc::new(Semaphore::new(config.limits.max_concurrent_requests.max(1))),
            bytes_in_flight: Arc::new(Semaphore::new(
                config
                    .limits
                    .max_bytes_in_flight
                    .min(Semaphore::MAX_PERMITS),
            )),
            sanitizer,
            events,
            ledger,
            dropped: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
        });
        let (stop, stopped) = oneshot::channel();
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stopped));
        Ok((
            Gateway {
                socket: socket.to_owned(),
                shared,
                stop: Some(stop),
                accept: Some(accept),
            },
            receiver,
        ))
    }

    /// The socket the gateway serves on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The ledger now: settled spend, what requests in flight hold, and the most ever held.
    pub fn totals(&self) -> Totals {
        self.shared.ledger.totals()
    }

    /// How many `Usage` and `Error` events were dropped because the receiver fell behind.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Stops accepting, ends in-flight requests (their agents see the connection close) and waits for
    /// that, then removes the socket file. Idempotent with the drop that follows.
    pub async fn shutdown(mut self) {
        self.shared.shutting_down.store(true, Ordering::Relaxed);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        unix_server::remove_socket(&self.socket);
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            self.shared.shutting_down.store(true, Ordering::Relaxed);
            // Aborting the accept task drops its `JoinSet`, which aborts every connection task.
            accept.abort();
            unix_server::remove_socket(&self.socket);
        }
    }
}

/// The gateway's socket, bound private by the one rule stet's sandbox servers share.
fn bind(socket: &Path) -> Result<UnixListener, GatewayError> {
    unix_server::bind_private(socket).map_err(|error| match error {
        BindError::TooLong { path, len } => GatewayError::SocketPathTooLong { path, len },
        BindError::Exists(path) => GatewayError::SocketExists(path),
        BindError::NoDirectory(path) => GatewayError::SocketDir(path),
        BindError::Bind { path, source } => GatewayError::Bind { path, source },
        BindError::Mode { path, source } => GatewayError::SocketMode { path, source },
    })
}

/// The host's model API key as each wire API sends it, made once (marked sensitive, so never logged).
#[derive(Debug)]
struct Keys {
    /// `Authorization: Bearer <key>`.
    bearer: HeaderValue,
    /// `x-api-key: <key>`.
    x_api_key: HeaderValue,
}

impl Keys {
    fn of(key: &SecretValue) -> Result<Keys, GatewayError> {
        Ok(Keys {
            bearer: header_value(b"Bearer ", key)?,
            x_api_key: header_value(b"", key)?,
        })
    }
}

fn header_value(prefix: &[u8], key: &SecretValue) -> Result<HeaderValue, GatewayError> {
    let mut value = Vec::with_capacity(prefix.len() + key.expose_secret().len());
    value.extend_from_slice(prefix);
    value.extend_from_slice(key.expose_secret().as_bytes());
    let header = HeaderValue::from_bytes(&value).map_err(|_| GatewayError::ApiKey);
    zeroize::Zeroize::zeroize(&mut value);
    let mut header = header?;
    header.set_sensitive(true);
    Ok(header)
}

/// Serves connections until stopped, at most the limits' count at once (past it, connections wait in
/// the socket's backlog, holding none of stet's descriptors); those still open are then aborted.
async fn accept_loop(listener: UnixListener, shared: Arc<Shared>, stopped: oneshot::Receiver<()>) {
    let max = shared.limits.max_connections;
    let mut connections = unix_server::accept_bounded(listener, max, stopped, |stream| {
        serve_connection(stream, Arc::clone(&shared))
    })
    .await;
    connections.shutdown().await;
}

async fn serve_connection(stream: tokio::net::UnixStream, shared: Arc<Shared>) {
    let header_timeout = shared.limits.header_timeout;
    let service = hyper::service::service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(forward::handle(shared, request).await) }
    });
    // A connection error is the agent's side going away; what matters was reported per request.
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The validated upstream base URL, without a trailing `/`.
#[derive(Debug)]
struct Upstream {
    base: String,
}

impl Upstream {
    fn parse(raw: &str) -> Result<Upstream, GatewayError> {
        let refuse = |reason: &str| GatewayError::Upstream {
            url: shown_url(raw),
            reason: reason.to_owned(),
        };
        let uri: Uri = raw
            .parse()
            .map_err(|_| refuse("not a valid absolute URL"))?;
        let authority = uri.authority().ok_or_else(|| refuse("it names no host"))?;
        if authority.as_str().contains('@') {
            return Err(refuse(
                "it carries userinfo; give the key through the API key setting instead",
            ));
        }
        if uri.query().is_some() || raw.contains('#') {
            return Err(refuse("a base URL takes no query or fragment"));
        }
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") => {
                let host = authority
                    .host()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let loopback = host.eq_ignore_ascii_case("localhost")
                    || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    return Err(refuse(
                        "plain http is allowed only to a loopback host; use https",
                    ));
                }
            }
            _ => {
                return Err(refuse(
                    "the scheme must be https (or http to a loopback host)",
                ));
            }
        }
        Ok(Upstream {
            base: format!(
                "{}://{}{}",
                uri.scheme_str().unwrap_or("https"),
                authority,
                uri.path().trim_end_matches('/')
            ),
        })
    }

    /// The upstream URI for `rest` (the path after `/v1/`) and the agent's query string.
    fn uri(&self, rest: &str, query: Option<&str>) -> Result<Uri, http::uri::InvalidUri> {
        match query {
            Some(query) => format!("{}/{rest}?{query}", self.base).parse(),
            None => format!("{}/{rest}", self.base).parse(),
        }
    }
}

/// `raw` safe to show in an error: userinfo, query and fragment withheld.
fn shown_url(raw: &str) -> String {
    let (scheme, rest) = match raw.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, raw),
    };
    let withheld = rest.contains(['?', '#']);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<userinfo withheld>@{host}"),
        None => authority.to_owned(),
    };
    let mut shown = match scheme {
        Some(scheme) => format!("{scheme}://{authority}{path}"),
        None => format!("{authority}{path}"),
    };
    if withheld {
        shown.push_str(" (query withheld)");
    }
    shown
}

/// What every request handler shares with the gateway.
#[derive(Debug)]
struct Shared {
    client: UpstreamClient,
    upstream: Upstream,
    /// The host's key, `None` when the configuration gives none.
    keys: Option<Keys>,
    prices: Arc<PriceTable>,
    ceiling_usd: Option<f64>,
    request_timeout: Duration,
    limits: GatewayLimits,
    policy: Arc<RequestPolicy>,
    /// One permit per request in flight.
    requests: Arc<Semaphore>,
    /// One permit per request body byte held.
    bytes_in_flight: Arc<Semaphore>,
    sanitizer: Arc<TokenSanitizer>,
    events: mpsc::Sender<GatewayEvent>,
    /// The dispatch's cost ledger, which holds the ceiling.
    ledger: SharedLedger,
    dropped: AtomicU64,
    /// Set by shutdown and drop, so responses ended by it say so.
    shutting_down: AtomicBool,
}

impl Shared {
    fn emit(&self, event: GatewayEvent) {
        if self.events.try_send(event).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped,
                "gateway event receiver is behind or gone; event dropped"
            );
        }
    }

    /// Reports a refusal of the request policy: its field made one line, bounded and sanitized,
    /// its shown value dropped.
    fn refused(&self, mut refusal: PolicyRefusal) {
        refusal.shown = None;
        let field = shown_text(&refusal.field);
        refusal.field = self.sanitizer.sanitize(&field).as_str().to_owned();
        self.emit(GatewayEvent::Refused { refusal });
    }

    /// Reports an enabled provider tool of a request being forwarded: its name and host made one
    /// line, bounded and sanitized.
    fn egress(&self, api: WireApi, call: ProviderCall) {
        let shown = |text: &str| self.sanitizer.sanitize(&shown_text(text));
        self.emit(GatewayEvent::Egress {
            api,
            tool: shown(&call.name),
            host: call.host.as_deref().map(shown),
            price_usd: call.price_usd,
        });
    }

    /// Reports a problem: made one line, sanitized, sent as a `GatewayEvent::Error`.
    fn error(&self, message: &str) {
        let line = stet_sanitize::display::one_line(message);
        self.emit(GatewayEvent::Error {
            message: self.sanitizer.sanitize(&line),
        });
    }
}

impl Reporter for Shared {
    fn ledger(&self) -> &SharedLedger {
        &self.ledger
    }

    fn unread_usage(
        &self,
        model: &str,
        counted_usd: f64,
        totals: Totals,
        latency: Duration,
        streamed: bool,
    ) {
        self.emit(GatewayEvent::Usage {
            report: UsageReport {
                model: self
                    .sanitizer
                    .sanitize(&stet_sanitize::display::without_invisible(model).text),
                input_tokens: 0,
                output_tokens: 0,
                cached_tokens: 0,
                cost_usd: Some(counted_usd),
            },
            totals,
            latency,
            streamed,
        });
    }

    fn error(&self, message: &str) {
        Shared::error(self, message);
    }
}
