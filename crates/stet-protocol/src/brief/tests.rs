//! Unit tests of `crate::brief`, in a file of their own so the module reads as code.

use super::*;

const VALID: &str = r#"
title = "Fix the login redirect loop"
workflow = "implement"

[target]
repo = "octo/app"
base = "main"
branch = "stet/fix-login"
pr = 42

[[items]]
text = "The redirect after login loops when ?next= is empty."
anchor = { path = "src/auth/login.rs", lines = [120, 148] }

[[items]]
text = "Add a regression test."
"#;

fn parse(text: &str) -> Result<Brief> {
    Brief::parse("fix-login", Path::new("briefs/fix-login.toml"), text)
}

/// The field, line and column an error reports, for errors that point into the file.
fn location(error: &BriefError) -> (Option<&str>, usize, usize) {
    match error {
        BriefError::Toml {
            field,
            line,
            column,
            ..
        } => (field.as_deref(), *line, *column),
        BriefError::Invalid {
            field,
            line,
            column,
            ..
        }
        | BriefError::Branch {
            field,
            line,
            column,
            ..
        } => (Some(field.as_str()), *line, *column),
        other => panic!("error without a location: {other}"),
    }
}

fn replaced(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "{from}");
    VALID.replacen(from, to, 1)
}

#[test]
fn parses_the_design_example() {
    let brief = parse(VALID).unwrap();
    assert_eq!(
        brief,
        Brief {
            id: "fix-login".to_owned(),
            title: "Fix the login redirect loop".to_owned(),
            workflow: "implement".to_owned(),
            target: Target {
                repo: "octo/app".to_owned(),
                base: "main".to_owned(),
                branch: Some("stet/fix-login".to_owned()),
                pr: Some(42),
            },
            items: vec![
                Item {
                    text: "The redirect after login loops when ?next= is empty.".to_owned(),
                    anchor: Some(Anchor {
                        path: "src/auth/login.rs".to_owned(),
                        lines: Some((120, 148)),
                    }),
                },
                Item {
                    text: "Add a regression test.".to_owned(),
                    anchor: None,
                },
            ],
        }
    );
}

#[test]
fn optional_fields_may_be_left_out() {
    let text = r#"
title = "t"
workflow = "implement"
target = { repo = "o/r", base = "release/1.x" }
items = [{ text = "x", anchor = { path = "README.md" } }]
"#;
    let brief = parse(text).unwrap();
    assert_eq!(brief.target.branch, None);
    assert_eq!(brief.target.pr, None);
    assert_eq!(brief.items[0].anchor.as_ref().unwrap().lines, None);
}

#[test]
fn malformed_toml_names_line_and_column() {
    let error = parse("title = \"unterminated\nworkflow = \"implement\"\n").unwrap_err();
    assert_eq!(location(&error), (Some("title"), 1, 22));
    assert!(
        error
            .to_string()
            .starts_with("briefs/fix-login.toml:1:22: "),
        "{error}"
    );
}

#[test]
fn syntax_errors_name_the_nearest_field_on_their_line() {
    let error = parse(&replaced("pr = 42", "pr = 42 branch = \"x\"")).unwrap_err();
    assert_eq!(location(&error), (Some("target.pr"), 9, 16));

    let error = parse(&replaced("[120, 148]", "[120, 148")).unwrap_err();
    let field = location(&error).0.unwrap();
    assert!(field.starts_with("items[0].anchor.lines"), "{error}");

    let error = parse("[target\n").unwrap_err();
    assert_eq!(location(&error), (Some("target"), 1, 8));
    assert!(
        error
            .to_string()
            .starts_with("briefs/fix-login.toml:1:8: field `target`: unclosed table"),
        "{error}"
    );

    let error = parse("]\n").unwrap_err();
    assert_eq!(location(&error), (None, 1, 1));
    assert_eq!(
        error.to_string(),
        "briefs/fix-login.toml:1:1: missing table open, expected `[`"
    );
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let error = parse(&replaced("pr = 42", "pr = 42\ncolor = \"red\"")).unwrap_err();
    assert_eq!(location(&error), (Some("target.color"), 10, 1));
    assert!(
        error.to_string().contains("unknown field `color`"),
        "{error}"
    );

    let error = parse(&replaced(
        "lines = [120, 148]",
        "lines = [120, 148], sha = 1",
    ))
    .unwrap_err();
    assert_eq!(location(&error).0, Some("items[0].anchor.sha"));

    let error = parse(&format!("id = \"other\"\n{VALID}")).unwrap_err();
    assert_eq!(location(&error).0, Some("id"));
}

