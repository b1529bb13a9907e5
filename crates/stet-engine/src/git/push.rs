//! The host's push (ADR-0018 rows 2, 3 and 5; DESIGN §4 "Pushing"): stet itself, never the container,
//! sends a result's commit to the forge with an explicit `<sha>:refs/heads/<branch>` refspec that never
//! forces. The dispatch's scoped credential is presented only as the answer of a git2 credentials
//! callback, in memory: never in a URL, an argv or a child's environment (no child ever holds it: the one
//! git process stet starts here fetches from a local path, which takes no credential).
//! A URL is checked before any network: no userinfo, and plain `http://` only to a loopback host, so a
//! credential never crosses a network in clear. The same rules serve the host's other two remote
//! operations: listing a remote's refs, and fetching a base commit the user's repository lacks.
//!
//! Every operation over HTTP keeps to the origin rule (docs/security.md): libgit2 talks only to an
//! [`OriginGuard`] that forwards to the checked origin (scheme, host and port) and refuses a redirect
//! anywhere else, and the credentials callback answers only for the guard's own origin.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use git2::{
    Cred, CredentialType, Direction, ErrorCode, Oid, ProxyOptions, PushOptions, Remote,
    RemoteCallbacks, RemoteRedirect, Repository,
};
use tokio_util::sync::CancellationToken;

use crate::credential::ScopedCredential;
use crate::git::origin_guard::{Origin, OriginGuard, TransferBounds};
use stet_sanitize::branch::{BranchError, CommitSha, validate_ref_format};

pub use self::fetch::{fetch_commit, fetch_commit_until, fetch_commit_within};

/// The user name presented with a scoped credential over HTTP(S) (GitHub's convention).
pub const PUSH_USERNAME: &str = "x-access-token";

/// How many times one push or listing answers the remote's request for a credential. libgit2 asks
/// again after every refusal; a refused credential will not become valid by repeating it.
pub const MAX_CREDENTIAL_ATTEMPTS: u32 = 2;

/// What stands in for a URL's userinfo in every error text.
const WITHHELD_USERINFO: &str = "<userinfo withheld>";

/// How much of the remote's own messages (hook output) a rejection keeps, in bytes.
const MAX_REMOTE_MESSAGE_BYTES: usize = 4096;

