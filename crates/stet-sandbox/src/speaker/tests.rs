//! Unit tests of `crate::speaker`, in a file of their own so the module reads as code. The harness
//! programs are `/bin/sh` scripts; every wait in them is on a condition, never a clock.

use super::*;

/// What one `speak` run gave: its exit code, and its stdout and stderr.
struct Spoken {
    code: u8,
    stdout: String,
    stderr: String,
}

/// How long a run may take before the test calls it stuck: far beyond what any of these scripts
/// needs, so reaching it means `speak` waited for something it must not wait for.
const STUCK: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `script` under `speak` on a thread of its own, so a `speak` that waits for a process still
/// holding the pipes fails the test instead of hanging it.
fn speak_sh(script: &str) -> Spoken {
    let argv: Vec<OsString> = ["/bin/sh", "-c", script].map(OsString::from).to_vec();
    let (done, spoken) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let code = speak(&argv, &mut stdout, &mut stderr).unwrap();
        let _ = done.send(Spoken {
            code,
            stdout: String::from_utf8(stdout).unwrap(),
            stderr: String::from_utf8(stderr).unwrap(),
        });
    });
    spoken
        .recv_timeout(STUCK)
        .expect("speak ended once its program had exited")
}

#[test]
fn the_programs_output_and_exit_code_come_through() {
    let spoken = speak_sh("echo one; echo two >&2; printf 'no line end'; exit 3");
    assert_eq!(spoken.code, 3);
    assert_eq!(spoken.stdout, "one\nno line end");
    assert_eq!(spoken.stderr, "two\n");
}

#[test]
fn a_program_ended_by_a_signal_exits_128_plus_the_signal() {
    assert_eq!(speak_sh("kill -KILL $$").code, 137);
}

#[test]
fn the_program_gets_no_input() {
    let spoken = speak_sh("cat; echo read-all");
    assert_eq!((spoken.code, spoken.stdout.as_str()), (0, "read-all\n"));
}

#[test]
fn output_larger_than_a_pipe_comes_through_whole() {
    let spoken = speak_sh("i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done");
    assert_eq!(spoken.code, 0);
    assert_eq!(spoken.stdout.lines().count(), 20_000);
    assert!(spoken.stdout.ends_with("line-19999\n"));
}

/// The attack: the program leaves a process holding its stdout and stderr, which waits until the
/// program is gone (exited and reaped) and then writes. Nothing of that is relayed, and the report
/// says which streams were held open. (Relaying until the pipes close would print `late`.)
#[test]
fn nothing_written_after_the_program_exited_comes_through() {
    let spoken = speak_sh(
        "echo real; echo real-err >&2; \
         (while kill -0 $$ 2>/dev/null; do :; done; echo late; echo late-err >&2) &",
    );
    assert_eq!(spoken.code, 0);
    assert_eq!(spoken.stdout, "real\n");
    assert_eq!(
        spoken.stderr,
        "real-err\n{\"held_open_after_exit\":[\"stdout\",\"stderr\"]}\n"
    );
}

/// A process holding the program's stdout and writing without end cannot keep `speak` relaying:
/// none of it is relayed, and once the program exited `speak` ends.
#[test]
fn a_process_flooding_the_programs_output_does_not_keep_it_going() {
    let spoken = speak_sh("echo real; (yes flood) &");
    assert_eq!(spoken.code, 0);
    assert_eq!(spoken.stdout, "real\n");
    // Whether `yes` wrote before the drain is a race; that it held the output open is not.
    assert!(
        spoken
            .stderr
            .starts_with("{\"held_open_after_exit\":[\"stdout\",\"stderr\"]"),
        "{}",
        spoken.stderr
    );
}

/// The attack: a child that inherited the program's output writes a finish of its own there before
/// the program writes its own. Only the program's own writes are relayed, and the report says
/// another process wrote.
#[test]
fn what_another_process_wrote_on_the_programs_output_is_not_relayed() {
    let spoken = speak_sh("(echo child; echo child-err >&2); echo real; echo real-err >&2");
    assert_eq!(spoken.code, 0);
    assert_eq!(spoken.stdout, "real\n");
    assert_eq!(
        spoken.stderr,
        "real-err\n{\"held_open_after_exit\":[],\"written_by_others\":[\"stdout\",\"stderr\"]}\n"
    );
}

/// The program's last stderr line is left open: the report still comes on a line of its own.
#[test]
fn the_report_is_on_a_line_of_its_own() {
    let spoken = speak_sh("printf open >&2; (while kill -0 $$ 2>/dev/null; do :; done) &");
    assert_eq!(
        spoken.stderr,
        "open\n{\"held_open_after_exit\":[\"stdout\",\"stderr\"]}\n"
    );
}

#[test]
fn a_program_that_closes_its_output_early_is_still_waited_for() {
    let spoken = speak_sh("echo before; exec >&- 2>&-; exit 5");
    assert_eq!((spoken.code, spoken.stdout.as_str()), (5, "before\n"));
    assert_eq!(spoken.stderr, "");
}

#[test]
fn no_program_or_a_missing_one_is_an_error_naming_it() {
    let mut sink = Vec::new();
    assert!(matches!(
        speak(&[], &mut Vec::new(), &mut sink),
        Err(SpeakerError::NoProgram)
    ));
    let missing = speak(
        &[OsString::from("/nonexistent/harness")],
        &mut Vec::new(),
        &mut sink,
    )
    .unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("speak: cannot start \"/nonexistent/harness\""),
        "{missing}"
    );
}
