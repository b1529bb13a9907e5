//! The head of a request to the egress proxy, read strictly: `CONNECT host:port` for a tunnel, or
//! an absolute-form `http://` request for plain HTTP, which is passed on rewritten to origin form
//! with one `Host` and `Connection: close`. Anything two parsers could read differently — a second
//! `Host`, a `Host` naming another authority, userinfo, folded lines, two lengths — is refused, so
//! the host stet checks is the host the bytes go to.

use super::hosts::split_port;

/// The most bytes a request head may take, its blank line included.
pub const MAX_HEAD_BYTES: usize = 16 << 10;

/// What the agent asked the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A tunnel (TLS, usually).
    Tunnel {
        /// The host as the request wrote it.
        host: String,
        /// The port.
        port: u16,
    },
    /// One plain HTTP request.
    Plain {
        /// The host as the request wrote it.
        host: String,
        /// The port (80 when the URL names none).
        port: u16,
        /// The head to send to the host: origin form, one `Host`, `Connection: close`.
        head: Vec<u8>,
        /// Where the request's body ends: the proxy passes on that much and nothing after it.
        body: Body,
    },
}

impl Asked {
    /// The host part as the request wrote it.
    pub fn host(&self) -> &str {
        match self {
            Asked::Tunnel { host, .. } | Asked::Plain { host, .. } => host,
        }
    }

    /// The port asked for.
    pub fn port(&self) -> u16 {
        match self {
            Asked::Tunnel { port, .. } | Asked::Plain { port, .. } => *port,
        }
    }
}