/// Everything a push or a listing can answer wrongly. Texts name the URL (never its userinfo), the
/// branch and the repository; libgit2's messages are included, and never hold the credential because it
/// is in no URL.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum PushError {
    #[error(
        "remote {url}: a remote URL may not carry a user name or password (the credential is presented separately); remove the part before '@'"
    )]
    UrlUserinfo { url: String },
    #[error(
        "remote {url}: plain http:// is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https:// so the credential never crosses a network in clear"
    )]
    InsecureUrl { url: String },
    #[error("remote {url}: {reason}")]
    UnsupportedUrl { url: String, reason: &'static str },
    #[error(
        "remote {url}: the repository's configuration rewrites this URL (url.<base>.insteadOf or pushInsteadOf); stet talks only to the URL it checked"
    )]
    UrlRewritten { url: String },
    #[error("branch {branch:?} is not a valid ref name for refs/heads/: {source}")]
    InvalidBranch { branch: String, source: BranchError },
    #[error("{}: cannot open the repository: {detail}", .repository.display())]
    OpenRepository { repository: PathBuf, detail: String },
    #[error("commit {commit} is not in the repository {}: {detail}", .repository.display())]
    CommitNotFound {
        commit: CommitSha,
        repository: PathBuf,
        detail: String,
    },
    #[error("remote {url}: the remote asked for a credential and none is configured")]
    CredentialRequired { url: String },
    #[error(
        "remote {url}: {request} was redirected from {from} to {to}, another origin; stet refused the redirect and sent the credential nowhere but {from}"
    )]
    RedirectRefused {
        url: String,
        from: String,
        to: String,
        request: String,
    },
    #[error(
        "remote {url}: a credential was asked for {asked}, but stet checked {checked}; the credential goes only to the origin stet checked"
    )]
    OriginMismatch {
        url: String,
        checked: String,
        asked: String,
    },
    #[error("remote {url}: {detail}")]
    Guard { url: String, detail: String },
    #[error("remote {url}: {origin} was cut off for moving too slowly: {detail}")]
    Stalled {
        url: String,
        origin: String,
        detail: String,
    },
    #[error("remote {url}: the exchange was stopped (the dispatch was cancelled or timed out)")]
    Stopped { url: String },
    #[error(
        "remote {url}: the credential was refused (presented {attempts} time(s)): it is wrong, expired or revoked, or has no access to this repository"
    )]
    AuthenticationFailed { url: String, attempts: u32 },
    #[error(
        "remote {url}: the remote asks for a kind of credential stet does not present ({asked}); stet presents a token as a user name and password only"
    )]
    UnsupportedCredential { url: String, asked: String },
    #[error(
        "remote {url}: branch {branch:?} holds commits that the commit pushed from {} does not contain, so the push is not a fast-forward; stet never forces a push: {detail}",
        .repository.display()
    )]
    NonFastForward {
        url: String,
        branch: String,
        repository: PathBuf,
        detail: String,
    },
    #[error("remote {url}: the remote rejected {reference}: {reason}")]
    Rejected {
        url: String,
        reference: String,
        reason: String,
    },
    #[error(
        "remote {url}: pushing to branch {branch:?} from {} failed: {detail}",
        .repository.display()
    )]
    PushFailed {
        url: String,
        branch: String,
        repository: PathBuf,
        detail: String,
    },
    #[error(
        "remote {url}: fetching {branch:?} into {} failed: {detail}",
        .repository.display()
    )]
    FetchFailed {
        url: String,
        branch: String,
        repository: PathBuf,
        detail: String,
    },
    #[error("remote {url}: listing its refs (from {}) failed: {detail}", .repository.display())]
    ListFailed {
        url: String,
        repository: PathBuf,
        detail: String,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, PushError>;

/// One host-side push.
#[derive(Debug)]
pub struct PushRequest<'a> {
    /// The user's repository: its object store holds `commit`.
    pub repository: &'a Path,
    /// Where to push: `https://…`, `http://<loopback>…`, an absolute local path or `file:///…`.
    pub url: &'a str,
    /// The commit the branch is made to point at.
    pub commit: &'a CommitSha,
    /// Pushed as `<commit>:refs/heads/<branch>`.
    pub branch: &'a str,
    /// The dispatch's scoped credential; `None` for a remote that needs none (a local path).
    pub credential: Option<&'a ScopedCredential>,
}

/// Pushes `<commit>:refs/heads/<branch>`; never forces. Blocking: callers use `spawn_blocking`.
pub fn push(request: &PushRequest<'_>) -> Result<()> {
    push_within(request, TransferBounds::default())
}

/// [`push`] with the given bounds on how slowly each exchange with the remote may move.
pub fn push_within(request: &PushRequest<'_>, bounds: TransferBounds) -> Result<()> {
    check_url(request.url)?;
    validate_ref_format(request.branch).map_err(|source| PushError::InvalidBranch {
        branch: request.branch.to_owned(),
        source,
    })?;
    let reference = format!("refs/heads/{}", request.branch);
    let repository = open_repository(request.repository)?;
    find_commit(&repository, request.commit, request.repository)?;
    let route = Route::to(request.url, bounds)?;
    let exchange = Exchange::new(request.credential, &route);
    let mut remote = route.remote(&repository)?;
    let mut options = PushOptions::new();
    options
        .remote_callbacks(exchange.callbacks())
        .proxy_options(ProxyOptions::new())
        .follow_redirects(RemoteRedirect::None);
    let refspec = format!("{}:{reference}", request.commit);
    let pushed = remote.push(&[refspec.as_str()], Some(&mut options));
    if let Err(err) = pushed {
        return Err(route
            .refusal(&exchange, &err)
            .unwrap_or_else(|| push_failure(request, &route, err)));
    }
    match exchange.rejection() {
        Some((rejected, reason)) => Err(PushError::Rejected {
            url: request.url.to_owned(),
            reference: rejected,
            reason,
        }),
        None => Ok(()),
    }
}

/// Lists the remote's refs (like `git ls-remote`): full ref name → commit. Peeled tag entries
/// (`…^{}`) are left out. Blocking: callers use `spawn_blocking`.
pub fn remote_refs(
    repository: &Path,
    url: &str,
    credential: Option<&ScopedCredential>,
) -> Result<BTreeMap<String, CommitSha>> {
    remote_refs_within(repository, url, credential, TransferBounds::default())
}

