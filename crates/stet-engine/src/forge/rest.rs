//! A forge's REST API over HTTPS, shared by every forge: the credential goes out only as the
//! `Authorization` header of requests to the API's own origin (a redirect elsewhere is not followed),
//! failures that may pass are retried under [`RetryPolicy`] honouring `Retry-After`, answers are read
//! whole but bounded (an answer over the bound is final, never asked for again), a whole request — its
//! attempts, redirects and waits — has one deadline, and every error text went through the sanitizer
//! first.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue,
    LOCATION, RETRY_AFTER, USER_AGENT,
};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use zeroize::Zeroizing;

use super::{ForgeError, Result};
use crate::error_chain::error_chain;
use crate::https::{HttpsClient, https_client};
pub(crate) use auth::Auth;
pub(crate) use names::{
    SEGMENT, git_host, instance_tag, is_name_part, minted_id, parse_minted_id, ref_path, web_url,
};
use stet_sanitize::sanitize::SanitizerHandle;

/// How long connecting to the API may take.
/// How long one attempt may take: every request of it sent and every answer read whole, the redirects
/// within the API's origin included (each of them is not given this time afresh).
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a whole request may take: every attempt, every redirect and every wait between attempts.
/// A forge that trickles its answers cannot hold `stet doctor` or a preflight longer than this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// The largest answer read; a forge's JSON about one repository or pull request is a few KiB. An
/// answer over it is an error at once: it would be as large the next time.
const MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;
/// Redirects followed within the API's origin before giving up.
const MAX_REDIRECTS: usize = 5;
/// How much of the forge's error text an error shows.
const DETAIL_CHARS: usize = 500;
/// What stet calls itself to the forge.
const AGENT: &str = concat!("stet/", env!("CARGO_PKG_VERSION"));

/// How often, and how patiently, a request that failed transiently (5xx, rate limits, the network) is
/// sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles for each further one.
    pub base_delay: Duration,
    /// The longest wait. A server asking for more (`Retry-After`, a rate-limit reset) is not waited
    /// for: the request fails with [`ForgeError::RateLimited`] at once.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The exponential wait after failed attempt number `attempt` (1-based).
    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// A response as [`Rest::send`] returns it: read whole, the body zeroized when dropped (it may hold
/// a freshly minted token).
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) body: Zeroizing<String>,
}

/// How one attempt went.
enum Attempt {
    /// The server answered (any status).
    Answered(Reply, HeaderMap),
    /// No answer arrived (connection, timeout, a body cut short): the sanitized reason, and whether
    /// the request may have reached the forge (only a failed connection proves it did not).
    Unreachable { detail: String, sent: bool },
}

/// Why an attempt may be worth repeating.
enum Transient {
    Server {
        status: StatusCode,
        detail: String,
        retry_after: Option<Duration>,
    },
    RateLimited {
        detail: String,
        /// What the server asked for, when it said.
        wait: Option<Duration>,
    },
    Transport {
        detail: String,
        /// Whether the request may have reached the forge.
        sent: bool,
    },
}

impl Transient {
    /// Whether sending `method` again cannot make the forge act twice: a request that may change
    /// something (a POST: a minted token, a pull request) is repeated only when the forge did not act
    /// on it — it refused it for the rate limit, or it never arrived.
    fn may_repeat(&self, method: &Method) -> bool {
        *method != Method::POST
            || matches!(
                self,
                Transient::RateLimited { .. } | Transient::Transport { sent: false, .. }
            )
    }
}

type HttpClient = HttpsClient<Full<Bytes>>;

/// One forge's REST API, authenticated one way.
pub(crate) struct Rest {
    forge: &'static str,
    client: HttpClient,
    /// The API's root, without a trailing `/`; request paths are appended to it.
    api_url: String,
    origin: Origin,
    auth: Auth,
    retry: RetryPolicy,
    /// [`READ_TIMEOUT`]; shorter in tests.
    read_timeout: Duration,
    /// [`REQUEST_DEADLINE`]; shorter in tests.
    deadline: Duration,
    sanitizer: SanitizerHandle,
}

