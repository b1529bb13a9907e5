//! `stet doctor`: checks that this machine can run a locked-down sandbox and that a dispatch from
//! here has what it needs ([`dispatch`]), says what it could not check, and what to fix. It changes
//! nothing: every check only looks.
//!
//! A sandbox whose memory or pids cap the engine silently ignores is not locked down, so the
//! container runtime reports which limits its engine enforces ([`RuntimeSetup::diagnose`]) before a
//! dispatch ever relies on it; the forge and its credential provider report on themselves too.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::check::{Check, Status};
use crate::config::Config;
use crate::dispatch::socket_dir::SocketPlace;
use crate::runtime::RuntimeSetup;
use crate::state_dir::StateDirError;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

mod dispatch;
mod egress;
pub use dispatch::{configuration_check, dispatch_checks, unchecked};

/// Below this much free space in the state directory, a dispatch's workspace may not fit.
const LOW_DISK_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Below this, provisioning is likely to fail.
const CRITICAL_DISK_BYTES: u64 = 200 * 1024 * 1024;

/// Every check, in the order they ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DoctorReport {
    /// Every check's outcome.
    pub checks: Vec<Check>,
    /// What could not be checked from here, each with how to check it.
    pub unchecked: Vec<String>,
}

impl DoctorReport {
    /// Whether any check failed (warnings do not count).
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// Each check's name, detail and fix quote the engine, the forge, the configuration or a path:
/// they are shown on one line each under the display policy (DESIGN §5 row 19).
impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use stet_sanitize::display::one_line;
        for check in &self.checks {
            let mark = match check.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            writeln!(f, "[{mark}] {}: {}", check.name, one_line(&check.detail))?;
            if let Some(fix) = &check.fix {
                writeln!(f, "       fix: {}", one_line(fix))?;
            }
        }
        for what in &self.unchecked {
            writeln!(f, "[----] not checked: {}", one_line(what))?;
        }
        let verdict = if self.failed() {
            "stet cannot dispatch from here until the failures above are fixed"
        } else if !self.unchecked.is_empty() {
            "nothing checked failed, but a dispatch needs what was not checked too"
        } else {
            "a dispatch from here has what it needs: this machine can run stet's sandboxes, its model and its forge answer"
        };
        writeln!(f, "{verdict}")
    }
}

/// Runs every check: the container runtime's own on itself (`Err`: it could not be made, it says
/// why) with the stet-sandbox executable `binary`, then this host's for the state directory `state`
/// (`Err`: there is none, it says why).
pub async fn diagnose(
    runtime: Result<Arc<dyn RuntimeSetup>, String>,
    state: Result<PathBuf, StateDirError>,
    binary: &Path,
) -> DoctorReport {
    let mut report = DoctorReport::default();
    let engine = runtime.as_ref().ok().cloned();
    match runtime {
        Ok(runtime) => report.checks.extend(runtime.diagnose(binary).await),
        Err(why) => report.checks.push(Check::problem(
            "engine",
            Status::Fail,
            why,
            "start the Docker daemon, or point DOCKER_HOST at a running engine",
        )),
    }
    report.checks.push(sandbox_uid_check());
    match state {
        Ok(state_dir) => {
            report.checks.push(state_check(&state_dir));
            report
                .checks
                .push(socket_check(&SocketPlace::for_installation(&state_dir)));
            report.checks.push(disk_check(&state_dir));
            if let Some(engine) = engine {
                report
                    .checks
                    .push(sandboxes_check(&*engine, &state_dir).await);
            }
        }
        Err(error) => report.checks.push(Check::problem(
            "state",
            Status::Fail,
            error.problem(),
            error.fix(),
        )),
    }
    report
}

