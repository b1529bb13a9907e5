//! The names and URLs a forge's REST API is addressed by, checked and encoded so that no value from a
//! brief or a setting can change a request's path or carry a credential: ref paths, name parts,
//! instance tags and the forge's own URLs.

use http::Uri;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sha2::{Digest, Sha256};

use crate::forge::{ForgeError, Result};

/// A path segment keeps only RFC 3986's unreserved characters; everything else is percent-encoded.
pub(crate) const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A ref name for a REST path: each `/`-separated segment percent-encoded, the `/` kept (GitHub reads
/// `branches/feature/x` as the branch `feature/x`). `None` for a name no ref can have (an empty, `.` or
/// `..` segment), which would otherwise change the path itself.
pub(crate) fn ref_path(name: &str) -> Option<String> {
    let mut encoded = Vec::new();
    for segment in name.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        encoded.push(utf8_percent_encode(segment, SEGMENT).to_string());
    }
    Some(encoded.join("/"))
}

/// Whether `part` can be one part of a repository's path on a forge (an owner, a group, a name, a
/// login): letters, digits, `-`, `_` and `.`, and not `.` or `..`, so it never changes a URL's path.
pub(crate) fn is_name_part(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A short tag of a forge instance (its API URL, without a trailing `/`), so an id a provider minted
/// at one instance is never acted on at another.
pub(crate) fn instance_tag(api_url: &str) -> String {
    let digest = Sha256::digest(api_url.trim_end_matches('/').as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The id of a token minted at an instance: `<prefix><instance tag>-<token id>-<subject>`, so that
/// revoking it, even after a crash, acts only at the instance that minted it and on that token.
pub(crate) fn minted_id(prefix: &str, instance: &str, token_id: u64, subject: &str) -> String {
    format!("{prefix}{instance}-{token_id}-{subject}")
}

/// The token id and subject of a [`minted_id`] of `prefix` at `instance`; `None` for any other id
/// (another prefix or instance, a token id that is not decimal digits). The subject is returned as
/// written, for the provider to check.
pub(crate) fn parse_minted_id<'a>(
    id: &'a str,
    prefix: &str,
    instance: &str,
) -> Option<(u64, &'a str)> {
    let rest = id.strip_prefix(prefix)?;
    let (tag, rest) = rest.split_once('-')?;
    let (token_id, subject) = rest.split_once('-')?;
    if tag != instance || token_id.is_empty() || !token_id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((token_id.parse().ok()?, subject))
}

/// The host of a forge's `git_url` (checked like every forge URL), which a checkout's remotes are
/// matched on.
pub(crate) fn git_host(forge: &'static str, git_url: &str) -> Result<String> {
    let uri = web_url(forge, git_url, "git_url")?;
    Ok(uri.host().unwrap_or_default().to_owned())
}

/// Parses an `http(s)` URL that carries no user information; `setting` names it in the error.
pub(crate) fn web_url(forge: &'static str, url: &str, setting: &str) -> Result<Uri> {
    // A URL with user information may carry a password: it is not repeated in the error.
    let shown = if url.contains('@') {
        "(withheld: it contains '@')"
    } else {
        url
    };
    let invalid = |why: &str| ForgeError::Settings {
        forge,
        detail: format!("{setting} {shown:?} {why}"),
    };
    let uri: Uri = url.parse().map_err(|_| invalid("is not a URL"))?;
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
