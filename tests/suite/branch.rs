//! Checks the branch rules against git itself: a deterministic corpus of awkward names goes through
//! both `validate_ref_format`/`BranchValidator::validate` and `git check-ref-format` (which
//! `validate_ref_format` follows, refusing besides what the display policy would not show).

use std::collections::BTreeSet;
use std::process::Command;

use stet_sanitize::branch::{BranchValidator, CommitSha, validate_ref_format};
use stet_sanitize::display::{Treatment, treatment};

/// Pieces names are built from: plain characters most of the time, so a good share of the corpus is
/// valid, and every character class and sequence the rules care about some of the time.
const PLAIN_PIECES: &[&str] = &[
    "a", "b", "c", "x", "y", "z", "f", "e", "0", "1", "7", "9", "Q", "Z", "-", "_", ".", "/",
    "fix", "stet", "login", "brief",
];

const AWKWARD_PIECES: &[&str] = &[
    "@",
    "{",
    "}",
    "~",
    "^",
    ":",
    "?",
    "*",
    "[",
    "]",
    "\\",
    " ",
    "\t",
    "\n",
    "\u{1}",
    "\u{1b}",
    "\u{7f}",
    "..",
    ".lock",
    "@{",
    "//",
    "refs/",
    "heads/",
    "origin/",
    "main",
    "MAIN",
    "HEAD",
    "FETCH_HEAD",
    "é",
    "\u{200b}",
    "\u{430}",
    "\u{a0}",
    "\u{202e}",
    "\u{2066}",
    "\u{9b}",
    "\u{9d}",
    "\u{3000}",
    "-",
    "/",
    ".",
    "deadbeef",
    "lock",
];

/// splitmix64: a tiny deterministic generator, so the corpus is the same on every run.
struct Generator(u64);

impl Generator {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(bound).unwrap_or(1)).unwrap_or(0)
    }

    fn pick<'a>(&mut self, pieces: &[&'a str]) -> &'a str {
        pieces[self.below(pieces.len())]
    }
}

fn corpus() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = [
        "stet/fix-login",
        "feature/x.y",
        "stet/brief-1a2b",
        "@",
        "a@b",
        "-x",
        "main",
        "refs/heads/x",
        "a/.b",
        "a./b",
        ".a",
        "a.",
        "a..b",
        "a//b",
        "/a",
        "a/",
        "a.lock",
        "a.lock/b",
        "a/b.lock",
        ".lock",
        "a@{b",
        "{a}",
        "@@",
        "0123456789abcdef0123456789abcdef01234567",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut generator = Generator(0x5eed_5eed_57e7_57e7);
    while names.len() < 1600 {
        let length = 1 + generator.below(10);
        let awkwardness = generator.below(4);
        let name: String = (0..length)
            .map(|_| {
                if generator.below(10) < awkwardness {
                    generator.pick(AWKWARD_PIECES)
                } else {
                    generator.pick(PLAIN_PIECES)
                }
            })
            .collect();
        names.insert(name);
    }
    names
}

fn git_accepts_branch(name: &str) -> bool {
    Command::new("git")
        .args(["check-ref-format", &format!("refs/heads/{name}")])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .map(|status| status.success())
        .unwrap_or_else(|error| panic!("cannot run git: {error}"))
}

#[test]
fn branch_rules_agree_with_git_check_ref_format() {
    let validator = BranchValidator::default();
    let names = corpus();
    let mut disagreements = Vec::new();
    let (mut accepted, mut refused_by_git, mut refused_only_by_product_rules) = (0, 0, 0);
    for name in &names {
        let git_ok = git_accepts_branch(name);
        let format_ok = validate_ref_format(name).is_ok();
        let product_ok = validator.validate(name, Some("main")).is_ok();
        // Beyond git: what the display policy would not show is refused too.
        let shown_as_written = name
            .chars()
            .all(|c| c.is_ascii() || treatment(c) == Treatment::Keep);
        if format_ok != (git_ok && shown_as_written) {
            disagreements.push(format!(
                "{name:?}: git says {git_ok}, shown as written {shown_as_written}, validate_ref_format says {format_ok}"
            ));
        }
        if product_ok && !git_ok {
            disagreements.push(format!("{name:?}: validate accepts a name git refuses"));
        }
        accepted += usize::from(product_ok);
        refused_by_git += usize::from(!git_ok);
        refused_only_by_product_rules += usize::from(git_ok && !product_ok);
    }
    assert!(
        disagreements.is_empty(),
        "{} disagreements with git, first ones:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(20)].join("\n")
    );
    assert!(accepted >= 300, "only {accepted} names accepted");
    assert!(
        refused_by_git >= 300,
        "only {refused_by_git} names refused by git"
    );
    assert!(
        refused_only_by_product_rules >= 100,
        "only {refused_only_by_product_rules} names refused by product rules alone"
    );
}

#[test]
fn commit_sha_validates_inside_a_deserialized_record() {
    #[derive(serde::Deserialize)]
    struct Record {
        base: CommitSha,
    }
    let sha = "a".repeat(40);
    let record: Record = serde_json::from_str(&format!("{{\"base\":\"{sha}\"}}")).unwrap();
    assert_eq!(record.base.as_str(), sha);
    let uppercase = "A".repeat(40);
    let error = serde_json::from_str::<Record>(&format!("{{\"base\":\"{uppercase}\"}}"))
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(error.contains("lowercase hex"), "{error}");
}

mod never_panics {
    use proptest::prelude::*;
    use stet_sanitize::branch::{BranchValidator, CommitSha, validate_ref_format};

    proptest! {
        #[test]
        fn any_name_and_base_get_an_answer(name in any::<String>(), base in any::<String>()) {
            let _ = BranchValidator::default().validate(&name, Some(&base));
            let _ = validate_ref_format(&name);
            let _ = CommitSha::parse(&name);
        }
    }
}