/// The forge's own checks for the checkout at `repository` under `config` (either may have failed to
/// be found or read: then that is the one failing check): the configured forge and its credential
/// provider report on themselves, changing nothing. The primary token is read as a dispatch reads it.
pub async fn forge_checks(
    repository: Result<PathBuf, String>,
    config: Result<Config, String>,
    state: &Result<PathBuf, StateDirError>,
) -> Vec<Check> {
    let repository = match repository {
        Ok(repository) => repository,
        Err(why) => {
            return vec![Check::problem(
                "forge",
                Status::Warn,
                format!("not checked: {why}"),
                "run stet doctor inside the repository your briefs are for",
            )];
        }
    };
    let config = match config {
        Ok(config) => config,
        Err(why) => {
            return vec![Check::problem(
                "configuration",
                Status::Fail,
                why,
                "correct the file and field the message names",
            )];
        }
    };
    let sanitizer = match TokenSanitizer::new() {
        Ok(sanitizer) => SanitizerHandle::new(sanitizer),
        Err(error) => {
            return vec![Check::problem(
                "forge",
                Status::Fail,
                format!("the sanitizer could not be built: {error}"),
                "report this as a bug",
            )];
        }
    };
    let state_dir = state
        .as_ref()
        .map_or_else(|_| repository.clone(), Clone::clone);
    let setup = match crate::forge::from_settings(
        &config.forge,
        &config.credentials,
        &repository,
        &state_dir,
        &sanitizer,
    ) {
        Ok(setup) => setup,
        Err(error) => {
            return vec![Check::problem(
                "forge",
                Status::Fail,
                error.to_string(),
                "correct the [forge] or [credentials] settings the message names, or the token's source",
            )];
        }
    };
    let mut checks = setup.forge.diagnose().await;
    checks.extend(setup.credentials.diagnose(&setup.repositories).await);
    // A forge's words (a login, a token's name) are outside input: masked, and inert on a terminal.
    let masks = sanitizer.current();
    for check in &mut checks {
        check.detail = stet_sanitize::display::one_line(masks.sanitize(&check.detail).as_str());
    }
    checks
}

/// Sandboxes run as the invoking account; as root, as a fixed uid no host account or process may
/// use.
fn sandbox_uid_check() -> Check {
    let uid = crate::runtime::DEFAULT_SANDBOX_UID;
    let me = rustix::process::geteuid().as_raw();
    if me != 0 {
        return Check::ok("sandbox user", format!("sandboxes run as you (uid {me})"));
    }
    match crate::runtime::host_use_of(uid) {
        None => Check::ok(
            "sandbox user",
            format!("sandboxes run as uid {uid}, which no account or process of this host uses"),
        ),
        Some(by) => Check::problem(
            "sandbox user",
            Status::Fail,
            format!(
                "sandboxes run as uid {uid}, but {by} uses it here: it could reach their files"
            ),
            "remove that account (or stop that process), or run stet as an ordinary user",
        ),
    }
}

/// The state directory is there and writable, or can be made: looked at, never made.
fn state_check(state_dir: &Path) -> Check {
    match crate::state_dir::inspect(state_dir) {
        Ok(true) => Check::ok("state", format!("{} (writable)", state_dir.display())),
        Ok(false) => Check::ok(
            "state",
            format!(
                "{} (not there yet: the first dispatch makes it, private)",
                state_dir.display()
            ),
        ),
        Err(error) => Check::problem("state", Status::Fail, error.problem(), error.fix()),
    }
}

/// Where the model gateways' sockets go, and that the place is private or can be made so: looked
/// at, never made.
fn socket_check(place: &SocketPlace) -> Check {
    match place.inspect() {
        Ok(true) => Check::ok("gateway sockets", format!("in {place}")),
        Ok(false) => Check::ok(
            "gateway sockets",
            format!("in {place} (the first dispatch makes it, private)"),
        ),
        Err(error) => Check::problem(
            "gateway sockets",
            Status::Fail,
            error.problem(),
            &error.fix(),
        ),
    }
}

