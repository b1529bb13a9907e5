//! The *New brief* form, so a person can write a brief without leaving the theater: pure state driven
//! by key events (tested without a terminal), and [`save`], the one place it touches the disk
//! (through [`beneath`], which follows no link under the repository).

mod beneath;

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde::Serialize;
use tui_input::backend::crossterm::to_input_request;
use tui_input::{Input, InputRequest};

use stet_protocol::brief::{
    Brief, BriefError, MAX_REPO_PART_BYTES, MAX_TITLE_CHARS, is_control_or_direction_override,
    repo_problem,
};
use stet_protocol::inbox::InboxEntry;
use stet_sanitize::branch::{MAX_BRANCH_NAME_BYTES, validate_ref_format};

/// Longest item, in characters.
const MAX_ITEM_CHARS: usize = 2000;

/// Most items one brief may hold.
const MAX_ITEMS: usize = 50;

/// The workflow every brief written by the form runs.
const WORKFLOW: &str = "implement";

/// Longest file-name slug taken from a title, leaving room for a `-N` suffix within a brief id.
const MAX_SLUG_BYTES: usize = 48;

/// How many file names (`slug`, `slug-2`, …) [`save`] tries before giving up.
const MAX_NAME_ATTEMPTS: usize = 1000;

/// One input of the form, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// What the brief is for, in a few words.
    Title,
    /// The forge repository, `owner/name`.
    Repo,
    /// The branch the work starts from.
    Base,
    /// The line an item is typed on; Enter adds it to the list.
    Items,
}

impl Field {
    /// Every field, in Tab order.
    pub const ALL: [Field; 4] = [Field::Title, Field::Repo, Field::Base, Field::Items];

    /// The field's name as the form shows it and its error messages name it.
    pub fn label(self) -> &'static str {
        match self {
            Field::Title => "Title",
            Field::Repo => "Repo",
            Field::Base => "Base",
            Field::Items => "Items",
        }
    }

    fn next(self) -> Field {
        match self {
            Field::Title => Field::Repo,
            Field::Repo => Field::Base,
            Field::Base => Field::Items,
            Field::Items => Field::Title,
        }
    }

    fn previous(self) -> Field {
        match self {
            Field::Title => Field::Items,
            Field::Repo => Field::Title,
            Field::Base => Field::Repo,
            Field::Items => Field::Base,
        }
    }

    /// Most characters the field's line takes.
    fn limit(self) -> usize {
        match self {
            Field::Title => MAX_TITLE_CHARS,
            Field::Repo => 2 * MAX_REPO_PART_BYTES + 1,
            Field::Base => MAX_BRANCH_NAME_BYTES,
            Field::Items => MAX_ITEM_CHARS,
        }
    }
}

/// The state of the *New brief* form: four lines of text, the items added so far, the focus and
/// why the last submit was refused.
#[derive(Debug, Clone)]
pub struct NewBriefForm {
    title: Input,
    repo: Input,
    base: Input,
    item: Input,
    items: Vec<String>,
    focus: Field,
    error: Option<String>,
}

/// What a key did to the form.
#[derive(Debug, Clone, PartialEq)]
pub enum FormOutcome {
    /// Still open.
    Editing,
    /// Closed without saving.
    Cancelled,
    /// Every field checked; the draft is ready for [`save`].
    Submitted(BriefDraft),
}

/// A submitted brief, trimmed and checked, not yet on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BriefDraft {
    /// Non-blank, trimmed.
    pub title: String,
    /// `owner/name`.
    pub repo: String,
    /// A branch name git accepts.
    pub base: String,
    /// At least one, none blank.
    pub items: Vec<String>,
}

pub use beneath::BeneathError;

/// The inbox's place under the repository's root, one directory name at a time.
const INBOX_COMPONENTS: [&str; 2] = [".stet", "briefs"];

/// Why [`save`] could not write a brief. Every message names the path.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum FormError {
    /// The inbox directory could not be opened or made, or one on the way is a link.
    #[error(transparent)]
    Inbox(#[from] BeneathError),

    /// The draft could not be written as TOML.
    #[error("cannot write a brief for {} as TOML: {error}", dir.display())]
    Serialize {
        dir: PathBuf,
        error: toml::ser::Error,
    },

    /// The brief file could not be created.
    #[error("cannot create {}: {error}", file.display())]
    Create { file: PathBuf, error: io::Error },

    /// Every file name the title allows is taken.
    #[error(
        "every name from {slug}.toml to {slug}-{MAX_NAME_ATTEMPTS}.toml is taken in {}",
        dir.display()
    )]
    NoFreeName { dir: PathBuf, slug: String },

    /// The brief file was created but could not be written; it is removed.
    #[error("cannot write {}: {error}", file.display())]
    Write { file: PathBuf, error: io::Error },

    /// The brief parser refused the file written; it is removed.
    #[error("{} was removed because stet cannot read it back: {error}", file.display())]
    Unreadable {
        file: PathBuf,
        error: Box<BriefError>,
    },
}

