//! A real git smart-HTTP server for the suites (DESIGN §7 "Forge"): the real `git http-backend` CGI
//! behind a small HTTP/1.1 server on loopback. It demands HTTP Basic auth on every request, asks an
//! injected authorizer whether the credential is good for the repository, and records every credential
//! presented, so a test can prove which credential a push used and that another one was never offered.
//!
//! The server runs on its own thread with its own tokio runtime, so it works the same from a plain
//! `#[test]` (calling the blocking push directly) and from any `#[tokio::test]` flavour.
//!
//! ```text
//! let server = GitHttpServer::start(root.path(), authorizer);
//! let bare = server.create_bare("octo/app");        // root/octo/app.git
//! let url = server.url("octo/app");                 // http://127.0.0.1:<port>/octo/app.git
//! // … push …
//! assert!(server.presented().iter().all(|p| p.password == scoped));
//! ```

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::oneshot;

/// Decides whether a presented credential may use a repository: `(repo ("owner/name"), user, password)`.
pub(crate) type Authorizer = Arc<dyn Fn(&str, &str, &str) -> bool + Send + Sync>;

/// The realm a `401` names.
const REALM: &str = "stet-test";

/// Longest request line or header line the server reads.
const MAX_LINE_BYTES: u64 = 16 * 1024;

/// Most header lines one request may have.
const MAX_HEADERS: usize = 100;

/// Largest request body the server accepts (a test pack is far smaller).
const MAX_BODY_BYTES: usize = 256 * 1024 * 1024;

/// One credential a client presented with a request, and the server's verdict on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Presented {
    /// The repository the request addressed, as `owner/name`.
    pub repo: String,
    pub user: String,
    pub password: String,
    /// What the authorizer answered.
    pub accepted: bool,
    /// `git-upload-pack` (fetch, ls-remote), `git-receive-pack` (push), or `dumb` (anything else).
    pub service: String,
    /// The request's method and path, e.g. `POST /octo/app.git/git-receive-pack`.
    pub request: String,
    /// The request's `Host` header: which name and port the client believed it was talking to.
    pub host: String,
}

/// One kind of smart-HTTP request, as a redirecting front end picks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// `GET …/info/refs?service=git-upload-pack` (ls-remote, fetch).
    UploadRefs,
    /// `GET …/info/refs?service=git-receive-pack` (push).
    ReceiveRefs,
    /// `POST …/git-upload-pack` (fetch).
    UploadPack,
    /// `POST …/git-receive-pack` (push).
    ReceivePack,
}

impl RequestKind {
    pub(crate) const ALL: [RequestKind; 4] = [
        RequestKind::UploadRefs,
        RequestKind::ReceiveRefs,
        RequestKind::UploadPack,
        RequestKind::ReceivePack,
    ];

    fn of(method: &str, service: &str) -> Option<RequestKind> {
        match (method, service) {
            ("GET", "git-upload-pack") => Some(RequestKind::UploadRefs),
            ("GET", "git-receive-pack") => Some(RequestKind::ReceiveRefs),
            ("POST", "git-upload-pack") => Some(RequestKind::UploadPack),
            ("POST", "git-receive-pack") => Some(RequestKind::ReceivePack),
            _ => None,
        }
    }
}

/// A front end's redirect: requests of `kind` are answered `307` to `location` + their own path and
/// query, with a `WWW-Authenticate: Basic` challenge (which makes libgit2 present the credential it
/// holds to the new place at once) — before the credential is checked, or only once it was accepted.
#[derive(Debug, Clone)]
pub(crate) struct Redirect {
    pub kind: RequestKind,
    /// `scheme://host:port`, without a trailing `/`.
    pub location: String,
    pub after_auth: bool,
    /// Whether only the first matching request is redirected (a redirect to the same place).
    pub once: bool,
}

