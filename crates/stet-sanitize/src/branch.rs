//! Branch names and commit SHAs are checked here before stet pushes anything (ADR-0018, row 5).
//!
//! A branch name reaches stet from a brief, which is untrusted text. Before any push, the name must
//! pass git's own ref-format rules and a set of product rules that keep stet away from protected
//! branches, from names git could read as something else (a remote ref, a revision, an abbreviated
//! SHA, an option) and from characters a person cannot see. Commit SHAs are accepted only in their
//! one canonical spelling, so a SHA in a journal or an event always names exactly one object.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest branch name [`BranchValidator::validate`] accepts, in bytes.
///
/// Loose refs are files under `.git/refs/heads/`, and 255 bytes is the usual file-name limit; a name
/// this long is already unreadable in a pull-request list.
pub const MAX_BRANCH_NAME_BYTES: usize = 255;

/// Longest `/`-separated component of a branch name [`BranchValidator::validate`] accepts, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 200;

/// Names no dispatch may push to, compared case-insensitively with the whole branch name (the ADR's list).
pub const DEFAULT_DENYLIST: [&str; 5] = ["main", "master", "develop", "trunk", "HEAD"];

/// Prefixes that make a branch name read like a fully or partly qualified ref, compared case-insensitively.
const REF_LIKE_PREFIXES: [&str; 5] = ["refs/", "heads/", "tags/", "remotes/", "origin/"];

/// Pseudo-refs git keeps beside `HEAD`; a branch with one of these names is ambiguous in every git command.
const PSEUDO_REFS: [&str; 6] = [
    "FETCH_HEAD",
    "ORIG_HEAD",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "BISECT_HEAD",
];

/// Shortest all-hex name refused because git could read it as an abbreviated commit SHA.
const MIN_SHA_LIKE_LENGTH: usize = 7;

/// A SHA-1 object name in hex.
const SHA1_HEX_LENGTH: usize = 40;

/// A SHA-256 object name in hex.
const SHA256_HEX_LENGTH: usize = 64;

/// Why a branch name or a commit SHA was refused. Offsets are byte offsets into the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum BranchError {
    #[error("the branch name is empty")]
    Empty,

    #[error("the branch name is {length} bytes long; branch names are limited to {limit} bytes")]
    TooLong { length: usize, limit: usize },

    #[error(
        "the path component at byte {offset} of the branch name is {length} bytes long; components are limited to {limit} bytes"
    )]
    ComponentTooLong {
        offset: usize,
        length: usize,
        limit: usize,
    },

    #[error("the branch name contains the whitespace character {character:?} at byte {offset}")]
    Whitespace { offset: usize, character: char },

    #[error("the branch name contains the control character {character:?} at byte {offset}")]
    ControlCharacter { offset: usize, character: char },

    #[error("the branch name contains a backslash at byte {offset}")]
    Backslash { offset: usize },

    #[error(
        "the branch name contains {character:?} at byte {offset}; git does not allow ~ ^ : ? * [ in ref names"
    )]
    ForbiddenCharacter { offset: usize, character: char },

    #[error(
        "the branch name contains the non-ASCII character {character:?} at byte {offset}; stet accepts only ASCII branch names, so look-alike and invisible characters cannot hide in one"
    )]
    NonAscii { offset: usize, character: char },

    #[error("the branch name contains \"..\" at byte {offset}")]
    DoubleDot { offset: usize },

    #[error("the branch name contains \"@{{\" at byte {offset}")]
    AtBrace { offset: usize },

    #[error("the branch name contains \"//\" (an empty path component) at byte {offset}")]
    DoubleSlash { offset: usize },

    #[error("the branch name starts with \"/\"")]
    LeadingSlash,

    #[error("the branch name ends with \"/\"")]
    TrailingSlash,

    #[error("the branch name ends with \".\"")]
    TrailingDot,

    #[error(
        "the path component {component:?} at byte {offset} of the branch name starts with \".\""
    )]
    ComponentStartsWithDot { offset: usize, component: String },

    #[error(
        "the path component {component:?} at byte {offset} of the branch name ends with \".lock\""
    )]
    ComponentEndsWithLock { offset: usize, component: String },

    #[error("the branch name is \"@\", which git reads as HEAD")]
    LoneAt,

    #[error("the branch name starts with \"-\", which git commands would read as an option")]
    LeadingDash,

    #[error("the branch name {name:?} is a protected branch that a dispatch never pushes to")]
    Denylisted { name: String },

    #[error(
        "the branch name {name:?} is the base branch {base:?}; a dispatch must push to a branch of its own"
    )]
    CollidesWithBase { name: String, base: String },

    #[error(
        "the branch name starts with {prefix:?}, so it reads like a qualified ref rather than a branch"
    )]
    RefLikePrefix { prefix: String },

    #[error("the branch name {name:?} is the name of a git pseudo-ref")]
    PseudoRef { name: String },

    #[error(
        "the branch name {name:?} is made only of hex digits, so git could read it as an abbreviated commit SHA"
    )]
    ShaLike { name: String },

    #[error(
        "the commit SHA has {character:?} at byte {offset}; a commit SHA is written in lowercase hex digits only"
    )]
    CommitShaCharacter { offset: usize, character: char },

    #[error(
        "the commit SHA is {length} characters long; a commit SHA has exactly 40 (SHA-1) or 64 (SHA-256) hex digits"
    )]
    CommitShaLength { length: usize },
}