impl fmt::Debug for Rest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rest")
            .field("forge", &self.forge)
            .field("api_url", &self.api_url)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Scheme, host and port: where the credential may be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    authority: String,
}

impl Origin {
    fn of(uri: &Uri) -> Option<Origin> {
        Some(Origin {
            scheme: uri.scheme_str()?.to_ascii_lowercase(),
            authority: uri.authority()?.as_str().to_ascii_lowercase(),
        })
    }
}

impl Rest {
    /// A client of the API at `api_url` (checked: http(s), no user information).
    pub(crate) fn new(
        forge: &'static str,
        api_url: &str,
        auth: Auth,
        retry: RetryPolicy,
        sanitizer: SanitizerHandle,
    ) -> Result<Rest> {
        let base = web_url(forge, api_url, "api_url")?;
        let origin = Origin::of(&base).ok_or_else(|| ForgeError::Settings {
            forge,
            detail: format!("api_url {api_url:?} has no host"),
        })?;
        Ok(Rest {
            forge,
            client: https_client().map_err(|err| ForgeError::Settings {
                forge,
                detail: err.to_string(),
            })?,
            api_url: api_url.trim_end_matches('/').to_owned(),
            origin,
            auth,
            retry,
            read_timeout: READ_TIMEOUT,
            deadline: REQUEST_DEADLINE,
            sanitizer,
        })
    }