/// What the serving thread and the test share.
struct Shared {
    root: PathBuf,
    authorizer: Authorizer,
    presented: Mutex<Vec<Presented>>,
    requests: AtomicUsize,
    redirect: Mutex<Option<Redirect>>,
    /// The `Host` header of every request, in order.
    hosts: Mutex<Vec<String>>,
    /// Set for HTTPS: each connection is a TLS session with this server certificate first.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// A smart-HTTP git server on `127.0.0.1:<ephemeral>` serving the bare repositories under a root
/// directory as `/<owner>/<name>.git`. Stops (and kills any running CGI) when dropped.
pub(crate) struct GitHttpServer {
    address: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitHttpServer {
    /// Binds a loopback port and starts serving `root`. Connections made before this returns are
    /// queued by the kernel, so a test can push right away.
    pub(crate) fn start(root: &Path, authorizer: Authorizer) -> GitHttpServer {
        GitHttpServer::serve(root, authorizer, None)
    }

    /// As [`GitHttpServer::start`], over HTTPS: every connection opens a TLS session with the
    /// certificate `tls` holds.
    pub(crate) fn start_tls(
        root: &Path,
        authorizer: Authorizer,
        tls: tokio_rustls::TlsAcceptor,
    ) -> GitHttpServer {
        GitHttpServer::serve(root, authorizer, Some(tls))
    }

    fn serve(
        root: &Path,
        authorizer: Authorizer,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> GitHttpServer {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            root: root.to_owned(),
            authorizer,
            presented: Mutex::new(Vec::new()),
            requests: AtomicUsize::new(0),
            redirect: Mutex::new(None),
            hosts: Mutex::new(Vec::new()),
            tls,
        });
        let (shutdown, stop) = oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("git-http-{}", address.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(accept_until_stopped(listener, serving, stop));
            })
            .unwrap();
        GitHttpServer {
            address,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// The clone URL of `repo` (`owner/name`): `http://127.0.0.1:<port>/owner/name.git`.
    pub(crate) fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}.git", self.address)
    }

    /// The listening address.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Every credential presented so far, in order.
    pub(crate) fn presented(&self) -> Vec<Presented> {
        self.shared.presented.lock().unwrap().clone()
    }

    /// How many requests arrived so far, with or without a credential.
    pub(crate) fn request_count(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// The `Host` header of every request so far, with or without a credential.
    pub(crate) fn hosts(&self) -> Vec<String> {
        self.shared.hosts.lock().unwrap().clone()
    }

    /// From now on, answers one kind of request with a redirect (`None`: none).
    pub(crate) fn redirect(&self, redirect: Option<Redirect>) {
        *self.shared.redirect.lock().unwrap() = redirect;
    }

    /// Creates an empty bare repository for `repo` (`owner/name`) at `<root>/owner/name.git`, with
    /// `HEAD` on `main`, and returns its path.
    pub(crate) fn create_bare(&self, repo: &str) -> PathBuf {
        let path = self.shared.root.join(format!("{repo}.git"));
        let mut options = git2::RepositoryInitOptions::new();
        options.bare(true).initial_head("main").mkpath(true);
        git2::Repository::init_opts(&path, &options).unwrap();
        path
    }
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_until_stopped(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match shared.tls.clone() {
                    None => {
                        tokio::spawn(serve_connection(stream, peer, shared.clone()));
                    }
                    Some(tls) => {
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            match tls.accept(stream).await {
                                Ok(stream) => serve_connection(stream, peer, shared).await,
                                Err(err) => eprintln!("git-http: TLS refused by {peer}: {err}"),
                            }
                        });
                    }
                },
                Err(err) => eprintln!("git-http: accept failed: {err}"),
            },
        }
    }
}

/// A request the server refuses at the HTTP level: answered with this status and the connection closed.
#[derive(Debug)]
struct Refusal {
    status: u16,
    reason: &'static str,
    detail: String,
}

impl Refusal {
    fn new(status: u16, reason: &'static str, detail: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason,
            detail: detail.into(),
        }
    }

    fn bad_request(detail: impl Into<String>) -> Refusal {
        Refusal::new(400, "Bad Request", detail)
    }
}

impl From<std::io::Error> for Refusal {
    fn from(err: std::io::Error) -> Refusal {
        Refusal::bad_request(format!("reading the request: {err}"))
    }
}

/// A request line and its headers (names lowercased).
struct RequestHead {
    method: String,
    path: String,
    query: String,
    http_1_0: bool,
    headers: Vec<(String, String)>,
}