/// Result of branch and SHA validation.
pub type Result<T> = std::result::Result<T, BranchError>;

/// Decides whether stet may push a branch with a given name.
///
/// [`Default`] holds the ADR's denylist ([`DEFAULT_DENYLIST`]).
#[derive(Debug, Clone)]
pub struct BranchValidator {
    denylist: Vec<String>,
}

impl Default for BranchValidator {
    fn default() -> Self {
        Self::with_denylist(DEFAULT_DENYLIST)
    }
}

impl BranchValidator {
    /// A validator that refuses the given names (case-insensitively) instead of the default denylist.
    pub fn with_denylist<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            denylist: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Checks a branch stet is about to push: git's ref-format rules for `refs/heads/<name>` plus
    /// stet's own rules (ASCII only, no whitespace, length limits, no leading `-`, not denylisted,
    /// not the base branch, not ref-like, not a pseudo-ref, not an abbreviated SHA).
    pub fn validate(&self, name: &str, base: Option<&str>) -> Result<()> {
        if name.is_empty() {
            return Err(BranchError::Empty);
        }
        if name.len() > MAX_BRANCH_NAME_BYTES {
            return Err(BranchError::TooLong {
                length: name.len(),
                limit: MAX_BRANCH_NAME_BYTES,
            });
        }
        check_characters(name, Charset::PlainAscii)?;
        check_git_structure(name)?;
        check_component_lengths(name)?;
        self.check_product_names(name, base)
    }

    fn check_product_names(&self, name: &str, base: Option<&str>) -> Result<()> {
        if name == "@" {
            return Err(BranchError::LoneAt);
        }
        if name.starts_with('-') {
            return Err(BranchError::LeadingDash);
        }
        if self
            .denylist
            .iter()
            .any(|denied| denied.eq_ignore_ascii_case(name))
        {
            return Err(BranchError::Denylisted {
                name: name.to_owned(),
            });
        }
        if let Some(base) = base
            && base.eq_ignore_ascii_case(name)
        {
            return Err(BranchError::CollidesWithBase {
                name: name.to_owned(),
                base: base.to_owned(),
            });
        }
        if let Some(prefix) = REF_LIKE_PREFIXES.iter().find_map(|prefix| {
            name.get(..prefix.len())
                .filter(|head| head.eq_ignore_ascii_case(prefix))
        }) {
            return Err(BranchError::RefLikePrefix {
                prefix: prefix.to_owned(),
            });
        }
        if PSEUDO_REFS
            .iter()
            .any(|pseudo| pseudo.eq_ignore_ascii_case(name))
        {
            return Err(BranchError::PseudoRef {
                name: name.to_owned(),
            });
        }
        if name.len() >= MIN_SHA_LIKE_LENGTH && name.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(BranchError::ShaLike {
                name: name.to_owned(),
            });
        }
        Ok(())
    }
}

