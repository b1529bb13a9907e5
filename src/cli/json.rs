//! `--json` for the commands a script reads (`stet doctor`, `reviews`, `sweep`, `trust --list`):
//! each prints one JSON object with its schema version `v`, the shapes in `docs/json.md`. Text that
//! came from outside is under the same display policy as the human output: names with what the
//! policy hides escaped, free text with it removed, so piping the JSON to a terminal is as safe.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use stet_engine::dispatch::service::SweepReport;
use stet_engine::doctor::{DoctorReport, Status};
use stet_engine::forge::local::ReviewRecord;
use stet_sanitize::display::{escaped_invisible, one_line, without_invisible};

/// The schema version of every object here; it goes up when a field changes meaning or goes away.
pub(crate) const JSON_SCHEMA_VERSION: u32 = 1;

/// Writes `value` on one line of `out`.
pub(crate) fn print(out: &mut dyn Write, value: &Value) -> std::io::Result<()> {
    writeln!(out, "{value}")
}

fn name(text: &str) -> String {
    escaped_invisible(text).into_owned()
}

fn path(path: &Path) -> String {
    name(&path.to_string_lossy())
}

/// `stet doctor --json`.
pub(crate) fn doctor(report: &DoctorReport) -> Value {
    let checks: Vec<Value> = report
        .checks
        .iter()
        .map(|check| {
            json!({
                "name": check.name,
                "status": match check.status {
                    Status::Ok => "ok",
                    Status::Warn => "warn",
                    Status::Fail => "fail",
                },
                "detail": one_line(&check.detail),
                "fix": check.fix.as_deref().map(one_line),
            })
        })
        .collect();
    let unchecked: Vec<String> = report.unchecked.iter().map(|what| one_line(what)).collect();
    json!({
        "v": JSON_SCHEMA_VERSION,
        "ok": !report.failed(),
        "checks": checks,
        "unchecked": unchecked,
    })
}

/// One review record; with its body when `body`.
pub(crate) fn review(record: &ReviewRecord, body: bool) -> Value {
    let mut value = json!({
        "number": record.number,
        "state": record.state.as_str(),
        "title": one_line(&record.title),
        "head": name(&record.head),
        "base": name(&record.base),
        "repo": name(&record.repo),
        "remote": path(&record.remote),
        "created": record.created,
        "updated": record.updated,
    });
    if body && let Some(fields) = value.as_object_mut() {
        fields.insert(
            "body".to_owned(),
            Value::String(without_invisible(&record.body).text.into_owned()),
        );
    }
    value
}

/// The opening of `stet reviews --json`, up to its list of records (each [`review`] without its
/// body, separated by commas, then `]}`): the list is written one record at a time.
pub(crate) fn reviews_opening(dir: &Path) -> String {
    let opening = json!({ "v": JSON_SCHEMA_VERSION, "dir": path(dir) }).to_string();
    format!("{},\"reviews\":[", opening.trim_end_matches('}'))
}

/// `stet reviews <n> --json`: the record, with its body.
pub(crate) fn one_review(record: &ReviewRecord) -> Value {
    json!({ "v": JSON_SCHEMA_VERSION, "review": review(record, true) })
}

/// `stet sweep --json`.
pub(crate) fn sweep(report: &SweepReport) -> Value {
    let texts = |items: &[String]| -> Vec<String> {
        items
            .iter()
            .map(|item| without_invisible(item).text.into_owned())
            .collect()
    };
    json!({
        "v": JSON_SCHEMA_VERSION,
        "containers_removed": texts(&report.containers_removed),
        "containers_already_gone": texts(&report.containers_already_gone),
        "directories_removed": report.directories_removed.iter().map(|dir| path(dir)).collect::<Vec<_>>(),
        "credentials_revoked": texts(&report.credentials_revoked),
        "credentials_left_to_expire": texts(&report.credentials_left_to_expire),
        "records_closed": report.records_closed,
        "failures": texts(&report.failures),
    })
}

/// One trusted file of `stet trust --list --json`.
pub(crate) struct TrustedFile<'a> {
    pub(crate) path: &'a Path,
    pub(crate) sha256: &'a str,
    pub(crate) since: chrono::DateTime<chrono::Utc>,
    /// `trusted`, `changed`, `gone` or `unreadable`.
    pub(crate) now: &'static str,
}

/// `stet trust --list --json`.
pub(crate) fn trusted(record: &Path, files: &[TrustedFile<'_>]) -> Value {
    let files: Vec<Value> = files
        .iter()
        .map(|file| {
            json!({
                "path": path(file.path),
                "sha256": file.sha256,
                "since": file.since,
                "now": file.now,
            })
        })
        .collect();
    json!({ "v": JSON_SCHEMA_VERSION, "record": path(record), "files": files })
}
