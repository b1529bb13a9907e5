//! `HTTPS_PROXY` and `NO_PROXY`: an HTTPS request to a host the bypass list does not name opens a
//! tunnel through the proxy with `CONNECT host:port`, and TLS to the destination runs inside it, so
//! the proxy sees the destination's name and port and nothing else — no header, no token, no body.
//! Plain HTTP (which stet allows to loopback only) never goes through the proxy.

use std::error::Error as StdError;
use std::ffi::OsStr;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;
use zeroize::Zeroizing;

/// How long the proxy may take to open a tunnel once connected.
const TUNNEL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer to `CONNECT` read.
const MAX_TUNNEL_ANSWER: usize = 16 * 1024;
/// The port of a proxy URL that names none, as curl has it.
const DEFAULT_PROXY_PORT: u16 = 1080;

/// What the proxy settings and a tunnel can answer wrongly. No text holds a proxy variable's value:
/// it may carry the proxy's password.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    #[error(
        "the environment variable {variable} is not an HTTP proxy's URL: it {problem}; set it to http://host:port (a proxy that tunnels with CONNECT) or unset it"
    )]
    Variable {
        variable: &'static str,
        problem: String,
    },
    #[error("the proxy {proxy} (from {variable}) could not be reached: {detail}")]
    Unreachable {
        proxy: String,
        variable: &'static str,
        detail: String,
    },
    #[error("the proxy {proxy} (from {variable}) did not open a tunnel to {target}: {detail}")]
    Tunnel {
        proxy: String,
        variable: &'static str,
        target: String,
        detail: String,
    },
}