/// This installation's sandbox containers on the engine, the warm pool's marked: what `stet sweep`
/// would look at.
async fn sandboxes_check(engine: &dyn RuntimeSetup, state_dir: &Path) -> Check {
    let ours = crate::runtime::state_label(state_dir);
    let listed = match engine.list_sandboxes().await {
        Ok(listed) => listed,
        Err(error) => {
            let fix = "check the engine's logs";
            return Check::problem("sandboxes", Status::Warn, error.to_string(), fix);
        }
    };
    let names: Vec<String> = listed
        .into_iter()
        .filter(|container| container.state_label.as_deref() == Some(ours.as_str()))
        .map(|container| match container.warm {
            true => format!("{} ({}, warm pool)", container.name, container.state),
            false => format!("{} ({})", container.name, container.state),
        })
        .collect();
    match names.is_empty() {
        true => Check::ok("sandboxes", "none".to_owned()),
        false => Check::ok("sandboxes", names.join(", ")),
    }
}

fn disk_check(state_dir: &Path) -> Check {
    let existing = state_dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    match rustix::fs::statvfs(existing) {
        Ok(stats) => {
            let free = stats.f_bavail.saturating_mul(stats.f_frsize);
            let detail = format!("{} free for {}", human_bytes(free), state_dir.display());
            if free < CRITICAL_DISK_BYTES {
                Check::problem(
                    "disk",
                    Status::Fail,
                    detail,
                    "free space on that filesystem, or set XDG_STATE_HOME elsewhere",
                )
            } else if free < LOW_DISK_BYTES {
                Check::problem(
                    "disk",
                    Status::Warn,
                    detail,
                    "large repositories may not fit; free some space",
                )
            } else {
                Check::ok("disk", detail)
            }
        }
        Err(error) => Check::problem(
            "disk",
            Status::Warn,
            format!("cannot read free space of {}: {error}", existing.display()),
            "check that the state directory is on a mounted filesystem",
        ),
    }
}

fn human_bytes(bytes: u64) -> String {
    const GIB: u64 = 1024 * 1024 * 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_engine_fails_with_a_fix_and_disk_is_still_checked() {
        let dir = tempfile::tempdir().unwrap();
        let report = diagnose(
            Err("connection refused".into()),
            Ok(dir.path().join("stet")),
            Path::new("/nonexistent"),
        )
        .await;
        assert!(report.failed());
        let text = report.to_string();
        assert!(text.contains("[FAIL] engine: connection refused"), "{text}");
        assert!(text.contains("fix: start the Docker daemon"), "{text}");
        assert!(text.contains("disk: "), "{text}");
        assert!(text.contains("[ok  ] state: "), "{text}");
        assert!(text.contains("] gateway sockets: "), "{text}");
        // Looked at, never made.
        assert!(!dir.path().join("stet").exists());
        let place = SocketPlace::for_installation(&dir.path().join("stet"));
        assert!(!place.root().exists());
        assert!(
            text.ends_with("until the failures above are fixed\n"),
            "{text}"
        );
    }

    #[test]
    fn what_a_check_quotes_is_shown_under_the_display_policy() {
        let hostile = "main\u{202e}x\u{9b}31m\u{9d}52;c;aGk=\u{9c}\u{1b}[2J\nnext";
        let report = DoctorReport {
            unchecked: Vec::new(),
            checks: vec![Check {
                name: "forge",
                status: Status::Fail,
                detail: format!("the forge said {hostile}"),
                fix: Some(format!("push {hostile}")),
            }],
        };
        let text = report.to_string();
        assert!(
            text.contains("[FAIL] forge: the forge said mainx next"),
            "{text:?}"
        );
        assert!(text.contains("fix: push mainx next"), "{text:?}");
        assert!(
            !text.chars().any(|c| c != '\n'
                && stet_sanitize::display::treatment(c) != stet_sanitize::display::Treatment::Keep),
            "{text:?}"
        );
    }

    #[test]
    fn sizes_read_as_a_person_would_write_them() {
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
        assert_eq!(human_bytes(300 * 1024 * 1024), "300 MiB");
    }
}
