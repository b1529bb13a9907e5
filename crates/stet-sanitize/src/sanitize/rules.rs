//! The shape rules: which literal triggers a look, and what must follow it to count as a secret.
//!
//! Every rule starts at a literal trigger (found by one SIMD-accelerated Aho-Corasick scan over the
//! stream) and is confirmed by a regex anchored at the rule's start, inside a bounded window. A trigger
//! may sit a few bytes into its rule (`assword` finds `password` and `Password`), so that keywords are
//! found case-insensitively with case-sensitive literals. Context checks look back at most
//! [`LOOKBACK`] bytes, so a streaming redactor that keeps that much context decides exactly as a pass
//! over the whole input would.

use std::sync::Arc;

use regex::bytes::{Match, Regex};

use super::{Result, SanitizeError};

/// How many bytes before a rule's start any rule may look at (boundaries, ANSI codes, the line).
pub(super) const LOOKBACK: usize = 256;

/// How many bytes from a trigger a rule may look at; also the longest secret redacted in one piece.
/// A match that reaches this far is continued by swallowing token characters (see [`is_token_byte`]).
pub(super) const WINDOW: usize = 8192;

/// The most a rule may start before its trigger literal.
pub(super) const MAX_LEAD: usize = 8;

/// A private key block's END line, colour codes (`grep --color`, raw or JSON-escaped) allowed
/// between its words. Its longest match is under [`MAX_KEY_LINE`].
pub(super) const PRIVATE_KEY_END_PATTERN: &str = concat!(
    r"^-----(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4}END(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4} ",
    r"(?:[A-Z0-9 ]|(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,60}PRIVATE(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4}",
    r" KEY(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]| BLOCK){0,8}-----"
);

/// Longer than any BEGIN or END line the patterns match: a line still arriving is waited for up to
/// this many bytes.
pub(super) const MAX_KEY_LINE: usize = 4096;

/// What a confirmed match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Replace the match (or its first capture group that took part) with a marker.
    Mask,
    /// The match opens a PEM private-key block: withhold everything up to its END line.
    OpenPrivateKey,
}

/// What must be true before a rule's start for the rule to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Before {
    /// Nothing: the rule may start anywhere (`DB_PASSWORD=`, `https://`).
    Anything,
    /// A token boundary: start of stream, a non-word byte, or the end of an ANSI colour sequence.
    TokenBoundary,
    /// A `://` preceded by a scheme character.
    Scheme,
    /// Only blanks since the start of the line, or a `machine`/`login` keyword earlier on it (`.netrc`).
    NetrcLine,
    /// Inside an upper-case name: an upper-case letter or digit right before (`GITEA` of
    /// `GITEA_TOKEN`).
    NameInside,
}

/// One way a trigger can turn out to be a secret.
#[derive(Debug)]
pub(super) struct Rule {
    /// The name shown in the marker: `[REDACTED:<kind>]`.
    pub label: Arc<str>,
    pub before: Before,
    /// How many bytes before its trigger literal the rule starts.
    pub lead: usize,
    /// A cheap test on the bytes from the rule's start that rejects most non-secrets before the regex.
    pub quick: fn(&[u8]) -> bool,
    /// Anchored at the rule's start; if it has capture groups, only the first that took part is masked.
    pub pattern: Regex,
    /// Whether the pattern has capture groups (so the match is not masked whole).
    masks_group: bool,
    pub action: Action,
    /// An extra test on the masked bytes, for shapes a regex states badly.
    pub accept: fn(&[u8]) -> bool,
    /// A value another rule recognises by its own shape (`DEMO_TOKEN=ghp_…`) is left to that rule,
    /// whose marker says more.
    pub yields_to_shapes: bool,
}

impl Rule {
    /// The rule's match anchored at the start of `window`, and the part of it that is masked (its
    /// first capture group that took part, or all of it).
    pub(super) fn matched<'h>(&self, window: &'h [u8]) -> Option<(Match<'h>, Match<'h>)> {
        // The lazy DFA decides quickly; captures run only on the matched span, and only for rules
        // that mask a group (none of those ends in a look-around assertion).
        let whole = self.pattern.find(window)?;
        if !self.masks_group {
            return Some((whole, whole));
        }
        let captures = self.pattern.captures(&window[..whole.end()])?;
        let secret = captures.iter().skip(1).flatten().next().unwrap_or(whole);
        Some((whole, secret))
    }
}

