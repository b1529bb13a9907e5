//! Collecting the agent's result ([`Collect`]): the workspace imported into a trusted commit kept at
//! `refs/stet/<dispatch>`, passed through the review gate, and reported (the diff to the run record,
//! what the gate holds as warnings and in the `collected` event).

use std::path::Path;

use crate::dispatch::error::DispatchError;
use crate::dispatch::gate::{GateReport, UploadHold, inspect_until, printable};
use crate::dispatch::order::result_ref;
use crate::dispatch::sandbox::DispatchSandbox;
use crate::forge::Preflight;
use crate::git::changes::read_changes_until;
use crate::git::import::{ImportRequest, Imported, import_until};
use crate::human::truncate;
use stet_protocol::event::{
    ChangedPath, EventKind, GateFindings, HeldPathReport, MAX_LISTED, MAX_LISTED_BYTES,
    SecretReport,
};
use stet_sanitize::branch::CommitSha;
use stet_sanitize::display;
use stet_sanitize::sanitize::SanitizedText;

use super::steering::Steering;

/// The longest agent summary carried into the commit message and the pull request.
const MAX_SUMMARY_BYTES: usize = 4 * 1024;

/// The most held paths, or findings, a warning or a reason names; the `collected` event lists more
/// (its first [`MAX_LISTED`]).
pub(super) const MAX_NAMED: usize = 12;

/// Covers `collecting`, from the agent's container removed: hands the result, if the agent changed
/// anything, to [`Handover`](super::delivery::Handover), which moves on from `collecting`.
pub(super) struct Collect<'d> {
    steering: &'d mut Steering,
    sandbox: &'d DispatchSandbox,
}

/// A collected result: the trusted commit (kept at [`result_ref`]) and what the review gate found.
pub(super) struct Collected {
    pub(super) commit: CommitSha,
    pub(super) gate: GateReport,
}