/// [`remote_refs`] with the given bounds on how slowly each exchange with the remote may move.
pub fn remote_refs_within(
    repository: &Path,
    url: &str,
    credential: Option<&ScopedCredential>,
    bounds: TransferBounds,
) -> Result<BTreeMap<String, CommitSha>> {
    check_url(url)?;
    let opened = open_repository(repository)?;
    let route = Route::to(url, bounds)?;
    let exchange = Exchange::new(credential, &route);
    let mut remote = route.remote(&opened)?;
    let list_failure = |detail: String| PushError::ListFailed {
        url: url.to_owned(),
        repository: repository.to_owned(),
        detail,
    };
    let connection = remote
        .connect_auth(
            Direction::Fetch,
            Some(exchange.callbacks()),
            Some(ProxyOptions::new()),
        )
        .map_err(|err| {
            route
                .refusal(&exchange, &err)
                .unwrap_or_else(|| list_failure(route.detail(&err)))
        })?;
    let heads = connection.list().map_err(|err| {
        route
            .refusal(&exchange, &err)
            .unwrap_or_else(|| list_failure(route.detail(&err)))
    })?;
    let mut refs = BTreeMap::new();
    for head in heads {
        if head.name().ends_with("^{}") {
            continue;
        }
        let sha = CommitSha::parse(&head.oid().to_string())
            .map_err(|err| list_failure(format!("the remote advertised {}: {err}", head.name())))?;
        refs.insert(head.name().to_owned(), sha);
    }
    Ok(refs)
}

/// Accepts `https://host[:port]/…`, `http://<loopback>[:port]/…`, `file:///…` and absolute paths;
/// refuses everything else before any network, without echoing a userinfo.
fn check_url(url: &str) -> Result<()> {
    let unsupported = |reason| PushError::UnsupportedUrl {
        url: withhold_userinfo(url),
        reason,
    };
    if url
        .chars()
        .any(|character| character.is_whitespace() || character.is_control())
    {
        return Err(unsupported(
            "a remote URL may not contain whitespace or control characters",
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return check_local_path(url);
    };
    if rest.contains('@') {
        return Err(PushError::UrlUserinfo {
            url: withhold_userinfo(url),
        });
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match scheme.to_ascii_lowercase().as_str() {
        "https" => {
            parse_host(authority).map_err(unsupported)?;
            Ok(())
        }
        "http" => {
            let host = parse_host(authority).map_err(unsupported)?;
            if is_loopback(host) {
                Ok(())
            } else {
                Err(PushError::InsecureUrl {
                    url: url.to_owned(),
                })
            }
        }
        "file" if authority.is_empty() => Ok(()),
        "file" => Err(unsupported(
            "a file:// URL must name a local path (file:///path), not a host",
        )),
        _ => Err(unsupported(
            "stet pushes over https://, http:// to a loopback host, or to a local path; not this scheme",
        )),
    }
}

/// A remote written without a scheme: only an absolute local path is accepted. `host:path` and
/// `user@host:path` (ssh shorthand) are not.
fn check_local_path(url: &str) -> Result<()> {
    if Path::new(url).is_absolute() {
        Ok(())
    } else {
        Err(PushError::UnsupportedUrl {
            url: withhold_userinfo(url),
            reason: "a remote without a scheme must be an absolute local path (ssh shorthand such as host:path is not supported)",
        })
    }
}

/// The host of an authority `host[:port]` or `[v6][:port]`, with a conservative character set so no
/// parser can read the same authority differently.
fn parse_host(authority: &str) -> std::result::Result<&str, &'static str> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("the IPv6 host of this URL has no closing ']'");
        };
        if host.parse::<Ipv6Addr>().is_err() {
            return Err("the bracketed host of this URL is not an IPv6 address");
        }
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err("unexpected text after the IPv6 host of this URL"),
            },
        };
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("this URL has no host");
    }
    if !authority.starts_with('[')
        && !host.chars().all(|character| {
            character.is_ascii_alphanumeric() || matches!(character, '.' | '-' | '_')
        })
    {
        return Err(
            "the host of this URL has characters outside letters, digits, '.', '-' and '_'",
        );
    }
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|byte| byte.is_ascii_digit()))
    {
        return Err("the port of this URL is not a number");
    }
    Ok(host)
}

/// 127.0.0.0/8, `::1` (also as `::ffff:127.x.y.z`) and `localhost`.
fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(address)) => address.is_loopback(),
        Ok(IpAddr::V6(address)) => {
            address.is_loopback()
                || address
                    .to_ipv4_mapped()
                    .is_some_and(|mapped| mapped.is_loopback())
        }
        Err(_) => false,
    }
}