impl RequestHead {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.headers
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.all(name)
            .flat_map(|value| value.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    }

    /// Whether the client wants the connection kept after this request (HTTP/1.1 unless `close`;
    /// HTTP/1.0 only with `keep-alive`).
    fn keeps_alive(&self) -> bool {
        if self.http_1_0 {
            self.has_token("connection", "keep-alive")
        } else {
            !self.has_token("connection", "close")
        }
    }
}

/// How a request body is framed.
enum Framing {
    Empty,
    Length(usize),
    Chunked,
}

/// A response ready to write: status, headers, and the whole body (always sent with Content-Length).
struct Response {
    status: u16,
    reason: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn text(status: u16, reason: &str, text: &str) -> Response {
        Response {
            status,
            reason: reason.to_owned(),
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: format!("{text}\n").into_bytes(),
        }
    }

    fn unauthorized(text: &str) -> Response {
        let mut response = Response::text(401, "Unauthorized", text);
        response.headers.push((
            "WWW-Authenticate".into(),
            format!("Basic realm=\"{REALM}\""),
        ));
        response
    }
}

async fn serve_connection<S>(stream: S, peer: SocketAddr, shared: Arc<Shared>)
where
    S: tokio::io::AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    loop {
        let keep_alive = match read_head(&mut reader).await {
            Ok(None) => return,
            Ok(Some(head)) => {
                shared.requests.fetch_add(1, Ordering::SeqCst);
                shared
                    .hosts
                    .lock()
                    .unwrap()
                    .push(head.header("host").unwrap_or_default().to_owned());
                match handle(&head, &mut reader, &mut write, peer, &shared).await {
                    Ok((response, body_consumed)) => {
                        let keep = body_consumed && head.keeps_alive();
                        write_response(&mut write, &response, keep).await.is_ok() && keep
                    }
                    Err(refusal) => {
                        let _ = write_refusal(&mut write, &refusal).await;
                        false
                    }
                }
            }
            Err(refusal) => {
                let _ = write_refusal(&mut write, &refusal).await;
                false
            }
        };
        if !keep_alive {
            let _ = write.shutdown().await;
            return;
        }
    }
}

/// Reads one line, LF-terminated, of at most [`MAX_LINE_BYTES`]; `None` at a clean end of stream.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<String>, Refusal> {
    let mut line = Vec::new();
    let read = reader
        .take(MAX_LINE_BYTES)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\n") {
        return Err(if line.len() as u64 >= MAX_LINE_BYTES {
            Refusal::new(431, "Request Header Fields Too Large", "a line is too long")
        } else {
            Refusal::bad_request("the connection ended inside a line")
        });
    }
    line.pop();
    if line.ends_with(b"\r") {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| Refusal::bad_request("a line is not UTF-8"))
}

async fn read_head<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<RequestHead>, Refusal> {
    let Some(request_line) = read_line(reader).await? else {
        return Ok(None);
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::bad_request(format!(
            "malformed request line {request_line:?}"
        )));
    };
    let http_1_0 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => {
            return Err(Refusal::new(
                505,
                "HTTP Version Not Supported",
                format!("unsupported version {version:?}"),
            ));
        }
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    loop {
        let Some(line) = read_line(reader).await? else {
            return Err(Refusal::bad_request(
                "the connection ended inside the headers",
            ));
        };
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            return Err(Refusal::bad_request("folded header lines are not accepted"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Refusal::bad_request(format!(
                "malformed header line {line:?}"
            )));
        };
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(Refusal::bad_request(format!(
                "malformed header name {name:?}"
            )));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        if headers.len() > MAX_HEADERS {
            return Err(Refusal::new(
                431,
                "Request Header Fields Too Large",
                "too many header lines",
            ));
        }
    }
    Ok(Some(RequestHead {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        http_1_0,
        headers,
    }))
}

