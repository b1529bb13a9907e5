//! `stet completions` and `stet man`: the bash script loads in a real bash and completes a
//! subcommand, the zsh and fish scripts name every subcommand, and the man page renders with
//! `man -l` and names every subcommand `stet --help` lists.

use std::process::{Command, Output};

fn stet(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_stet"))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "stet {args:?}: {output:?}");
    output
}

/// The subcommands `stet --help` lists (its `Commands:` section), `help` aside.
fn subcommands() -> Vec<String> {
    let help = String::from_utf8(stet(&["--help"]).stdout).unwrap();
    let listed: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect();
    assert!(
        ["sweep", "reviews", "completions", "man"]
            .iter()
            .all(|name| listed.iter().any(|l| l == name)),
        "{listed:?}"
    );
    listed
}

#[test]
fn the_bash_completion_loads_in_bash_and_completes_a_subcommand() {
    let script = String::from_utf8(stet(&["completions", "bash"]).stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stet.bash");
    std::fs::write(&file, script).unwrap();
    // What bash does on `stet sw<TAB>` and `stet rev<TAB>`: call the function `complete` names.
    let probe = r#"
        set -e
        source "$1"
        complete -p stet
        for word in sw rev comp; do
            COMP_WORDS=(stet "$word"); COMP_CWORD=1; COMP_LINE="stet $word"; COMP_POINT=${#COMP_LINE}
            _stet stet "$word" stet
            echo "$word: ${COMPREPLY[*]}"
        done
    "#;
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", probe, "probe"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("-F _stet"), "{stdout}");
    assert!(stdout.contains("sw: sweep\n"), "{stdout}");
    assert!(stdout.contains("rev: reviews\n"), "{stdout}");
    assert!(stdout.contains("comp: completions\n"), "{stdout}");
}

#[test]
fn the_zsh_and_fish_completions_name_every_subcommand() {
    let subcommands = subcommands();
    // zsh lists `'name:what it does'`, fish `-a "name"` where a subcommand is expected.
    for (shell, spelling) in [("zsh", "'{}:"), ("fish", "-f -a \"{}\"")] {
        let script = String::from_utf8(stet(&["completions", shell]).stdout).unwrap();
        for name in &subcommands {
            let wanted = spelling.replace("{}", name);
            assert!(
                script.contains(&wanted),
                "{shell} does not complete {name} ({wanted}):\n{script}"
            );
        }
    }
}

#[test]
fn an_unknown_shell_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_stet"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("bash, zsh, fish"));
}

#[test]
fn the_man_page_renders_with_man_and_names_every_subcommand() {
    let page = stet(&["man"]).stdout;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stet.1");
    std::fs::write(&file, &page).unwrap();
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{rendered:?}");
    let text = String::from_utf8_lossy(&rendered.stdout);
    for heading in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS"] {
        assert!(text.contains(heading), "{heading}:\n{text}");
    }
    for name in subcommands() {
        assert!(text.contains(&format!("stet-{name}(1)")), "{name}:\n{text}");
    }
    assert!(text.contains("crashed dispatches left behind"), "{text}");
}