/// One literal that starts a look, and the rules tried at it in order (the first that matches wins).
#[derive(Debug)]
pub(super) struct Trigger {
    pub literal: &'static str,
    pub rules: Vec<usize>,
    /// Which scan finds it.
    pub scan: Scan,
}

/// Which scan finds a trigger literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// The shared SIMD automaton of the shape rules.
    Shared,
    /// Common in ordinary text (`://`): found by its own memmem scan, which restarts cheaply after a
    /// hit, instead of by the shared SIMD automaton, which does not.
    Frequent,
    /// Long, rare literals (encoded token prefixes, structured keys): a second SIMD automaton, so
    /// the shared one keeps within the literal count its SIMD search needs.
    Rare,
}

/// Literals that occur every few lines of ordinary logs.
const FREQUENT: &[&str] = &["://"];

/// The compiled rule book.
#[derive(Debug)]
pub(super) struct RuleBook {
    pub rules: Vec<Rule>,
    pub triggers: Vec<Trigger>,
}

fn always(_: &[u8]) -> bool {
    true
}

/// `sk-` keys: long enough to be random, and either very long or carrying a digit, so hyphenated
/// prose such as `sk-learn-compatible-...` is left alone.
fn openai_like(secret: &[u8]) -> bool {
    secret.len() >= 35 || secret.iter().any(u8::is_ascii_digit)
}

/// A bare userinfo (no password) is only a secret when it looks like a token, not a login name.
fn url_userinfo(secret: &[u8]) -> bool {
    secret.contains(&b':') || secret.len() >= 20
}

/// Most URLs have no userinfo: the first byte that cannot be in one is not `@`.
fn has_userinfo(from_scheme: &[u8]) -> bool {
    from_scheme
        .iter()
        .skip(3)
        .take(LOOKBACK)
        .find(|b| !(b.is_ascii_alphanumeric() || b"._~%!$&*+=:-".contains(b)))
        == Some(&b'@')
}

/// A `curl`/`wget` command passes `-u` (alone or among short flags: `-su`) or `--user` before its
/// line ends (continuations included).
fn same_command_has_user_flag(from_command: &[u8]) -> bool {
    let mut end = from_command.len();
    let mut from = 0;
    while let Some(newline) = memchr::memchr(b'\n', &from_command[from..]) {
        let at = from + newline;
        let continued =
            from_command[..at].ends_with(b"\\") || from_command[..at].ends_with(b"\\\r");
        if !continued {
            end = at;
            break;
        }
        from = at + 1;
    }
    let command = &from_command[..end];
    memchr::memmem::find(command, b"--user").is_some()
        || memchr::memchr_iter(b'-', command).any(|at| {
            let after_blank = at > 0 && matches!(command[at - 1], b' ' | b'\t' | b'\n');
            let flags = command[at + 1..]
                .iter()
                .take_while(|b| b.is_ascii_alphabetic());
            after_blank && flags.clone().any(|b| *b == b'u')
        })
}

/// A token prefix is followed by at least a few token bytes.
fn token_follows(from_start: &[u8]) -> bool {
    starts_with_run(from_start, 12, is_token_byte)
}

/// Whether `bytes` begins with at least `len` bytes of which `part_of_run` holds.
fn starts_with_run(bytes: &[u8], len: usize, part_of_run: fn(u8) -> bool) -> bool {
    bytes
        .iter()
        .take_while(|b| part_of_run(**b))
        .take(len)
        .count()
        >= len
}

/// What the token prefixes `ghp_`, `github_pat_`, `sk-ant-`, `glpat-`, `xoxb-` and `xoxp-` become in
/// base64, at each of the three byte alignments: the characters that depend on the prefix alone.
const BASE64_PREFIXES: &[&str] = &[
    "Z2hwX",
    "docF",
    "naHBf",
    "Z2l0aHViX3BhdF",
    "dpdGh1Yl9wYXRf",
    "naXRodWJfcGF0X",
    "c2stYW50L",
    "NrLWFudC",
    "zay1hbnQt",
    "Z2xwYXQt",
    "dscGF0L",
    "nbHBhdC",
    "eG94Yi",
    "hveGIt",
    "4b3hiL",
    "eG94cC",
    "hveHAt",
    "4b3hwL",
];