#[test]
fn wrong_types_name_the_field() {
    let error = parse(&replaced("pr = 42", "pr = \"42\"")).unwrap_err();
    assert_eq!(location(&error), (Some("target.pr"), 9, 6));

    let error = parse(&replaced("[120, 148]", "[120, 148.5]")).unwrap_err();
    assert_eq!(location(&error).0, Some("items[0].anchor.lines[1]"));

    let error = parse(&replaced(
        "[[items]]\ntext = \"Add",
        "[[items]]\ntext = 5\n#\"Add",
    ))
    .unwrap_err();
    assert_eq!(location(&error), (Some("items[1].text"), 16, 8));
}

#[test]
fn missing_sections_and_fields_are_named() {
    let without_target = VALID.replace(
        "[target]\nrepo = \"octo/app\"\nbase = \"main\"\nbranch = \"stet/fix-login\"\npr = 42\n",
        "",
    );
    let error = parse(&without_target).unwrap_err();
    assert_eq!(location(&error), (Some("target"), 1, 1));
    assert!(
        error
            .to_string()
            .contains("field `target`: this field is required"),
        "{error}"
    );

    let error = parse(&replaced("base = \"main\"\n", "")).unwrap_err();
    assert_eq!(location(&error), (Some("target.base"), 5, 1));

    let error = parse(&replaced("text = \"Add a regression test.\"", "")).unwrap_err();
    assert_eq!(location(&error), (Some("items[1].text"), 15, 1));

    let error = parse(&replaced("path = \"src/auth/login.rs\", ", "")).unwrap_err();
    assert_eq!(location(&error).0, Some("items[0].anchor.path"));

    let error = parse(
        "title = \"t\"\nworkflow = \"implement\"\n[target]\nrepo = \"o/r\"\nbase = \"main\"\n",
    )
    .unwrap_err();
    assert_eq!(location(&error).0, Some("items"));

    let error = parse(&format!(
        "items = []\n{}",
        VALID.split("[[items]]").next().unwrap()
    ))
    .unwrap_err();
    assert_eq!(location(&error), (Some("items"), 1, 9));

    assert_eq!(location(&parse("").unwrap_err()), (Some("title"), 1, 1));
}

#[test]
fn titles_are_checked() {
    let error = parse(&replaced("\"Fix the login redirect loop\"", "\"   \"")).unwrap_err();
    assert_eq!(location(&error), (Some("title"), 2, 9));

    let long = format!("\"{}\"", "x".repeat(MAX_TITLE_CHARS + 1));
    assert!(parse(&replaced("\"Fix the login redirect loop\"", &long)).is_err());
    let at_limit = format!("\"{}\"", "é".repeat(MAX_TITLE_CHARS));
    assert!(parse(&replaced("\"Fix the login redirect loop\"", &at_limit)).is_ok());

    for control in ["\\u001b[2J", "\\t", "\\u0000", "\\u202e"] {
        let title = format!("\"Fix {control} now\"");
        let error = parse(&replaced("\"Fix the login redirect loop\"", &title)).unwrap_err();
        assert_eq!(location(&error).0, Some("title"), "{control}");
    }
    let padded = parse(&replaced(
        "\"Fix the login redirect loop\"",
        "\"  Fix it  \"",
    ))
    .unwrap();
    assert_eq!(padded.title, "Fix it");
}