/// An HTTP proxy, from the variable that named it.
pub(crate) struct Proxy {
    variable: &'static str,
    /// `host:port`.
    authority: String,
    /// `Proxy-Authorization`, when the URL carried a user and password.
    authorization: Option<Zeroizing<String>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("variable", &self.variable)
            .field("authority", &self.authority)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Proxy {
    /// The proxy `value` names: `http://[user:password@]host[:port][/]`, or the same without the
    /// scheme; anything else is an error naming `variable`.
    pub(super) fn parse(variable: &'static str, value: &OsStr) -> Result<Proxy, ProxyError> {
        let bad = |problem: &str| ProxyError::Variable {
            variable,
            problem: problem.to_owned(),
        };
        let text = value.to_str().ok_or_else(|| bad("is not UTF-8"))?;
        if text
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || !c.is_ascii())
        {
            return Err(bad(
                "holds a space, a control character or a character outside ASCII",
            ));
        }
        let (scheme, rest) = match text.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => ("http".to_owned(), text),
        };
        match scheme.as_str() {
            "http" => {}
            "https" => {
                return Err(bad(
                    "names an https:// proxy; stet speaks plain HTTP to the proxy and runs TLS to the server inside the tunnel",
                ));
            }
            scheme if scheme.starts_with("socks") => {
                return Err(bad("names a SOCKS proxy, which stet does not speak"));
            }
            _ => return Err(bad("names a scheme other than http://")),
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if !tail.is_empty() && tail != "/" {
            return Err(bad("has a path, a query or a fragment after the host"));
        }
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let parsed: http::uri::Authority = host_port
            .parse()
            .map_err(|_| bad("does not name a host and port"))?;
        let host = parsed.host();
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        let bracketed = host.starts_with('[')
            && host.ends_with(']')
            && host[1..host.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .is_ok();
        if host.is_empty()
            || !(bracketed || host.chars().all(plain))
            || parsed.as_str().contains('@')
        {
            return Err(bad(
                "does not name a host (letters, digits, - and ., or an address)",
            ));
        }
        // The port as written: `http` reads one past 65535 as none.
        let written = host_port
            .rsplit_once(':')
            .filter(|(host, _)| host.ends_with(']') || !host.contains(':'))
            .map(|(_, port)| port);
        let port = match written.map(|port| (port, port.parse::<u16>())) {
            None => DEFAULT_PROXY_PORT,
            Some(("", _)) => return Err(bad("names an empty port")),
            Some((_, Ok(0))) => return Err(bad("names port 0")),
            Some((_, Ok(port))) => port,
            Some((_, Err(_))) => return Err(bad("names a port past 65535")),
        };
        let authorization = match userinfo {
            None => None,
            Some(userinfo) => {
                let decoded = Zeroizing::new(
                    percent_encoding::percent_decode_str(userinfo)
                        .decode_utf8()
                        .map_err(|_| bad("has a user or password that is not UTF-8"))?
                        .into_owned(),
                );
                if !decoded.contains(':') {
                    return Err(bad("has a user but no password (user:password@host)"));
                }
                Some(Zeroizing::new(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes())
                )))
            }
        };
        Ok(Proxy {
            variable,
            authority: format!("{}:{port}", host.to_ascii_lowercase()),
            authorization,
        })
    }

    /// What a tunnel's failure names: the proxy's host and port, and its variable.
    fn unreachable(&self, detail: String) -> ProxyError {
        ProxyError::Unreachable {
            proxy: self.authority.clone(),
            variable: self.variable,
            detail,
        }
    }

    /// A tunnel to `target` (`host:port`): a connection to the proxy within the connect bound, then
    /// [`Proxy::open`].
    pub(super) async fn tunnel(&self, target: &str) -> Result<TcpStream, ProxyError> {
        let connected = tokio::time::timeout(
            super::CONNECT_TIMEOUT,
            TcpStream::connect(self.authority.as_str()),
        )
        .await
        .map_err(|_| self.unreachable("connecting took too long".to_owned()))?
        .map_err(|err| self.unreachable(err.to_string()))?;
        self.open(connected, target).await
    }

    /// A tunnel to `target` (`host:port`) over `stream`, connected to the proxy: `CONNECT`, then
    /// the proxy's answer read up to its blank line, within [`TUNNEL_TIMEOUT`].
    async fn open(&self, mut stream: TcpStream, target: &str) -> Result<TcpStream, ProxyError> {
        let failed = |detail: String| ProxyError::Tunnel {
            proxy: self.authority.clone(),
            variable: self.variable,
            target: target.to_owned(),
            detail,
        };
        let mut head = Zeroizing::new(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"));
        if let Some(authorization) = &self.authorization {
            head.push_str("Proxy-Authorization: ");
            head.push_str(authorization);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let exchange = async {
            stream
                .write_all(head.as_bytes())
                .await
                .map_err(|err| failed(format!("sending CONNECT: {err}")))?;
            let mut answer = Vec::new();
            let mut buffer = [0u8; 1024];
            loop {
                let read = stream
                    .read(&mut buffer)
                    .await
                    .map_err(|err| failed(format!("reading its answer: {err}")))?;
                if read == 0 {
                    return Err(failed(
                        "it closed the connection without answering".to_owned(),
                    ));
                }
                answer.extend_from_slice(&buffer[..read]);
                if let Some(end) = memchr::memmem::find(&answer, b"\r\n\r\n") {
                    if end + 4 != answer.len() {
                        return Err(failed("it sent data before the tunnel was open".to_owned()));
                    }
                    return Ok(answer);
                }
                if answer.len() > MAX_TUNNEL_ANSWER {
                    return Err(failed(format!(
                        "its answer is longer than {} KiB",
                        MAX_TUNNEL_ANSWER / 1024
                    )));
                }
            }
        };
        let answer = tokio::time::timeout(TUNNEL_TIMEOUT, exchange)
            .await
            .map_err(|_| failed(format!("no answer within {} s", TUNNEL_TIMEOUT.as_secs())))??;
        let status_line = answer
            .split(|&byte| byte == b'\r')
            .next()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let mut words = status_line.splitn(3, ' ');
        let version = words.next().unwrap_or_default();
        let status = words.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") || status.len() != 3 {
            return Err(failed("its answer is not HTTP".to_owned()));
        }
        if !status.starts_with('2') {
            let shown = stet_sanitize::display::one_line(&status_line);
            let shown: String = shown.chars().take(200).collect();
            return Err(failed(format!("it answered {shown:?}")));
        }
        Ok(stream)
    }
}

/// Hosts reached without the proxy (`NO_PROXY`): `*` for all, a name (and every name under it; a
/// leading `.` or `*.` is the same), an address, or a network `address/prefix`. A port on an entry is
/// ignored.
#[derive(Debug, Default)]
pub(crate) struct NoProxy {
    all: bool,
    domains: Vec<String>,
    networks: Vec<(IpAddr, u8)>,
}