/// The URL with everything between `://` and the last `@` (or, without a scheme, before the last `@`)
/// replaced, so an error never echoes a user name or password.
fn withhold_userinfo(url: &str) -> String {
    let (prefix, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    match rest.rfind('@') {
        Some(at) if !prefix.is_empty() || !rest.starts_with('/') => {
            format!("{prefix}{WITHHELD_USERINFO}{}", &rest[at..])
        }
        _ => url.to_owned(),
    }
}

fn open_repository(path: &Path) -> Result<Repository> {
    Repository::open(path).map_err(|err| PushError::OpenRepository {
        repository: path.to_owned(),
        detail: err.message().to_owned(),
    })
}

/// Whether `repository` holds `commit` as a commit, read from the object's header only: a commit
/// of hundreds of MiB (a message that compresses a thousandfold) is never inflated here.
fn find_commit(repository: &Repository, commit: &CommitSha, path: &Path) -> Result<()> {
    let not_found = |detail: String| PushError::CommitNotFound {
        commit: commit.clone(),
        repository: path.to_owned(),
        detail,
    };
    let oid = Oid::from_str(commit.as_str()).map_err(|err| not_found(err.message().to_owned()))?;
    if oid.to_string() != commit.as_str() {
        return Err(not_found(
            "this repository's object format cannot name it".to_owned(),
        ));
    }
    let (_, kind) = repository
        .odb()
        .and_then(|odb| odb.read_header(oid))
        .map_err(|err| not_found(err.message().to_owned()))?;
    if kind != git2::ObjectType::Commit {
        return Err(not_found(format!("it names a {kind}, not a commit")));
    }
    Ok(())
}

/// An in-memory remote for `url`: nothing is written to the repository's configuration. The
/// repository's `insteadOf` rules could still rewrite the URL into one that was never checked, so a
/// rewritten remote is refused.
fn anonymous_remote<'r>(repository: &'r Repository, url: &str) -> Result<Remote<'r>> {
    let remote = repository
        .remote_anonymous(url)
        .map_err(|err| PushError::UnsupportedUrl {
            url: url.to_owned(),
            reason: remote_refusal(&err),
        })?;
    let fetch_url_kept = remote.url_bytes() == url.as_bytes();
    let push_url_kept = remote
        .pushurl_bytes()
        .is_none_or(|push_url| push_url == url.as_bytes());
    if fetch_url_kept && push_url_kept {
        Ok(remote)
    } else {
        Err(PushError::UrlRewritten {
            url: url.to_owned(),
        })
    }
}

fn remote_refusal(err: &git2::Error) -> &'static str {
    match err.code() {
        ErrorCode::InvalidSpec => "libgit2 does not accept this as a remote URL",
        _ => "libgit2 could not make a remote of this URL",
    }
}

fn push_failure(request: &PushRequest<'_>, route: &Route<'_>, err: git2::Error) -> PushError {
    if err.code() == ErrorCode::NotFastForward {
        return PushError::NonFastForward {
            url: request.url.to_owned(),
            branch: request.branch.to_owned(),
            repository: request.repository.to_owned(),
            detail: route.detail(&err),
        };
    }
    PushError::PushFailed {
        url: request.url.to_owned(),
        branch: request.branch.to_owned(),
        repository: request.repository.to_owned(),
        detail: route.detail(&err),
    }
}

/// Where libgit2 is sent for one operation: for an `http(s)` URL, an [`OriginGuard`] in front of the
/// checked origin; a local path as it is.
struct Route<'u> {
    url: &'u str,
    guard: Option<OriginGuard>,
}

impl<'u> Route<'u> {
    /// A route to `url`, which [`check_url`] accepted; each exchange through its guard within
    /// `bounds`.
    fn to(url: &'u str, bounds: TransferBounds) -> Result<Route<'u>> {
        Route::until(url, bounds, None)
    }

    /// [`Route::to`], its guard closing every exchange once `stop` is cancelled.
    fn until(
        url: &'u str,
        bounds: TransferBounds,
        stop: Option<CancellationToken>,
    ) -> Result<Route<'u>> {
        let guard = match Origin::of(url) {
            Some(_) => Some(OriginGuard::start_until(url, bounds, stop).map_err(|err| {
                PushError::Guard {
                    url: url.to_owned(),
                    detail: err.to_string(),
                }
            })?),
            None => None,
        };
        Ok(Route { url, guard })
    }

