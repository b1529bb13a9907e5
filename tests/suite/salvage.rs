//! A crash never loses the agent's work: the real `stet` is SIGKILLed in each phase of a dispatch,
//! and the next `stet sweep` salvages what the workspace holds through the trusted import before it
//! reclaims it — kept at `refs/stet/<dispatch>`, marked incomplete, shown by `stet reviews` with its
//! diff, never pushed. A workspace the import refuses is refused by the salvage with the import's own
//! message, and nothing is written outside.

use std::os::unix::process::ExitStatusExt;

use stet_protocol::event::{Event, EventKind};
use stet_protocol::state::Phase;

use super::headless::{
    Finished, Project, Watched, assert_nothing_left, docker_ready, run_text, scenario,
};
use super::support::git;

/// Where the test kills stet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// Right after the `provisioning` phase event: the agent has not started.
    Provisioning,
    /// Once the agent said it wrote its file, and goes on working.
    Running,
    /// Right after the `collecting` phase event.
    Collecting,
}

impl Point {
    fn reached(self, event: &Event) -> bool {
        match (self, &event.kind) {
            (Point::Provisioning, EventKind::Phase { to, .. }) => *to == Phase::Provisioning,
            (Point::Collecting, EventKind::Phase { to, .. }) => *to == Phase::Collecting,
            (Point::Running, EventKind::Transcript(item)) => item.text.as_str().contains("wrote"),
            _ => false,
        }
    }

    fn scenario(self) -> String {
        let write = "write = { path = \"src/notes.txt\", content = \"tidied by the agent\\n\" }";
        match self {
            Point::Provisioning | Point::Running => scenario(&[
                write,
                "say = \"I wrote src/notes.txt and keep at it.\"",
                "forever = true",
            ]),
            Point::Collecting => scenario(&[write, "finish = \"Tidied.\""]),
        }
    }
}

/// Kills a headless dispatch of `project` at `point`, then sweeps; returns the dispatch and the
/// sweep's output.
fn kill_and_sweep(project: &Project, point: Point) -> (stet_protocol::event::DispatchId, Finished) {
    let mut watched = Watched::start(project.headless(&["--timeout", "2m"]));
    let at = watched.until(&format!("{point:?}"), |event| point.reached(event));
    let status = watched.kill();
    assert_eq!(status.signal(), Some(9), "{point:?}: {status}");
    let mut sweep = project.home.stet();
    sweep.arg("sweep");
    let swept = run_text(sweep);
    assert_eq!(swept.code(), Some(0), "{point:?}: {swept:#?}");
    assert_nothing_left(&project.home, at.dispatch);
    (at.dispatch, swept)
}

fn reviews(project: &Project) -> String {
    let mut reviews = project.home.stet();
    reviews.current_dir(&project.repo).arg("reviews");
    let shown = run_text(reviews);
    assert_eq!(shown.code(), Some(0), "{shown:#?}");
    shown.stdout
}

fn kept_commit(project: &Project, reference: &str) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(&project.repo)
        .args(["rev-parse", "--verify", "--quiet", reference])
        .output()
        .unwrap();
    output
        .status
        .success()
        .then(|| String::from_utf8(output.stdout).unwrap().trim().to_owned())
}

#[test]
fn the_agents_work_is_salvaged_after_a_sigkill_once_it_ran_and_not_before() {
    docker_ready();
    for point in [Point::Provisioning, Point::Running, Point::Collecting] {
        let project = Project::new(&point.scenario());
        let main = git(&project.remote, &["rev-parse", "refs/heads/main"]);
        let (dispatch, swept) = kill_and_sweep(&project, point);
        let reference = format!("refs/stet/{dispatch}");
        let salvaged_line = format!("salvaged the agent's work of {dispatch}");
        let shown = reviews(&project);
        // Nothing is ever pushed: the remote holds main alone.
        assert_eq!(
            git(&project.remote, &["for-each-ref", "--format=%(refname)"]),
            "refs/heads/main",
            "{point:?}"
        );
        match point {
            Point::Provisioning => {
                assert!(!swept.stdout.contains(&salvaged_line), "{}", swept.stdout);
                assert_eq!(kept_commit(&project, &reference), None, "{point:?}");
                assert!(!shown.contains("salvaged"), "{shown}");
            }
            Point::Running => {
                assert!(
                    swept.stdout.contains(&format!(
                        "{salvaged_line} (it was cut short): 1 file(s), +1 -3, kept at {reference}"
                    )),
                    "{}",
                    swept.stdout
                );
                let commit = kept_commit(&project, &reference).expect("the salvaged commit");
                assert_eq!(
                    git(&project.repo, &["show", &format!("{commit}:src/notes.txt")]),
                    "tidied by the agent"
                );
                assert_eq!(
                    git(&project.repo, &["rev-parse", &format!("{commit}^")]),
                    main
                );
                let message = git(&project.repo, &["log", "-1", "--format=%B", &commit]);
                assert!(message.starts_with("Tidy the notes"), "{message}");
                assert!(message.contains("Incomplete: salvaged"), "{message}");
                assert!(
                    shown.contains(&format!(
                        "salvaged {dispatch}  Tidy the notes  ({reference}"
                    )),
                    "{shown}"
                );
                assert!(shown.contains("incomplete, not pushed"), "{shown}");
                assert!(shown.contains("+tidied by the agent"), "the diff: {shown}");
            }
            Point::Collecting => {
                // The collect may have kept the result before the kill landed, or the sweep salvaged
                // it: either way the work is at the dispatch's ref.
                let commit = kept_commit(&project, &reference).expect("the kept commit");
                assert_eq!(
                    git(&project.repo, &["show", &format!("{commit}:src/notes.txt")]),
                    "tidied by the agent"
                );
                if swept.stdout.contains(&salvaged_line) {
                    assert!(shown.contains(&format!("salvaged {dispatch}")), "{shown}");
                }
            }
        }
    }
}

#[test]
fn a_workspace_the_import_refuses_is_refused_by_the_salvage_with_the_imports_message() {
    docker_ready();
    let big = format!(
        "write = {{ path = \"big.bin\", content = \"{}\" }}",
        "x".repeat(2000)
    );
    let project = Project::new(&scenario(&[
        &big,
        // The workspace is <home>/state/stet/dispatches/<id>/workspace: this names <home>/outside.
        "symlink = { path = \"out/escape\", target = \"../../../../../../outside\" }",
        "say = \"I wrote big.bin and keep at it.\"",
        "forever = true",
    ]));
    project
        .home
        .add_user_config("\n[import]\nmax_file_bytes = 1000\n");
    let outside = project.home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (dispatch, swept) = kill_and_sweep(&project, Point::Running);
    assert!(
        swept.stdout.contains(&format!(
            "did not salvage the agent's work of {dispatch}: the import refused the workspace: \"big.bin\" in the workspace is 2000 bytes; files larger than 1000 bytes are not imported"
        )),
        "{}",
        swept.stdout
    );
    assert_eq!(
        kept_commit(&project, &format!("refs/stet/{dispatch}")),
        None
    );
    assert!(!reviews(&project).contains("salvaged"));
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    assert!(
        !project.home.state().join("salvaged").exists(),
        "no salvage record"
    );
}