#[test]
fn workflow_names_are_checked() {
    for bad in [
        "\"\"",
        "\"Implement\"",
        "\"-x\"",
        "\"../implement\"",
        "\"a b\"",
    ] {
        let error = parse(&replaced("\"implement\"", bad)).unwrap_err();
        assert_eq!(location(&error).0, Some("workflow"), "{bad}");
    }
    assert!(parse(&replaced("\"implement\"", "\"fix-2\"")).is_ok());
}

#[test]
fn repositories_must_be_owner_slash_name_or_nested_groups() {
    let too_deep = vec!["g"; MAX_REPO_PARTS + 1].join("/");
    for bad in [
        "app",
        "/app",
        "octo/",
        "octo//x",
        "octo/../x",
        too_deep.as_str(),
        "../app",
        "octo/..",
        "octo/a b",
        "octo/ap\u{43f}",
        "o:o/app",
    ] {
        let error = parse(&replaced("\"octo/app\"", &format!("\"{bad}\""))).unwrap_err();
        assert_eq!(location(&error), (Some("target.repo"), 6, 8), "{bad}");
    }
    assert!(parse(&replaced("\"octo/app\"", "\"Octo-1/app_2.rs\"")).is_ok());
    assert!(parse(&replaced("\"octo/app\"", "\"group/sub/app\"")).is_ok());
}

#[test]
fn base_must_be_a_well_formed_ref_but_may_be_protected() {
    let error = parse(&replaced("base = \"main\"", "base = \"ma..in\"")).unwrap_err();
    assert!(
        matches!(
            error,
            BriefError::Branch { ref field, reason: BranchError::DoubleDot { offset: 2 }, line: 7, column: 8, .. } if field == "target.base"
        ),
        "{error}"
    );
    assert!(parse(&replaced("base = \"main\"", "base = \"master\"")).is_ok());
}

