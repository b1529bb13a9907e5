//! `GitHubForge` (ADR-0018 rows 3 and 5, the invariant): the host's side of GitHub. It holds the
//! person's primary token privately inside its REST client — the token leaves only as the
//! `Authorization` header of REST calls, never into git, a container, a log or an error — checks a
//! target before anything is created, and opens or updates the pull request. The push itself uses the
//! dispatch's scoped credential only.
//!
//! Requests go through octocrab's raw interface with octocrab's own retry switched off: [`Rest`]
//! retries server errors and rate limits itself, honouring `Retry-After`, and gives up rather than
//! wait longer than [`RetryPolicy::max_delay`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use http::header::{HeaderMap, RETRY_AFTER};
use http::{Method, StatusCode};
use octocrab::Octocrab;
use octocrab::models::AppId;
use octocrab::service::middleware::retry::RetryConfig;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::token::TokenSource;
use super::{
    Forge, ForgeError, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed, ResolvedHead,
    Result,
};
use crate::brief::Target;
use crate::dispatch::branch::CommitSha;
use crate::dispatch::credential::SecretValue;
use crate::dispatch::sanitize::{KnownValue, SanitizerHandle};
use crate::forge::checkout_remotes::CheckoutRemotes;

const FORGE: &str = "github";

/// How long connecting to the API may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one response may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of GitHub's error text an error shows.
const DETAIL_CHARS: usize = 500;

/// A path segment keeps only RFC 3986's unreserved characters; everything else is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where GitHub is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHubSettings {
    /// The REST API, `https://api.github.com` (or `https://<host>/api/v3` for GitHub Enterprise).
    pub api_url: String,
    /// Where repositories are pushed, `https://github.com`.
    pub git_url: String,
    /// Where the primary token comes from (a reference, never the value).
    pub token: TokenSource,
    pub retry: RetryPolicy,
}

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

/// How a REST client authenticates.
pub(crate) enum ClientAuth<'a> {
    /// A bearer token: the primary token, or an installation token being revoked with itself.
    Token(&'a SecretValue),
    /// A GitHub App: a fresh JWT signed with its private key on every request.
    App {
        app_id: u64,
        key: jsonwebtoken::EncodingKey,
    },
}

/// Reads the primary token from its configured source.
pub fn resolve_token(source: &TokenSource) -> Result<SecretValue> {
    source.resolve().map_err(|err| ForgeError::Token {
        forge: FORGE,
        detail: err.to_string(),
    })
}

/// Builds an octocrab client for `api_url` with octocrab's retry off (the [`Rest`] wrapper retries).
/// Must run inside the tokio runtime the client will be used on: octocrab starts a worker task there.
pub(crate) fn build_client(api_url: &str, auth: ClientAuth<'_>) -> Result<Octocrab> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(ForgeError::Settings {
            forge: FORGE,
            detail: "the GitHub client must be created inside the async runtime".to_owned(),
        });
    }
    let base = web_url(api_url, "api_url")?;
    let builder = Octocrab::builder()
        .add_retry_config(RetryConfig::None)
        .set_connect_timeout(Some(CONNECT_TIMEOUT))
        .set_read_timeout(Some(READ_TIMEOUT))
        .base_uri(base)
        .map_err(|err| ForgeError::Transport {
            forge: FORGE,
            detail: format!("api_url {api_url:?}: {}", error_chain(&err)),
        })?;
    let builder = match auth {
        ClientAuth::Token(token) => {
            // octocrab turns the token into a header value and panics on one it cannot carry.
            if !token.expose_secret().bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ForgeError::Token {
                    forge: FORGE,
                    detail: "the token contains characters an HTTP header cannot carry".to_owned(),
                });
            }
            builder.personal_token(token.expose_secret().to_owned())
        }
        ClientAuth::App { app_id, key } => builder.app(AppId(app_id), key),
    };
    builder.build().map_err(|err| ForgeError::Transport {
        forge: FORGE,
        detail: format!("the HTTP client could not be built: {}", error_chain(&err)),
    })
}

