//! The origin rule for git over HTTP (docs/security.md "The origin rule"): a credential goes only to
//! the origin (scheme, host and port) stet checked. libgit2 cannot be made to keep it there on its own:
//! it follows a redirect to another port of the same host even when told to follow none, it takes
//! `http://` → `https://` to any host as "the same site" for the first request, and after a redirect it
//! presents the credential it already holds to the new place without asking the credentials callback
//! again. So libgit2 never talks to the forge itself: each git operation over HTTP talks to an
//! [`OriginGuard`], a forwarder on loopback that sends every request to the checked origin only, turns a
//! redirect within that origin into one back to itself, and answers any other redirect with a refusal
//! that libgit2 cannot follow. What libgit2 holds can therefore reach nothing but the guard, and what
//! the guard forwards reaches nothing but the checked origin.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{HOST, HeaderName, LOCATION, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

mod pace;

use pace::{Meter, Metered};
pub use pace::{Stall, StallKind, TransferBounds};

/// Headers of one hop only: never forwarded in either direction.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Everything starting a guard can answer wrongly.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum GuardError {
    #[error("{url}: not an http(s) URL with a host the origin guard can forward to")]
    NotHttp { url: String },
    #[error("the origin guard could not start on loopback: {detail}")]
    Start { detail: String },
}

/// Scheme, host and port, compared whole and without case (a missing port is the scheme's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an absolute `http(s)` URL; `None` for anything else. A userinfo is skipped, never
    /// kept.
    pub fn of(url: &str) -> Option<Origin> {
        let uri: Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return None,
        };
        let host = uri.host()?.to_ascii_lowercase();
        if host.is_empty() {
            return None;
        }
        Some(Origin {
            scheme,
            host,
            port: uri.port_u16().unwrap_or(default),
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// A redirect the guard refused: where it led, and which request it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRedirect {
    /// The origin the redirect led to (or the `Location` itself, shortened, when it names none).
    pub to: String,
    /// The request it answered, as `METHOD path` relative to the checked URL's origin.
    pub request: String,
}

/// What the serving thread and the guard's owner share.
struct Shared {
    /// The checked origin, as a URL prefix without a trailing `/` (`https://github.com:443`).
    upstream: String,
    origin: Origin,
    /// `/<nonce>`: the path prefix only libgit2 is told.
    prefix: String,
    /// `http://127.0.0.1:<port>/<nonce>`.
    local_base: String,
    refused: Mutex<Option<RefusedRedirect>>,
    /// The first exchange cut for moving too slowly, if any.
    stalled: Arc<Mutex<Option<Stall>>>,
    /// How slowly one exchange may move (a front end that never answers, or trickles, is cut).
    bounds: TransferBounds,
    client: crate::https::HttpsClient<Metered<Incoming>>,
}

/// A forwarder on `127.0.0.1:<ephemeral>` to one checked origin, for the lifetime of one git operation.
/// Stops when dropped.
pub struct OriginGuard {
    shared: Arc<Shared>,
    local_origin: Origin,
    path: String,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for OriginGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OriginGuard")
            .field("origin", &self.shared.origin)
            .field("local_origin", &self.local_origin)
            .finish_non_exhaustive()
    }
}

impl OriginGuard {
    /// Starts a guard in front of `url` (an `https://…` URL, or `http://` to loopback: the caller has
    /// checked it), with the default [`TransferBounds`]. libgit2 is then given
    /// [`OriginGuard::local_url`] instead.
    pub fn start(url: &str) -> Result<OriginGuard, GuardError> {
        OriginGuard::start_within(url, TransferBounds::default())
    }

    /// [`OriginGuard::start`] with the given bounds on each exchange.
    pub fn start_within(url: &str, bounds: TransferBounds) -> Result<OriginGuard, GuardError> {
        OriginGuard::start_until(url, bounds, None)
    }

