//! Unit tests of `crate::branch`, in a file of their own so the module reads as code.

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
        Err(BranchError::Invisible {
            offset: 8,
            code_point: "U+200B".to_owned()
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
        Err(BranchError::Invisible {
            offset: 3,
            code_point: "U+202E".to_owned()
        })
    );
}

#[test]
fn a_base_refuses_c1_controls_and_invisible_characters_by_code_point() {
    for (name, offset, code_point) in [
        ("fix\u{202e}nigol", 3, "U+202E"),
        ("a\u{2066}b", 1, "U+2066"),
        ("x\u{9b}31m", 1, "U+009B"),
        ("x\u{9d}52;c;aGk=\u{9c}", 1, "U+009D"),
        ("zero\u{200b}width", 4, "U+200B"),
        ("tag\u{e0041}", 3, "U+E0041"),
        ("nel\u{85}", 3, "U+0085"),
        ("line\u{2028}sep", 4, "U+2028"),
    ] {
        let refused = validate_ref_format(name);
        assert_eq!(
            refused,
            Err(BranchError::Invisible {
                offset,
                code_point: code_point.to_owned()
            }),
            "{name:?}"
        );
        let message = refused.unwrap_err().to_string();
        assert!(message.contains(code_point), "{message}");
        assert!(
            !message
                .chars()
                .any(|c| crate::display::treatment(c) != crate::display::Treatment::Keep),
            "{message:?}"
        );
    }
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
