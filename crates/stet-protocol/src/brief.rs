//! Briefs are the only input a person writes for a dispatch; this module turns one TOML file into a
//! checked [`Brief`] or into an error that names the file, line, column and field.
//!
//! A brief is untrusted data. Parsing refuses unknown fields, oversized files and invalid UTF-8, and
//! checks every value before anything downstream sees it: the branch name against
//! [`BranchValidator`], the base against git's ref-format rules, anchors against path traversal.
//! Nothing in a brief is ever interpreted; its text only travels as data.

use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;
use toml::de::DeTable;

use crate::host_file::line_and_column;
use field_path::field_path_at;
use stet_sanitize::branch::{BranchError, BranchValidator, validate_ref_format};

/// Largest brief file stet reads, in bytes (1 MiB).
pub const MAX_BRIEF_BYTES: u64 = 1024 * 1024;

/// Most TOML marks (`=`, `,`, `[`, `{`, `.` outside strings: about one per key, value or table) a
/// brief may hold: a title, a target and some hundreds of items with anchors. Counted before
/// parsing, because 1 MiB of tiny inline tables takes the parser seconds and over 100 MiB.
pub const MAX_BRIEF_MARKS: usize = 4096;

/// Longest brief id (the file stem), in bytes.
pub const MAX_ID_BYTES: usize = 64;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Highest line number an anchor may name.
pub const MAX_ANCHOR_LINE: u32 = 10_000_000;

const MAX_WORKFLOW_NAME_BYTES: usize = 64;
/// Longest owner or repository name of a target, in bytes.
pub const MAX_REPO_PART_BYTES: usize = 100;
/// Most parts of a target's repository: an owner and a name, or GitLab's groups nested 20 deep and
/// a name.
pub const MAX_REPO_PARTS: usize = 21;
const MAX_ANCHOR_PATH_BYTES: usize = 4096;

/// Why a brief could not be read or was refused.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum BriefError {
    #[error("{}: cannot read the brief: {error}", shown_path(file))]
    Read { file: PathBuf, error: io::Error },

    #[error("{}: a brief must be a regular file", shown_path(file))]
    NotAFile { file: PathBuf },

    #[error(
        "{}: not read: a brief in the inbox must be a regular file, not a link (a link could point at any file of yours)",
        shown_path(file)
    )]
    Link { file: PathBuf },

    #[error(
        "{}: the brief is {size} bytes; briefs are limited to {limit} bytes (1 MiB)",
        shown_path(file)
    )]
    TooLarge {
        file: PathBuf,
        size: u64,
        limit: u64,
    },

    #[error(
        "{}: not parsed: the brief holds {marks} TOML keys, values and brackets and stet parses at most {limit} in one brief (a brief is a title, a target and some items of prose)",
        shown_path(file)
    )]
    TooCostly {
        file: PathBuf,
        marks: usize,
        limit: usize,
    },

    #[error(
        "{}:{line}:{column}: the brief is not valid UTF-8 text",
        shown_path(file)
    )]
    NotUtf8 {
        file: PathBuf,
        line: usize,
        column: usize,
    },

    #[error(
        "{}: the brief id {id:?} (the file name without `.toml`) must be 1 to 64 characters of a-z, 0-9, `_` and `-`, starting with a letter or a digit",
        shown_path(file)
    )]
    InvalidId { file: PathBuf, id: String },

    #[error(
        "{}:{line}:{column}: {}{message}",
        shown_path(file),
        field_prefix(field)
    )]
    Toml {
        file: PathBuf,
        line: usize,
        column: usize,
        field: Option<String>,
        message: String,
    },

    #[error("{}:{line}:{column}: field `{field}`: {problem}", shown_path(file))]
    Invalid {
        file: PathBuf,
        line: usize,
        column: usize,
        field: String,
        problem: String,
    },

    #[error("{}:{line}:{column}: field `{field}`: {reason}", shown_path(file))]
    Branch {
        file: PathBuf,
        line: usize,
        column: usize,
        field: String,
        reason: BranchError,
    },
}

/// Result of reading a brief.
pub type Result<T> = std::result::Result<T, BriefError>;

