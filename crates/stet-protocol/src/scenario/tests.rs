//! Unit tests of `crate::scenario`, in a file of their own so the module reads as code.

use super::*;

fn parse(text: &str) -> Result<Scenario> {
    parse_scenario(Path::new("scenarios/test.toml"), text)
}

fn error(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn every_action_reads_into_its_step() {
    let scenario = parse(
        r#"
model = "demo-model"

[[step]]
say = "hello"
pause = 1.5

[[step]]
think = "hmm"
pause = 2

[[step]]
read_instructions = true

[[step]]
run = ["stet", "agent", "check", "checks.toml"]

[[step]]
write = { path = "a/b.txt", content = "x\n" }

[[step]]
append = { path = "NOTES.md", content = "y\n" }

[[step]]
replace = { path = "a/b.txt", find = "x", with = "z" }

[[step]]
symlink = { path = "link", target = "/etc/passwd" }

[[step]]
remove = "a"

[[step]]
chmod = { path = "bin/run", mode = 0o755 }

[[step]]
plant = { path = "config/app.env", shape = "github" }

[[step]]
plant = { path = "notes.txt", value = "plain" }

[[step]]
usage = { input_tokens = 10, output_tokens = 5, cost_usd = 0.25 }

[[step]]
leak = { value = "plain" }

[[step]]
leak = { shape = "github" }

[[step]]
network = "1.1.1.1:443"

[[step]]
fetch = { url = "http://pkg.example.org/simple/", save = "index.html" }

[[step]]
fetch = { url = "http://paste.example.org/", upload = 4096 }

[[step]]
tunnel = { target = "pypi.org:443", upload = 10 }

[[step]]
ask = { prompt = "What next?" }

[[step]]
ask = { prompt = "And then?", stream = true }

[[step]]
ask_until_refused = { prompt = "More?", max = 20 }
pause = 0.5

[[step]]
ask_until_refused = { prompt = "Streamed?", max = 1, stream = true }

[[step]]
flood = { lines = 3, bytes_per_line = 10 }

[[step]]
finish = "done"
"#,
    )
    .unwrap();
    assert_eq!(scenario.model, "demo-model");
    let actions: Vec<&Action> = scenario.steps.iter().map(|step| &step.action).collect();
    assert_eq!(
        actions,
        vec![
            &Action::Say("hello".into()),
            &Action::Think("hmm".into()),
            &Action::ReadInstructions,
            &Action::Run(vec![
                "stet".into(),
                "agent".into(),
                "check".into(),
                "checks.toml".into()
            ]),
            &Action::Write {
                path: "a/b.txt".into(),
                content: "x\n".into()
            },
            &Action::Append {
                path: "NOTES.md".into(),
                content: "y\n".into()
            },
            &Action::Replace {
                path: "a/b.txt".into(),
                find: "x".into(),
                with: "z".into()
            },
            &Action::Symlink {
                path: "link".into(),
                target: "/etc/passwd".into()
            },
            &Action::Remove("a".into()),
            &Action::Chmod {
                path: "bin/run".into(),
                mode: 0o755
            },
            &Action::Plant {
                path: "config/app.env".into(),
                secret: Leak::GitHub
            },
            &Action::Plant {
                path: "notes.txt".into(),
                secret: Leak::Value("plain".into())
            },
            &Action::Usage {
                input_tokens: 10,
                output_tokens: 5,
                cached_tokens: 0,
                cost_usd: Some(0.25)
            },
            &Action::Leak(Leak::Value("plain".into())),
            &Action::Leak(Leak::GitHub),
            &Action::Network("1.1.1.1:443".parse().unwrap()),
            &Action::Fetch {
                url: "http://pkg.example.org/simple/".into(),
                save: Some("index.html".into()),
                upload: 0
            },
            &Action::Fetch {
                url: "http://paste.example.org/".into(),
                save: None,
                upload: 4096
            },
            &Action::Tunnel {
                target: "pypi.org:443".into(),
                upload: 10
            },
            &Action::Ask {
                prompt: "What next?".into(),
                stream: false
            },
            &Action::Ask {
                prompt: "And then?".into(),
                stream: true
            },
            &Action::AskUntilRefused {
                prompt: "More?".into(),
                max: 20,
                stream: false
            },
            &Action::AskUntilRefused {
                prompt: "Streamed?".into(),
                max: 1,
                stream: true
            },
            &Action::Flood {
                lines: 3,
                bytes_per_line: 10
            },
            &Action::Finish("done".into()),
        ]
    );
    assert_eq!(scenario.steps[0].pause, 1.5);
    assert_eq!(scenario.steps[1].pause, 2.0);
    assert_eq!(scenario.steps[2].pause, 0.0);
    assert_eq!(scenario.steps[21].pause, 0.5);
}

#[test]
fn the_ending_actions_read_too() {
    for (step, action) in [
        ("forever = true", Action::Forever),
        (
            "fail = { code = 3, message = \"no\" }",
            Action::Fail {
                code: 3,
                message: "no".into(),
            },
        ),
        ("give_up = \"stuck\"", Action::GiveUp("stuck".into())),
    ] {
        let scenario = parse(&format!("model = \"m\"\n[[step]]\n{step}\n")).unwrap();
        assert_eq!(scenario.steps[0].action, action);
    }
}

#[test]
fn an_unknown_action_is_refused_with_its_file_step_and_name() {
    let message = error("model = \"m\"\n[[step]]\nsay = \"a\"\n[[step]]\ndance = true\n");
    assert!(
        message.starts_with("scenarios/test.toml: step 2: field `dance`"),
        "{message}"
    );
    assert!(message.contains("not a known action"), "{message}");
}

#[test]
fn errors_name_the_file_the_step_and_the_field() {
    let cases = [
        ("[[step]]\nsay = \"a\"\n", "field `model`", "missing"),
        (
            "model = 3\n[[step]]\nsay = \"a\"\n",
            "field `model`",
            "must be a string",
        ),
        (
            "model = \"m\"\nsteps = []\n",
            "field `steps`",
            "not a scenario field",
        ),
        ("model = \"m\"\n", "field `step`", "no `[[step]]`"),
        (
            "model = \"m\"\n[[step]]\npause = 1\n",
            "step 1: field `step`",
            "no action",
        ),
        (
            "model = \"m\"\n[[step]]\nsay = \"a\"\nthink = \"b\"\n",
            "step 1: field `think`",
            "already has `say`",
        ),
        (
            "model = \"m\"\n[[step]]\nsay = 1\n",
            "step 1: field `say`",
            "must be a string",
        ),
        (
            "model = \"m\"\n[[step]]\nsay = \"a\"\npause = -1\n",
            "step 1: field `pause`",
            "not between",
        ),
        (
            "model = \"m\"\n[[step]]\nwrite = { path = \"a\" }\n",
            "step 1: field `write.content`",
            "missing",
        ),
        (
            "model = \"m\"\n[[step]]\nwrite = { path = \"a\", content = \"b\", mode = 1 }\n",
            "step 1: field `write.mode`",
            "not a field of `write`",
        ),
        (
            "model = \"m\"\n[[step]]\nreplace = { path = \"a\", find = \"\", with = \"b\" }\n",
            "step 1: field `replace.find`",
            "empty",
        ),
        (
            "model = \"m\"\n[[step]]\nrun = []\n",
            "step 1: field `run`",
            "needs a program",
        ),
        (
            "model = \"m\"\n[[step]]\nrun = [\"a\", 2]\n",
            "step 1: field `run[1]`",
            "must be a string",
        ),
        (
            "model = \"m\"\n[[step]]\nusage = { input_tokens = -1, output_tokens = 1 }\n",
            "step 1: field `usage.input_tokens`",
            "-1 is negative",
        ),
        (
            "model = \"m\"\n[[step]]\nusage = { input_tokens = 1, output_tokens = 1, cost_usd = -0.5 }\n",
            "step 1: field `usage.cost_usd`",
            "-0.5",
        ),
        (
            "model = \"m\"\n[[step]]\nleak = { shape = \"aws\" }\n",
            "step 1: field `leak.shape`",
            "\"aws\"",
        ),
        (
            "model = \"m\"\n[[step]]\nleak = { value = \"a\", shape = \"github\" }\n",
            "step 1: field `leak`",
            "exactly one",
        ),
        (
            "model = \"m\"\n[[step]]\nchmod = { path = \"a\", mode = 0o17777 }\n",
            "step 1: field `chmod.mode`",
            "0o17777 is not a mode",
        ),
        (
            "model = \"m\"\n[[step]]\nchmod = { path = \"a\" }\n",
            "step 1: field `chmod.mode`",
            "missing",
        ),
        (
            "model = \"m\"\n[[step]]\nplant = { shape = \"github\" }\n",
            "step 1: field `plant.path`",
            "missing",
        ),
        (
            "model = \"m\"\n[[step]]\nplant = { path = \"a\" }\n",
            "step 1: field `plant`",
            "exactly one",
        ),
        (
            "model = \"m\"\n[[step]]\nnetwork = \"example.com:443\"\n",
            "step 1: field `network`",
            "\"example.com:443\"",
        ),
        (
            "model = \"m\"\n[[step]]\nask = \"hello\"\n",
            "step 1: field `ask`",
            "must be a table",
        ),
        (
            "model = \"m\"\n[[step]]\nask = { stream = true }\n",
            "step 1: field `ask.prompt`",
            "missing",
        ),
        (
            "model = \"m\"\n[[step]]\nask = { prompt = \"  \" }\n",
            "step 1: field `ask.prompt`",
            "empty",
        ),
        (
            "model = \"m\"\n[[step]]\nask = { prompt = \"a\", stream = \"yes\" }\n",
            "step 1: field `ask.stream`",
            "must be true or false",
        ),
        (
            "model = \"m\"\n[[step]]\nask = { prompt = \"a\", max = 2 }\n",
            "step 1: field `ask.max`",
            "not a field of `ask`",
        ),
        (
            "model = \"m\"\n[[step]]\nask_until_refused = { prompt = \"a\" }\n",
            "step 1: field `ask_until_refused.max`",
            "missing",
        ),
        (
            "model = \"m\"\n[[step]]\nask_until_refused = { prompt = \"a\", max = 0 }\n",
            "step 1: field `ask_until_refused.max`",
            "0 is not from 1",
        ),
        (
            "model = \"m\"\n[[step]]\nfail = { code = 256, message = \"x\" }\n",
            "step 1: field `fail.code`",
            "256",
        ),
        (
            "model = \"m\"\n[[step]]\nread_instructions = false\n",
            "step 1: field `read_instructions`",
            "must be `true`",
        ),
        (
            "model = \"m\"\n[[step]]\nfinish = \"a\"\n[[step]]\nsay = \"b\"\n",
            "step 2: field `step`",
            "ends at step 1",
        ),
    ];
    for (text, field, problem) in cases {
        let message = error(text);
        assert!(message.starts_with("scenarios/test.toml: "), "{message}");
        assert!(message.contains(field), "{text:?}: {message}");
        assert!(message.contains(problem), "{text:?}: {message}");
    }
}

#[test]
fn a_syntax_error_names_the_file() {
    let message = error("model = \n");
    assert!(message.starts_with("scenarios/test.toml: "), "{message}");
}