/// Why a submit was refused: the field to fix and what is wrong with it.
struct Refusal {
    field: Field,
    problem: String,
}

impl Refusal {
    fn new(field: Field, problem: impl Into<String>) -> Refusal {
        Refusal {
            field,
            problem: problem.into(),
        }
    }

    fn message(&self) -> String {
        format!("{}: {}", self.field.label(), self.problem)
    }
}

impl NewBriefForm {
    /// An empty form focused on the title; repo and base pre-filled (e.g. from the first brief in
    /// the inbox), either may be empty.
    pub fn new(repo: &str, base: &str) -> NewBriefForm {
        NewBriefForm {
            title: Input::default(),
            repo: Input::from(repo),
            base: Input::from(base),
            item: Input::default(),
            items: Vec::new(),
            focus: Field::Title,
            error: None,
        }
    }

    /// Applies one key. Only presses act; repeats and releases leave the form as it is.
    pub fn handle_key(&mut self, key: KeyEvent) -> FormOutcome {
        if key.kind != KeyEventKind::Press {
            return FormOutcome::Editing;
        }
        match key.code {
            KeyCode::Esc => return FormOutcome::Cancelled,
            KeyCode::Enter => return self.enter(),
            KeyCode::Char('s' | 'S') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                return self.submit();
            }
            KeyCode::Tab if key.modifiers.contains(KeyModifiers::SHIFT) => {
                self.focus = self.focus.previous();
            }
            KeyCode::Tab | KeyCode::Down => self.focus = self.focus.next(),
            KeyCode::BackTab | KeyCode::Up => self.focus = self.focus.previous(),
            _ => self.edit(key),
        }
        FormOutcome::Editing
    }

    /// The field keys go to.
    pub fn focus(&self) -> Field {
        self.focus
    }

    /// The text of `field`; for [`Field::Items`], the item being typed.
    pub fn value(&self, field: Field) -> &str {
        self.input(field).value()
    }

    /// The items already added, in order.
    pub fn items(&self) -> &[String] {
        &self.items
    }

    /// The cursor's column (in terminal columns) within the focused field's value.
    pub fn cursor(&self) -> usize {
        self.input(self.focus).visual_cursor()
    }

    /// Why the last submit (or item) was refused, naming the field; kept until the next submit.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn input(&self, field: Field) -> &Input {
        match field {
            Field::Title => &self.title,
            Field::Repo => &self.repo,
            Field::Base => &self.base,
            Field::Items => &self.item,
        }
    }

    fn input_mut(&mut self, field: Field) -> &mut Input {
        match field {
            Field::Title => &mut self.title,
            Field::Repo => &mut self.repo,
            Field::Base => &mut self.base,
            Field::Items => &mut self.item,
        }
    }

    /// Enter moves on from a field; on the item line it adds the item, or submits when the line is
    /// empty.
    fn enter(&mut self) -> FormOutcome {
        if self.focus != Field::Items {
            self.focus = self.focus.next();
            return FormOutcome::Editing;
        }
        let pending = self.item.value().trim();
        if pending.is_empty() {
            return self.submit();
        }
        if self.items.len() >= MAX_ITEMS {
            self.error = Some(too_many_items().message());
            return FormOutcome::Editing;
        }
        let item = pending.to_owned();
        self.items.push(item);
        self.item.reset();
        FormOutcome::Editing
    }

    fn submit(&mut self) -> FormOutcome {
        match self.draft() {
            Ok(draft) => {
                self.error = None;
                FormOutcome::Submitted(draft)
            }
            Err(refusal) => {
                self.focus = refusal.field;
                self.error = Some(refusal.message());
                FormOutcome::Editing
            }
        }
    }

    /// The form's values trimmed and checked, with a non-blank pending item as the last item.
    fn draft(&self) -> Result<BriefDraft, Refusal> {
        let title = self.title.value().trim();
        if title.is_empty() {
            return Err(Refusal::new(
                Field::Title,
                "the title is empty; say in a few words what the brief is for",
            ));
        }
        let repo = self.repo.value().trim();
        if repo.is_empty() {
            return Err(Refusal::new(
                Field::Repo,
                "the repository is empty; write it as owner/name, e.g. octo/app",
            ));
        }
        if let Some(problem) = repo_problem(repo) {
            return Err(Refusal::new(
                Field::Repo,
                format!("\"{repo}\" {problem}, e.g. octo/app"),
            ));
        }
        let base = self.base.value().trim();
        if base.is_empty() {
            return Err(Refusal::new(
                Field::Base,
                "the base branch is empty; name the branch the work starts from",
            ));
        }
        if let Err(reason) = validate_ref_format(base) {
            return Err(Refusal::new(
                Field::Base,
                format!("\"{base}\" is not a branch git accepts: {reason}"),
            ));
        }
        let mut items = self.items.clone();
        let pending = self.item.value().trim();
        if !pending.is_empty() {
            items.push(pending.to_owned());
        }
        if items.is_empty() {
            return Err(Refusal::new(
                Field::Items,
                "a brief needs at least one item; type one and press Enter",
            ));
        }
        if items.len() > MAX_ITEMS {
            return Err(too_many_items());
        }
        Ok(BriefDraft {
            title: title.to_owned(),
            repo: repo.to_owned(),
            base: base.to_owned(),
            items,
        })
    }

    /// Hands the key to the focused line; typing past the field's limit, and control or
    /// text-direction characters, are refused.
    fn edit(&mut self, key: KeyEvent) {
        let Some(request) = to_input_request(&Event::Key(key)) else {
            return;
        };
        if let InputRequest::InsertChar(character) = request
            && is_control_or_direction_override(character)
        {
            return;
        }
        let limit = self.focus.limit();
        let input = self.input_mut(self.focus);
        let before = matches!(request, InputRequest::InsertChar(_) | InputRequest::Yank)
            .then(|| input.clone());
        input.handle(request);
        if let Some(before) = before
            && input.value().chars().count() > limit
        {
            *input = before;
        }
    }
}

