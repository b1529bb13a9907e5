//! Workflows turn a brief into the agent's instructions through a fixed-vocabulary template, so brief
//! text can only ever land in the instructions as data (ADR-0018, row 4).
//!
//! A template is parsed once, up front: an unknown placeholder or an unclosed `{{` is an error before
//! any brief is rendered. Rendering walks the parsed pieces and pastes brief values in verbatim; the
//! pasted text is never scanned again, so `{{title}}`, `$(…)` or `--flag` inside a brief stay literal.
//! Anchors travel as coordinates only (`path:first-last`); no file contents are ever read here.

use crate::brief::{Anchor, Brief};

/// The workflows compiled into stet: name and template text.
const BUILTIN_WORKFLOWS: [(&str, &str); 1] = [(
    "implement",
    include_str!("../../../assets/workflows/implement.md"),
)];

/// Every placeholder a template may use, by the name written between the braces.
const PLACEHOLDERS: [(&str, Placeholder); 7] = [
    ("title", Placeholder::Title),
    ("brief_id", Placeholder::BriefId),
    ("items", Placeholder::Items),
    ("anchors", Placeholder::Anchors),
    ("repo", Placeholder::Repo),
    ("base", Placeholder::Base),
    ("branch", Placeholder::Branch),
];

/// Why a workflow could not be found or its template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum WorkflowError {
    #[error(
        "there is no built-in workflow named {name:?}; the built-in workflows are: {}",
        builtin_names()
    )]
    UnknownWorkflow { name: String },

    #[error(
        "workflow {workflow:?}, line {line}, column {column}: unknown placeholder {placeholder:?}; the known placeholders are: {}",
        placeholder_names()
    )]
    UnknownPlaceholder {
        workflow: String,
        placeholder: String,
        line: usize,
        column: usize,
    },

    #[error(
        "workflow {workflow:?}, line {line}, column {column}: this \"{{{{\" has no closing \"}}}}\" on the same line"
    )]
    UnterminatedPlaceholder {
        workflow: String,
        line: usize,
        column: usize,
    },
}

/// Result of loading a workflow.
pub type Result<T> = std::result::Result<T, WorkflowError>;

/// A value of the brief a template can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Title,
    BriefId,
    Items,
    Anchors,
    Repo,
    Base,
    Branch,
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Placeholder(Placeholder),
}

/// A parsed instruction template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workflow {
    name: String,
    segments: Vec<Segment>,
}

impl Workflow {
    /// The built-in workflow called `name`.
    pub fn builtin(name: &str) -> Result<Self> {
        let (name, template) = BUILTIN_WORKFLOWS
            .iter()
            .find(|(builtin, _)| *builtin == name)
            .ok_or_else(|| WorkflowError::UnknownWorkflow {
                name: name.to_owned(),
            })?;
        Self::from_template(name, template)
    }

    /// Parses `template`; `name` is used in error messages.
    pub fn from_template(name: &str, template: &str) -> Result<Self> {
        let mut segments = Vec::new();
        let mut rest = template;
        while let Some((literal, after_open)) = rest.split_once("{{") {
            let open_offset = template.len() - rest.len() + literal.len();
            let (line, column) = line_and_column(template, open_offset);
            let Some((inside, after_close)) = after_open
                .split_once("}}")
                .filter(|(inside, _)| !inside.contains('\n'))
            else {
                return Err(WorkflowError::UnterminatedPlaceholder {
                    workflow: name.to_owned(),
                    line,
                    column,
                });
            };
            let wanted = inside.trim();
            let placeholder = PLACEHOLDERS
                .iter()
                .find(|(known, _)| *known == wanted)
                .map(|(_, placeholder)| *placeholder)
                .ok_or_else(|| WorkflowError::UnknownPlaceholder {
                    workflow: name.to_owned(),
                    placeholder: wanted.to_owned(),
                    line,
                    column,
                })?;
            if !literal.is_empty() {
                segments.push(Segment::Literal(literal.to_owned()));
            }
            segments.push(Segment::Placeholder(placeholder));
            rest = after_close;
        }
        if !rest.is_empty() {
            segments.push(Segment::Literal(rest.to_owned()));
        }
        Ok(Self {
            name: name.to_owned(),
            segments,
        })
    }

    /// The workflow's name, e.g. `implement`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent's instructions for `brief`, to be pushed to `branch`.
    pub fn render(&self, brief: &Brief, branch: &str) -> String {
        let mut instructions = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => instructions.push_str(text),
                Segment::Placeholder(Placeholder::Title) => instructions.push_str(&brief.title),
                Segment::Placeholder(Placeholder::BriefId) => instructions.push_str(&brief.id),
                Segment::Placeholder(Placeholder::Items) => {
                    instructions.push_str(&numbered_items(brief));
                }
                Segment::Placeholder(Placeholder::Anchors) => {
                    instructions.push_str(&anchor_list(brief));
                }
                Segment::Placeholder(Placeholder::Repo) => {
                    instructions.push_str(&brief.target.repo);
                }
                Segment::Placeholder(Placeholder::Base) => {
                    instructions.push_str(&brief.target.base);
                }
                Segment::Placeholder(Placeholder::Branch) => instructions.push_str(branch),
            }
        }
        instructions
    }
}

/// `1. text` per item, continuation lines indented under it, then the item's anchor if it has one.
fn numbered_items(brief: &Brief) -> String {
    let mut list = String::new();
    for (index, item) in brief.items.iter().enumerate() {
        if index > 0 {
            list.push('\n');
        }
        let marker = format!("{}. ", index + 1);
        let indent = " ".repeat(marker.len());
        for (line_index, line) in item.text.lines().enumerate() {
            if line_index == 0 {
                list.push_str(&marker);
            } else {
                list.push('\n');
                if !line.is_empty() {
                    list.push_str(&indent);
                }
            }
            list.push_str(line);
        }
        if let Some(anchor) = &item.anchor {
            list.push_str(&format!("\n{indent}(see {})", anchor_coordinates(anchor)));
        }
    }
    list
}

/// `- path:first-last` per anchored item, or one sentence saying there are none.
fn anchor_list(brief: &Brief) -> String {
    let anchors: Vec<String> = brief
        .items
        .iter()
        .filter_map(|item| item.anchor.as_ref())
        .map(|anchor| format!("- {}", anchor_coordinates(anchor)))
        .collect();
    if anchors.is_empty() {
        "The brief does not point at any particular file; find the relevant code yourself."
            .to_owned()
    } else {
        anchors.join("\n")
    }
}

fn anchor_coordinates(anchor: &Anchor) -> String {
    match anchor.lines {
        Some((first, last)) => format!("{}:{first}-{last}", anchor.path),
        None => anchor.path.clone(),
    }
}

fn builtin_names() -> String {
    let names: Vec<&str> = BUILTIN_WORKFLOWS.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

fn placeholder_names() -> String {
    let names: Vec<String> = PLACEHOLDERS
        .iter()
        .map(|(name, _)| format!("{{{{{name}}}}}"))
        .collect();
    names.join(", ")
}

/// 1-based line and column (in characters) of the byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.bytes().filter(|byte| *byte == b'\n').count() + 1;
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests;