    /// The API's root, as configured.
    pub(crate) fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The forge this client talks to, as errors name it.
    pub(crate) fn forge(&self) -> &'static str {
        self.forge
    }

    /// Sends `method path` (a path relative to the API URL, its segments already encoded) with an
    /// optional JSON body, retrying transient failures. Any other answer, success or not, is returned
    /// for the caller to interpret.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply> {
        let payload = match body {
            Some(body) => Some(Zeroizing::new(serde_json::to_vec(body).map_err(|err| {
                ForgeError::Protocol {
                    forge: self.forge,
                    detail: format!("the body of {method} {path} could not be written: {err}"),
                }
            })?)),
            None => None,
        };
        self.send_payload(method, path, payload, &HeaderMap::new())
            .await
    }

    /// [`Rest::send`] of a body already written as JSON, with `extra` headers (a client library's
    /// own, such as an API version) sent beside stet's: they cannot replace the credential, the
    /// content type or the host.
    pub(crate) async fn send_payload(
        &self,
        method: Method,
        path: &str,
        payload: Option<Zeroizing<Vec<u8>>>,
        extra: &HeaderMap,
    ) -> Result<Reply> {
        let max_attempts = self.retry.max_attempts.max(1);
        let until = tokio::time::Instant::now() + self.deadline;
        let mut attempt = 1;
        loop {
            let transient = match self
                .attempt(&method, path, payload.as_ref(), extra, until)
                .await?
            {
                Attempt::Answered(reply, headers) => match self.transient(&reply, &headers) {
                    None => return Ok(reply),
                    Some(transient) => transient,
                },
                Attempt::Unreachable { detail, sent } => Transient::Transport { detail, sent },
            };
            let told = match &transient {
                Transient::Server { retry_after, .. } => *retry_after,
                Transient::RateLimited { wait, .. } => *wait,
                Transient::Transport { .. } => None,
            };
            if let Some(wait) = told.filter(|wait| *wait > self.retry.max_delay) {
                tracing::warn!(forge = self.forge, %method, path, attempt, wait_s = wait.as_secs(), max_delay_s = self.retry.max_delay.as_secs(), "the forge asked to wait longer than allowed; giving up");
                return Err(self.exhausted(transient, attempt));
            }
            if attempt >= max_attempts {
                return Err(self.exhausted(transient, attempt));
            }
            if !transient.may_repeat(&method) {
                tracing::warn!(forge = self.forge, %method, path, attempt, reason = transient.reason(), "the forge may have acted on the request; it is not sent again");
                return Err(self.exhausted(transient, attempt));
            }
            let delay = match &transient {
                Transient::RateLimited { wait: None, .. } => {
                    // GitHub asks for at least a minute when it names no time; max_delay caps that.
                    self.retry.max_delay.min(Duration::from_secs(60))
                }
                _ => told.unwrap_or_else(|| self.retry.backoff(attempt)),
            };
            if tokio::time::Instant::now() + delay >= until {
                tracing::warn!(forge = self.forge, %method, path, attempt, deadline_s = self.deadline.as_secs(), "the request's deadline would pass before the next attempt; giving up");
                return Err(self.past_deadline(transient, attempt));
            }
            tracing::warn!(forge = self.forge, %method, path, attempt, delay_ms = delay.as_millis(), reason = transient.reason(), "forge request failed transiently; retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// One request and the redirects within the API's origin it leads to, read whole, all within
    /// [`READ_TIMEOUT`] and before the request's deadline `until`. A request that cannot be built (the
    /// credential cannot make a header), a redirect to another origin, or an answer over the size bound
    /// is an error at once; one that found no answer may be tried again.
    async fn attempt(
        &self,
        method: &Method,
        path: &str,
        payload: Option<&Zeroizing<Vec<u8>>>,
        extra: &HeaderMap,
        until: tokio::time::Instant,
    ) -> Result<Attempt> {
        let remaining = until.saturating_duration_since(tokio::time::Instant::now());
        let limit = self.read_timeout.min(remaining);
        match tokio::time::timeout(limit, self.follow(method, path, payload, extra)).await {
            Ok(attempt) => attempt,
            Err(_) => Ok(Attempt::Unreachable {
                detail: format!("no answer within {} s", limit.as_secs_f32()),
                sent: true,
            }),
        }
    }

    /// [`Rest::attempt`] without its time limit.
    async fn follow(
        &self,
        method: &Method,
        path: &str,
        payload: Option<&Zeroizing<Vec<u8>>>,
        extra: &HeaderMap,
    ) -> Result<Attempt> {
        let mut uri = self.uri(&format!("{}{path}", self.api_url), path)?;
        let mut method = method.clone();
        let mut payload = payload;
        for _ in 0..=MAX_REDIRECTS {
            tracing::debug!(forge = self.forge, %method, path = uri.path(), "forge request");
            // Per request: a GitHub App signs a fresh JWT each time. A credential that cannot be sent
            // is not a transient failure.
            let authorization = self.auth.headers(self.forge)?;
            let (status, headers, reply) = match self
                .exchange(
                    &method,
                    &uri,
                    authorization,
                    extra,
                    payload.map(|p| p.as_slice()),
                )
                .await
            {
                Ok(answer) => answer,
                Err(Unanswered::Transport { detail, sent }) => {
                    return Ok(Attempt::Unreachable { detail, sent });
                }
                Err(Unanswered::TooLarge { detail }) => {
                    return Err(ForgeError::Protocol {
                        forge: self.forge,
                        detail: format!("{path}: {detail}; it is not asked for again"),
                    });
                }
            };
            if !status.is_redirection() || status == StatusCode::NOT_MODIFIED {
                return Ok(Attempt::Answered(reply, headers));
            }
            uri = self.redirect(&uri, &headers, path)?;
            if status == StatusCode::SEE_OTHER {
                method = Method::GET;
                payload = None;
            }
        }
        Err(ForgeError::Protocol {
            forge: self.forge,
            detail: format!("{path}: more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// The request sent and its answer read, or the sanitized reason it could not be and whether
    /// the request may have reached the forge.
    async fn exchange(
        &self,
        method: &Method,
        uri: &Uri,
        authorization: Vec<(HeaderName, HeaderValue)>,
        extra: &HeaderMap,
        payload: Option<&[u8]>,
    ) -> std::result::Result<(StatusCode, HeaderMap, Reply), Unanswered> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .header(USER_AGENT, AGENT)
            .header(ACCEPT, "application/json");
        for (name, value) in extra {
            let stets = [
                AUTHORIZATION,
                CONTENT_TYPE,
                CONTENT_LENGTH,
                HOST,
                USER_AGENT,
                ACCEPT,
            ];
            if !stets.contains(name) && !name.as_str().starts_with("proxy-") {
                request = request.header(name, value);
            }
        }
        if payload.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        for (name, value) in authorization {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(
                payload.unwrap_or_default(),
            )))
            .map_err(|err| Unanswered::Transport {
                detail: self.sanitize(&format!("the request could not be built: {err}")),
                sent: false,
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|err| Unanswered::Transport {
                detail: self.sanitize(&error_chain(&err)),
                sent: !err.is_connect(),
            })?;
        let (parts, body) = response.into_parts();
        let text = read_bounded(body, MAX_REPLY_BYTES)
            .await
            .map_err(|err| match err {
                Unread::TooLarge(limit) => Unanswered::TooLarge {
                    detail: format!("the answer is longer than {} MiB", limit / (1024 * 1024)),
                },
                Unread::Broken(detail) => Unanswered::Transport {
                    detail: self.sanitize(&format!("reading the answer: {detail}")),
                    sent: true,
                },
            })?;
        Ok((
            parts.status,
            parts.headers,
            Reply {
                status: parts.status,
                body: text,
            },
        ))
    }

    /// Where a redirect leads, if it stays within the API's origin: the credential is not sent
    /// anywhere else.
    fn redirect(&self, from: &Uri, headers: &HeaderMap, path: &str) -> Result<Uri> {
        let refused = |why: &str| ForgeError::Protocol {
            forge: self.forge,
            detail: format!("{path} was redirected {why}; the redirect was not followed"),
        };
        let location =
            header_str(headers, LOCATION.as_str()).ok_or_else(|| refused("without a Location"))?;
        let target = if location.starts_with('/') && !location.starts_with("//") {
            let scheme = from.scheme_str().unwrap_or("https");
            let authority = from.authority().map(|a| a.as_str()).unwrap_or_default();
            format!("{scheme}://{authority}{location}")
        } else {
            location.to_owned()
        };
        let uri: Uri = target
            .parse()
            .map_err(|_| refused("to a location that is not a URL"))?;
        if Origin::of(&uri).as_ref() != Some(&self.origin) {
            return Err(refused(
                "to another origin (the credential is sent only to the configured API)",
            ));
        }
        Ok(uri)
    }

    /// `url` parsed as a request URI.
    fn uri(&self, url: &str, path: &str) -> Result<Uri> {
        url.parse().map_err(|_| ForgeError::Protocol {
            forge: self.forge,
            detail: self.sanitize(&format!("the request path {path:?} does not make a URL")),
        })
    }

    /// Whether an answer is a server error or a rate limit (primary or secondary).
    fn transient(&self, reply: &Reply, headers: &HeaderMap) -> Option<Transient> {
        let status = reply.status;
        if status.is_server_error() {
            return Some(Transient::Server {
                status,
                detail: self.detail(reply),
                retry_after: retry_after(headers),
            });
        }
        if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::FORBIDDEN {
            return None;
        }
        // GitHub's and Gitea's `x-ratelimit-*`, GitLab's `ratelimit-*`.
        let limit_header = |name: &str| {
            header_str(headers, &format!("x-{name}")).or_else(|| header_str(headers, name))
        };
        let exhausted = limit_header("ratelimit-remaining") == Some("0");
        let reset = limit_header("ratelimit-reset")
            .and_then(|reset| reset.parse::<i64>().ok())
            .filter(|_| exhausted)
            .map(|reset| {
                // One second of slack: the reset is the second the window reopens.
                let seconds = reset
                    .saturating_sub(Utc::now().timestamp())
                    .saturating_add(1);
                Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
            });
        let retry_after = retry_after(headers);
        let detail = self.detail(reply);
        let limited = status == StatusCode::TOO_MANY_REQUESTS
            || retry_after.is_some()
            || exhausted
            || detail.to_ascii_lowercase().contains("rate limit");
        limited.then(|| Transient::RateLimited {
            detail,
            wait: retry_after.or(reset),
        })
    }

    /// The error for a request whose deadline passed: what went wrong last, and the deadline.
    fn past_deadline(&self, transient: Transient, attempts: u32) -> ForgeError {
        match self.exhausted(transient, attempts) {
            ForgeError::Transport { forge, detail } => ForgeError::Transport {
                forge,
                detail: format!(
                    "{detail}; the request's deadline of {} s has passed",
                    self.deadline.as_secs_f32()
                ),
            },
            other => other,
        }
    }

    fn exhausted(&self, transient: Transient, attempts: u32) -> ForgeError {
        let forge = self.forge;
        match transient {
            Transient::Server { status, detail, .. } => ForgeError::Server {
                forge,
                status: status.as_u16(),
                attempts,
                detail,
            },
            Transient::RateLimited { detail, .. } => ForgeError::RateLimited {
                forge,
                attempts,
                detail,
            },
            Transient::Transport { detail, .. } => ForgeError::Transport {
                forge,
                detail: format!("{detail} (after {attempts} attempts)"),
            },
        }
    }

    /// The error for an answer the operation did not expect, by status; `what` names the object a
    /// 404 was about.
    pub(crate) fn failure(&self, reply: &Reply, what: &str) -> ForgeError {
        let forge = self.forge;
        let detail = self.detail(reply);
        match reply.status {
            StatusCode::UNAUTHORIZED => ForgeError::Unauthorized { forge, detail },
            StatusCode::FORBIDDEN => ForgeError::Forbidden { forge, detail },
            StatusCode::NOT_FOUND => ForgeError::NotFound {
                forge,
                what: what.to_owned(),
                detail,
            },
            StatusCode::UNPROCESSABLE_ENTITY => ForgeError::Unprocessable { forge, detail },
            status => ForgeError::Protocol {
                forge,
                detail: format!("HTTP {status} for {what}: {detail}"),
            },
        }
    }

    /// The forge's own words about a failed request — `message` and each `errors[]` entry —
    /// sanitized and bounded.
    pub(crate) fn detail(&self, reply: &Reply) -> String {
        let reason = reply.status.canonical_reason().unwrap_or("no reason given");
        let text = match serde_json::from_str::<ErrorBody>(&reply.body) {
            Ok(parsed) => {
                let parts = parsed.parts();
                if parts.is_empty() {
                    reason.to_owned()
                } else {
                    parts.join("; ")
                }
            }
            Err(_) if reply.body.trim().is_empty() => reason.to_owned(),
            Err(_) => reply.body.trim().to_owned(),
        };
        self.sanitize(&text)
    }

    /// Parses a successful answer; a body that does not fit is a protocol error.
    pub(crate) fn parse<T: DeserializeOwned>(&self, reply: &Reply, what: &str) -> Result<T> {
        serde_json::from_str(&reply.body).map_err(|err| ForgeError::Protocol {
            forge: self.forge,
            detail: self.sanitize(&format!("{what}: {err}")),
        })
    }

    /// A forge's own words (a login, a token's name) as stet may show them: masked, bounded, one line
    /// and inert on a terminal.
    pub(crate) fn shown(&self, text: &str) -> String {
        self.sanitize(text)
    }

    fn sanitize(&self, text: &str) -> String {
        let masked = self.sanitizer.current().sanitize(text);
        let sanitized = stet_sanitize::display::one_line(masked.as_str());
        let mut bounded: String = sanitized.chars().take(DETAIL_CHARS).collect();
        if bounded.len() < sanitized.len() {
            bounded.push('…');
        }
        bounded
    }
}

impl Transient {
    fn reason(&self) -> &'static str {
        match self {
            Transient::Server { .. } => "server error",
            Transient::RateLimited { .. } => "rate limited",
            Transient::Transport { .. } => "transport",
        }
    }
}

/// A forge's error body: GitHub's and Gitea's `message` and `errors[]`; GitLab's `message` as a
/// string, a list, or an object of field errors, and OAuth's `error` and `error_description`.
#[derive(Deserialize)]
struct ErrorBody {
    message: Option<Value>,
    /// Gitea sends `"errors": null`.
    #[serde(default)]
    errors: Option<Vec<Value>>,
    error: Option<String>,
    error_description: Option<String>,
}

impl ErrorBody {
    /// Every part of the body a person should read, in order.
    fn parts(self) -> Vec<String> {
        let mut parts = match self.message {
            Some(Value::String(text)) => vec![text],
            Some(Value::Array(items)) => items.iter().filter_map(error_entry).collect(),
            Some(Value::Object(fields)) => fields
                .iter()
                .map(|(field, problems)| {
                    let problems: Vec<String> = match problems {
                        Value::Array(items) => items.iter().filter_map(error_entry).collect(),
                        other => error_entry(other).into_iter().collect(),
                    };
                    format!("{field}: {}", problems.join(", "))
                })
                .collect(),
            _ => Vec::new(),
        };
        parts.extend(self.errors.iter().flatten().filter_map(error_entry));
        match (self.error_description, self.error) {
            (Some(description), _) => parts.push(description),
            (None, Some(error)) if parts.is_empty() => parts.push(error),
            (None, _) => {}
        }
        parts
    }
}

/// One `errors[]` entry: a string, or an object with a `message` or a `code` on a `field`.
fn error_entry(entry: &Value) -> Option<String> {
    match entry {
        Value::String(text) => Some(text.clone()),
        Value::Object(fields) => {
            let text = |key: &str| fields.get(key).and_then(Value::as_str);
            match (text("message"), text("code"), text("field")) {
                (Some(message), _, _) => Some(message.to_owned()),
                (None, Some(code), Some(field)) => Some(format!("{field}: {code}")),
                (None, Some(code), None) => Some(code.to_owned()),
                (None, None, _) => None,
            }
        }
        _ => None,
    }
}

/// Why an exchange brought no answer to interpret.
enum Unanswered {
    /// No answer, or one cut short: the sanitized reason, and whether the request may have reached the
    /// forge. May be tried again.
    Transport { detail: String, sent: bool },
    /// An answer over [`MAX_REPLY_BYTES`]: final.
    TooLarge { detail: String },
}

/// Why a body could not be read whole.
enum Unread {
    /// It is longer than this many bytes.
    TooLarge(usize),
    /// The connection failed while reading it.
    Broken(String),
}

/// A body read whole into one buffer of at most `limit` bytes, copied frame by frame: memory follows
/// the answer's size, not the number of its chunks (collecting the frames would keep each one, and the
/// buffer it was read into, until the end: tens of bytes for each one-byte chunk). The text is
/// zeroized when dropped; a body that is not UTF-8 is read lossily.
async fn read_bounded<B>(
    mut body: B,
    limit: usize,
) -> std::result::Result<Zeroizing<String>, Unread>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error,
{
    // A Content-Length over the bound is refused before a byte of the body is read.
    if usize::try_from(body.size_hint().lower()).map_or(true, |announced| announced > limit) {
        return Err(Unread::TooLarge(limit));
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| Unread::Broken(error_chain(&err)))?;
        if let Ok(data) = frame.into_data() {
            if data.len() > limit - bytes.len() {
                return Err(Unread::TooLarge(limit));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Zeroizing::new(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let bytes = Zeroizing::new(err.into_bytes());
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }))
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// `Retry-After` as seconds or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = header_str(headers, RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&Utc) - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

mod auth;
mod names;
#[cfg(test)]
mod tests;