/// Content-Length or chunked; both at once, or any other transfer coding, is refused.
fn framing(head: &RequestHead) -> Result<Framing, Refusal> {
    let codings: Vec<String> = head
        .all("transfer-encoding")
        .flat_map(|value| value.split(','))
        .map(|coding| coding.trim().to_ascii_lowercase())
        .collect();
    let lengths: Vec<&str> = head.all("content-length").collect();
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err(Refusal::bad_request(
                "both Transfer-Encoding and Content-Length were sent",
            ));
        }
        if codings != ["chunked"] {
            return Err(Refusal::new(
                501,
                "Not Implemented",
                format!("transfer coding {codings:?} is not supported; only chunked"),
            ));
        }
        return Ok(Framing::Chunked);
    }
    let Some(first) = lengths.first() else {
        return Ok(Framing::Empty);
    };
    if lengths.iter().any(|length| length != first)
        || first.is_empty()
        || !first.bytes().all(|byte| byte.is_ascii_digit())
    {
        return Err(Refusal::bad_request(format!(
            "invalid Content-Length {lengths:?}"
        )));
    }
    let length: usize = first
        .parse()
        .map_err(|_| Refusal::bad_request("Content-Length out of range"))?;
    if length > MAX_BODY_BYTES {
        return Err(Refusal::new(
            413,
            "Content Too Large",
            "the body is too large",
        ));
    }
    Ok(Framing::Length(length))
}

async fn read_body<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    framing: &Framing,
) -> Result<Vec<u8>, Refusal> {
    match framing {
        Framing::Empty => Ok(Vec::new()),
        Framing::Length(length) => {
            let mut body = vec![0; *length];
            reader.read_exact(&mut body).await?;
            Ok(body)
        }
        Framing::Chunked => read_chunked(reader).await,
    }
}

/// A `Transfer-Encoding: chunked` body: hex sizes (extensions ignored), data, CRLF, and trailers after
/// the last chunk (read and dropped).
async fn read_chunked<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    loop {
        let Some(line) = read_line(reader).await? else {
            return Err(Refusal::bad_request(
                "the connection ended inside a chunked body",
            ));
        };
        let size_text = line.split(';').next().unwrap_or_default().trim();
        if size_text.is_empty()
            || size_text.len() > 15
            || !size_text.bytes().all(|byte| byte.is_ascii_hexdigit())
        {
            return Err(Refusal::bad_request(format!("invalid chunk size {line:?}")));
        }
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| Refusal::bad_request("chunk size out of range"))?;
        if size == 0 {
            loop {
                match read_line(reader).await? {
                    Some(trailer) if trailer.is_empty() => return Ok(body),
                    Some(_) => {}
                    None => {
                        return Err(Refusal::bad_request(
                            "the connection ended inside the trailers",
                        ));
                    }
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(Refusal::new(
                413,
                "Content Too Large",
                "the body is too large",
            ));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).await?;
        let mut end = [0; 2];
        reader.read_exact(&mut end).await?;
        if &end != b"\r\n" {
            return Err(Refusal::bad_request("a chunk does not end with CRLF"));
        }
    }
}

/// The repository (`owner/name`) and the service a request path addresses; `None` when the path is
/// not `/<owner>/<name>.git/…` or tries to leave the root.
fn route(head: &RequestHead) -> Option<(String, String)> {
    if head.path.contains(['%', '\\']) {
        return None;
    }
    let mut segments = head.path.strip_prefix('/')?.split('/');
    let owner = segments.next()?;
    let name = segments.next()?.strip_suffix(".git")?;
    let rest: Vec<&str> = segments.collect();
    let bad = |segment: &str| segment.is_empty() || segment.starts_with('.');
    if bad(owner) || bad(name) || rest.iter().any(|segment| bad(segment)) {
        return None;
    }
    let query_service = head
        .query
        .split('&')
        .find_map(|pair| pair.strip_prefix("service="));
    let service = match (head.method.as_str(), rest.as_slice()) {
        ("GET", ["info", "refs"]) => query_service.unwrap_or("dumb"),
        ("POST", [service @ ("git-upload-pack" | "git-receive-pack")]) => service,
        _ => "dumb",
    };
    Some((format!("{owner}/{name}"), service.to_owned()))
}

/// `user` and `password` from `Authorization: Basic …`.
fn basic_credentials(value: &str) -> Result<(String, String), Refusal> {
    let malformed = || Refusal::bad_request("malformed Authorization header");
    let (scheme, encoded) = value.split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(malformed());
    }
    let decoded = BASE64.decode(encoded.trim()).map_err(|_| malformed())?;
    let text = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (user, password) = text.split_once(':').ok_or_else(malformed)?;
    Ok((user.to_owned(), password.to_owned()))
}