/// Why a head was refused.
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the request head is larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("the request is malformed: {0}")]
    Malformed(&'static str),
    #[error("the request is not one the proxy serves: {0}")]
    Unsupported(&'static str),
}

/// Where the head ends in `buffer` (the index just past its blank line), if it has ended.
pub fn end_of_head(buffer: &[u8]) -> Option<usize> {
    memchr::memmem::find(buffer, b"\r\n\r\n").map(|at| at + 4)
}

/// Reads a complete head (up to and including its blank line).
pub fn parse(head: &[u8]) -> Result<Asked, HeadError> {
    if head.len() > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let text =
        std::str::from_utf8(head).map_err(|_| HeadError::Malformed("the head is not ASCII"))?;
    if !text.is_ascii() {
        return Err(HeadError::Malformed("the head is not ASCII"));
    }
    let body = text.strip_suffix("\r\n\r\n").ok_or(HeadError::Malformed(
        "the head does not end in a blank line",
    ))?;
    let mut lines = body.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    if request_line.bytes().any(|byte| byte.is_ascii_control()) {
        return Err(HeadError::Malformed(
            "the request line holds a control character",
        ));
    }
    let headers = lines
        .map(header)
        .collect::<Result<Vec<(&str, &str)>, HeadError>>()?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed(
            "the request line is not `METHOD target HTTP/1.x`",
        ));
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HeadError::Unsupported("only HTTP/1.1 and HTTP/1.0"));
    }
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(HeadError::Malformed("the method is not a token"));
    }
    let hosts: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map(|(_, value)| *value)
        .collect();
    if hosts.len() > 1 {
        return Err(HeadError::Malformed("the request holds more than one Host"));
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        same_host(hosts.first().copied(), &host, port, None)?;
        return Ok(Asked::Tunnel { host, port });
    }
    let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
        return Err(if target.starts_with('/') {
            HeadError::Unsupported("an origin-form request: this is a proxy, send an absolute URL")
        } else {
            HeadError::Unsupported(
                "a plain request must name an http:// URL; tunnel TLS with CONNECT",
            )
        });
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (host, port) = authority(&rest[..end], Some(80))?;
    same_host(hosts.first().copied(), &host, port, Some(80))?;
    let path = match &rest[end..] {
        "" => "/",
        path if path.starts_with('#') => "/",
        path => path.split('#').next().unwrap_or("/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let body = framing(&headers)?;
    let mut rewritten = format!("{method} {path} HTTP/1.1\r\n");
    rewritten.push_str(&format!("Host: {}\r\n", shown_authority(&rest[..end])));
    for (name, value) in &headers {
        let hop = [
            "host",
            "connection",
            "proxy-connection",
            "keep-alive",
            "te",
            "upgrade",
        ]
        .iter()
        .any(|hop| name.eq_ignore_ascii_case(hop))
            || name.len() > 6 && name[..6].eq_ignore_ascii_case("proxy-");
        if !hop {
            rewritten.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    Ok(Asked::Plain {
        host,
        port,
        head: rewritten.into_bytes(),
        body,
    })
}

/// One header line: a token name, a colon, a value without controls; no folded continuation.
fn header(line: &str) -> Result<(&str, &str), HeadError> {
    if line.starts_with([' ', '\t']) {
        return Err(HeadError::Malformed("a header line is folded"));
    }
    let (name, value) = line
        .split_once(':')
        .ok_or(HeadError::Malformed("a header line has no colon"))?;
    if name.is_empty() || !name.bytes().all(is_token) {
        return Err(HeadError::Malformed("a header name is not a token"));
    }
    let value = value.trim_matches([' ', '\t']);
    if value
        .bytes()
        .any(|byte| byte.is_ascii_control() && byte != b'\t')
    {
        return Err(HeadError::Malformed(
            "a header value holds a control character",
        ));
    }
    Ok((name, value))
}

/// At most one way of saying where the body ends: one `Content-Length` of decimal digits, or
/// `Transfer-Encoding: chunked` alone; neither is a request without a body.
fn framing(headers: &[(&str, &str)]) -> Result<Body, HeadError> {
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .map(|(_, value)| *value)
        .collect();
    let encodings: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("transfer-encoding"))
        .map(|(_, value)| *value)
        .collect();
    if lengths.len() > 1 {
        return Err(HeadError::Malformed(
            "the request holds more than one Content-Length",
        ));
    }
    if !encodings.is_empty() && !lengths.is_empty() {
        return Err(HeadError::Malformed(
            "the request holds both Content-Length and Transfer-Encoding",
        ));
    }
    if encodings.len() > 1
        || encodings
            .first()
            .is_some_and(|value| !value.eq_ignore_ascii_case("chunked"))
    {
        return Err(HeadError::Unsupported(
            "a Transfer-Encoding other than chunked",
        ));
    }
    if !encodings.is_empty() {
        return Ok(Body::Chunked(Chunk::Size(0)));
    }
    match lengths.first() {
        None => Ok(Body::Length(0)),
        Some(length) => {
            let digits = !length.is_empty() && length.bytes().all(|byte| byte.is_ascii_digit());
            match length.parse::<u64>() {
                Ok(length) if digits => Ok(Body::Length(length)),
                _ => Err(HeadError::Malformed(
                    "the Content-Length is not a decimal number",
                )),
            }
        }
    }
}

/// What is left of a plain request's body, read as its framing says, so that the bytes after it
/// (a second, pipelined request to whatever host it names) never reach the host stet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// This many bytes are left.
    Length(u64),
    /// A chunked body, at this point of its framing.
    Chunked(Chunk),
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// In a chunk's size line: the size so far.
    Size(u64),
    /// In a size line's extensions, the size read.
    Extension(u64),
    /// After a size line's CR, the size read.
    SizeEnd(u64),
    /// In a chunk's data: the bytes left.
    Data(u64),
    /// After a chunk's data: its CR.
    DataCr,
    /// After a chunk's data: its LF.
    DataLf,
    /// After the last chunk, at the start of a trailer line (or of the final blank line).
    LineStart,
    /// Within a trailer line.
    Trailer,
    /// After a trailer line's CR.
    TrailerEnd,
    /// After the final blank line's CR.
    Last,
    /// The body has ended (or its framing broke, and nothing more is passed on).
    Done,
}

impl Body {
    /// How many of `bytes` (the next bytes from the client) still belong to the request.
    pub fn take(&mut self, bytes: &[u8]) -> usize {
        match self {
            Body::Length(left) => {
                let taken =
                    usize::try_from(*left).map_or(bytes.len(), |left| left.min(bytes.len()));
                *left -= taken as u64;
                taken
            }
            Body::Chunked(chunk) => {
                let mut taken = 0;
                while taken < bytes.len() && *chunk != Chunk::Done {
                    if let Chunk::Data(left) = chunk {
                        let run = usize::try_from(*left)
                            .map_or(bytes.len() - taken, |left| left.min(bytes.len() - taken));
                        *left -= run as u64;
                        taken += run;
                        if *left == 0 {
                            *chunk = Chunk::DataCr;
                        }
                        continue;
                    }
                    let Some(next) = chunk.next(bytes[taken]) else {
                        *chunk = Chunk::Done;
                        break;
                    };
                    *chunk = next;
                    taken += 1;
                }
                taken
            }
        }
    }

    /// Whether the whole body has been passed on.
    pub fn done(&self) -> bool {
        matches!(self, Body::Length(0) | Body::Chunked(Chunk::Done))
    }
}

impl Chunk {
    /// The state after `byte` (outside a chunk's data), or `None` when the framing breaks.
    fn next(self, byte: u8) -> Option<Chunk> {
        let next = match (self, byte) {
            (Chunk::Size(size), byte) if byte.is_ascii_hexdigit() => {
                let digit = u64::from(char::from(byte).to_digit(16)?);
                Chunk::Size(size.checked_mul(16)?.checked_add(digit)?)
            }
            (Chunk::Size(size), b';') => Chunk::Extension(size),
            (Chunk::Size(size) | Chunk::Extension(size), b'\r') => Chunk::SizeEnd(size),
            (Chunk::Extension(size), byte) if byte == b'\t' || !byte.is_ascii_control() => {
                Chunk::Extension(size)
            }
            (Chunk::SizeEnd(0), b'\n') => Chunk::LineStart,
            (Chunk::SizeEnd(size), b'\n') => Chunk::Data(size),
            (Chunk::DataCr, b'\r') => Chunk::DataLf,
            (Chunk::DataLf, b'\n') => Chunk::Size(0),
            (Chunk::LineStart, b'\r') => Chunk::Last,
            (Chunk::Trailer, b'\r') => Chunk::TrailerEnd,
            (Chunk::LineStart | Chunk::Trailer, byte)
                if byte == b'\t' || !byte.is_ascii_control() =>
            {
                Chunk::Trailer
            }
            (Chunk::TrailerEnd, b'\n') => Chunk::LineStart,
            (Chunk::Last, b'\n') => Chunk::Done,
            _ => return None,
        };
        Some(next)
    }
}

/// `host:port` (the port required unless `default` is given), no userinfo.
fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), HeadError> {
    if text.contains('@') {
        return Err(HeadError::Malformed("the target carries userinfo"));
    }
    if text.is_empty() || text.bytes().any(|byte| !(byte.is_ascii_graphic())) {
        return Err(HeadError::Malformed("the target names no host"));
    }
    let (host, port) = split_port(text).map_err(HeadError::Malformed)?;
    let port = port
        .or(default)
        .ok_or(HeadError::Malformed("a CONNECT target must name its port"))?;
    if host.is_empty() {
        return Err(HeadError::Malformed("the target names no host"));
    }
    Ok((host.to_owned(), port))
}