    /// The in-memory remote libgit2 talks to. The checked URL must not be one the repository's
    /// configuration rewrites (stet would silently ignore the user's rule), nor may the guard's.
    fn remote<'r>(&self, repository: &'r Repository) -> Result<Remote<'r>> {
        let checked = anonymous_remote(repository, self.url)?;
        let Some(guard) = &self.guard else {
            return Ok(checked);
        };
        drop(checked);
        anonymous_remote(repository, &guard.local_url()).map_err(|err| match err {
            PushError::UrlRewritten { .. } => PushError::UrlRewritten {
                url: self.url.to_owned(),
            },
            PushError::UnsupportedUrl { reason, .. } => PushError::UnsupportedUrl {
                url: self.url.to_owned(),
                reason,
            },
            other => other,
        })
    }

    /// The error for a redirect the guard refused or an exchange it cut, or for a credential the
    /// callback refused or the remote did not take.
    fn refusal(&self, exchange: &Exchange<'_>, err: &git2::Error) -> Option<PushError> {
        if let Some(guard) = &self.guard {
            if let Some(refused) = guard.refused() {
                return Some(PushError::RedirectRefused {
                    url: self.url.to_owned(),
                    from: guard.origin().to_string(),
                    to: refused.to,
                    request: refused.request,
                });
            }
            if let Some(stall) = guard.stalled() {
                return Some(PushError::Stalled {
                    url: self.url.to_owned(),
                    origin: guard.origin().to_string(),
                    detail: stall.to_string(),
                });
            }
        }
        exchange.auth_failure(self.url, err)
    }

    /// libgit2's message, naming the checked origin where it named the guard.
    fn detail(&self, err: &git2::Error) -> String {
        match &self.guard {
            Some(guard) => guard.unmask(err.message()),
            None => err.message().to_owned(),
        }
    }
}

/// Why the credentials callback stopped answering.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AuthStop {
    NoneConfigured,
    Exhausted,
    Unsupported(CredentialType),
    /// libgit2 asked for a credential for another origin than the guard's (shown as given).
    OtherOrigin(String),
}

/// What the callbacks of one push or listing saw: how often a credential was asked for, why the
/// callback stopped, which ref the remote rejected, and what the remote said on its side band.
struct Exchange<'a> {
    credential: Option<&'a ScopedCredential>,
    /// The origin libgit2 may be given the credential for (the guard's), and the checked origin it
    /// stands for; `None` for a local path, where no credential is ever presented.
    origins: Option<(Origin, String)>,
    attempts: Cell<u32>,
    stop: RefCell<Option<AuthStop>>,
    rejected: RefCell<Option<(String, String)>>,
    remote_messages: RefCell<String>,
}

