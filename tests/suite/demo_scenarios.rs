//! The demo's scenarios acted out by the scripted agent itself (the sandbox side's code, run here on
//! the host) against the demo repository the engine prepares: each turns its brief's checks from red
//! to green. It lives here, not in the engine, because the engine does not depend on the sandbox side.

use stet_engine::demo;
use stet_engine::harness::script::demo_scenario;
use stet_protocol::agent_record::AgentRecord;
use stet_sandbox::agent::{self, AgentOptions};

/// The checks of the demo brief `id` fail on the demo program and pass once its scenario's edits
/// are made. The scenario's `stet agent check` runs are left out: here the agent's executable is
/// the test binary.
#[test]
fn each_demo_scenario_turns_its_checks_green() {
    for (id, checks) in [
        ("fix-greeting", "checks/greeting.toml"),
        ("test-word-count", "checks/word-count.toml"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let setup = demo::prepare(root.path()).unwrap();
        let checks = setup.repo.join(checks);
        let mut out = Vec::new();
        assert_eq!(
            agent::check(&checks, &setup.repo, &mut out).unwrap(),
            1,
            "{id}"
        );
        let (name, text) = demo_scenario(id);
        assert_eq!(name, id);
        let without_runs: String = text
            .lines()
            .map(|line| {
                if line.starts_with("run = [\"stet\", \"agent\", \"check\"") {
                    "say = \"(the checks run here)\""
                } else {
                    line
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let scenario = root.path().join("scenario.toml");
        std::fs::write(&scenario, without_runs).unwrap();
        let instructions = root.path().join("task.md");
        std::fs::write(&instructions, "# Task: demo\n").unwrap();
        let options = AgentOptions {
            scenario,
            instructions,
            pace: 0.0,
            workspace: setup.repo.clone(),
        };
        let mut records = Vec::new();
        assert_eq!(agent::run(&options, &mut records).unwrap(), 0);
        let records = String::from_utf8(records).unwrap();
        let last: AgentRecord = serde_json::from_str(records.lines().last().unwrap()).unwrap();
        assert!(matches!(last, AgentRecord::Finish { .. }), "{id}: {last:?}");
        let mut out = Vec::new();
        let passed = agent::check(&checks, &setup.repo, &mut out).unwrap();
        assert_eq!(passed, 0, "{id}: {}", String::from_utf8_lossy(&out));
    }
}