/// An encoded prefix is followed by enough base64 to hold a token's random part.
fn base64_follows(from_start: &[u8]) -> bool {
    starts_with_run(from_start, 24, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-')
    })
}

struct RuleSpec {
    kind: &'static str,
    triggers: &'static [&'static str],
    lead: usize,
    before: Before,
    quick: fn(&[u8]) -> bool,
    pattern: &'static str,
    action: Action,
    accept: fn(&[u8]) -> bool,
    yields_to_shapes: bool,
    /// Its triggers go to the [`Scan::Rare`] automaton.
    rare: bool,
}

/// A token: a prefix at a token boundary, then random characters.
const fn token(
    kind: &'static str,
    triggers: &'static [&'static str],
    pattern: &'static str,
) -> RuleSpec {
    RuleSpec {
        kind,
        triggers,
        lead: 0,
        before: Before::TokenBoundary,
        quick: token_follows,
        pattern,
        action: Action::Mask,
        accept: always,
        yields_to_shapes: false,
        rare: false,
    }
}

/// A value after a keyword, found by a case fragment of the keyword that starts `lead` bytes in.
const fn keyword(
    kind: &'static str,
    triggers: &'static [&'static str],
    lead: usize,
    pattern: &'static str,
) -> RuleSpec {
    RuleSpec {
        kind,
        triggers,
        lead,
        before: Before::Anything,
        quick: always,
        pattern,
        action: Action::Mask,
        accept: always,
        yields_to_shapes: false,
        rare: false,
    }
}

/// A value after `name: `, `name=`, `"name": "`, as in headers, env dumps, JSON and config files.
/// A quoted value is taken up to its closing quote, spaces included; a bare one as `$value` says.
macro_rules! assigned {
    ($names:literal, $value:literal) => {
        concat!(
            r#"^(?i:"#,
            $names,
            r#")["']?[ \t]*[:=][ \t]*(?:\\"(?P<escaped>[^"\\\n]+)\\"|"(?P<double>[^"\n]+)"|'(?P<single>[^'\n]+)'|(?P<bare>"#,
            $value,
            "))"
        )
    };
}

/// A value that only refers to one (`$TOKEN`, `${TOKEN}`, `${{ secrets.X }}`, `$(pass show x)`) or
/// stands in for one (`<your token>`, `****`) is not a secret.
fn not_a_reference(value: &[u8]) -> bool {
    let name = |text: &[u8]| {
        !text.is_empty() && text.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    };
    let whole = |open: &[u8], close: u8| {
        value.len() > open.len()
            && value.starts_with(open)
            && value.ends_with(&[close])
            && !value[open.len()..value.len() - 1].contains(&close)
    };
    let reference = (value.first() == Some(&b'$') && name(&value[1..]))
        || whole(b"${", b'}')
        || whole(b"$(", b')')
        || whole(b"<", b'>')
        // `<your token>` unquoted: cut at its first blank, a word in lower case.
        || (value.first() == Some(&b'<')
            && value[1..]
                .iter()
                .all(|b| b.is_ascii_lowercase() || matches!(b, b'_' | b'-')))
        // `${{ secrets.X }}` unquoted: cut at its first blank.
        || value == b"${{"
        || value.iter().all(|b| *b == b'*' || *b == b'x' || *b == b'X');
    !reference
}