/// A `Host` header, if any, must name the same host and port as the target.
fn same_host(
    header: Option<&str>,
    host: &str,
    port: u16,
    default: Option<u16>,
) -> Result<(), HeadError> {
    let Some(header) = header else {
        return Ok(());
    };
    let (named, named_port) = authority(header, default.or(Some(port)))
        .map_err(|_| HeadError::Malformed("the Host header is not an authority"))?;
    if !named.eq_ignore_ascii_case(host) || named_port != port {
        return Err(HeadError::Malformed(
            "the Host header names another authority than the target",
        ));
    }
    Ok(())
}

fn shown_authority(authority: &str) -> String {
    authority.to_ascii_lowercase()
}

fn strip_prefix_ignore_case<'t>(text: &'t str, prefix: &str) -> Option<&'t str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// A byte of an HTTP token (RFC 9110 `tchar`).
fn is_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(head: &str) -> Result<Asked, HeadError> {
        parse(head.as_bytes())
    }

    #[test]
    fn a_connect_names_its_tunnel() {
        assert_eq!(
            asked("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nUser-Agent: pip\r\n\r\n"),
            Ok(Asked::Tunnel {
                host: "pypi.org".into(),
                port: 443
            })
        );
        assert_eq!(
            asked("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n")
                .unwrap()
                .host(),
            "[2001:db8::1]"
        );
    }

    #[test]
    fn a_plain_request_is_rewritten_to_origin_form_with_one_host_and_no_proxy_headers() {
        let Asked::Plain {
            host, port, head, ..
        } = asked(
            "GET http://Deb.Debian.org/debian/dists?x=1#frag HTTP/1.1\r\nHost: deb.debian.org\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap() else {
            panic!("not plain");
        };
        assert_eq!((host.as_str(), port), ("Deb.Debian.org", 80));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /debian/dists?x=1 HTTP/1.1\r\nHost: deb.debian.org\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn requests_two_parsers_could_read_differently_are_refused() {
        for head in [
            "CONNECT a.org:443 HTTP/1.1\r\nHost: a.org:443\r\nHost: b.org:443\r\n\r\n",
            "CONNECT a.org:443 HTTP/1.1\r\nHost: b.org:443\r\n\r\n",
            "CONNECT a.org:443 HTTP/1.1\r\nHost: a.org:8443\r\n\r\n",
            "CONNECT user:pw@a.org:443 HTTP/1.1\r\n\r\n",
            "CONNECT a.org HTTP/1.1\r\n\r\n",
            "CONNECT a.org:443 HTTP/1.1 x\r\n\r\n",
            "GET http://a.org/ HTTP/1.1\r\nHost: b.org\r\n\r\n",
            "GET http://user@a.org/ HTTP/1.1\r\n\r\n",
            "GET http://a.org/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n",
            "POST http://a.org/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "POST http://a.org/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://a.org/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "GET http://a.org/ HTTP/1.1\r\nX: a\u{7f}b\r\n\r\n",
            "GET http://a.org/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET /index.html HTTP/1.1\r\nHost: a.org\r\n\r\n",
            "GET https://a.org/ HTTP/1.1\r\n\r\n",
            "GET http://a.org/ HTTP/2\r\n\r\n",
            "GET http://\u{e9}.org/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(asked(head).is_err(), "accepted: {head:?}");
        }
    }

    #[test]
    fn a_head_past_its_bound_is_refused_and_its_end_is_found() {
        let big = format!(
            "GET http://a.org/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert_eq!(asked(&big), Err(HeadError::TooLarge));
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n"), None);
    }
}