impl NoProxy {
    /// The entries of a comma- or space-separated list; entries that fit no form are ignored, as
    /// curl does.
    pub(super) fn parse(value: &str) -> NoProxy {
        let mut no_proxy = NoProxy::default();
        for entry in value.split([',', ' ', '\t']).map(str::trim) {
            let entry = entry.to_ascii_lowercase();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                no_proxy.all = true;
            } else if let Some(network) = network(&entry) {
                no_proxy.networks.push(network);
            } else {
                let name = match entry.rsplit_once(':') {
                    Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
                    _ => entry.as_str(),
                };
                let name = name.trim_start_matches("*.").trim_start_matches('.');
                let name = name.trim_end_matches('.');
                if !name.is_empty() {
                    no_proxy.domains.push(name.to_owned());
                }
            }
        }
        no_proxy
    }

    /// Whether `host` (a URI's host: a name, an IPv4 address or a bracketed IPv6 one) is reached
    /// without the proxy.
    pub(super) fn bypasses(&self, host: &str) -> bool {
        if self.all {
            return true;
        }
        let host = host.to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.trim_end_matches('.');
        if let Ok(address) = host.parse::<IpAddr>() {
            return self
                .networks
                .iter()
                .any(|&(network, prefix)| contains(network, prefix, address));
        }
        self.domains.iter().any(|domain| {
            host == domain
                || host
                    .strip_suffix(domain.as_str())
                    .is_some_and(|head| head.ends_with('.'))
        })
    }
}

/// An address (a whole-length network) or `address/prefix`.
fn network(entry: &str) -> Option<(IpAddr, u8)> {
    let (address, prefix) = match entry.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
        None => (entry, None),
    };
    let address: IpAddr = address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    let whole = if address.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(whole);
    (prefix <= whole).then_some((address, prefix))
}

/// Whether `address` is in `network/prefix`.
fn contains(network: IpAddr, prefix: u8, address: IpAddr) -> bool {
    let masked = |bits: u128, width: u32| {
        let shift = width - u32::from(prefix);
        bits.checked_shr(shift).unwrap_or(0)
    };
    match (network, address) {
        (IpAddr::V4(network), IpAddr::V4(address)) => {
            masked(u128::from(u32::from(network)), 32) == masked(u128::from(u32::from(address)), 32)
        }
        (IpAddr::V6(network), IpAddr::V6(address)) => {
            masked(u128::from(network), 128) == masked(u128::from(address), 128)
        }
        _ => false,
    }
}

/// The connector under TLS: straight to the destination, or, for `https` to a host the bypass list
/// does not name, through a tunnel the proxy opens.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    direct: HttpConnector,
    proxy: Option<Arc<Proxy>>,
    no_proxy: Arc<NoProxy>,
}

impl Connector {
    pub(super) fn new(
        direct: HttpConnector,
        proxy: Option<Arc<Proxy>>,
        no_proxy: Arc<NoProxy>,
    ) -> Connector {
        Connector {
            direct,
            proxy,
            no_proxy,
        }
    }

    /// The proxy to tunnel through to `destination`, and the tunnel's `host:port`; `None` to go
    /// straight there.
    fn route(&self, destination: &Uri) -> Option<(Arc<Proxy>, String)> {
        let proxy = self.proxy.as_ref()?;
        if destination.scheme_str() != Some("https") {
            return None;
        }
        let host = destination.host()?;
        if self.no_proxy.bypasses(host) {
            return None;
        }
        let port = destination.port_u16().unwrap_or(443);
        Some((Arc::clone(proxy), format!("{host}:{port}")))
    }
}

type BoxError = Box<dyn StdError + Send + Sync>;

impl Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        let route = self.route(&destination);
        let mut direct = self.direct.clone();
        Box::pin(async move {
            let Some((proxy, target)) = route else {
                return direct.call(destination).await.map_err(Into::into);
            };
            tracing::debug!(proxy = %proxy.authority, variable = proxy.variable, %target, "tunnelling through the proxy");
            let proxy_uri: Uri = format!("http://{}/", proxy.authority)
                .parse()
                .map_err(|_| proxy.unreachable("its address does not make a URL".to_owned()))?;
            let stream = direct
                .call(proxy_uri)
                .await
                .map_err(|err| proxy.unreachable(chain(&err)))?;
            let tunnel = proxy.open(stream.into_inner(), &target).await?;
            Ok(TokioIo::new(tunnel))
        })
    }
}

/// An error and its sources, one after another (`error_chain` stands on the same floor).
fn chain(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}