fn specs() -> Vec<RuleSpec> {
    vec![
        token(
            "github-token",
            &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
            r"^gh[pousr]_(?:[0-9]{1,20}_[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*|[A-Za-z0-9]{30,})",
        ),
        token(
            "github-token",
            &["github_pat_"],
            r"^github_pat_[A-Za-z0-9_]{40,}",
        ),
        token("anthropic-key", &["sk-"], r"^sk-ant-[A-Za-z0-9_-]{20,}"),
        RuleSpec {
            accept: openai_like,
            ..token(
                "openai-key",
                &["sk-"],
                r"^sk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_-]{20,}",
            )
        },
        token(
            "stripe-key",
            &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"],
            r"^(?:[rs]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9+/=]{24,})",
        ),
        token(
            "slack-token",
            &["xox", "xapp-"],
            r"^(?:xox[abeoprs]-[A-Za-z0-9-]{10,}|xoxe\.xox[bp]-[A-Za-z0-9-]{10,}|xapp-[0-9]+-[A-Za-z0-9-]{10,})",
        ),
        keyword(
            "slack-webhook",
            &[".slack.com/"],
            5,
            r"^hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{8,})",
        ),
        // Access key ids only; AWS's other unique-id prefixes (AIDA, AROA, ...) name things, not secrets.
        token(
            "aws-access-key-id",
            &["AKIA", "ASIA", "ABIA", "ACCA"],
            r"^[A-Z]{4}[A-Z0-9]{16}(?-u:\b)",
        ),
        keyword(
            "aws-secret-key",
            // The upper-case spelling is a named secret (`_ACCESS_KEY`).
            &["ws_secret_access_key"],
            1,
            assigned!("aws_secret_access_key", r"[A-Za-z0-9/+=]{30,}"),
        ),
        token(
            "gitlab-token",
            &[
                "glpat-",
                "gldt-",
                "glrt-",
                "glptt-",
                "glcbt-",
                "glimt-",
                "glft-",
                "glagent-",
                "gloas-",
                "glsoat-",
                "glffct-",
                "GR1348941",
            ],
            r"^(?:gl[a-z]{2,7}-[A-Za-z0-9_.-]{20,}|GR1348941[A-Za-z0-9_-]{20,})",
        ),
        token("npm-token", &["npm_"], r"^npm_[A-Za-z0-9]{36,}"),
        token("huggingface-token", &["hf_"], r"^hf_[A-Za-z0-9]{30,}"),
        token("google-api-key", &["AIza"], r"^AIza[0-9A-Za-z_-]{35}"),
        token(
            "jwt",
            &["eyJ"],
            r"^eyJ[A-Za-z0-9_-]{8,}\.ey[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        ),
        RuleSpec {
            action: Action::OpenPrivateKey,
            ..keyword(
                "private-key",
                &["-----"],
                0,
                concat!(
                    r"^-----(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4}BEGIN(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4} ",
                    r"(?:[A-Z0-9 ]|(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,60}PRIVATE(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]){0,4}",
                    r" KEY(?:(?:\x1b|\\u001[bB])\[[0-9;]{0,16}[A-Za-z]| BLOCK){0,8}-----"
                ),
            )
        },
        keyword(
            "authorization",
            &["uthorization", "UTHORIZATION"],
            1,
            r#"^(?i:authorization)(?:\\"|["'])?[ \t]*[:=][ \t]*(?:\\"|["'])?(?:(?i:bearer|basic|token|digest|negotiate|apikey)[ \t]+(?P<secret>[A-Za-z0-9._~+/=:-]{4,})|(?P<bare_secret>[^\s"'\\]{8,}))"#,
        ),
        RuleSpec {
            yields_to_shapes: true,
            ..keyword(
                "api-key",
                &[
                    "pi_key", "pi-key", "pikey", "PI_KEY", "PI-KEY", "PIKEY", "pi-Key",
                ],
                1,
                assigned!(r"api[_-]?key", r"[A-Za-z0-9._~+/=-]{8,}"),
            )
        },
        RuleSpec {
            yields_to_shapes: true,
            ..keyword(
                "api-key",
                &[
                    "rivate-token",
                    "RIVATE-TOKEN",
                    "rivate-Token",
                    "uth-token",
                    "uth_token",
                    "UTH-TOKEN",
                    // `AUTH_TOKEN` is a named secret (`_TOKEN`).
                    "uth-Token",
                ],
                1,
                assigned!(r"private-token|auth[_-]token", r"[A-Za-z0-9._~+/=-]{8,}"),
            )
        },
        RuleSpec {
            yields_to_shapes: true,
            ..keyword(
                "password",
                &["assword", "ASSWORD", "asswd", "ASSWD"],
                1,
                assigned!("password|passwd", r#"[^\s"'&\\]+"#),
            )
        },
        // A name that says what its value is (`GITEA_TOKEN=`, `CI_JOB_SECRET: `), whatever the
        // value's shape; a reference (`$TOKEN`, `${{ secrets.X }}`, `<token>`) is not a value.
        RuleSpec {
            before: Before::NameInside,
            yields_to_shapes: true,
            accept: not_a_reference,
            ..keyword(
                "named-secret",
                &["_TOKEN", "_SECRET", "_ACCESS_KEY"],
                0,
                r#"^_(?:TOKEN|SECRET(?:_KEY)?|ACCESS_KEY)["']?[ \t]*[:=][ \t]*(?:\\"(?P<escaped>[^"\\\n]{4,})\\"|"(?P<double>[^"\n]{4,})"|'(?P<single>[^'\n]{4,})'|(?P<bare>[^\s"'&\\]{4,}))"#,
            )
        },
        RuleSpec {
            before: Before::NetrcLine,
            ..keyword(
                "password",
                &["assword", "ASSWORD"],
                1,
                r#"^(?i:password)[ \t]+(?P<secret>[^\s=:\\"][^\s\\"]*)"#,
            )
        },
        RuleSpec {
            quick: same_command_has_user_flag,
            ..keyword(
                "basic-auth",
                &["curl ", "wget "],
                0,
                r#"^(?:curl|wget)[ \t](?:(?:\\\r?\n|[^\n])*?(?:[ \t]|\\\r?\n))??(?:-[A-Za-z]*?u[ \t]*|--user[= \t][ \t]*)(?:\\"(?P<escaped>[^"\\\n]*:[^"\\\n]+)\\"|"(?P<double>[^"\n]*:[^"\n]+)"|'(?P<single>[^'\n]*:[^'\n]+)'|(?P<bare>[^\s"':\\]*:[^\s"'\\]+))"#,
            )
        },
        // A token printed base64-encoded: each known prefix at the three byte alignments has a run of
        // characters that depends on the prefix alone (`rules::tests` derives them).
        RuleSpec {
            quick: base64_follows,
            rare: true,
            ..keyword(
                "encoded-token",
                BASE64_PREFIXES,
                0,
                r"^[A-Za-z0-9+/_-]{24,}={0,2}",
            )
        },
        // JSON may escape the underscore: `"ghp\u005f…"`.
        RuleSpec {
            rare: true,
            ..keyword(
                "github-token",
                &["\\u005f"],
                3,
                r"^gh[pousr]\\u005f[A-Za-z0-9]{30,}",
            )
        },
        RuleSpec {
            rare: true,
            ..keyword(
                "aws-secret-key",
                &["ecretAccessKey"],
                1,
                r#"^SecretAccessKey"?[ \t]*[:=][ \t]*"?(?P<secret>[A-Za-z0-9/+=]{30,})"#,
            )
        },
        RuleSpec {
            rare: true,
            yields_to_shapes: true,
            ..keyword(
                "npm-token",
                &["_authToken"],
                0,
                r#"^_authToken[ \t]*=[ \t]*["']?(?P<secret>[^\s"'$]{8,})"#,
            )
        },
        RuleSpec {
            rare: true,
            ..keyword(
                "docker-auth",
                &["\"auth\""],
                0,
                r#"^"auth"[ \t]*:[ \t]*"(?P<secret>[A-Za-z0-9+/]{8,}={0,2})""#,
            )
        },
        RuleSpec {
            rare: true,
            ..keyword(
                "azure-key",
                &["AccountKey="],
                0,
                r"^AccountKey=(?P<secret>[A-Za-z0-9+/]{20,}={0,2})",
            )
        },
        RuleSpec {
            before: Before::Scheme,
            quick: has_userinfo,
            accept: url_userinfo,
            ..keyword(
                "url-credentials",
                &["://"],
                0,
                r"^://(?P<secret>[A-Za-z0-9._~%!$&*+=-]+(?::[A-Za-z0-9._~%!$&*+=:-]*)?)@",
            )
        },
    ]
}

impl RuleBook {
    /// Compiles the built-in rules. Fails only if a built-in pattern is malformed (a bug caught by tests).
    pub(super) fn builtin() -> Result<RuleBook> {
        let mut rules = Vec::new();
        let mut triggers: Vec<Trigger> = Vec::new();
        for spec in specs() {
            // Bytes, not characters: a byte that is not UTF-8 inside a value is part of it.
            let pattern = regex::bytes::RegexBuilder::new(spec.pattern)
                .unicode(false)
                .build()
                .map_err(|source| SanitizeError::Rule {
                    kind: spec.kind,
                    source: Box::new(source),
                })?;
            let index = rules.len();
            rules.push(Rule {
                label: Arc::from(spec.kind),
                before: spec.before,
                lead: spec.lead,
                quick: spec.quick,
                masks_group: pattern.captures_len() > 1,
                pattern,
                action: spec.action,
                accept: spec.accept,
                yields_to_shapes: spec.yields_to_shapes,
            });
            for literal in spec.triggers {
                match triggers.iter_mut().find(|t| t.literal == *literal) {
                    Some(trigger) => trigger.rules.push(index),
                    None => triggers.push(Trigger {
                        literal,
                        rules: vec![index],
                        scan: if FREQUENT.contains(literal) {
                            Scan::Frequent
                        } else if spec.rare {
                            Scan::Rare
                        } else {
                            Scan::Shared
                        },
                    }),
                }
            }
        }
        Ok(RuleBook { rules, triggers })
    }
}

/// Bytes a word is made of: a token glued to one of these is part of a longer word, not a token.
fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Bytes that can continue a token past [`WINDOW`].
pub(super) fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b'+' | b'/' | b'=')
}