    /// [`OriginGuard::start_within`], closing every connection once `stop` is cancelled: libgit2,
    /// waiting on a forge that sends nothing, sees its transfer fail at once instead of after the
    /// bounds.
    pub fn start_until(
        url: &str,
        bounds: TransferBounds,
        stop: Option<CancellationToken>,
    ) -> Result<OriginGuard, GuardError> {
        let not_http = || GuardError::NotHttp {
            url: shown_origin(url),
        };
        let uri: Uri = url.parse().map_err(|_| not_http())?;
        let origin = Origin::of(url).ok_or_else(not_http)?;
        let authority = uri.authority().ok_or_else(not_http)?;
        if authority.as_str().contains('@') {
            return Err(not_http());
        }
        let upstream = format!("{}://{}:{}", origin.scheme, authority.host(), origin.port);
        let path = uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned();
        let start = |detail: String| GuardError::Start { detail };
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|err| start(err.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|err| start(err.to_string()))?;
        let address = listener
            .local_addr()
            .map_err(|err| start(err.to_string()))?;
        let prefix = format!("/{}", uuid::Uuid::new_v4().simple());
        let local_base = format!("http://{address}{prefix}");
        let local_origin = Origin {
            scheme: "http".to_owned(),
            host: address.ip().to_string(),
            port: address.port(),
        };
        let shared = Arc::new(Shared {
            upstream,
            origin,
            prefix,
            local_base,
            refused: Mutex::new(None),
            stalled: Arc::default(),
            bounds,
            client: crate::https::https_client().map_err(|err| start(err.to_string()))?,
        });
        let cancelled = stop;
        let (shutdown, stop) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| start(err.to_string()))?;
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("stet-origin-guard".to_owned())
            .spawn(move || runtime.block_on(serve(listener, serving, stop, cancelled)))
            .map_err(|err| start(err.to_string()))?;
        Ok(OriginGuard {
            shared,
            local_origin,
            path,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The URL libgit2 is given: the guard's address, a prefix only this operation knows, and the
    /// checked URL's path.
    pub fn local_url(&self) -> String {
        format!("{}{}", self.shared.local_base, self.path)
    }

    /// The guard's own origin: the only one the credentials callback answers for.
    pub fn local_origin(&self) -> &Origin {
        &self.local_origin
    }

    /// The checked origin the guard forwards to.
    pub fn origin(&self) -> &Origin {
        &self.shared.origin
    }

    /// The first redirect the guard refused, if any.
    pub fn refused(&self) -> Option<RefusedRedirect> {
        self.shared
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The first exchange the guard cut for moving too slowly, if any.
    pub fn stalled(&self) -> Option<Stall> {
        self.shared
            .stalled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// `text` (a libgit2 message) with the guard's address put back as the checked origin, so an error
    /// names the forge and not a loopback port.
    pub fn unmask(&self, text: &str) -> String {
        text.replace(&self.shared.local_base, &self.shared.upstream)
    }
}

impl Drop for OriginGuard {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves until the guard is dropped or `cancelled`; returning ends the runtime, and with it every
/// connection still open.
async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
    cancelled: Option<CancellationToken>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let cancelled = async {
        match &cancelled {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(cancelled);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            () = &mut cancelled => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, std::convert::Infallible>(forward(&shared, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

type Body = Either<Metered<Incoming>, Full<Bytes>>;

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text))));
    *response.status_mut() = status;
    response
}

/// One request of libgit2's, sent to the checked origin; its answer, with a redirect within the origin
/// pointed back at the guard and any other refused.
async fn forward(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let path_and_query = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let Some(rest) = path_and_query
        .strip_prefix(shared.prefix.as_str())
        .filter(|rest| rest.starts_with('/'))
    else {
        return plain(
            StatusCode::FORBIDDEN,
            "not a path of this operation".to_owned(),
        );
    };
    let shown_request = format!("{} {}", parts.method, rest);
    let target = format!("{}{rest}", shared.upstream);
    let Ok(uri) = target.parse::<Uri>() else {
        return plain(StatusCode::BAD_REQUEST, "not a request path".to_owned());
    };
    parts.uri = uri;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(HOST);
    let meter = Meter::new(
        shared.bounds,
        shown_request.clone(),
        Arc::clone(&shared.stalled),
    );
    let sending = shared.client.request(Request::from_parts(
        parts,
        Metered::counting(body, Arc::clone(&meter)),
    ));
    let answer = match meter.within(sending).await {
        Ok(Ok(answer)) => answer,
        Err(stall) => {
            tracing::warn!(origin = %shared.origin, %stall, "a git remote moved too slowly; the exchange was cut");
            return plain(
                StatusCode::GATEWAY_TIMEOUT,
                format!("{}: {stall}", shared.origin),
            );
        }
        Ok(Err(err)) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                format!(
                    "{}: {}",
                    shared.origin,
                    crate::error_chain::error_chain(&err)
                ),
            );
        }
    };
    let (mut parts, body) = answer.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if parts.status.is_redirection() && parts.status != StatusCode::NOT_MODIFIED {
        // A challenge on a redirect makes libgit2 present the credential it holds to the new place at
        // once, or, holding none yet, crash (a NULL credential in `best_scheme_and_challenge`): a
        // redirect is never a challenge.
        parts.headers.remove(WWW_AUTHENTICATE);
        // A Location that is not visible ASCII is refused, never passed on: libgit2 would follow it
        // unchecked.
        let location = parts
            .headers
            .get(LOCATION)
            .map(|value| value.to_str().map(str::trim));
        match location {
            Some(Ok(location)) => match within(shared, location) {
                Ok(local) => match local.parse() {
                    Ok(value) => {
                        parts.headers.insert(LOCATION, value);
                    }
                    Err(_) => return refuse(shared, &shown_request, "(an unreadable Location)"),
                },
                Err(to) => return refuse(shared, &shown_request, &to),
            },
            Some(Err(_)) => return refuse(shared, &shown_request, "(an unreadable Location)"),
            None => {}
        }
    }
    Response::from_parts(parts, Either::Left(Metered::enforcing(body, meter)))
}

/// A redirect's `Location` as the guard's own URL when it stays within the checked origin; otherwise
/// the origin it leads to, for the refusal.
fn within(shared: &Shared, location: &str) -> Result<String, String> {
    if location.starts_with('/') && !location.starts_with("//") {
        return Ok(format!("{}{location}", shared.local_base));
    }
    let absolute = match location.strip_prefix("//") {
        Some(rest) => format!("{}://{rest}", shared.origin.scheme),
        None => location.to_owned(),
    };
    let Some(origin) = Origin::of(&absolute) else {
        return Err(shown_origin(location));
    };
    if origin != shared.origin {
        return Err(origin.to_string());
    }
    let uri: Uri = absolute.parse().map_err(|_| shown_origin(location))?;
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    Ok(format!("{}{path}", shared.local_base))
}

fn refuse(shared: &Shared, request: &str, to: &str) -> Response<Body> {
    let refusal = RefusedRedirect {
        to: to.to_owned(),
        request: request.to_owned(),
    };
    tracing::warn!(from = %shared.origin, to, request, "a git remote redirected to another origin; refused (the credential goes only to the origin stet checked)");
    let mut refused = shared
        .refused
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    refused.get_or_insert(refusal);
    plain(
        StatusCode::BAD_GATEWAY,
        format!(
            "stet refused a redirect from {} to {to}: the credential goes only to the origin stet checked",
            shared.origin
        ),
    )
}

fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(HeaderName::from_static(name));
    }
}

/// What an error may show of a URL it could not read: its scheme and authority without userinfo, at
/// most 100 characters, one line.
fn shown_origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let shown: String = format!("{scheme}://{host}").chars().take(100).collect();
    stet_sanitize::display::one_line(&shown)
}

#[cfg(test)]
mod tests;
