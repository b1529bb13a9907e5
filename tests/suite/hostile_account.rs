//! Attacks on the per-user socket place, the private state and stet's teardown, as another local
//! account would make them, or as the agent would through what it leaves in its directories. Each
//! test states what must hold; each failed against the code before the fixes it guards (a link
//! planted in the socket place was followed by the sweep, a state directory of another account and
//! its forged journal were obeyed, a tree deeper than the open-file limit outlived its dispatch).
//!
//! The parts that need a second account (to own what is planted, or to run as the sandbox's uid)
//! run when the suite runs as root; as an ordinary user the same test checks what that user can
//! plant. CI runs the suite both ways.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stet_protocol::event::{DispatchId, Event, EventKind};

use super::accounts::{Account, OTHER_UID, me, mode, running_as_root};
use super::headless::docker_ready;

/// A directory of the victim's that happens to hold a directory named like a dispatch's socket
/// directory (32 hex digits: systemd's `/var/log/journal/<machine-id>` is one, for root).
fn precious_tree(parent: &Path) -> (PathBuf, PathBuf) {
    let precious = parent.join("precious");
    let named_like_a_dispatch = precious.join("3d1219c7c4c5404aaa1f6d2a48adfda4");
    std::fs::create_dir_all(named_like_a_dispatch.join("deep")).unwrap();
    let file = named_like_a_dispatch.join("deep/system.journal");
    std::fs::write(&file, "years of logs").unwrap();
    (precious, file)
}

/// The socket place's `<base>/<installation>` planted as a link (what another account does to
/// `/tmp/stet-<uid>/<installation>` when it makes `/tmp/stet-<uid>` first): `stet sweep` must not
/// list the link's target and remove what it finds there. `prepare` refuses this place; the sweep
/// must refuse it too.
#[test]
fn the_sweep_never_follows_a_link_planted_in_the_socket_place() {
    docker_ready();
    let victim = Account::new(None).with_runtime_dir();
    let (precious, file) = precious_tree(victim.root.path());
    // The state directory exists first, so its label is the one stet computes.
    std::fs::create_dir_all(victim.state()).unwrap();
    let label = stet_engine::runtime::state_label(&victim.state());
    let base = victim.runtime_dir.as_ref().unwrap().join("stet");
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&precious, base.join(&label)).unwrap();

    let swept = victim.stet("umask 022", &["sweep"]).output().unwrap();
    let report = String::from_utf8_lossy(&swept.stdout);
    assert!(
        file.exists(),
        "stet sweep removed a directory it reached through a planted link: {report}"
    );
}

/// A host process running as the sandbox's uid could reach a running sandbox's files through
/// `/proc/<pid>/root` (the gateway socket, the workspace that becomes the commit). So stet, as root,
/// refuses to run sandboxes as a uid the host uses (`Engine::assemble`, `stet doctor`); as an
/// ordinary user, its sandboxes are its own. The squatter here takes a uid next to the sandbox's,
/// so that the dispatches of tests running meanwhile are not refused.
#[test]
fn a_uid_a_host_process_uses_is_found_so_no_sandbox_runs_as_it() {
    let victim = Account::new(None);
    let doctor = victim.stet("umask 022", &["doctor"]).output().unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    if !running_as_root() {
        assert!(
            report.contains(&format!(
                "[ok  ] sandbox user: sandboxes run as you (uid {})",
                me()
            )),
            "{report}"
        );
        return;
    }
    let uid = stet_engine::runtime::DEFAULT_SANDBOX_UID;
    assert!(
        report.contains(&format!("[ok  ] sandbox user: sandboxes run as uid {uid}, which no account or process of this host uses")),
        "{report}"
    );
    let squatted = uid - 2;
    assert_eq!(stet_engine::runtime::host_use_of(squatted), None);
    let mut squatter = Command::new("sleep")
        .arg("600")
        .uid(squatted)
        .gid(squatted)
        .spawn()
        .unwrap();
    let found = stet_engine::runtime::host_use_of(squatted);
    squatter.kill().unwrap();
    squatter.wait().unwrap();
    assert_eq!(found, Some(format!("process {}", squatter.id())));
    assert_eq!(stet_engine::runtime::host_use_of(squatted), None);
}