/// Whether the context before `at` allows a rule to start there. `haystack[..at]` holds at least
/// [`LOOKBACK`] bytes of context unless the stream itself starts within that distance.
pub(super) fn context_allows(before: Before, haystack: &[u8], at: usize) -> bool {
    match before {
        Before::Anything => true,
        Before::TokenBoundary => token_boundary(haystack, at),
        Before::Scheme => {
            at > 0
                && (haystack[at - 1].is_ascii_alphanumeric()
                    || matches!(haystack[at - 1], b'+' | b'.' | b'-'))
        }
        Before::NameInside => {
            at > 0 && (haystack[at - 1].is_ascii_uppercase() || haystack[at - 1].is_ascii_digit())
        }
        Before::NetrcLine => {
            let line = current_line(haystack, at);
            line.iter().all(|b| *b == b' ' || *b == b'\t')
                || contains_word(line, b"machine")
                || contains_word(line, b"login")
        }
    }
}

fn token_boundary(haystack: &[u8], at: usize) -> bool {
    at == 0 || !is_word_byte(haystack[at - 1]) || ansi_sequence_ends_at(haystack, at)
}

/// True when an ANSI CSI sequence (`ESC [ params final`) ends right before `at`, written raw or
/// escaped the ways logs and JSON write it (`\u001b`, `\x1b`, `\033`, `\e`).
fn ansi_sequence_ends_at(haystack: &[u8], at: usize) -> bool {
    let start = at.saturating_sub(32);
    let window = &haystack[start..at];
    let Some((&last, rest)) = window.split_last() else {
        return false;
    };
    if !(0x40..=0x7e).contains(&last) {
        return false;
    }
    let params = rest
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit() || matches!(b, b';' | b'?'))
        .count();
    let Some(before_params) = rest.len().checked_sub(params + 1) else {
        return false;
    };
    if rest[before_params] != b'[' {
        return false;
    }
    let introducer = &rest[..before_params];
    introducer.ends_with(b"\x1b")
        || introducer.ends_with(b"\\u001b")
        || introducer.ends_with(b"\\u001B")
        || introducer.ends_with(b"\\x1b")
        || introducer.ends_with(b"\\x1B")
        || introducer.ends_with(b"\\033")
        || introducer.ends_with(b"\\e")
}

