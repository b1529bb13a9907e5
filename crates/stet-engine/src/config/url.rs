//! The one rule every URL setting obeys (`forge.github.api_url`, `forge.github.git_url`,
//! `model.base_url`), whichever file sets it: `https` to any host, plain `http` only to this machine's
//! loopback, and never a user name or password inside the URL. A token sent over plain `http` to
//! another host is a token given away; one written in a URL is a secret written inline. The
//! engine's address (`runtime.host`) is checked here too, by the runtime's own rules.

use std::net::IpAddr;

/// Why a URL setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum UrlError {
    #[error("{0:?} is not a URL (expected https://host/... or http://127.0.0.1:port/...)")]
    NotAUrl(String),
    #[error("{0:?} is neither https:// nor http://")]
    Scheme(String),
    #[error(
        "{0:?} holds a user name or password: reference secrets instead of writing them in a URL"
    )]
    Userinfo(String),
    #[error(
        "{0:?} is plain http to a host other than this machine's loopback: a token sent there can be read on the way; use https"
    )]
    PlainHttp(String),
}

/// `runtime.host`, when set, checked as the docker CLI takes an address; an error names its file,
/// line and value.
pub(super) fn checked_engine_host(
    host: Option<super::Sourced<String>>,
) -> Result<Option<String>, super::ConfigError> {
    let Some(super::Sourced { value, origin, .. }) = host else {
        return Ok(None);
    };
    match crate::runtime::endpoint::check_host(&value) {
        Ok(()) => Ok(Some(value)),
        Err(error) => Err(super::ConfigError::Invalid {
            origin,
            field: "runtime.host",
            problem: error.to_string(),
        }),
    }
}

/// Accepts `text` when it is an `https` URL with a host, or an `http` URL whose host is `localhost`,
/// `127.0.0.0/8` or `[::1]`; neither may carry userinfo.
pub fn check(text: &str) -> Result<(), UrlError> {
    let not_a_url = || UrlError::NotAUrl(text.to_owned());
    let uri: http::Uri = text.parse().map_err(|_| not_a_url())?;
    let authority = uri.authority().ok_or_else(not_a_url)?;
    if authority.as_str().contains('@') {
        return Err(UrlError::Userinfo(text.to_owned()));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(not_a_url());
    }
    match uri.scheme_str() {
        Some(scheme) if scheme.eq_ignore_ascii_case("https") => Ok(()),
        Some(scheme) if scheme.eq_ignore_ascii_case("http") => {
            if is_loopback(host) {
                Ok(())
            } else {
                Err(UrlError::PlainHttp(text.to_owned()))
            }
        }
        _ => Err(UrlError::Scheme(text.to_owned())),
    }
}

/// `localhost`, an IPv4 address in `127.0.0.0/8` or `[::1]`.
fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_and_plain_http_only_to_loopback() {
        for accepted in [
            "https://api.github.com",
            "https://ghe.example.invalid/api/v3",
            "HTTPS://example.com:8443/v1",
            "http://127.0.0.1:4000/v1",
            "http://127.8.9.10",
            "http://[::1]:8080/v1",
            "http://localhost:4000",
            "http://LOCALHOST/v1",
        ] {
            assert_eq!(check(accepted), Ok(()), "{accepted}");
        }
        for refused in [
            "http://example.com",
            "http://example.com:80/v1",
            "http://10.0.0.1:4000/v1",
            "http://0.0.0.0:4000",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost.example.com/",
            "http://127.0.0.1.example.com/",
        ] {
            assert!(
                matches!(check(refused), Err(UrlError::PlainHttp(_))),
                "{refused}: {:?}",
                check(refused)
            );
        }
    }

    #[test]
    fn userinfo_other_schemes_and_non_urls_are_refused() {
        assert!(matches!(
            check("https://user:pass@github.com"),
            Err(UrlError::Userinfo(_))
        ));
        assert!(matches!(
            check("http://token@127.0.0.1:4000"),
            Err(UrlError::Userinfo(_))
        ));
        assert!(matches!(
            check("ftp://example.com"),
            Err(UrlError::Scheme(_))
        ));
        assert!(matches!(
            check("file:///etc/passwd"),
            Err(UrlError::NotAUrl(_)) | Err(UrlError::Scheme(_))
        ));
        for not_a_url in ["127.0.0.1:4000", "api.github.com", "", "https://", "/v1"] {
            assert!(check(not_a_url).is_err(), "{not_a_url}");
        }
    }
}