impl<'d> Collect<'d> {
    pub(super) fn new(steering: &'d mut Steering, sandbox: &'d DispatchSandbox) -> Collect<'d> {
        Collect { steering, sandbox }
    }

    /// Collects the result, then removes the agent's files (the review needs only the imported
    /// commit); `None` when nothing changed.
    pub(super) async fn collect(
        mut self,
        preflight: &Preflight,
    ) -> Result<Option<Collected>, DispatchError> {
        let collected = self.import(preflight).await?;
        if let Err(failure) = self.sandbox.remove_agent_files().await {
            let message = self.steering.sanitize(&format!(
                "the agent's files were not removed after collecting: {failure}; the teardown tries again"
            ));
            self.steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
        Ok(collected)
    }

    /// Imports the workspace into a trusted commit kept at [`result_ref`] and passes it through the
    /// review gate; `None` when nothing changed.
    async fn import(&mut self, preflight: &Preflight) -> Result<Option<Collected>, DispatchError> {
        if self.steering.stop.is_cancelled() {
            return Err(self.steering.stop_reason());
        }
        let message = self.commit_message();
        let repository = self.steering.parts.repository.clone();
        let workspace = self.sandbox.paths().workspace.clone();
        let parent = preflight.parent().clone();
        let identity = self.steering.parts.settings.agent.clone();
        let limits = self.steering.parts.settings.import;
        let reference = result_ref(self.steering.run.id);
        let keep_at = reference.clone();
        let rules = self.steering.parts.settings.protected.clone();
        let sanitizer = self.steering.sanitizer();
        // The import and the gate go on in their thread when the dispatch stops (cancel or timeout);
        // told so, at each entry, path and line, they end there, the import writing nothing.
        let stop = self.steering.stop.clone();
        let imported = tokio::task::spawn_blocking(move || {
            let request = ImportRequest {
                repository: &repository,
                workspace: &workspace,
                parent: &parent,
                identity: &identity,
                message: &message,
                limits,
            };
            let interrupted = || stop.is_cancelled();
            let imported = import_until(&request, &interrupted)
                .map_err(|error| format!("collecting the result: {error}"))?;
            let Imported::Committed { commit, .. } = &imported else {
                return Ok::<_, String>((imported, GateReport::default()));
            };
            keep_result(&repository, &keep_at, commit)?;
            let changes = read_changes_until(&repository, &parent, commit, &interrupted)
                .map_err(|error| format!("reviewing the result: {error}"))?;
            let gate = inspect_until(&changes, &rules, &sanitizer, &interrupted)
                .map_err(|error| error.to_string())?;
            Ok((imported, gate))
        });
        let imported = self
            .steering
            .guarded(imported)
            .await?
            .map_err(|error| {
                self.steering
                    .fail(format!("collecting the result ended abnormally: {error}"))
            })?
            .map_err(|error| self.steering.fail(error))?;
        let (imported, mut gate) = imported;
        gate.uploads = self.upload_hold();
        let (commit, diff, warnings) = match imported {
            Imported::Committed {
                commit,
                diff,
                warnings,
            } => (commit, diff, warnings),
            Imported::Unchanged { warnings } => {
                for warning in warnings {
                    let message = self.steering.sanitize(&warning.to_string());
                    self.steering
                        .publisher
                        .emit(EventKind::Warning { message })
                        .await;
                }
                if self.steering.stop.is_cancelled() {
                    return Err(self.steering.stop_reason());
                }
                return Ok(None);
            }
        };
        for warning in &warnings {
            let message = self.steering.sanitize(&warning.to_string());
            self.steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
        let mut held_warnings: Vec<String> = gate
            .held
            .iter()
            .map(|held| {
                format!("the result changes a protected path: {held}; it is held for review")
            })
            .chain(
                gate.uploads
                    .iter()
                    .map(|uploads| format!("{uploads}; the result is held for review")),
            )
            .collect();
        let mut secret_warnings: Vec<String> = gate
            .secrets
            .iter()
            .map(|finding| {
                if finding.known {
                    format!(
                        "the result holds a value stet itself handles: {finding}; it will not be pushed"
                    )
                } else {
                    format!(
                        "the result holds what looks like a secret: {finding}; it is held for review"
                    )
                }
            })
            .collect();
        for warnings in [&mut held_warnings, &mut secret_warnings] {
            if warnings.len() > MAX_NAMED {
                let more = warnings.len() - MAX_NAMED;
                warnings.truncate(MAX_NAMED);
                warnings.push(format!(
                    "… and {more} more (the collected event lists the first {MAX_LISTED})"
                ));
            }
        }
        for warning in held_warnings.into_iter().chain(secret_warnings) {
            let message = self.steering.sanitize(&warning);
            self.steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
        let (files, files_not_listed) = listed(
            &diff.files,
            |file| file.path.len(),
            |file| ChangedPath {
                path: self.steering.sanitize(&printable(&file.path)),
                change: file.change,
                insertions: file.insertions,
                deletions: file.deletions,
                binary: file.binary,
                cut: file.cut,
            },
        );
        let (held, held_not_listed) = listed(
            &gate.held,
            |held| held.path.len(),
            |held| {
                (
                    self.steering.sanitize(&held.to_string()),
                    HeldPathReport {
                        path: self.steering.sanitize(&held.path),
                        rule: self.steering.sanitize(&held.rule()),
                    },
                )
            },
        );
        let (protected, held): (Vec<_>, Vec<_>) = held.into_iter().unzip();
        let (secrets, secrets_not_listed) = listed(
            &gate.secrets,
            |finding| finding.path.len(),
            |finding| SecretReport {
                path: self.steering.sanitize(&finding.path),
                line: finding.line.and_then(|line| u64::try_from(line).ok()),
                kind: self.steering.sanitize(&finding.kind),
                known: finding.known,
            },
        );
        if let Some(record) = self.steering.publisher.record()
            && let Err(error) = record.write_patch(&self.steering.sanitize(&diff.patch))
        {
            let message = self
                .steering
                .sanitize(&format!("the diff was not saved: {error}"));
            self.steering
                .publisher
                .emit(EventKind::Warning { message })
                .await;
        }
        let collected = EventKind::Collected {
            commit: commit.clone(),
            reference: self.steering.sanitize(&reference),
            files,
            files_not_listed,
            insertions: diff.insertions,
            deletions: diff.deletions,
            gate: Box::new(GateFindings {
                protected,
                held,
                secrets,
                held_not_listed,
                secrets_not_listed,
            }),
        };
        self.steering.publisher.emit(collected).await;
        self.steering.gathered.commit = Some(commit.clone());
        self.steering.gathered.reference = Some(reference);
        if self.steering.stop.is_cancelled() {
            return Err(self.steering.stop_reason());
        }
        Ok(Some(Collected { commit, gate }))
    }

    /// What the agent uploaded through the egress proxy, when it is past the review threshold: the
    /// hosts it sent bytes to, most first.
    fn upload_hold(&self) -> Option<UploadHold> {
        let report = self.steering.gathered.egress.as_ref()?;
        let threshold = self
            .steering
            .parts
            .settings
            .egress
            .as_ref()?
            .review_upload_bytes;
        if report.uploaded <= threshold {
            return None;
        }
        let mut sent: Vec<(String, u64)> = Vec::new();
        for record in report.records.iter().filter(|record| record.up > 0) {
            let host = format!("{}:{}", record.host, record.port);
            match sent.iter_mut().find(|(known, _)| *known == host) {
                Some((_, bytes)) => *bytes += record.up,
                None => sent.push((host, record.up)),
            }
        }
        sent.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
        let more = sent.len().saturating_sub(MAX_NAMED);
        let mut hosts: Vec<String> = sent
            .into_iter()
            .take(MAX_NAMED)
            .map(|(host, bytes)| format!("{host} ({bytes} B)"))
            .collect();
        if more > 0 {
            hosts.push(format!(
                "and {more} more (the run record's egress events list them)"
            ));
        }
        Some(UploadHold {
            uploaded: report.uploaded,
            threshold,
            hosts,
        })
    }

    /// The brief's title, the agent's summary made inert the way the pull request shows it (a forge
    /// renders a commit message as markdown when it fills in a pull request), and where it came from;
    /// no invisible character anywhere.
    pub(super) fn commit_message(&self) -> SanitizedText {
        let brief = &self.steering.run.brief;
        let mut message = display::without_invisible(brief.title.trim())
            .text
            .into_owned();
        if let Some(summary) = self.steering.gathered.summary.as_deref().map(str::trim)
            && !summary.is_empty()
        {
            let shown = display::forge_text(
                &self.steering.sanitizer(),
                truncate(summary, MAX_SUMMARY_BYTES),
            );
            message.push_str("\n\n");
            message.push_str(shown.text.as_str());
        }
        message.push_str(&format!(
            "\n\nDispatched by stet from brief {} ({}).",
            brief.id, self.steering.run.id
        ));
        self.steering.sanitize(&message)
    }
}

/// The first of `items` that fit in a list of the `collected` event ([`MAX_LISTED`] entries, and
/// [`MAX_LISTED_BYTES`] as `bytes` measures each), each made by `make` (only those are sanitized),
/// and how many are left out.
fn listed<T, U>(
    items: &[T],
    bytes: impl Fn(&T) -> usize,
    make: impl FnMut(&T) -> U,
) -> (Vec<U>, usize) {
    let mut budget = MAX_LISTED_BYTES;
    let fitting = items
        .iter()
        .take(MAX_LISTED)
        .take_while(|item| match budget.checked_sub(bytes(item)) {
            Some(left) => {
                budget = left;
                true
            }
            None => false,
        })
        .count();
    let shown = items[..fitting].iter().map(make).collect();
    (shown, items.len() - fitting)
}

/// Writes `refs/stet/<dispatch>` at the result, so it is never lost (and is what `--headless`
/// without `--push` leaves).
fn keep_result(repository: &Path, reference: &str, commit: &CommitSha) -> Result<(), String> {
    let repo = git2::Repository::open(repository)
        .map_err(|error| format!("{}: {}", repository.display(), error.message()))?;
    let oid = git2::Oid::from_str(commit.as_str()).map_err(|error| error.message().to_owned())?;
    repo.reference(reference, oid, false, "stet: dispatch result")
        .map_err(|error| format!("writing {reference}: {}", error.message()))?;
    Ok(())
}