/// One checked brief: what to change, where, and how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Brief {
    /// The file stem; safe to use inside a branch name.
    pub id: String,
    /// One line saying what the brief is for; the pull request's title.
    pub title: String,
    /// Name of the workflow (instruction template) to run, e.g. `implement`.
    pub workflow: String,
    /// Where the result goes.
    pub target: Target,
    /// At least one.
    pub items: Vec<Item>,
}

/// Where the result of a dispatch goes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// Forge repository, `owner/name` (`group/subgroup/name` on GitLab).
    pub repo: String,
    /// Branch the work starts from; passes git's ref-format rules.
    pub base: String,
    /// Branch to push; passes [`BranchValidator::validate`]. `None` lets the engine choose one.
    pub branch: Option<String>,
    /// Existing pull request to update instead of opening a new one.
    pub pr: Option<u64>,
}

/// One thing the agent should do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    /// What to do, in the person's words.
    pub text: String,
    /// The code it is about, when it names some.
    pub anchor: Option<Anchor>,
}

/// Coordinates of the code an item is about. Only these travel to the agent, never file contents.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anchor {
    /// Relative path inside the repository.
    pub path: String,
    /// First and last line, inclusive, 1-based.
    pub lines: Option<(u32, u32)>,
}

impl Brief {
    /// Reads and checks the brief at `path`; its id is the file stem.
    pub fn from_file(path: &Path) -> Result<Self> {
        let (id, text) = Self::read_file(path)?;
        Self::parse(&id, path, &text)
    }

    /// The id and the text of the brief file at `path`, unparsed: the id (the file stem) checked
    /// first, so a file that cannot be a brief costs no I/O, then at most [`MAX_BRIEF_BYTES`] of
    /// UTF-8 read from a regular file.
    pub fn read_file(path: &Path) -> Result<(String, String)> {
        let id = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_id(&id, path)?;
        let text = read_text(path)?;
        Ok((id, text))
    }

    /// Checks the brief `text` read from `source` (named in errors) under the id `id`.
    pub fn parse(id: &str, source: &Path, text: &str) -> Result<Self> {
        check_id(id, source)?;
        let size = u64::try_from(text.len()).unwrap_or(u64::MAX);
        if size > MAX_BRIEF_BYTES {
            return Err(BriefError::TooLarge {
                file: source.to_owned(),
                size,
                limit: MAX_BRIEF_BYTES,
            });
        }
        let marks = crate::toml_marks::count(text);
        if marks > MAX_BRIEF_MARKS {
            return Err(BriefError::TooCostly {
                file: source.to_owned(),
                marks,
                limit: MAX_BRIEF_MARKS,
            });
        }
        let document = Document { file: source, text };
        let raw = document.deserialize()?;
        document.check(id, raw)
    }
}