/// Answers one request. Returns the response and whether the request's body was read (when it was
/// not, the connection cannot carry another request).
async fn handle<R, W>(
    head: &RequestHead,
    reader: &mut R,
    write: &mut W,
    peer: SocketAddr,
    shared: &Shared,
) -> Result<(Response, bool), Refusal>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let framing = framing(head)?;
    let expects_continue = head.has_token("expect", "100-continue");
    let Some((repo, service)) = route(head) else {
        let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
        return Ok((
            Response::text(404, "Not Found", "no such repository path"),
            consumed,
        ));
    };
    let redirect = {
        let mut rule = shared.redirect.lock().unwrap();
        let redirect = rule
            .clone()
            .filter(|redirect| RequestKind::of(&head.method, &service) == Some(redirect.kind))
            .filter(|redirect| !redirect.after_auth || head.header("authorization").is_some());
        if redirect.as_ref().is_some_and(|redirect| redirect.once) {
            *rule = None;
        }
        redirect
    };
    if let Some(redirect) = redirect.as_ref().filter(|redirect| !redirect.after_auth) {
        let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
        return Ok((redirected(head, redirect), consumed));
    }
    let Some(authorization) = head.header("authorization") else {
        let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
        return Ok((Response::unauthorized("authentication required"), consumed));
    };
    let (user, password) = basic_credentials(authorization)?;
    let accepted = (shared.authorizer)(&repo, &user, &password);
    shared.presented.lock().unwrap().push(Presented {
        repo: repo.clone(),
        user: user.clone(),
        password,
        accepted,
        service: service.clone(),
        request: format!("{} {}", head.method, head.path),
        host: head.header("host").unwrap_or_default().to_owned(),
    });
    if !accepted {
        let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
        return Ok((Response::unauthorized("credential refused"), consumed));
    }
    if let Some(redirect) = &redirect {
        let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
        return Ok((redirected(head, redirect), consumed));
    }
    let encoding = match head.header("content-encoding") {
        None => None,
        Some(coding) if coding.eq_ignore_ascii_case("identity") => None,
        Some(coding) if matches!(coding.to_ascii_lowercase().as_str(), "gzip" | "x-gzip") => {
            Some(coding.to_owned())
        }
        Some(coding) => {
            let consumed = consume_unless_continue(reader, &framing, expects_continue).await?;
            return Ok((
                Response::text(
                    415,
                    "Unsupported Media Type",
                    &format!("content coding {coding:?} is not supported; only gzip"),
                ),
                consumed,
            ));
        }
    };
    if expects_continue && !matches!(framing, Framing::Empty) {
        write.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        write.flush().await?;
    }
    let body = read_body(reader, &framing).await?;
    let cgi = CgiRequest {
        head,
        body: &body,
        user: &user,
        peer,
        encoding: encoding.as_deref(),
    };
    Ok((run_backend(&shared.root, &cgi).await, true))
}

/// A `307` to the redirect's location with the request's own path and query, and a Basic challenge.
fn redirected(head: &RequestHead, redirect: &Redirect) -> Response {
    let query = if head.query.is_empty() {
        String::new()
    } else {
        format!("?{}", head.query)
    };
    let mut response = Response::text(307, "Temporary Redirect", "moved");
    response.headers.push((
        "Location".into(),
        format!("{}{}{query}", redirect.location, head.path),
    ));
    response.headers.push((
        "WWW-Authenticate".into(),
        format!("Basic realm=\"{REALM}\""),
    ));
    response
}

/// Reads and drops a body the server will not use, so the connection stays usable; with
/// `Expect: 100-continue` the client has not sent it, so nothing is read and the connection ends.
async fn consume_unless_continue<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    framing: &Framing,
    expects_continue: bool,
) -> Result<bool, Refusal> {
    if expects_continue && !matches!(framing, Framing::Empty) {
        return Ok(false);
    }
    read_body(reader, framing).await?;
    Ok(true)
}

