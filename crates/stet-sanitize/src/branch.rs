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

    #[error(
        "the branch name contains {code_point} at byte {offset}, a control, invisible or text-direction character: it would make the name display as something else (or drive the terminal), so stet refuses it"
    )]
    Invisible { offset: usize, code_point: String },

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

/// Checks git's own rules for `refs/heads/<name>`, as `git check-ref-format` does, and refuses
/// what the display policy would not show (C1 controls, bidirectional and other invisible format
/// characters; [`crate::display::treatment`]), which git accepts: such a name would reach every
/// terminal that prints it.
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
            character
                if !character.is_ascii()
                    && crate::display::treatment(character) != crate::display::Treatment::Keep =>
            {
                return Err(BranchError::Invisible {
                    offset,
                    code_point: format!("U+{:04X}", u32::from(character)),
                });
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
mod tests;