#[test]
fn branch_goes_through_the_branch_validator() {
    let error = parse(&replaced("\"stet/fix-login\"", "\"../evil\"")).unwrap_err();
    assert_eq!(location(&error), (Some("target.branch"), 8, 10));

    let error = parse(&replaced("\"stet/fix-login\"", "\"MAIN\"")).unwrap_err();
    assert!(
        matches!(
            error,
            BriefError::Branch {
                reason: BranchError::Denylisted { .. },
                ..
            }
        ),
        "{error}"
    );

    let error = parse(&replaced("base = \"main\"", "base = \"stet/fix-login\"")).unwrap_err();
    assert!(
        matches!(
            error,
            BriefError::Branch {
                reason: BranchError::CollidesWithBase { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("field `target.branch`"),
        "{error}"
    );
}

#[test]
fn pull_request_numbers_are_positive() {
    for bad in ["0", "-1"] {
        let error = parse(&replaced("pr = 42", &format!("pr = {bad}"))).unwrap_err();
        assert_eq!(location(&error), (Some("target.pr"), 9, 6), "{bad}");
    }
    let error = parse(&replaced("pr = 42", "pr = 99999999999999999999")).unwrap_err();
    assert_eq!(location(&error).0, Some("target.pr"));
}

#[test]
fn item_text_must_not_be_empty() {
    let error = parse(&replaced("\"Add a regression test.\"", "\"  \\n \"")).unwrap_err();
    assert_eq!(location(&error), (Some("items[1].text"), 16, 8));
    let multi_line = parse(&replaced(
        "\"Add a regression test.\"",
        "\"\"\"\nFirst.\n\tThen second.\n\"\"\"",
    ))
    .unwrap();
    assert_eq!(multi_line.items[1].text, "First.\n\tThen second.");
}

#[test]
fn absurd_anchors_are_refused() {
    let cases = [
        ("path = \"\"", "items[0].anchor.path"),
        ("path = \"/etc/passwd\"", "items[0].anchor.path"),
        ("path = \"../../etc/passwd\"", "items[0].anchor.path"),
        ("path = \"src/../../x\"", "items[0].anchor.path"),
        ("path = \"src\\\\x.rs\"", "items[0].anchor.path"),
        ("path = \"src/x\\u0000.rs\"", "items[0].anchor.path"),
        ("path = \"src/x\\n.rs\"", "items[0].anchor.path"),
        ("path = 7", "items[0].anchor.path"),
    ];
    for (path, field) in cases {
        let error = parse(&replaced("path = \"src/auth/login.rs\"", path)).unwrap_err();
        assert_eq!(location(&error).0, Some(field), "{path}");
    }
    let lines_cases = [
        "[]",
        "[1]",
        "[1, 2, 3]",
        "[0, 5]",
        "[-3, 5]",
        "[5, 4]",
        "[1, 10000001]",
        "[1, 99999999999999999999]",
        "\"1-2\"",
        "[1.0, 2.0]",
        "{ start = 1, end = 2 }",
    ];
    for lines in lines_cases {
        let error = parse(&replaced("[120, 148]", lines)).unwrap_err();
        let field = location(&error).0.unwrap().to_owned();
        assert!(
            field.starts_with("items[0].anchor.lines"),
            "{lines}: {error}"
        );
    }
    let error = parse(&replaced("[120, 148]", "[148, 120]")).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the first line (148) comes after the last line (120)"),
        "{error}"
    );
    assert!(parse(&replaced("[120, 148]", "[1, 10000000]")).is_ok());
    assert!(parse(&replaced("[120, 148]", "[7, 7]")).is_ok());
}

#[test]
fn ids_must_be_safe_for_branch_names() {
    for bad in ["", "Fix", "-x", "_x", "a b", "a.b", "ü", &"a".repeat(65)] {
        assert!(
            matches!(
                Brief::parse(bad, Path::new("x.toml"), VALID),
                Err(BriefError::InvalidId { .. })
            ),
            "{bad}"
        );
    }
    for good in ["a", "0", "fix_login-2", &"a".repeat(64)] {
        assert!(
            Brief::parse(good, Path::new("x.toml"), VALID).is_ok(),
            "{good}"
        );
    }
}

#[test]
fn oversized_text_is_refused() {
    let padding = "#".repeat(usize::try_from(MAX_BRIEF_BYTES).unwrap());
    let error = parse(&format!("{VALID}{padding}")).unwrap_err();
    assert!(
        matches!(
            error,
            BriefError::TooLarge {
                limit: MAX_BRIEF_BYTES,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn duplicate_keys_are_refused() {
    let error = parse(&replaced(
        "workflow = \"implement\"",
        "workflow = \"implement\"\nworkflow = \"x\"",
    ))
    .unwrap_err();
    assert_eq!(location(&error).1, 4);
}

#[test]
fn error_text_escapes_control_characters_from_the_brief() {
    let error = parse(&format!("{VALID}\n\"evil\\u001b[2J\" = 1\n")).unwrap_err();
    let shown = error.to_string();
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    assert!(shown.contains("\\u{1b}"), "{shown:?}");
}

#[test]
fn brief_text_is_kept_as_data() {
    let hostile = r#""{{title}} $(rm -rf /) `id` --force""#;
    let brief = parse(&replaced("\"Add a regression test.\"", hostile)).unwrap();
    assert_eq!(brief.items[1].text, "{{title}} $(rm -rf /) `id` --force");
}

#[test]
fn line_and_column_count_characters_from_one() {
    assert_eq!(line_and_column("", 0), (1, 1));
    assert_eq!(line_and_column("ab\ncd", 4), (2, 2));
    assert_eq!(line_and_column("é\né", 3), (2, 1));
    assert_eq!(line_and_column("é\néa", 5), (2, 2));
    assert_eq!(line_and_column("é\né", 4), (2, 1));
    assert_eq!(line_and_column("éa", 1), (1, 1));
    assert_eq!(line_and_column("ab", 99), (1, 3));
}