/// What `git http-backend` is told about one request.
struct CgiRequest<'a> {
    head: &'a RequestHead,
    body: &'a [u8],
    user: &'a str,
    peer: SocketAddr,
    encoding: Option<&'a str>,
}

/// Runs `git http-backend` with a clean environment (no user or system git configuration) and turns
/// its CGI output into a response.
async fn run_backend(root: &Path, request: &CgiRequest<'_>) -> Response {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", &request.head.method)
        .env("PATH_INFO", &request.head.path)
        .env("QUERY_STRING", &request.head.query)
        .env("REMOTE_USER", request.user)
        .env("REMOTE_ADDR", request.peer.ip().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if request.head.method == "POST" {
        command.env("CONTENT_LENGTH", request.body.len().to_string());
    }
    if let Some(content_type) = request.head.header("content-type") {
        command.env("CONTENT_TYPE", content_type);
    }
    if let Some(encoding) = request.encoding {
        command.env("HTTP_CONTENT_ENCODING", encoding);
    }
    if let Some(protocol) = request.head.header("git-protocol") {
        command.env("GIT_PROTOCOL", protocol);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            return Response::text(
                500,
                "Internal Server Error",
                &format!("git http-backend: {err}"),
            );
        }
    };
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // The backend may answer without reading everything (an error); a broken pipe is fine.
            let _ = stdin.write_all(request.body).await;
        }
    };
    let (_, output) = tokio::join!(feed, child.wait_with_output());
    match output {
        Ok(output) => {
            if !output.stderr.is_empty() {
                eprintln!(
                    "git-http: http-backend for {} {}: {}",
                    request.head.method,
                    request.head.path,
                    String::from_utf8_lossy(&output.stderr).trim()
                );
            }
            cgi_response(&output.stdout).unwrap_or_else(|detail| {
                Response::text(
                    502,
                    "Bad Gateway",
                    &format!("git http-backend ({}): {detail}", output.status),
                )
            })
        }
        Err(err) => Response::text(
            500,
            "Internal Server Error",
            &format!("git http-backend: {err}"),
        ),
    }
}

/// CGI output → response: `Status:` becomes the status line (200 without one), other headers pass
/// through except the framing ones, which the server sets itself.
fn cgi_response(output: &[u8]) -> Result<Response, String> {
    let (header_end, separator) = [&b"\r\n\r\n"[..], &b"\n\n"[..]]
        .iter()
        .filter_map(|separator| {
            output
                .windows(separator.len())
                .position(|window| window == *separator)
                .map(|position| (position, separator.len()))
        })
        .min()
        .ok_or("no end of the CGI headers")?;
    let header_text = std::str::from_utf8(&output[..header_end])
        .map_err(|_| "CGI headers are not UTF-8".to_owned())?;
    let mut status = 200;
    let mut reason = "OK".to_owned();
    let mut headers = Vec::new();
    for line in header_text.lines() {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed CGI header {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let (code, text) = value.split_once(' ').unwrap_or((value, ""));
            status = code
                .parse()
                .map_err(|_| format!("malformed CGI status {value:?}"))?;
            reason = text.to_owned();
        } else if !["content-length", "transfer-encoding", "connection"]
            .iter()
            .any(|framing| name.eq_ignore_ascii_case(framing))
        {
            headers.push((name.to_owned(), value.to_owned()));
        }
    }
    Ok(Response {
        status,
        reason,
        headers,
        body: output[header_end + separator..].to_vec(),
    })
}

async fn write_response<W: AsyncWrite + Unpin>(
    write: &mut W,
    response: &Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    write!(head, "HTTP/1.1 {} {}\r\n", response.status, response.reason)?;
    for (name, value) in &response.headers {
        write!(head, "{name}: {value}\r\n")?;
    }
    write!(head, "Content-Length: {}\r\n", response.body.len())?;
    if !keep_alive {
        write!(head, "Connection: close\r\n")?;
    }
    head.extend_from_slice(b"\r\n");
    write.write_all(&head).await?;
    write.write_all(&response.body).await?;
    write.flush().await
}

async fn write_refusal<W: AsyncWrite + Unpin>(
    write: &mut W,
    refusal: &Refusal,
) -> std::io::Result<()> {
    let response = Response::text(refusal.status, refusal.reason, &refusal.detail);
    write_response(write, &response, false).await
}