/// Checks only git's own rules for `refs/heads/<name>`, exactly as `git check-ref-format` does.
///
/// This is for names stet does not choose, such as a base branch: `main` passes here while
/// [`BranchValidator::validate`] refuses it.
pub fn validate_ref_format(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(BranchError::Empty);
    }
    check_characters(name, Charset::Git)?;
    check_git_structure(name)
}

/// Git's rules about where `/` and `.` may stand, once every character is known to be allowed.
fn check_git_structure(name: &str) -> Result<()> {
    if name.starts_with('/') {
        return Err(BranchError::LeadingSlash);
    }
    if name.ends_with('/') {
        return Err(BranchError::TrailingSlash);
    }
    for (offset, component) in components_with_offsets(name) {
        if component.starts_with('.') {
            return Err(BranchError::ComponentStartsWithDot {
                offset,
                component: component.to_owned(),
            });
        }
        if component.ends_with(".lock") {
            return Err(BranchError::ComponentEndsWithLock {
                offset,
                component: component.to_owned(),
            });
        }
    }
    if name.ends_with('.') {
        return Err(BranchError::TrailingDot);
    }
    Ok(())
}

/// Which characters a name may use: the ones git allows, or stet's stricter ASCII-only set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Charset {
    /// Whatever `git check-ref-format` allows, non-ASCII included.
    Git,
    /// Stet's stricter set for names it pushes: ASCII only, so no whitespace of any script,
    /// no look-alikes and nothing invisible.
    PlainAscii,
}

/// Finds the first character that breaks a rule: git's (no control characters, space,
/// `~ ^ : ? * [ \`, `..`, `@{` or `//`) and, with [`Charset::PlainAscii`], stet's.
fn check_characters(name: &str, charset: Charset) -> Result<()> {
    let mut previous = None;
    for (offset, character) in name.char_indices() {
        match character {
            ' ' | '\t' | '\n' | '\r' | '\u{0c}' => {
                return Err(BranchError::Whitespace { offset, character });
            }
            character if character.is_ascii_control() => {
                return Err(BranchError::ControlCharacter { offset, character });
            }
            '\\' => return Err(BranchError::Backslash { offset }),
            '~' | '^' | ':' | '?' | '*' | '[' => {
                return Err(BranchError::ForbiddenCharacter { offset, character });
            }
            '.' if previous == Some('.') => {
                return Err(BranchError::DoubleDot { offset: offset - 1 });
            }
            '{' if previous == Some('@') => {
                return Err(BranchError::AtBrace { offset: offset - 1 });
            }
            '/' if previous == Some('/') => {
                return Err(BranchError::DoubleSlash { offset: offset - 1 });
            }
            character if charset == Charset::PlainAscii && character.is_whitespace() => {
                return Err(BranchError::Whitespace { offset, character });
            }
            character if charset == Charset::PlainAscii && !character.is_ascii() => {
                return Err(BranchError::NonAscii { offset, character });
            }
            _ => {}
        }
        previous = Some(character);
    }
    Ok(())
}

fn check_component_lengths(name: &str) -> Result<()> {
    match components_with_offsets(name).find(|(_, component)| component.len() > MAX_COMPONENT_BYTES)
    {
        Some((offset, component)) => Err(BranchError::ComponentTooLong {
            offset,
            length: component.len(),
            limit: MAX_COMPONENT_BYTES,
        }),
        None => Ok(()),
    }
}

/// The `/`-separated components of a name, each with the byte offset where it starts.
fn components_with_offsets(name: &str) -> impl Iterator<Item = (usize, &str)> {
    name.split('/').scan(0, |offset, component| {
        let start = *offset;
        *offset += component.len() + 1;
        Some((start, component))
    })
}

/// A full commit object name: exactly 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub struct CommitSha(String);

