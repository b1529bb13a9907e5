//! The review gate (DESIGN §5 row 19): what in a collected result a person must see before it leaves
//! the host. Dangerous paths are held for explicit approval ([`paths`]: protected rules, new or
//! retargeted symbolic links, newly executable files, paths reached through a link); the content the
//! result adds is scanned for secrets ([`secrets`]): a value stet itself handles is never pushed, and
//! a shape match is held like a dangerous path; content past the scan's budget is held unread. Pure: it reads what [`crate::git::changes`] read.

mod paths;
mod secrets;

use std::fmt;
use std::sync::Arc;

use crate::forge::protected::ProtectedPaths;
use crate::git::changes::ResultChanges;
use stet_sanitize::sanitize::TokenSanitizer;

/// A changed path held for explicit approval, and every reason it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPath {
    /// Repository-relative, control characters escaped.
    pub path: String,
    /// Each rule that holds it (`CI: .github/**`, `newly executable`, `new symlink → .github`).
    pub reasons: Vec<String>,
}

impl HeldPath {
    /// The reasons as one phrase.
    pub fn rule(&self) -> String {
        self.reasons.join("; ")
    }
}

/// `stet.toml (stet's own configuration)`.
impl fmt::Display for HeldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path, self.rule())
    }
}

/// A secret in what the result adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFinding {
    /// Repository-relative, control characters escaped.
    pub path: String,
    /// The line of the new file it is on; `None` when it is in the path's name.
    pub line: Option<usize>,
    /// The shape rule's label, or the known value's (`github-token`, `model-key`).
    pub kind: String,
    /// A value stet itself handles (scoped credential, primary token, model key): never pushed.
    pub known: bool,
}

/// `config/app.env line 3 (github-token)`; a known value says so (`... (the known value model-key)`).
impl fmt::Display for SecretFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} line {line}", self.path)?,
            None => write!(f, "the name {}", self.path)?,
        }
        if self.known {
            write!(f, " (the known value {})", self.kind)
        } else {
            write!(f, " ({})", self.kind)
        }
    }
}

/// The agent uploaded more through the egress proxy than the review threshold: whatever the diff,
/// a person sees where the bytes went before the result is pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadHold {
    /// Bytes the agent sent out.
    pub uploaded: u64,
    /// The threshold (`network.review_upload_bytes`).
    pub threshold: u64,
    /// The hosts it sent them to, as `host:port (bytes)`, most first.
    pub hosts: Vec<String>,
}

impl fmt::Display for UploadHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the agent uploaded {} bytes through the egress proxy, past the review threshold of {} (network.review_upload_bytes), to {}",
            self.uploaded,
            self.threshold,
            self.hosts.join(", ")
        )
    }
}

/// What the gate found in one result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateReport {
    /// Changed paths held for explicit approval.
    pub held: Vec<HeldPath>,
    /// What looks like a secret in the lines the result adds.
    pub secrets: Vec<SecretFinding>,
    /// Uploads past the review threshold, when the agent made them.
    pub uploads: Option<UploadHold>,
}

impl GateReport {
    /// Findings of values stet itself handles: the result must never be pushed.
    pub fn known_values(&self) -> Vec<&SecretFinding> {
        self.secrets
            .iter()
            .filter(|finding| finding.known)
            .collect()
    }

    /// Findings by shape: the result waits for a person.
    pub fn shaped_secrets(&self) -> Vec<&SecretFinding> {
        self.secrets
            .iter()
            .filter(|finding| !finding.known)
            .collect()
    }

    /// Whether a person must approve the result before it is pushed.
    pub fn needs_approval(&self) -> bool {
        !self.held.is_empty() || !self.secrets.is_empty() || self.uploads.is_some()
    }
}

/// The gate was told to stop before it read the whole result: it gives no report, since a partial
/// one would pass what it never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the review gate was interrupted before it read the whole result")]
pub struct Interrupted;

/// Reads `changes` against the path `rules` and the `sanitizer`'s shape rules and known values.
pub fn inspect(
    changes: &ResultChanges,
    rules: &ProtectedPaths,
    sanitizer: &Arc<TokenSanitizer>,
) -> GateReport {
    match inspect_until(changes, rules, sanitizer, &|| false) {
        Ok(report) => report,
        Err(Interrupted) => unreachable!("nothing interrupts this reading"),
    }
}

/// [`inspect`], ending with [`Interrupted`] once `interrupted` says so (asked at each changed path,
/// each name a link reaches it by, and each reading of its content).
pub fn inspect_until(
    changes: &ResultChanges,
    rules: &ProtectedPaths,
    sanitizer: &Arc<TokenSanitizer>,
    interrupted: &dyn Fn() -> bool,
) -> Result<GateReport, Interrupted> {
    let mut held = paths::held_until(changes, rules, interrupted)?;
    let mut positions: std::collections::HashMap<String, usize> = held
        .iter()
        .enumerate()
        .map(|(position, held)| (held.path.clone(), position))
        .collect();
    // What the scan could not read, it cannot vouch for: a person decides.
    for change in &changes.changes {
        let Some(reason) = &change.unread else {
            continue;
        };
        let path = printable(&change.path);
        let reason = format!("not scanned for secrets: {reason}");
        match positions.get(&path).and_then(|at| held.get_mut(*at)) {
            Some(held) => held.reasons.push(reason),
            None => {
                positions.insert(path.clone(), held.len());
                held.push(HeldPath {
                    path,
                    reasons: vec![reason],
                });
            }
        }
    }
    Ok(GateReport {
        held,
        secrets: secrets::scan_until(changes, sanitizer, interrupted)?,
        uploads: None,
    })
}