/// Parses an `http(s)` URL that carries no user information.
fn web_url(url: &str, setting: &str) -> Result<http::Uri> {
    // A URL with user information may carry a password: it is not repeated in the error.
    let shown = if url.contains('@') {
        "(withheld: it contains '@')"
    } else {
        url
    };
    let invalid = |why: &str| ForgeError::Settings {
        forge: FORGE,
        detail: format!("{setting} {shown:?} {why}"),
    };
    let uri: http::Uri = url.parse().map_err(|_| invalid("is not a URL"))?;
    if !matches!(uri.scheme_str(), Some("https" | "http")) {
        return Err(invalid("must be an https:// (or http://) URL"));
    }
    match uri.authority() {
        None => Err(invalid("has no host")),
        Some(authority) if authority.as_str().contains('@') => {
            Err(invalid("must not carry user information"))
        }
        Some(_) => Ok(uri),
    }
}

/// An error and its sources, one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
    /// No answer arrived (connection, timeout, a body cut short): the sanitized reason.
    Unreachable(String),
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
    },
}

/// GitHub's REST API over an octocrab client, with stet's retry policy and error texts that went
/// through the sanitizer.
pub(crate) struct Rest {
    client: Octocrab,
    api_url: String,
    retry: RetryPolicy,
    sanitizer: SanitizerHandle,
}