impl<'a> Exchange<'a> {
    fn new(credential: Option<&'a ScopedCredential>, route: &Route<'_>) -> Exchange<'a> {
        Exchange {
            credential,
            origins: route
                .guard
                .as_ref()
                .map(|guard| (guard.local_origin().clone(), guard.origin().to_string())),
            attempts: Cell::new(0),
            stop: RefCell::new(None),
            rejected: RefCell::new(None),
            remote_messages: RefCell::new(String::new()),
        }
    }

    fn callbacks<'s>(&'s self) -> RemoteCallbacks<'s> {
        let mut callbacks = RemoteCallbacks::new();
        callbacks.credentials(|url, _username, allowed| self.answer(url, allowed));
        callbacks.push_update_reference(|reference, status| {
            if let Some(status) = status {
                self.record_rejection(reference, status);
            }
            Ok(())
        });
        callbacks.sideband_progress(|data| {
            self.record_remote_message(data);
            true
        });
        callbacks
    }

    /// The credentials callback: the scoped credential, at most [`MAX_CREDENTIAL_ATTEMPTS`] times,
    /// and only for the guard's origin (scheme, host and port compared whole).
    fn answer(&self, url: &str, allowed: CredentialType) -> std::result::Result<Cred, git2::Error> {
        let stop = |why: AuthStop, message: &str| {
            *self.stop.borrow_mut() = Some(why);
            Err(git2::Error::from_str(message))
        };
        let asked = Origin::of(url);
        if self.origins.as_ref().map(|(local, _)| local) != asked.as_ref() || asked.is_none() {
            let shown = asked.map_or_else(|| withhold_userinfo(url), |origin| origin.to_string());
            return stop(
                AuthStop::OtherOrigin(shown),
                "a credential was asked for another origin than the one stet checked",
            );
        }
        let Some(credential) = self.credential else {
            return stop(
                AuthStop::NoneConfigured,
                "the remote asked for a credential and none is configured",
            );
        };
        if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            return stop(
                AuthStop::Unsupported(allowed),
                "the remote asks for a kind of credential stet does not present",
            );
        }
        if self.attempts.get() >= MAX_CREDENTIAL_ATTEMPTS {
            return stop(AuthStop::Exhausted, "the credential was refused");
        }
        self.attempts.set(self.attempts.get() + 1);
        Cred::userpass_plaintext(PUSH_USERNAME, credential.host_push_secret().expose_secret())
    }

    fn record_rejection(&self, reference: &str, status: &str) {
        let mut rejected = self.rejected.borrow_mut();
        if rejected.is_none() {
            *rejected = Some((
                reference.to_owned(),
                stet_sanitize::display::one_line(status),
            ));
        }
    }

    /// Keeps the last [`MAX_REMOTE_MESSAGE_BYTES`] of what the remote printed, as a terminal would show
    /// it: a progress line overwritten by `\r` keeps only its last state.
    fn record_remote_message(&self, data: &[u8]) {
        let mut messages = self.remote_messages.borrow_mut();
        messages.push_str(&String::from_utf8_lossy(data));
        if messages.len() > 4 * MAX_REMOTE_MESSAGE_BYTES {
            let cut = messages.len() - MAX_REMOTE_MESSAGE_BYTES;
            let boundary = (cut..messages.len())
                .find(|index| messages.is_char_boundary(*index))
                .unwrap_or(messages.len());
            messages.drain(..boundary);
        }
    }

    /// Turns a credentials-callback stop, or libgit2's own authentication failure after a credential
    /// was presented (a request refused where libgit2 does not ask again), into its error.
    fn auth_failure(&self, url: &str, err: &git2::Error) -> Option<PushError> {
        let url = url.to_owned();
        match self.stop.borrow().clone() {
            Some(AuthStop::NoneConfigured) => Some(PushError::CredentialRequired { url }),
            Some(AuthStop::Exhausted) => Some(PushError::AuthenticationFailed {
                url,
                attempts: self.attempts.get(),
            }),
            Some(AuthStop::Unsupported(asked)) => Some(PushError::UnsupportedCredential {
                url,
                asked: format!("{asked:?}"),
            }),
            Some(AuthStop::OtherOrigin(asked)) => Some(PushError::OriginMismatch {
                checked: self.origins.as_ref().map_or_else(
                    || "no origin (a local path)".to_owned(),
                    |(_, checked)| checked.clone(),
                ),
                url,
                asked,
            }),
            None if err.code() == ErrorCode::Auth && self.attempts.get() > 0 => {
                Some(PushError::AuthenticationFailed {
                    url,
                    attempts: self.attempts.get(),
                })
            }
            None => None,
        }
    }

    /// The first ref the remote refused, with its status and what the remote printed.
    fn rejection(&self) -> Option<(String, String)> {
        let (reference, status) = self.rejected.borrow().clone()?;
        let said = remote_lines(&self.remote_messages.borrow());
        let reason = if said.is_empty() {
            status
        } else {
            format!("{status}; the remote said: {said}")
        };
        Some((reference, reason))
    }
}

/// The remote's side-band text as single-spaced lines: each line's last `\r`-separated state, control
/// characters dropped (a remote may not drive the user's terminal), bounded in length.
fn remote_lines(messages: &str) -> String {
    let lines: Vec<String> = messages
        .split('\n')
        .filter_map(|line| line.rsplit('\r').find(|state| !state.trim().is_empty()))
        .map(|line| stet_sanitize::display::one_line(line.trim()))
        .filter(|line| !line.is_empty())
        .collect();
    let joined = lines.join(" | ");
    match joined.len().checked_sub(MAX_REMOTE_MESSAGE_BYTES) {
        Some(excess) if excess > 0 => {
            let start = (excess..joined.len())
                .find(|index| joined.is_char_boundary(*index))
                .unwrap_or(joined.len());
            format!("…{}", &joined[start..])
        }
        _ => joined,
    }
}

mod fetch;
mod leftovers;
mod local_fetch;
#[cfg(test)]
mod tests;