/// A state directory where another account could make it first (`XDG_STATE_HOME` under `/tmp`, a
/// CI runner's `HOME=/tmp/...`, `sudo -E`): stet refuses a state directory on a path another account
/// could change — a directory of another account's holding a forged journal record, a link another
/// account planted, a directory every account may write — and sweeps nothing it names.
#[test]
fn a_state_directory_another_account_could_plant_is_refused_and_nothing_it_names_is_swept() {
    // Any account can meet a directory every account may write on the way.
    let victim = Account::new(None);
    let shared = victim.root.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut open = victim.stet("umask 022", &["sweep"]);
    open.env("XDG_STATE_HOME", shared.join("state"));
    let refused = open.output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: writable by every account", shared.display())),
        "{stderr}"
    );
    assert!(!shared.join("state").exists(), "nothing was made there");
    if !running_as_root() {
        return;
    }

    // As root: another account's state directory, with a forged record naming a precious tree.
    let (precious, file) = precious_tree(victim.root.path());
    let journal = victim.state().join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    let dispatch = DispatchId::new();
    let record = journal.join(format!("{dispatch}.1-1.jsonl"));
    std::fs::write(
        &record,
        format!(
            "{{\"v\":1,\"op\":\"begin\",\"dispatch\":\"{dispatch}\"}}\n{}\n",
            serde_json::json!({"v": 1, "op": "intend", "resource": {"kind": "workspace", "path": precious}})
        ),
    )
    .unwrap();
    for path in [
        victim.state_home.clone(),
        victim.state(),
        journal.clone(),
        record.clone(),
    ] {
        std::os::unix::fs::chown(&path, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
        let open = if path.is_dir() { 0o777 } else { 0o666 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(open)).unwrap();
    }
    let swept = victim.stet("umask 022", &["sweep"]).output().unwrap();
    let report = String::from_utf8_lossy(&swept.stdout);
    let stderr = String::from_utf8_lossy(&swept.stderr);
    assert!(
        file.exists(),
        "root's stet swept a path named by a journal record another account wrote: {report}"
    );
    assert_eq!(swept.status.code(), Some(2), "{report}{stderr}");
    assert!(
        stderr.contains(&format!(
            "belongs to uid {OTHER_UID}, neither you (uid 0) nor root"
        )),
        "{stderr}"
    );

    // As root: the state directory a link another account planted to a directory of root's.
    let victim = Account::new(None);
    let target = victim.root.path().join("etc-like");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(&victim.state_home).unwrap();
    std::os::unix::fs::symlink(&target, victim.state()).unwrap();
    std::os::unix::fs::lchown(victim.state(), Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let swept = victim.stet("umask 022", &["sweep"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&swept.stderr);
    assert_eq!(swept.status.code(), Some(2), "{stderr}");
    assert_eq!(
        mode(&target),
        0o755,
        "root's stet changed the mode of the link's target: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "root's stet kept its state in the link's target: {stderr}"
    );
}

/// What the agent leaves in its writable `/outputs` (here: a directory tree deeper than the
/// process's open-file limit, 1024 by default for a login account) must not outlive the
/// dispatch: the teardown removes it, and no sweep is left failing on it forever.
#[test]
fn an_agent_cannot_make_its_files_outlive_the_dispatch() {
    docker_ready();
    let victim = Account::new(None);
    let setup = "umask 022; ulimit -n 1024";
    let mut child = victim
        .stet(
            setup,
            &["demo", "--headless", "--pace", "1", "--timeout", "2m"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut dispatch = None;
    let mut planted = false;
    let mut warnings = Vec::new();
    for line in lines {
        let event: Event = serde_json::from_str(&line.unwrap()).unwrap();
        dispatch = Some(event.dispatch);
        if !planted && matches!(event.kind, EventKind::Usage(_)) {
            // Anything the agent can do in /outputs: mkdir d; cd d; 1100 times.
            let outputs = victim
                .state()
                .join("dispatches")
                .join(event.dispatch.to_string())
                .join("outputs");
            let mut dir = std::fs::File::open(&outputs).unwrap();
            for _ in 0..1100 {
                rustix::fs::mkdirat(&dir, "d", rustix::fs::Mode::RWXU).unwrap();
                let next = rustix::fs::openat(
                    &dir,
                    "d",
                    rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
                    rustix::fs::Mode::empty(),
                )
                .unwrap();
                dir = std::fs::File::from(next);
            }
            planted = true;
        }
        if let EventKind::Warning { message } = &event.kind {
            warnings.push(message.as_str().to_owned());
        }
    }
    child.wait().unwrap();
    assert!(planted, "the agent got to work");
    let dispatch = dispatch.unwrap();
    let swept = victim.stet(setup, &["sweep"]).output().unwrap();
    let report = String::from_utf8_lossy(&swept.stdout).into_owned();
    let left = victim.state().join("dispatches").join(dispatch.to_string());
    let still_there = left.exists();
    // Clean up with a generous limit, whatever the outcome.
    let _ = victim.stet("ulimit -n 20000", &["sweep"]).output();
    assert!(warnings.is_empty(), "teardown warnings: {warnings:?}");
    assert!(
        !still_there,
        "the dispatch's files outlived it; stet sweep says: {report}"
    );
    assert_eq!(swept.status.code(), Some(0), "{report}");
}
