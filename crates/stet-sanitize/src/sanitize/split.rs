//! Tokens broken over two lines: a token's prefix near the end of one line and the run of its
//! alphabet that starts the next are one secret, so a token printed with a line break in it (a
//! wrapped terminal line, a hard-wrapped log) does not come out in two clear halves.
//!
//! The redactor masks the first line's part where the token starts and drops the run of the token's
//! alphabet that starts the next line ([`super::redactor`]'s continuing mode), whichever read it
//! arrives in. A prefix split itself (`gh` / `p_…`) is not recognised: the prefix is the anchor.

/// How many of a token's characters after its prefix, both lines counted, make it a secret.
pub(super) const MIN_BODY: usize = 8;

/// One token family whose line-broken form is recognised.
#[derive(Debug)]
pub(super) struct Family {
    /// The spellings of its prefix (each is also a trigger literal of the rule book).
    pub prefixes: &'static [&'static str],
    /// The name the marker shows.
    pub label: &'static str,
    /// The bytes its random part is made of.
    pub alphabet: fn(u8) -> bool,
    /// A test on the random part's two pieces, for families whose prefix occurs in prose.
    accept: fn(&[u8], &[u8]) -> bool,
    /// How long the random part of a whole token is, where the family fixes it: a whole token
    /// at a line's end is not continued on the next line.
    whole: Option<usize>,
}

fn alnum(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
}

fn word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn url_safe(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-')
}

fn always(_: &[u8], _: &[u8]) -> bool {
    true
}

/// As the `sk-` shape rule: long enough to be random, or carrying a digit, so hyphenated prose
/// (`sk-` / `learn-compatible`) is left alone.
fn key_like(first: &[u8], second: &[u8]) -> bool {
    first.len() + second.len() >= 32 || first.iter().chain(second).any(u8::is_ascii_digit)
}

/// The families, the more specific prefix first where two share a start.
pub(super) const FAMILIES: &[Family] = &[
    Family {
        prefixes: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        label: "github-token",
        alphabet: alnum,
        accept: always,
        whole: Some(36),
    },
    Family {
        prefixes: &["github_pat_"],
        label: "github-token",
        alphabet: word,
        accept: always,
        whole: Some(82),
    },
    Family {
        prefixes: &["glpat-"],
        label: "gitlab-token",
        alphabet: url_safe,
        accept: always,
        whole: Some(20),
    },
    Family {
        prefixes: &["sk-ant-"],
        label: "anthropic-key",
        alphabet: url_safe,
        accept: key_like,
        whole: None,
    },
    Family {
        prefixes: &["sk-"],
        label: "openai-key",
        alphabet: url_safe,
        accept: key_like,
        whole: None,
    },
];

/// Whether a trigger literal starts a family's token.
pub(super) fn applies(literal: &str) -> bool {
    FAMILIES
        .iter()
        .any(|family| family.prefixes.iter().any(|p| p.starts_with(literal)))
}

/// The family (its index in [`FAMILIES`]) of a masked `secret` that may go on at the start of the
/// next line: it starts with the family's prefix and is shorter than a whole token.
pub(super) fn continued_family(secret: &[u8]) -> Option<usize> {
    FAMILIES.iter().position(|family| {
        family
            .prefixes
            .iter()
            .any(|p| secret.starts_with(p.as_bytes()) && family.cut_short(secret.len() - p.len()))
    })
}

impl Family {
    /// Whether a random part of `len` bytes may be a token cut short.
    fn cut_short(&self, len: usize) -> bool {
        self.whole.is_none_or(|whole| len < whole)
    }
}

/// What the bytes at a token prefix turn out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Examined {
    /// Not a token broken by a line end.
    No,
    /// The bytes that decide have not all arrived.
    Pending,
    /// A broken token: mask up to `line_break` (an offset into the bytes examined), then drop the
    /// run of the family's alphabet that starts the next line.
    Found { line_break: usize, family: usize },
}

/// The length of the run of `alphabet` that starts `bytes`.
pub(super) fn run(bytes: &[u8], alphabet: fn(u8) -> bool) -> usize {
    bytes.iter().take_while(|b| alphabet(**b)).count()
}

/// The length of the line break (`\n` or `\r\n`) that starts `bytes`, if one does.
pub(super) fn line_break(bytes: &[u8]) -> Option<usize> {
    if bytes.starts_with(b"\r\n") {
        Some(2)
    } else if bytes.starts_with(b"\n") {
        Some(1)
    } else {
        None
    }
}

/// Examines `bytes`, which start at a token prefix at a token boundary. `complete` says nothing
/// follows them (the stream ended, or the look-ahead window is used up).
pub(super) fn examine(bytes: &[u8], complete: bool) -> Examined {
    for (index, family) in FAMILIES.iter().enumerate() {
        let Some(prefix) = family
            .prefixes
            .iter()
            .find(|p| bytes.starts_with(p.as_bytes()))
        else {
            continue;
        };
        let body = &bytes[prefix.len()..];
        let first = run(body, family.alphabet);
        if !family.cut_short(first) {
            continue;
        }
        let after = &body[first..];
        let Some(width) = line_break(after) else {
            // The line has not ended yet (or ends in a lone `\r` still waiting for its `\n`).
            if !complete && (after.is_empty() || after == b"\r") {
                return Examined::Pending;
            }
            continue;
        };
        let found = Examined::Found {
            line_break: prefix.len() + first,
            family: index,
        };
        if first >= MIN_BODY && (family.accept)(&body[..first], b"") {
            return found;
        }
        let next = &after[width..];
        let second = run(next, family.alphabet);
        if second == next.len() && !complete {
            // An earlier family decides first, as it would on the whole stream.
            return Examined::Pending;
        }
        if first + second >= MIN_BODY && (family.accept)(&body[..first], &next[..second]) {
            return found;
        }
    }
    Examined::No
}

#[cfg(test)]
mod tests;