fn too_many_items() -> Refusal {
    Refusal::new(
        Field::Items,
        format!("a brief holds at most {MAX_ITEMS} items"),
    )
}

/// A brief file as `toml` writes it; the field names are the brief format's.
#[derive(Serialize)]
struct BriefFile<'a> {
    title: &'a str,
    workflow: &'a str,
    target: TargetTable<'a>,
    items: Vec<ItemTable<'a>>,
}

#[derive(Serialize)]
struct TargetTable<'a> {
    repo: &'a str,
    base: &'a str,
}

#[derive(Serialize)]
struct ItemTable<'a> {
    text: &'a str,
}

/// Writes the draft as a brief TOML file in the inbox of the repository at `repository`
/// (`.stet/briefs`) and reads it back with the real brief parser.
///
/// The file is named after the title (`fix-the-login.toml`, then `fix-the-login-2.toml`, … when
/// taken) and is never written over. A file the parser refuses is removed again. The inbox is
/// reached from the repository's root one directory at a time, and neither `.stet`, `briefs` nor
/// the file is followed when it is a link: a link there, even one that appeared after stet started,
/// fails the save ([`BeneathError::Link`]) and nothing is written.
pub fn save(repository: &Path, draft: &BriefDraft) -> Result<InboxEntry, FormError> {
    let inbox = beneath::Beneath::open(repository, &INBOX_COMPONENTS)?;
    let document = BriefFile {
        title: &draft.title,
        workflow: WORKFLOW,
        target: TargetTable {
            repo: &draft.repo,
            base: &draft.base,
        },
        items: draft.items.iter().map(|text| ItemTable { text }).collect(),
    };
    let text = toml::to_string(&document).map_err(|error| FormError::Serialize {
        dir: inbox.path().to_owned(),
        error,
    })?;
    let (name, mut file) = create_new_file(&inbox, &slug(&draft.title))?;
    let path = inbox.path().join(&name);
    let written = file.write_all(text.as_bytes());
    drop(file);
    if let Err(error) = written {
        remove(&inbox, &name);
        return Err(FormError::Write { file: path, error });
    }
    let id = name.trim_end_matches(".toml");
    match Brief::parse(id, &path, &text) {
        Ok(brief) => Ok(InboxEntry {
            path,
            brief: Ok(brief),
        }),
        Err(error) => {
            remove(&inbox, &name);
            Err(FormError::Unreadable {
                file: path,
                error: Box::new(error),
            })
        }
    }
}

/// Creates the first free `<slug>.toml`, `<slug>-2.toml`, … in `dir`, never opening an existing
/// file; returns its name.
fn create_new_file(dir: &beneath::Beneath, slug: &str) -> Result<(String, File), FormError> {
    for attempt in 1..=MAX_NAME_ATTEMPTS {
        let name = if attempt == 1 {
            format!("{slug}.toml")
        } else {
            format!("{slug}-{attempt}.toml")
        };
        match dir.create_new(&name) {
            Ok(file) => return Ok((name, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                return Err(FormError::Create {
                    file: dir.path().join(name),
                    error,
                });
            }
        }
    }
    Err(FormError::NoFreeName {
        dir: dir.path().to_owned(),
        slug: slug.to_owned(),
    })
}

fn remove(dir: &beneath::Beneath, name: &str) {
    if let Err(error) = dir.remove(name) {
        let path = dir.path().join(name);
        tracing::warn!(path = %path.display(), %error, "cannot remove a brief the form wrote");
    }
}

/// The title as a brief id: lowercase ASCII letters and digits joined by single `-`, at most
/// [`MAX_SLUG_BYTES`] long; `brief` when nothing is left.
fn slug(title: &str) -> String {
    let words: Vec<String> = title
        .split(|character: char| !character.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut slug = words.join("-");
    slug.truncate(MAX_SLUG_BYTES);
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        "brief".to_owned()
    } else {
        slug.to_owned()
    }
}

#[cfg(test)]
pub(crate) mod tests;