/// A path as a person can read it: control and invisible characters shown as escapes (the one
/// display policy's rule for names, where dropping a character would name another file).
pub fn printable(text: &str) -> String {
    stet_sanitize::display::escaped_invisible(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_and_findings_read_as_a_person_would_say_them() {
        let held = HeldPath {
            path: "bin/run".into(),
            reasons: vec!["CI: .github/**".into(), "newly executable".into()],
        };
        assert_eq!(
            held.to_string(),
            "bin/run (CI: .github/**; newly executable)"
        );
        let shaped = SecretFinding {
            path: "app.env".into(),
            line: Some(3),
            kind: "github-token".into(),
            known: false,
        };
        assert_eq!(shaped.to_string(), "app.env line 3 (github-token)");
        let known = SecretFinding {
            line: None,
            kind: "model-key".into(),
            known: true,
            ..shaped.clone()
        };
        assert_eq!(
            known.to_string(),
            "the name app.env (the known value model-key)"
        );
        let report = GateReport {
            held: Vec::new(),
            secrets: vec![shaped, known],
            uploads: None,
        };
        assert_eq!(report.known_values().len(), 1);
        assert_eq!(report.shaped_secrets().len(), 1);
        assert!(report.needs_approval());
        let uploads = GateReport {
            uploads: Some(UploadHold {
                uploaded: 2_000_000,
                threshold: 1_048_576,
                hosts: vec!["paste.example.org:443 (2000000 B)".into()],
            }),
            ..GateReport::default()
        };
        assert!(uploads.needs_approval());
        assert_eq!(
            uploads.uploads.unwrap().to_string(),
            "the agent uploaded 2000000 bytes through the egress proxy, past the review threshold of 1048576 (network.review_upload_bytes), to paste.example.org:443 (2000000 B)"
        );
        assert!(!GateReport::default().needs_approval());
    }

    /// The attack: a secret in a file past the scan's bound. The file is held, named with why, and
    /// never passes the gate unread.
    #[test]
    fn a_file_the_scan_could_not_read_is_held() {
        let token = format!("ghp_{}", "a1B2".repeat(9));
        let mut content = format!("TOKEN={token}\n").into_bytes();
        content.resize(2 * 1024 * 1024, b'x');
        let changes = crate::git::changes::trees::changes(
            &[],
            &[("config.env", git2::FileMode::Blob, &content)],
        );
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let report = inspect(&changes, &ProtectedPaths::default(), &sanitizer);
        assert!(report.needs_approval());
        assert_eq!(report.held.len(), 1, "{report:?}");
        assert_eq!(report.held[0].path, "config.env");
        assert!(
            report.held[0]
                .rule()
                .starts_with("not scanned for secrets: "),
            "{report:?}"
        );
    }

    #[test]
    fn an_interrupted_gate_gives_no_report_wherever_it_stops() {
        use git2::FileMode;

        use crate::git::changes::trees::changes;

        let link: &[u8] = b".github";
        let readme = format!(
            "hello\nDEMO_TOKEN=ghp_{}\n",
            crate::credential::random_token(36).unwrap()
        );
        let changes = changes(
            &[("README.md", FileMode::Blob, b"hello\n")],
            &[
                ("README.md", FileMode::Blob, readme.as_bytes()),
                (".github/workflows/ci.yml", FileMode::Blob, b"on: push\n"),
                ("ci", FileMode::Link, link),
                ("src/lib.rs", FileMode::Blob, b"fn a() {}\n"),
            ],
        );
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let rules = ProtectedPaths::default();
        let whole = inspect(&changes, &rules, &sanitizer);
        assert!(
            !whole.held.is_empty() && !whole.secrets.is_empty(),
            "{whole:?}"
        );
        let mut stops = 0;
        for after_questions in 0.. {
            let asked = std::cell::Cell::new(0);
            let interrupted = || {
                asked.set(asked.get() + 1);
                asked.get() > after_questions
            };
            match inspect_until(&changes, &rules, &sanitizer, &interrupted) {
                Err(Interrupted) => stops += 1,
                Ok(report) => {
                    assert_eq!(report, whole);
                    break;
                }
            }
        }
        // Each path was a place to stop, for the rules and for the scan (and the link's other
        // names, and each reading of added content).
        assert!(stops > 2 * changes.changes.len(), "{stops}");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
        assert_eq!(
            printable("invoice\u{202e}fdp.exe\u{200b}"),
            "invoice\\u{202e}fdp.exe\\u{200b}"
        );
    }
}