fn check_id(id: &str, file: &Path) -> Result<()> {
    if is_simple_name(id, MAX_ID_BYTES, b"_-") {
        Ok(())
    } else {
        Err(BriefError::InvalidId {
            file: file.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// Whether `name` is 1 to `max_bytes` bytes of `a-z`, `0-9` and `punctuation`, starting with a
/// letter or a digit.
fn is_simple_name(name: &str, max_bytes: usize, punctuation: &[u8]) -> bool {
    let lowercase_or_digit = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    match name.as_bytes() {
        [first, rest @ ..] => {
            name.len() <= max_bytes
                && lowercase_or_digit(first)
                && rest
                    .iter()
                    .all(|byte| lowercase_or_digit(byte) || punctuation.contains(byte))
        }
        [] => false,
    }
}

fn read_text(path: &Path) -> Result<String> {
    let read_error = |error| BriefError::Read {
        file: path.to_owned(),
        error,
    };
    let too_large = |size| BriefError::TooLarge {
        file: path.to_owned(),
        size,
        limit: MAX_BRIEF_BYTES,
    };
    let not_a_file = || BriefError::NotAFile {
        file: path.to_owned(),
    };
    // Checked before opening: opening a FIFO for reading would block until something writes to it.
    if !std::fs::metadata(path).map_err(read_error)?.is_file() {
        return Err(not_a_file());
    }
    let file = File::open(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(not_a_file());
    }
    if metadata.len() > MAX_BRIEF_BYTES {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BRIEF_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > MAX_BRIEF_BYTES {
        return Err(too_large(size));
    }
    String::from_utf8(bytes).map_err(|error| {
        let valid = error
            .as_bytes()
            .get(..error.utf8_error().valid_up_to())
            .unwrap_or_default();
        let prefix = std::str::from_utf8(valid).unwrap_or_default();
        let (line, column) = line_and_column(prefix, prefix.len());
        BriefError::NotUtf8 {
            file: path.to_owned(),
            line,
            column,
        }
    })
}

/// The brief as TOML gives it, before any checks; every value keeps its span for error messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBrief {
    title: Option<Spanned<String>>,
    workflow: Option<Spanned<String>>,
    target: Option<Spanned<RawTarget>>,
    items: Option<Spanned<Vec<Spanned<RawItem>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    repo: Option<Spanned<String>>,
    base: Option<Spanned<String>>,
    branch: Option<Spanned<String>>,
    pr: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    text: Option<Spanned<String>>,
    anchor: Option<Spanned<RawAnchor>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnchor {
    path: Option<Spanned<String>>,
    lines: Option<Spanned<Vec<Spanned<i64>>>>,
}

/// One brief's text and where it came from, so every error can point into it.
struct Document<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Document<'_> {
    fn deserialize(&self) -> Result<RawBrief> {
        toml::from_str::<RawBrief>(self.text).map_err(|error| {
            let offset = error.span().map_or(0, |span| span.start);
            let (line, column) = line_and_column(self.text, offset);
            let (tree, _) = DeTable::parse_recoverable(self.text);
            BriefError::Toml {
                file: self.file.to_owned(),
                line,
                column,
                field: field_path_at(tree.get_ref(), self.text, offset),
                message: stet_sanitize::display::escaped_invisible(error.message()).into_owned(),
            }
        })
    }

    fn check(&self, id: &str, raw: RawBrief) -> Result<Brief> {
        let whole_document = 0..0;
        let title = self.required(raw.title, &whole_document, "title")?;
        let workflow = self.required(raw.workflow, &whole_document, "workflow")?;
        let target = self.required(raw.target, &whole_document, "target")?;
        let items = self.required(raw.items, &whole_document, "items")?;
        Ok(Brief {
            id: id.to_owned(),
            title: self.check_title(&title)?,
            workflow: self.check_workflow_name(&workflow)?,
            target: self.check_target(target)?,
            items: self.check_items(items)?,
        })
    }

    fn check_title(&self, title: &Spanned<String>) -> Result<String> {
        let trimmed = title.get_ref().trim();
        let problem = if trimmed.is_empty() {
            Some("the title is empty".to_owned())
        } else if trimmed.chars().count() > MAX_TITLE_CHARS {
            Some(format!(
                "the title is longer than {MAX_TITLE_CHARS} characters"
            ))
        } else {
            trimmed
                .chars()
                .find(|character| is_control_or_direction_override(*character))
                .map(|character| {
                    format!(
                        "the title contains the control or text-direction character {}",
                        character.escape_unicode()
                    )
                })
        };
        match problem {
            Some(problem) => Err(self.invalid(title.span(), "title", problem)),
            None => Ok(trimmed.to_owned()),
        }
    }

    fn check_workflow_name(&self, workflow: &Spanned<String>) -> Result<String> {
        let name = workflow.get_ref();
        if is_simple_name(name, MAX_WORKFLOW_NAME_BYTES, b"-") {
            Ok(name.clone())
        } else {
            Err(self.invalid(
                workflow.span(),
                "workflow",
                format!(
                    "the workflow name \"{}\" must be 1 to {MAX_WORKFLOW_NAME_BYTES} characters of a-z, 0-9 and `-`, starting with a letter or a digit",
                    stet_sanitize::display::escaped_invisible(name)
                ),
            ))
        }
    }

    fn check_target(&self, target: Spanned<RawTarget>) -> Result<Target> {
        let table = target.span();
        let raw = target.into_inner();
        let repo = self.required(raw.repo, &table, "target.repo")?;
        let base = self.required(raw.base, &table, "target.base")?;
        self.check_repo(&repo)?;
        validate_ref_format(base.get_ref())
            .map_err(|reason| self.branch_error(base.span(), "target.base", reason))?;
        if let Some(branch) = &raw.branch {
            BranchValidator::default()
                .validate(branch.get_ref(), Some(base.get_ref()))
                .map_err(|reason| self.branch_error(branch.span(), "target.branch", reason))?;
        }
        let pr = raw.pr.map(|pr| self.check_pr(&pr)).transpose()?;
        Ok(Target {
            repo: repo.into_inner(),
            base: base.into_inner(),
            branch: raw.branch.map(Spanned::into_inner),
            pr,
        })
    }

    fn check_pr(&self, pr: &Spanned<i64>) -> Result<u64> {
        match u64::try_from(*pr.get_ref()) {
            Ok(number) if number >= 1 => Ok(number),
            _ => Err(self.invalid(
                pr.span(),
                "target.pr",
                format!("a pull request number is 1 or more, not {}", pr.get_ref()),
            )),
        }
    }

    fn check_repo(&self, repo: &Spanned<String>) -> Result<()> {
        match repo_problem(repo.get_ref()) {
            Some(problem) => Err(self.invalid(
                repo.span(),
                "target.repo",
                format!(
                    "the repository \"{}\" {problem}",
                    stet_sanitize::display::escaped_invisible(repo.get_ref())
                ),
            )),
            None => Ok(()),
        }
    }

    fn check_items(&self, items: Spanned<Vec<Spanned<RawItem>>>) -> Result<Vec<Item>> {
        if items.get_ref().is_empty() {
            return Err(self.invalid(
                items.span(),
                "items",
                "a brief needs at least one item ([[items]] with a `text`)",
            ));
        }
        items
            .into_inner()
            .into_iter()
            .enumerate()
            .map(|(index, item)| self.check_item(index, item))
            .collect()
    }

    fn check_item(&self, index: usize, item: Spanned<RawItem>) -> Result<Item> {
        let field = format!("items[{index}]");
        let table = item.span();
        let raw = item.into_inner();
        let text = self.required(raw.text, &table, &format!("{field}.text"))?;
        let trimmed = text.get_ref().trim();
        let problem = if trimmed.is_empty() {
            Some("the item text is empty".to_owned())
        } else {
            trimmed
                .chars()
                .find(|character| {
                    is_control_or_direction_override(*character)
                        && !matches!(character, '\n' | '\r' | '\t')
                })
                .map(|character| {
                    format!(
                        "the item text contains the control or text-direction character {}",
                        character.escape_unicode()
                    )
                })
        };
        if let Some(problem) = problem {
            return Err(self.invalid(text.span(), &format!("{field}.text"), problem));
        }
        let anchor = raw
            .anchor
            .map(|anchor| self.check_anchor(&format!("{field}.anchor"), anchor))
            .transpose()?;
        Ok(Item {
            text: trimmed.to_owned(),
            anchor,
        })
    }

    fn check_anchor(&self, field: &str, anchor: Spanned<RawAnchor>) -> Result<Anchor> {
        let table = anchor.span();
        let raw = anchor.into_inner();
        let path_field = format!("{field}.path");
        let path = self.required(raw.path, &table, &path_field)?;
        if let Some(problem) = anchor_path_problem(path.get_ref()) {
            return Err(self.invalid(path.span(), &path_field, problem));
        }
        let lines = raw
            .lines
            .map(|lines| self.check_lines(&format!("{field}.lines"), &lines))
            .transpose()?;
        Ok(Anchor {
            path: path.into_inner(),
            lines,
        })
    }

    fn check_lines(&self, field: &str, lines: &Spanned<Vec<Spanned<i64>>>) -> Result<(u32, u32)> {
        let [start, end] = lines.get_ref().as_slice() else {
            return Err(self.invalid(
                lines.span(),
                field,
                format!(
                    "lines must be exactly two numbers, [first, last], not {}",
                    lines.get_ref().len()
                ),
            ));
        };
        let line_number = |line: &Spanned<i64>| {
            u32::try_from(*line.get_ref())
                .ok()
                .filter(|number| (1..=MAX_ANCHOR_LINE).contains(number))
                .ok_or_else(|| {
                    self.invalid(
                        line.span(),
                        field,
                        format!(
                            "line {} is out of range; lines go from 1 to {MAX_ANCHOR_LINE}",
                            line.get_ref()
                        ),
                    )
                })
        };
        let (first, last) = (line_number(start)?, line_number(end)?);
        if first > last {
            return Err(self.invalid(
                lines.span(),
                field,
                format!("the first line ({first}) comes after the last line ({last})"),
            ));
        }
        Ok((first, last))
    }

    /// A value the brief must have; missing, it is reported at the table that should hold it.
    fn required<T>(
        &self,
        value: Option<Spanned<T>>,
        table: &Range<usize>,
        field: &str,
    ) -> Result<Spanned<T>> {
        value.ok_or_else(|| self.invalid(table.clone(), field, "this field is required"))
    }

    fn invalid(&self, span: Range<usize>, field: &str, problem: impl Into<String>) -> BriefError {
        let (line, column) = line_and_column(self.text, span.start);
        BriefError::Invalid {
            file: self.file.to_owned(),
            line,
            column,
            field: field.to_owned(),
            problem: problem.into(),
        }
    }

    fn branch_error(&self, span: Range<usize>, field: &str, reason: BranchError) -> BriefError {
        let (line, column) = line_and_column(self.text, span.start);
        BriefError::Branch {
            file: self.file.to_owned(),
            line,
            column,
            field: field.to_owned(),
            reason,
        }
    }
}

/// What is wrong with `repo` as a forge repository `owner/name` (or, for a forge that nests groups,
/// `group/subgroup/name`, at most [`MAX_REPO_PARTS`] parts); `None` when it is one. Each forge
/// refuses at preflight a shape it cannot hold.
pub fn repo_problem(repo: &str) -> Option<String> {
    let parts: Vec<&str> = repo.split('/').collect();
    match parts.as_slice() {
        [_] => Some("must be `owner/name`".to_owned()),
        parts if parts.len() > MAX_REPO_PARTS => Some(format!(
            "has more than {MAX_REPO_PARTS} parts; it must be `owner/name` (or `group/subgroup/name`)"
        )),
        [owners @ .., name] => owners
            .iter()
            .find_map(|owner| repo_part_problem("owner", owner))
            .or_else(|| repo_part_problem("name", name)),
        [] => Some("must be `owner/name`".to_owned()),
    }
}

fn repo_part_problem(part: &str, value: &str) -> Option<String> {
    if value.is_empty() {
        return Some(format!("has an empty {part}; it must be `owner/name`"));
    }
    if value == "." || value == ".." {
        return Some(format!("has {value:?} as its {part}"));
    }
    if value.len() > MAX_REPO_PART_BYTES {
        return Some(format!(
            "has more than {MAX_REPO_PART_BYTES} characters in its {part}"
        ));
    }
    value
        .chars()
        .find(|character| {
            !(character.is_ascii_alphanumeric() || matches!(character, '_' | '.' | '-'))
        })
        .map(|character| {
            format!(
                "has {} in its {part}; only A-Z, a-z, 0-9, `_`, `.` and `-` are allowed",
                character.escape_default()
            )
        })
}

fn anchor_path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("the anchor path is empty".to_owned());
    }
    if path.len() > MAX_ANCHOR_PATH_BYTES {
        return Some(format!(
            "the anchor path is longer than {MAX_ANCHOR_PATH_BYTES} bytes"
        ));
    }
    if let Some(character) = path
        .chars()
        .find(|character| is_control_or_direction_override(*character))
    {
        return Some(format!(
            "the anchor path contains the control or text-direction character {}",
            character.escape_unicode()
        ));
    }
    if path.contains('\\') {
        return Some(
            "the anchor path contains a backslash; use `/` between directories".to_owned(),
        );
    }
    if path.starts_with('/') {
        return Some(
            "the anchor path is absolute; it must be relative to the repository root".to_owned(),
        );
    }
    if path.split('/').any(|component| component == "..") {
        return Some(
            "the anchor path contains a `..` component; it must stay inside the repository"
                .to_owned(),
        );
    }
    None
}

/// Control characters (C0, DEL, C1) and the invisible bidirectional-text overrides and isolates,
/// which can make text display differently from what it says.
pub fn is_control_or_direction_override(character: char) -> bool {
    character.is_control() || matches!(character, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn shown_path(path: &Path) -> String {
    stet_sanitize::display::escaped_invisible(&path.to_string_lossy()).into_owned()
}

fn field_prefix(field: &Option<String>) -> String {
    field
        .as_ref()
        .map(|field| format!("field `{field}`: "))
        .unwrap_or_default()
}

mod field_path;
#[cfg(test)]
mod tests;