/// A response as a raw test client reads it.
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// Reads one response (status line, headers, Content-Length body) from a blocking connection.
fn read_raw_response(reader: &mut impl std::io::BufRead) -> RawResponse {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let response = RawResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let length: usize = response.header("content-length").unwrap().parse().unwrap();
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    RawResponse { body, ..response }
}

/// Sends `request` on a fresh connection and reads the one response.
fn exchange_raw(server: &GitHttpServer, request: &[u8]) -> RawResponse {
    let mut stream = std::net::TcpStream::connect(server.address()).unwrap();
    stream.write_all(request).unwrap();
    read_raw_response(&mut std::io::BufReader::new(stream))
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
}

/// A server whose only good credential is a random password for `octo/app`, which holds one commit on
/// `main`.
fn raw_fixture() -> (tempfile::TempDir, GitHttpServer, String, git2::Oid) {
    let root = tempfile::tempdir().unwrap();
    let password = stet_engine::credential::random_token(32).unwrap();
    let good = password.clone();
    let server = GitHttpServer::start(
        root.path(),
        Arc::new(move |repo, _user, presented| repo == "octo/app" && presented == good),
    );
    let bare = git2::Repository::open_bare(server.create_bare("octo/app")).unwrap();
    let blob = bare.blob(b"served\n").unwrap();
    let mut tree = bare.treebuilder(None).unwrap();
    tree.insert("served.txt", blob, 0o100644).unwrap();
    let tree = bare.find_tree(tree.write().unwrap()).unwrap();
    let signature = git2::Signature::now("stet test", "test@stet.invalid").unwrap();
    let commit = bare
        .commit(
            Some("refs/heads/main"),
            &signature,
            &signature,
            "served",
            &tree,
            &[],
        )
        .unwrap();
    (root, server, password, commit)
}

/// A protocol-v0 upload-pack request for `commit`: one want, a flush, done.
fn upload_pack_request(commit: git2::Oid) -> Vec<u8> {
    let want = format!("want {commit}\n");
    format!("{:04x}{want}00000009done\n", want.len() + 4).into_bytes()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    output.stdout
}