/// The part of the current line before `at`, at most [`LOOKBACK`] bytes of it.
fn current_line(haystack: &[u8], at: usize) -> &[u8] {
    let window = &haystack[at.saturating_sub(LOOKBACK)..at];
    match memchr::memrchr(b'\n', window) {
        Some(newline) => &window[newline + 1..],
        None => window,
    }
}

fn contains_word(line: &[u8], word: &[u8]) -> bool {
    memchr::memmem::find_iter(line, word).any(|at| {
        let before_ok = at == 0 || !is_word_byte(line[at - 1]);
        let after = at + word.len();
        let after_ok = after >= line.len() || !is_word_byte(line[after]);
        before_ok && after_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD prefilter (Teddy) handles at most this many literals; past it scanning is ~4x slower.
    const MAX_TRIGGERS: usize = 64;

    /// The characters of `prefix`'s base64 that depend on it alone, with `skip` unknown bytes before
    /// it in its group of three.
    fn encoded(prefix: &[u8], skip: usize) -> String {
        use base64::Engine as _;
        let mut data = vec![0u8; skip];
        data.extend_from_slice(prefix);
        data.extend_from_slice(&[0, 0]);
        let text = base64::engine::general_purpose::STANDARD.encode(&data);
        let (from, to) = (8 * skip, 8 * (skip + prefix.len()));
        text.char_indices()
            .filter(|(i, _)| 6 * i >= from && 6 * i + 6 <= to)
            .map(|(_, c)| c)
            .collect()
    }

    #[test]
    fn the_encoded_prefixes_are_the_prefixes_in_base64_at_every_alignment() {
        let derived: Vec<String> = [
            &b"ghp_"[..],
            b"github_pat_",
            b"sk-ant-",
            b"glpat-",
            b"xoxb-",
            b"xoxp-",
        ]
        .iter()
        .flat_map(|prefix| (0..3).map(|skip| encoded(prefix, skip)))
        .collect();
        assert_eq!(derived, BASE64_PREFIXES);
    }

    #[test]
    fn builtin_rules_compile_and_every_rule_has_a_trigger() {
        let book = RuleBook::builtin().unwrap();
        for index in 0..book.rules.len() {
            assert!(
                book.triggers.iter().any(|t| t.rules.contains(&index)),
                "rule {} has no trigger",
                book.rules[index].label
            );
        }
        for scan in [Scan::Shared, Scan::Rare] {
            let count = book.triggers.iter().filter(|t| t.scan == scan).count();
            assert!(
                count <= MAX_TRIGGERS,
                "{count} {scan:?} triggers: the SIMD prefilter would be lost"
            );
        }
        for rule in &book.rules {
            assert!(rule.lead <= MAX_LEAD);
        }
    }

    #[test]
    fn ansi_colour_codes_count_as_a_boundary_in_every_spelling() {
        for prefix in [
            &b"\x1b[32m"[..],
            b"\\u001b[1;31m",
            b"\\x1b[0m",
            b"\\033[33m",
            b"\\e[4m",
        ] {
            let mut text = prefix.to_vec();
            let at = text.len();
            text.extend_from_slice(b"ghp_");
            assert!(
                token_boundary(&text, at),
                "{}",
                String::from_utf8_lossy(prefix)
            );
        }
        assert!(!token_boundary(b"xm", 1));
        assert!(!token_boundary(b"[32m", 4), "no escape introducer");
    }

    #[test]
    fn line_context_is_limited_to_the_current_line() {
        assert!(context_allows(Before::NetrcLine, b"  password x", 2));
        assert!(context_allows(
            Before::NetrcLine,
            b"machine h login u password x",
            18
        ));
        assert!(!context_allows(Before::NetrcLine, b"the password x", 4));
        assert!(!context_allows(
            Before::NetrcLine,
            b"machine h\nthe password x",
            14
        ));
    }

    #[test]
    fn a_curl_user_flag_counts_within_the_command_and_its_continuations() {
        assert!(same_command_has_user_flag(b"curl -s -u a:b https://x"));
        assert!(same_command_has_user_flag(
            b"curl -s \\\n  --user a:b https://x"
        ));
        assert!(!same_command_has_user_flag(
            b"curl -s https://x\nsudo -u root ls"
        ));
    }
}