impl fmt::Debug for Rest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rest")
            .field("api_url", &self.api_url)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Rest {
    pub(crate) fn new(
        client: Octocrab,
        api_url: &str,
        retry: RetryPolicy,
        sanitizer: SanitizerHandle,
    ) -> Rest {
        Rest {
            client,
            api_url: api_url.to_owned(),
            retry,
            sanitizer,
        }
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
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            let transient = match self.attempt(&method, path, body).await? {
                Attempt::Answered(reply, headers) => match self.transient(&reply, &headers) {
                    None => return Ok(reply),
                    Some(transient) => transient,
                },
                Attempt::Unreachable(detail) => Transient::Transport { detail },
            };
            let told = match &transient {
                Transient::Server { retry_after, .. } => *retry_after,
                Transient::RateLimited { wait, .. } => *wait,
                Transient::Transport { .. } => None,
            };
            if let Some(wait) = told.filter(|wait| *wait > self.retry.max_delay) {
                tracing::warn!(%method, path, attempt, wait_s = wait.as_secs(), max_delay_s = self.retry.max_delay.as_secs(), "GitHub asked to wait longer than allowed; giving up");
                return Err(Self::exhausted(transient, attempt));
            }
            if attempt >= max_attempts {
                return Err(Self::exhausted(transient, attempt));
            }
            let delay = match &transient {
                Transient::RateLimited { wait: None, .. } => {
                    // GitHub asks for at least a minute when it names no time; max_delay caps that.
                    self.retry.max_delay.min(Duration::from_secs(60))
                }
                _ => told.unwrap_or_else(|| self.retry.backoff(attempt)),
            };
            tracing::warn!(%method, path, attempt, delay_ms = delay.as_millis(), reason = transient.reason(), "GitHub request failed transiently; retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// One request, read whole. A request that cannot even be built is an error at once; one that
    /// found no answer may be tried again.
    async fn attempt(&self, method: &Method, path: &str, body: Option<&Value>) -> Result<Attempt> {
        tracing::debug!(%method, path, "GitHub request");
        let request = http::Request::builder().method(method.clone()).uri(path);
        let request =
            self.client
                .build_request(request, body)
                .map_err(|err| ForgeError::Protocol {
                    forge: FORGE,
                    detail: self.sanitize(&format!(
                        "the request {method} {path} could not be built: {}",
                        error_chain(&err)
                    )),
                })?;
        let unreachable =
            |err: octocrab::Error| Attempt::Unreachable(self.sanitize(&error_chain(&err)));
        let response = match self.client.execute(request).await {
            Ok(response) => response,
            Err(err) => return Ok(unreachable(err)),
        };
        let status = response.status();
        let headers = response.headers().clone();
        Ok(match self.client.body_to_string(response).await {
            Ok(body) => Attempt::Answered(
                Reply {
                    status,
                    body: Zeroizing::new(body),
                },
                headers,
            ),
            Err(err) => unreachable(err),
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
        let exhausted = header_str(headers, "x-ratelimit-remaining") == Some("0");
        let reset = header_str(headers, "x-ratelimit-reset")
            .and_then(|reset| reset.parse::<i64>().ok())
            .filter(|_| exhausted)
            .map(|reset| {
                // One second of slack: GitHub's reset is the second the window reopens.
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

    fn exhausted(transient: Transient, attempts: u32) -> ForgeError {
        match transient {
            Transient::Server { status, detail, .. } => ForgeError::Server {
                forge: FORGE,
                status: status.as_u16(),
                attempts,
                detail,
            },
            Transient::RateLimited { detail, .. } => ForgeError::RateLimited {
                forge: FORGE,
                attempts,
                detail,
            },
            Transient::Transport { detail } => ForgeError::Transport {
                forge: FORGE,
                detail: format!("{detail} (after {attempts} attempts)"),
            },
        }
    }

    /// The error for an answer the operation did not expect, by status; `what` names the object a
    /// 404 was about.
    pub(crate) fn failure(&self, reply: &Reply, what: &str) -> ForgeError {
        let detail = self.detail(reply);
        match reply.status {
            StatusCode::UNAUTHORIZED => ForgeError::Unauthorized {
                forge: FORGE,
                detail,
            },
            StatusCode::FORBIDDEN => ForgeError::Forbidden {
                forge: FORGE,
                detail,
            },
            StatusCode::NOT_FOUND => ForgeError::NotFound {
                forge: FORGE,
                what: what.to_owned(),
                detail,
            },
            StatusCode::UNPROCESSABLE_ENTITY => ForgeError::Unprocessable {
                forge: FORGE,
                detail,
            },
            status => ForgeError::Protocol {
                forge: FORGE,
                detail: format!("HTTP {status} for {what}: {detail}"),
            },
        }
    }

    /// GitHub's own words about a failed request — `message` and each `errors[]` entry — sanitized
    /// and bounded.
    pub(crate) fn detail(&self, reply: &Reply) -> String {
        let reason = reply.status.canonical_reason().unwrap_or("no reason given");
        let text = match serde_json::from_str::<ErrorBody>(&reply.body) {
            Ok(parsed) => {
                let mut parts: Vec<String> = parsed.message.into_iter().collect();
                parts.extend(parsed.errors.iter().filter_map(error_entry));
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
            forge: FORGE,
            detail: self.sanitize(&format!("{what}: {err}")),
        })
    }

    fn sanitize(&self, text: &str) -> String {
        let sanitized = self.sanitizer.current().sanitize(text).into_string();
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

/// GitHub's error body.
#[derive(Deserialize)]
struct ErrorBody {
    message: Option<String>,
    #[serde(default)]
    errors: Vec<Value>,
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

/// `owner/name`, each part percent-encoded, checked to be a repository name GitHub can hold.
fn repo_path(repo: &str) -> Result<String> {
    let valid_part = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if valid_part(owner) && valid_part(name) => Ok(format!(
            "/repos/{}/{}",
            utf8_percent_encode(owner, SEGMENT),
            utf8_percent_encode(name, SEGMENT)
        )),
        _ => Err(ForgeError::InvalidTarget {
            forge: FORGE,
            detail: format!("repository {repo:?} is not owner/name"),
        }),
    }
}

/// A ref name for a REST path: each `/`-separated segment percent-encoded, the `/` kept (GitHub reads
/// `branches/feature/x` as the branch `feature/x`). `None` for a name no ref can have (an empty, `.` or
/// `..` segment), which would otherwise change the path itself.
fn ref_path(name: &str) -> Option<String> {
    let mut encoded = Vec::new();
    for segment in name.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        encoded.push(utf8_percent_encode(segment, SEGMENT).to_string());
    }
    Some(encoded.join("/"))
}

#[derive(Deserialize)]
struct BranchBody {
    commit: CommitBody,
}

#[derive(Deserialize)]
struct CommitBody {
    sha: String,
}

#[derive(Deserialize)]
struct PullBody {
    number: u64,
    state: String,
    #[serde(default)]
    merged: bool,
    head: PullEnd,
    base: PullEnd,
}

#[derive(Deserialize)]
struct PullEnd {
    #[serde(rename = "ref")]
    branch: String,
    sha: String,
    repo: Option<RepoBody>,
}

#[derive(Deserialize)]
struct RepoBody {
    full_name: String,
}

#[derive(Deserialize)]
struct PullRequestBody {
    number: u64,
    html_url: String,
}

/// The GitHub forge. Its primary token lives only inside its REST client.
pub struct GitHubForge {
    rest: Rest,
    git_url: String,
    /// The only repositories a brief may target: those the user's checkout has as remotes.
    remotes: CheckoutRemotes,
}

impl fmt::Debug for GitHubForge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHubForge")
            .field("api_url", &self.rest.api_url)
            .field("git_url", &self.git_url)
            .field("token", &"<withheld>")
            .finish()
    }
}

impl GitHubForge {
    /// Reads the primary token from its source and builds the forge with it ([`GitHubForge::with_token`]).
    /// Must run inside the async runtime.
    pub fn new(
        settings: GitHubSettings,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitHubForge> {
        let token = resolve_token(&settings.token)?;
        GitHubForge::with_token(settings, token, sanitizer, remotes)
    }

    /// Teaches the primary token to the sanitizer (`primary-token`) so no sink can show it, and keeps
    /// it inside the REST client. For a caller that already read the token from `settings.token` and
    /// needs it once more (the fallback credential provider), so its source runs only once. Briefs
    /// may target only the repositories in `remotes` ([`CheckoutRemotes`]).
    pub fn with_token(
        settings: GitHubSettings,
        token: SecretValue,
        sanitizer: SanitizerHandle,
        remotes: CheckoutRemotes,
    ) -> Result<GitHubForge> {
        web_url(&settings.git_url, "git_url")?;
        let token_error = |detail: String| ForgeError::Token {
            forge: FORGE,
            detail,
        };
        let known = KnownValue::new("primary-token", token.expose_secret())
            .map_err(|err| token_error(format!("{}: {err}", settings.token.describe())))?;
        sanitizer
            .register(known)
            .map_err(|err| token_error(err.to_string()))?;
        let client = build_client(&settings.api_url, ClientAuth::Token(&token))?;
        tracing::info!(api_url = %settings.api_url, source = %settings.token.describe(), "GitHub primary token read");
        Ok(GitHubForge {
            rest: Rest::new(client, &settings.api_url, settings.retry, sanitizer),
            git_url: settings.git_url.trim_end_matches('/').to_owned(),
            remotes,
        })
    }

    /// The host of `git_url`, which the checkout's remotes are matched on.
    pub fn git_host(git_url: &str) -> Result<String> {
        let uri = web_url(git_url, "git_url")?;
        Ok(uri.host().unwrap_or_default().to_owned())
    }

    /// Fails unless `reply` is a success about pull request `number` (404: it does not exist).
    fn pull_request_found(&self, reply: &Reply, target: &Target, number: u64) -> Result<()> {
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::PullRequestNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
                number,
            });
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(reply, &format!("pull request #{number}")));
        }
        Ok(())
    }

    /// The pull request's real head, refusing one stet cannot build on.
    /// Fails when the brief's own branch already exists: a push there would be refused (or land on
    /// someone's work) only after the whole agent run.
    async fn refuse_existing_branch(
        &self,
        target: &Target,
        repo: &str,
        branch: &str,
    ) -> Result<()> {
        let Some(path) = ref_path(branch) else {
            return Ok(());
        };
        let reply = self
            .rest
            .send(Method::GET, &format!("{repo}/branches/{path}"), None)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        if !reply.status.is_success() {
            return Err(self.rest.failure(&reply, &format!("branch {branch:?}")));
        }
        Err(ForgeError::BranchExists {
            forge: FORGE,
            repo: target.repo.clone(),
            branch: branch.to_owned(),
        })
    }

    async fn resolve_head(&self, target: &Target, repo: &str, number: u64) -> Result<ResolvedHead> {
        let reply = self
            .rest
            .send(Method::GET, &format!("{repo}/pulls/{number}"), None)
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let pull: PullBody = self.rest.parse(&reply, "pull request")?;
        if pull.state != "open" {
            return Err(ForgeError::PullRequestClosed {
                forge: FORGE,
                repo: target.repo.clone(),
                number,
                state: if pull.merged {
                    "merged".to_owned()
                } else {
                    pull.state
                },
            });
        }
        let refused = |detail: String| ForgeError::InvalidTarget {
            forge: FORGE,
            detail,
        };
        match &pull.head.repo {
            None => {
                return Err(refused(format!(
                    "pull request #{number} in {}: its head repository no longer exists; stet can only update a pull request whose branch is in {}",
                    target.repo, target.repo
                )));
            }
            Some(head) if !head.full_name.eq_ignore_ascii_case(&target.repo) => {
                return Err(refused(format!(
                    "pull request #{number} in {} comes from the fork {}; stet pushes only to {} itself and cannot update it",
                    target.repo, head.full_name, target.repo
                )));
            }
            Some(_) => {}
        }
        if pull.base.branch != target.base {
            return Err(refused(format!(
                "pull request #{number} in {} merges into {:?}, but the brief's base is {:?}",
                target.repo, pull.base.branch, target.base
            )));
        }
        let sha = CommitSha::parse(&pull.head.sha)
            .map_err(|err| refused(format!("pull request #{number}: head SHA: {err}")))?;
        Ok(ResolvedHead {
            number: pull.number,
            branch: pull.head.branch,
            sha,
        })
    }

    fn pull_request(reply: &Reply, rest: &Rest, opened: bool) -> Result<PullRequest> {
        let body: PullRequestBody = rest.parse(reply, "pull request")?;
        Ok(PullRequest {
            number: body.number,
            url: body.html_url,
            opened,
        })
    }
}

#[async_trait]
impl Forge for GitHubForge {
    fn name(&self) -> &'static str {
        FORGE
    }

    async fn preflight(&self, target: &Target) -> Result<Preflight> {
        if !self.remotes.allows(&target.repo) {
            return Err(ForgeError::NotThisCheckout {
                forge: FORGE,
                repo: target.repo.clone(),
                remotes: match self.remotes.repositories() {
                    [] => "none".to_owned(),
                    own => own.join(", "),
                },
            });
        }
        let repo = repo_path(&target.repo)?;
        let reply = self.rest.send(Method::GET, &repo, None).await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(ForgeError::RepositoryNotFound {
                forge: FORGE,
                repo: target.repo.clone(),
            });
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("repository {}", target.repo)));
        }
        let base_not_found = || ForgeError::BaseNotFound {
            forge: FORGE,
            repo: target.repo.clone(),
            base: target.base.clone(),
        };
        let branch = ref_path(&target.base).ok_or_else(base_not_found)?;
        let reply = self
            .rest
            .send(Method::GET, &format!("{repo}/branches/{branch}"), None)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(base_not_found());
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("branch {:?}", target.base)));
        }
        let branch: BranchBody = self.rest.parse(&reply, "branch")?;
        let base_sha =
            CommitSha::parse(&branch.commit.sha).map_err(|err| ForgeError::Protocol {
                forge: FORGE,
                detail: format!("branch {:?}: commit SHA: {err}", target.base),
            })?;
        if target.pr.is_none()
            && let Some(wanted) = &target.branch
        {
            self.refuse_existing_branch(target, &repo, wanted).await?;
        }
        let head = match target.pr {
            Some(number) => Some(self.resolve_head(target, &repo, number).await?),
            None => None,
        };
        Ok(Preflight {
            base_sha,
            head,
            push_url: format!("{}/{}.git", self.git_url, target.repo),
        })
    }

    /// Pushes with the dispatch's scoped credential through the shared checked push; the primary
    /// token never reaches git.
    async fn push_branch(&self, push: PushBranch<'_>) -> Result<Pushed> {
        super::push_checked(FORGE, push).await
    }

    async fn open_pull_request(
        &self,
        target: &Target,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let repo = repo_path(&target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
            "head": draft.head,
            "base": draft.base,
        });
        let reply = self
            .rest
            .send(Method::POST, &format!("{repo}/pulls"), Some(&body))
            .await?;
        if reply.status == StatusCode::UNPROCESSABLE_ENTITY {
            let detail = self.rest.detail(&reply);
            if detail
                .to_ascii_lowercase()
                .contains("a pull request already exists")
            {
                return Err(ForgeError::PullRequestExists {
                    forge: FORGE,
                    repo: target.repo.clone(),
                    head: draft.head.clone(),
                    base: draft.base.clone(),
                    detail,
                });
            }
        }
        if !reply.status.is_success() {
            return Err(self
                .rest
                .failure(&reply, &format!("repository {}", target.repo)));
        }
        let opened = Self::pull_request(&reply, &self.rest, true)?;
        tracing::info!(repo = %target.repo, number = opened.number, head = %draft.head, base = %draft.base, "GitHub pull request opened");
        Ok(opened)
    }

    async fn update_pull_request(
        &self,
        target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> Result<PullRequest> {
        let repo = repo_path(&target.repo)?;
        let body = json!({
            "title": draft.title.as_str(),
            "body": draft.body.as_str(),
        });
        let reply = self
            .rest
            .send(
                Method::PATCH,
                &format!("{repo}/pulls/{number}"),
                Some(&body),
            )
            .await?;
        self.pull_request_found(&reply, target, number)?;
        let updated = Self::pull_request(&reply, &self.rest, false)?;
        tracing::info!(repo = %target.repo, number, "GitHub pull request updated");
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_encoded_per_segment() {
        assert_eq!(ref_path("feature/x#1").unwrap(), "feature/x%231");
        assert_eq!(ref_path("a b/c?d").unwrap(), "a%20b/c%3Fd");
        assert_eq!(ref_path("release/1.x").unwrap(), "release/1.x");
        assert_eq!(ref_path("ü").unwrap(), "%C3%BC");
        for bad in ["", "a//b", "../x", "a/./b", "a/"] {
            assert!(ref_path(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn repositories_must_be_owner_slash_name() {
        assert_eq!(repo_path("octo/app.rs").unwrap(), "/repos/octo/app.rs");
        for bad in [
            "octo", "octo/", "/app", "a/b/c", "a/..", "o/r#x", "o/r?x", "o /r",
        ] {
            assert!(
                matches!(repo_path(bad), Err(ForgeError::InvalidTarget { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(700),
        };
        let waits: Vec<u128> = (1..=5).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 700, 700]);
        assert_eq!(policy.backoff(200), Duration::from_millis(700));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        headers.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn urls_with_userinfo_are_refused() {
        assert!(web_url("https://github.com", "git_url").is_ok());
        assert!(web_url("https://user:pw@github.com", "git_url").is_err());
        assert!(web_url("file:///tmp/x", "git_url").is_err());
        let err = web_url("https://user:hunter2@github.com", "git_url").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn error_entries_read_like_github_writes_them() {
        assert_eq!(
            error_entry(
                &json!({"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for o:b."})
            ),
            Some("A pull request already exists for o:b.".to_owned())
        );
        assert_eq!(
            error_entry(&json!({"resource": "PullRequest", "field": "head", "code": "invalid"})),
            Some("head: invalid".to_owned())
        );
        assert_eq!(error_entry(&json!("plain")), Some("plain".to_owned()));
        assert_eq!(error_entry(&json!(3)), None);
    }
}