impl CommitSha {
    /// Accepts the canonical spelling only: no uppercase, no prefix, no surrounding whitespace, no abbreviation.
    pub fn parse(text: &str) -> Result<Self> {
        if let Some((offset, character)) = text
            .char_indices()
            .find(|(_, character)| !matches!(character, '0'..='9' | 'a'..='f'))
        {
            return Err(BranchError::CommitShaCharacter { offset, character });
        }
        match text.len() {
            SHA1_HEX_LENGTH | SHA256_HEX_LENGTH => Ok(Self(text.to_owned())),
            length => Err(BranchError::CommitShaLength { length }),
        }
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CommitSha {
    type Error = BranchError;

    fn try_from(text: String) -> Result<Self> {
        Self::parse(&text)
    }
}

impl fmt::Display for CommitSha {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(name: &str) -> Result<()> {
        BranchValidator::default().validate(name, Some("release"))
    }

    #[test]
    fn accepts_ordinary_branch_names() {
        for name in [
            "stet/fix-login",
            "feature/x.y",
            "stet/brief-1a2b",
            "a",
            "fix_42",
            "user@host",
            "a./b",
            "stet/deadbeef",
            "abc1234x",
            "mainline",
            "main2",
            "x/main",
        ] {
            assert_eq!(validate(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn refuses_an_empty_name() {
        assert_eq!(validate(""), Err(BranchError::Empty));
        assert_eq!(validate_ref_format(""), Err(BranchError::Empty));
    }

    #[test]
    fn refuses_traversal() {
        assert_eq!(
            validate("../evil"),
            Err(BranchError::DoubleDot { offset: 0 })
        );
        assert_eq!(
            validate("./evil"),
            Err(BranchError::ComponentStartsWithDot {
                offset: 0,
                component: ".".to_owned()
            })
        );
        assert_eq!(
            validate("stet/../evil"),
            Err(BranchError::DoubleDot { offset: 5 })
        );
        assert_eq!(validate("a..b"), Err(BranchError::DoubleDot { offset: 1 }));
    }

    #[test]
    fn refuses_denylisted_names_in_any_case() {
        for name in ["main", "MAIN", "Master", "develop", "TRUNK", "HEAD", "head"] {
            assert_eq!(
                validate(name),
                Err(BranchError::Denylisted {
                    name: name.to_owned()
                }),
                "{name}"
            );
        }
    }

    #[test]
    fn a_custom_denylist_replaces_the_default() {
        let validator = BranchValidator::with_denylist(["production"]);
        assert!(matches!(
            validator.validate("PRODUCTION", None),
            Err(BranchError::Denylisted { .. })
        ));
        assert_eq!(validator.validate("main", None), Ok(()));
    }

    #[test]
    fn refuses_the_base_branch_in_any_case() {
        let validator = BranchValidator::default();
        assert_eq!(
            validator.validate("Release/2.0", Some("release/2.0")),
            Err(BranchError::CollidesWithBase {
                name: "Release/2.0".to_owned(),
                base: "release/2.0".to_owned()
            })
        );
        assert_eq!(
            validator.validate("release/2.1", Some("release/2.0")),
            Ok(())
        );
        assert_eq!(validator.validate("release/2.0", None), Ok(()));
    }

    #[test]
    fn refuses_slashes_in_the_wrong_places() {
        assert_eq!(
            validate("a//b"),
            Err(BranchError::DoubleSlash { offset: 1 })
        );
        assert_eq!(validate("/a"), Err(BranchError::LeadingSlash));
        assert_eq!(validate("a/"), Err(BranchError::TrailingSlash));
        assert_eq!(validate("/"), Err(BranchError::LeadingSlash));
    }

    #[test]
    fn refuses_dot_rules() {
        assert_eq!(
            validate("x.lock"),
            Err(BranchError::ComponentEndsWithLock {
                offset: 0,
                component: "x.lock".to_owned()
            })
        );
        assert_eq!(
            validate("a/b.lock/c"),
            Err(BranchError::ComponentEndsWithLock {
                offset: 2,
                component: "b.lock".to_owned()
            })
        );
        assert_eq!(
            validate("a/.hidden"),
            Err(BranchError::ComponentStartsWithDot {
                offset: 2,
                component: ".hidden".to_owned()
            })
        );
        assert_eq!(validate("a."), Err(BranchError::TrailingDot));
        assert_eq!(validate("a/b."), Err(BranchError::TrailingDot));
    }

    #[test]
    fn refuses_at_rules() {
        assert_eq!(validate("@"), Err(BranchError::LoneAt));
        assert_eq!(validate("a@{b"), Err(BranchError::AtBrace { offset: 1 }));
        assert_eq!(validate("@{-1}"), Err(BranchError::AtBrace { offset: 0 }));
    }

    #[test]
    fn refuses_a_leading_dash() {
        assert_eq!(validate("-x"), Err(BranchError::LeadingDash));
        assert_eq!(validate("--force"), Err(BranchError::LeadingDash));
    }

    #[test]
    fn refuses_characters_git_forbids() {
        for (name, character) in [
            ("a~1", '~'),
            ("a^2", '^'),
            ("a:b", ':'),
            ("a?b", '?'),
            ("a*b", '*'),
            ("a[b", '['),
        ] {
            assert_eq!(
                validate(name),
                Err(BranchError::ForbiddenCharacter {
                    offset: 1,
                    character
                }),
                "{name}"
            );
        }
        assert_eq!(validate("a\\b"), Err(BranchError::Backslash { offset: 1 }));
    }

    #[test]
    fn refuses_whitespace_and_control_characters() {
        assert_eq!(
            validate("a b"),
            Err(BranchError::Whitespace {
                offset: 1,
                character: ' '
            })
        );
        assert_eq!(
            validate("ab\tc"),
            Err(BranchError::Whitespace {
                offset: 2,
                character: '\t'
            })
        );
        assert_eq!(
            validate("a\nb"),
            Err(BranchError::Whitespace {
                offset: 1,
                character: '\n'
            })
        );
        assert_eq!(
            validate("a\u{0}b"),
            Err(BranchError::ControlCharacter {
                offset: 1,
                character: '\u{0}'
            })
        );
        assert_eq!(
            validate("a\u{1b}[31m"),
            Err(BranchError::ControlCharacter {
                offset: 1,
                character: '\u{1b}'
            })
        );
        assert_eq!(
            validate("a\u{7f}"),
            Err(BranchError::ControlCharacter {
                offset: 1,
                character: '\u{7f}'
            })
        );
        assert_eq!(
            validate("a\u{a0}b"),
            Err(BranchError::Whitespace {
                offset: 1,
                character: '\u{a0}'
            })
        );
    }

    #[test]
    fn reports_the_first_offending_character() {
        assert_eq!(
            validate("a b\u{430}"),
            Err(BranchError::Whitespace {
                offset: 1,
                character: ' '
            })
        );
        assert_eq!(
            validate("\u{430}a b"),
            Err(BranchError::NonAscii {
                offset: 0,
                character: '\u{430}'
            })
        );
    }

    #[test]
    fn refuses_non_ascii_lookalikes_and_invisible_characters() {
        assert_eq!(
            validate("stet/fix\u{200b}-login"),
            Err(BranchError::NonAscii {
                offset: 8,
                character: '\u{200b}'
            })
        );
        // "mаin" with a Cyrillic "а" (U+0430) looks like the protected "main".
        assert_eq!(
            validate("m\u{430}in"),
            Err(BranchError::NonAscii {
                offset: 1,
                character: '\u{430}'
            })
        );
        assert_eq!(
            validate("fix\u{202e}nigol"),
            Err(BranchError::NonAscii {
                offset: 3,
                character: '\u{202e}'
            })
        );
    }

    #[test]
    fn refuses_ref_like_names() {
        for (name, prefix) in [
            ("refs/heads/x", "refs/"),
            ("heads/x", "heads/"),
            ("Tags/v1", "Tags/"),
            ("remotes/origin/x", "remotes/"),
            ("origin/feature", "origin/"),
        ] {
            assert_eq!(
                validate(name),
                Err(BranchError::RefLikePrefix {
                    prefix: prefix.to_owned()
                }),
                "{name}"
            );
        }
        for name in ["FETCH_HEAD", "orig_head", "MERGE_HEAD", "CHERRY_PICK_HEAD"] {
            assert_eq!(
                validate(name),
                Err(BranchError::PseudoRef {
                    name: name.to_owned()
                }),
                "{name}"
            );
        }
    }

    #[test]
    fn refuses_names_that_read_as_a_sha() {
        let full = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            validate(full),
            Err(BranchError::ShaLike {
                name: full.to_owned()
            })
        );
        assert!(matches!(
            validate("DEADBEEF"),
            Err(BranchError::ShaLike { .. })
        ));
        assert!(matches!(
            validate("abc1234"),
            Err(BranchError::ShaLike { .. })
        ));
        assert_eq!(validate("abc123"), Ok(()));
    }

    #[test]
    fn refuses_over_long_names_and_components() {
        let long_component = format!("stet/{}", "a".repeat(MAX_COMPONENT_BYTES + 1));
        assert_eq!(
            validate(&long_component),
            Err(BranchError::ComponentTooLong {
                offset: 5,
                length: MAX_COMPONENT_BYTES + 1,
                limit: MAX_COMPONENT_BYTES
            })
        );
        let at_limit = format!("stet/{}", "a".repeat(MAX_COMPONENT_BYTES));
        assert_eq!(validate(&at_limit), Ok(()));

        let long_name = format!("{}/{}", "a".repeat(150), "b".repeat(150));
        assert_eq!(
            validate(&long_name),
            Err(BranchError::TooLong {
                length: 301,
                limit: MAX_BRANCH_NAME_BYTES
            })
        );
    }

    #[test]
    fn ref_format_accepts_protected_and_unusual_names_git_accepts() {
        for name in [
            "main",
            "HEAD",
            "@",
            "-x",
            "refs/heads/x",
            "caf\u{e9}",
            "a\u{a0}b",
        ] {
            assert_eq!(validate_ref_format(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn ref_format_refuses_what_git_refuses() {
        for name in [
            "a..b", "a//b", "/a", "a/", "a.", ".a", "a.lock", "a b", "a@{b", "a\\b",
        ] {
            assert!(validate_ref_format(name).is_err(), "{name}");
        }
    }

    #[test]
    fn error_messages_name_the_rule_and_the_place() {
        assert_eq!(
            BranchError::DoubleDot { offset: 4 }.to_string(),
            "the branch name contains \"..\" at byte 4"
        );
        assert_eq!(
            BranchError::NonAscii {
                offset: 3,
                character: '\u{200b}'
            }
            .to_string(),
            "the branch name contains the non-ASCII character '\\u{200b}' at byte 3; stet accepts only ASCII branch names, so look-alike and invisible characters cannot hide in one"
        );
    }

    const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";
    const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn commit_sha_accepts_full_lowercase_hex() {
        assert_eq!(CommitSha::parse(SHA1).unwrap().as_str(), SHA1);
        assert_eq!(CommitSha::parse(SHA256).unwrap().to_string(), SHA256);
    }

    #[test]
    fn commit_sha_refuses_other_spellings() {
        assert_eq!(
            CommitSha::parse(&SHA1.to_uppercase()),
            Err(BranchError::CommitShaCharacter {
                offset: 10,
                character: 'A'
            })
        );
        assert_eq!(
            CommitSha::parse(&SHA1[..39]),
            Err(BranchError::CommitShaLength { length: 39 })
        );
        assert_eq!(
            CommitSha::parse(&format!("{SHA1}0")),
            Err(BranchError::CommitShaLength { length: 41 })
        );
        assert_eq!(
            CommitSha::parse(&SHA256[..63]),
            Err(BranchError::CommitShaLength { length: 63 })
        );
        assert_eq!(
            CommitSha::parse(&format!("{}g", &SHA1[..39])),
            Err(BranchError::CommitShaCharacter {
                offset: 39,
                character: 'g'
            })
        );
        assert_eq!(
            CommitSha::parse(&format!(" {}", &SHA1[..39])),
            Err(BranchError::CommitShaCharacter {
                offset: 0,
                character: ' '
            })
        );
        assert_eq!(
            CommitSha::parse(&format!("{SHA1}\n")),
            Err(BranchError::CommitShaCharacter {
                offset: 40,
                character: '\n'
            })
        );
        assert_eq!(
            CommitSha::parse(""),
            Err(BranchError::CommitShaLength { length: 0 })
        );
    }

    #[test]
    fn commit_sha_round_trips_through_serde_and_validates_on_the_way_in() {
        let sha = CommitSha::parse(SHA1).unwrap();
        let json = serde_json::to_string(&sha).unwrap();
        assert_eq!(json, format!("\"{SHA1}\""));
        assert_eq!(serde_json::from_str::<CommitSha>(&json).unwrap(), sha);
        assert!(serde_json::from_str::<CommitSha>("\"ABC\"").is_err());
        assert!(serde_json::from_str::<CommitSha>("\"abc123\"").is_err());
    }
}