fn chunked(data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (index, chunk) in data.chunks(7).enumerate() {
        write!(body, "{:x};n={index}\r\n", chunk.len()).unwrap();
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\nX-Trailer: ignored\r\n\r\n");
    body
}

fn post(authorization: &str, extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /octo/app.git/git-upload-pack HTTP/1.1\r\nHost: test\r\nAuthorization: {authorization}\r\nContent-Type: application/x-git-upload-pack-request\r\n{extra_headers}\r\n"
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn is_pack(response: &RawResponse) -> bool {
    response.status == 200
        && response.header("content-type") == Some("application/x-git-upload-pack-result")
        && response.body.windows(4).any(|window| window == b"PACK")
}

#[test]
fn every_request_needs_basic_credentials_and_each_one_presented_is_recorded() {
    let (_root, server, password, _) = raw_fixture();
    let stream = std::net::TcpStream::connect(server.address()).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let advertisement = |authorization: Option<String>, close: bool| {
        let mut request =
            "GET /octo/app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: test\r\n"
                .to_owned();
        if let Some(authorization) = authorization {
            request.push_str(&format!("Authorization: {authorization}\r\n"));
        }
        if close {
            request.push_str("Connection: close\r\n");
        }
        request.push_str("\r\n");
        request
    };

    // All on one kept-alive connection.
    writer
        .write_all(advertisement(None, false).as_bytes())
        .unwrap();
    let missing = read_raw_response(&mut reader);
    assert_eq!(missing.status, 401);
    assert_eq!(
        missing.header("www-authenticate"),
        Some("Basic realm=\"stet-test\"")
    );
    assert!(server.presented().is_empty());

    writer
        .write_all(advertisement(Some(basic("x-access-token", "wrong")), false).as_bytes())
        .unwrap();
    let wrong = read_raw_response(&mut reader);
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("www-authenticate").is_some());

    writer
        .write_all(advertisement(Some(basic("x-access-token", &password)), true).as_bytes())
        .unwrap();
    let good = read_raw_response(&mut reader);
    assert_eq!(good.status, 200);
    assert_eq!(
        good.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );
    assert_eq!(good.header("connection"), Some("close"));
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut rest).unwrap();
    assert!(rest.is_empty(), "the server closed after Connection: close");

    assert_eq!(server.request_count(), 3);
    let presented = server.presented();
    let verdicts: Vec<(&str, &str, bool, &str)> = presented
        .iter()
        .map(|p| {
            (
                p.user.as_str(),
                p.password.as_str(),
                p.accepted,
                p.service.as_str(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ("x-access-token", "wrong", false, "git-upload-pack"),
            ("x-access-token", password.as_str(), true, "git-upload-pack"),
        ]
    );
    assert!(
        presented
            .iter()
            .all(|p| p.repo == "octo/app" && p.request == "GET /octo/app.git/info/refs")
    );
}

#[test]
fn request_bodies_arrive_whole_by_length_chunked_gzip_and_after_100_continue() {
    let (_root, server, password, commit) = raw_fixture();
    let authorization = basic("x-access-token", &password);
    let plain = upload_pack_request(commit);
    let zipped = gzip(&plain);

    let by_length = post(
        &authorization,
        &format!("Content-Length: {}\r\n", plain.len()),
        &plain,
    );
    let by_chunks = post(
        &authorization,
        "Transfer-Encoding: chunked\r\n",
        &chunked(&plain),
    );
    let zipped_by_length = post(
        &authorization,
        &format!(
            "Content-Encoding: gzip\r\nContent-Length: {}\r\n",
            zipped.len()
        ),
        &zipped,
    );
    let zipped_by_chunks = post(
        &authorization,
        "Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        &chunked(&zipped),
    );
    for request in [by_length, by_chunks, zipped_by_length, zipped_by_chunks] {
        let response = exchange_raw(&server, &request);
        assert!(
            is_pack(&response),
            "{} {:?}",
            response.status,
            String::from_utf8_lossy(&response.body)
        );
    }

    // With Expect: 100-continue the body goes only after the interim response.
    let head = post(
        &authorization,
        &format!(
            "Expect: 100-continue\r\nContent-Length: {}\r\n",
            plain.len()
        ),
        b"",
    );
    let stream = std::net::TcpStream::connect(server.address()).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = std::io::BufReader::new(stream);
    writer.write_all(&head).unwrap();
    let mut interim = String::new();
    std::io::BufRead::read_line(&mut reader, &mut interim).unwrap();
    assert_eq!(interim, "HTTP/1.1 100 Continue\r\n");
    interim.clear();
    std::io::BufRead::read_line(&mut reader, &mut interim).unwrap();
    assert_eq!(interim, "\r\n");
    writer.write_all(&plain).unwrap();
    assert!(is_pack(&read_raw_response(&mut reader)));

    let accepted = server.presented().iter().filter(|p| p.accepted).count();
    assert_eq!(accepted, 5);
}

#[test]
fn unsupported_codings_and_ambiguous_framing_are_refused() {
    let (_root, server, password, commit) = raw_fixture();
    let authorization = basic("x-access-token", &password);
    let plain = upload_pack_request(commit);
    let length = plain.len();
    for (headers, body, status) in [
        (
            format!("Content-Encoding: br\r\nContent-Length: {length}\r\n"),
            plain.clone(),
            415,
        ),
        (
            "Transfer-Encoding: gzip, chunked\r\n".to_owned(),
            chunked(&plain),
            501,
        ),
        (
            format!("Transfer-Encoding: chunked\r\nContent-Length: {length}\r\n"),
            chunked(&plain),
            400,
        ),
        (
            format!(
                "Content-Length: {length}\r\nContent-Length: {}\r\n",
                length + 1
            ),
            plain.clone(),
            400,
        ),
        (
            "Transfer-Encoding: chunked\r\n".to_owned(),
            b"zz\r\nnot hex\r\n0\r\n\r\n".to_vec(),
            400,
        ),
    ] {
        let response = exchange_raw(&server, &post(&authorization, &headers, &body));
        assert_eq!(response.status, status, "{headers}");
    }
}
