//! The pull request's title and body: built from the brief, passed through the sanitizer as a whole,
//! and closed by a provenance block the host writes (what ran, where, with which credential, at what
//! cost), so a reviewer knows how the change was made without trusting the agent's word for it. The
//! agent's own words (its summary, the model it reported) go through the display policy
//! ([`stet_sanitize::display`]): nothing of theirs is fetched or clickable when the page is viewed.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::brief::Brief;
use stet_protocol::event::DispatchId;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::display::{code_span, forge_text, table_cell_code, without_invisible};
use stet_sanitize::sanitize::{SanitizedText, TokenSanitizer};

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
    /// What the agent reached through the egress proxy, when one ran.
    pub egress: Option<EgressProvenance>,
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

/// What the agent reached through the egress proxy, as the provenance tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressProvenance {
    /// The hosts reached, as `host:port` (the agent named them: shown as code, escaped).
    pub hosts: Vec<String>,
    /// How many more hosts were reached than `hosts` lists.
    pub hosts_not_listed: usize,
    /// Bytes the agent sent out.
    pub uploaded: u64,
    /// Bytes it received.
    pub downloaded: u64,
    /// Connections the proxy refused.
    pub refused: u64,
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
    if let Some(egress) = &p.egress {
        let mut hosts: Vec<String> = egress
            .hosts
            .iter()
            .map(|host| table_cell_code(&without_invisible(host).text))
            .collect();
        if egress.hosts_not_listed > 0 {
            hosts.push(format!("and {} more", egress.hosts_not_listed));
        }
        let reached = if hosts.is_empty() {
            "no host reached".to_owned()
        } else {
            hosts.join(", ")
        };
        row(
            "Egress",
            format!(
                "through stet's proxy: {reached}; {} B uploaded, {} B downloaded, {} refused",
                egress.uploaded, egress.downloaded, egress.refused
            ),
        );
    }
    row(
        "Credential",
        format!(
            "{} ({})",
            p.credential_kind,
            credential_reach(&p.credential_kind)
        ),
    );
    row("Redactions", p.redactions.to_string());
    row("Duration", human_duration(p.duration));
    row("Base → commit", format!("`{}` → `{}`", p.base, p.commit));
    block
}

/// What a credential of `kind` could do, in the provenance's words (docs/security.md, residual 43).
fn credential_reach(kind: &str) -> &'static str {
    match kind {
        "local" => "scoped to this repository, short-lived",
        "github-app" => "scoped to this repository, revoked after the push",
        "gitlab-project-token" => "scoped to this project, Developer, revoked after the push",
        "gitea-token" => {
            "write:repository scope, every repository of the account, deleted after the push"
        }
        "fallback" => "the person's own token, not narrowed, used on the host only",
        _ => "as its provider scopes it",
    }
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
mod tests;
