//! The dispatch engine against fakes at the process and network edges: every exit path × phase.
//!
//! Only the container runtime, the forge and the harness are fakes, and the credential provider is the
//! real local one wrapped to count. The repository is a real git repository in a temporary directory,
//! the journal and the state directory are real, the workspace is really materialized and the agent's
//! edit is really imported into a commit. Every test checks what ADR-0018's guaranteed-cleanup pattern
//! promises on its exit path: the container removed exactly as it was created (or never created), the
//! dispatch's directory gone, every minted credential revoked exactly once, the journal empty, and a
//! run record whose events are exactly the ones published.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tempfile::TempDir;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use stet_engine::brief::{Brief, Target};
use stet_engine::config::default_agent;
use stet_engine::credential::{
    CREDENTIAL_ENV, CredentialId, CredentialProvider, LocalCredentialProvider, Minted, Revocation,
    SecretValue, random_token,
};
use stet_engine::dispatch::dispatcher::{DispatchHandle, Dispatcher, DispatcherError};
use stet_engine::dispatch::journal::{Journal, Resource};
use stet_engine::dispatch::order::{Decision, Delivery, DispatchControl, DispatchRun, result_ref};
use stet_engine::dispatch::record::{EVENTS_FILE, PATCH_FILE, RESULT_FILE, read_result, run_dir};
use stet_engine::dispatch::service::{DispatchContext, DispatchService, DispatchSettings};
use stet_engine::forge::protected::ProtectedPaths;
use stet_engine::forge::{
    Forge, ForgeError, Preflight, PullRequest, PullRequestDraft, PushBranch, Pushed, ResolvedHead,
};
use stet_engine::gateway::usage::UsageReport;
use stet_engine::git::import::ImportLimits;
use stet_engine::git::push::PushError;
use stet_engine::harness::{
    Finish, Harness, HarnessLaunch, HarnessPlan, OutputParser, Parsed, StagedFile,
};
use stet_engine::runtime::{
    ContainerExit, ContainerRuntime, DEFAULT_SANDBOX_UID, DispatchLimits, ExecExit, ImageRef,
    NetworkPolicy, OutputChunk, OutputLine, OutputStream, PullProgress, Removal, RuntimeError,
    SandboxContainer, SandboxProcess, SandboxSpec, SandboxUser,
};
use stet_protocol::event::{
    DispatchId, Event, EventKind, ItemKind, PullRequestAction, TranscriptItem, Usage,
};
use stet_protocol::state::Phase;
use stet_sanitize::branch::CommitSha;
use stet_sanitize::sanitize::{KnownValue, SanitizedText, SanitizerHandle, TokenSanitizer};

use super::support::git;

/// The longest any single wait of these tests may take before it counts as a hang (a failure guard,
/// never a synchronisation).
const DEADLINE: Duration = Duration::from_secs(60);

/// Room for every event of every dispatch of a test, so no dispatch ever waits on the test.
const EVENT_BUFFER: usize = 4096;

/// The file the fake agent writes; `{container}` becomes the container it ran in.
const EDITED_FILE: &str = "CHANGES.md";
const EDIT: &str = "fixed by {container}\n";

/// The program the fake harness runs.
const AGENT_PROGRAM: &str = "fake-agent";

// ---------------------------------------------------------------------------------------------------
// The matrix: one dispatch through `DispatchService::run`, every exit path.
// ---------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_with_push_is_done_and_reports_collect_push_pull_request_teardown_in_order() {
    let fx = Fixture::builder().build();
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Done, 0);
    assert_eq!(
        fin.path(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::Pushing,
            Phase::OpeningPr,
            Phase::Done
        ]
    );
    // The image pull's progress reaches the stream during provisioning.
    let names = fin.names();
    let pulled = names.iter().position(|n| *n == "image_pull");
    let running = fin.events.iter().position(|e| is_phase(e, Phase::Running));
    assert!(
        matches!((pulled, running), (Some(p), Some(r)) if p < r),
        "{names:?}"
    );
    let milestones: Vec<&str> = fin
        .names()
        .into_iter()
        .filter(|name| {
            [
                "collected",
                "pushed",
                "pull_request",
                "torn_down",
                "finished",
            ]
            .contains(name)
        })
        .collect();
    assert_eq!(
        milestones,
        [
            "collected",
            "pushed",
            "pull_request",
            "torn_down",
            "finished"
        ]
    );

    let commit = fin.collected_commit().expect("a collected event");
    assert_eq!(fx.result_ref(fin.id).as_deref(), Some(commit.as_str()));
    assert_eq!(
        git(&fx.repo, &["rev-parse", &format!("{commit}^")]),
        fx.base
    );
    assert_eq!(
        git(&fx.repo, &["show", &format!("{commit}:{EDITED_FILE}")]),
        format!("fixed by {}", fin.id)
    );
    assert_eq!(
        git(&fx.repo, &["rev-parse", "HEAD"]),
        fx.base,
        "the user's HEAD is untouched"
    );
    assert_eq!(git(&fx.repo, &["status", "--porcelain"]), "");

    let pushes = fx.forge.pushes();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].commit, commit);
    assert_eq!(pushes[0].branch, fin.dispatched_branch());
    let pull_requests = fx.forge.pull_requests();
    assert_eq!(pull_requests.len(), 1);
    assert_eq!(pull_requests[0].head, fin.dispatched_branch());
    assert_eq!(pull_requests[0].base, "main");
    assert_eq!(pull_requests[0].updated, None);
    assert!(fin.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::PullRequest {
            action: PullRequestAction::Opened,
            number: 42,
            ..
        }
    )));
    let result = fx.result(fin.id);
    assert_eq!(
        result.commit.as_ref().map(CommitSha::as_str),
        Some(commit.as_str())
    );
    assert_eq!(result.pull_request, Some(42));
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_token_standing_in_is_announced_with_its_reason_and_named_in_the_provenance() {
    let fx = Fixture::builder().build();
    let reason = "GitLab refused to mint a project access token (403 Forbidden)";
    *lock(&fx.provider.stand_in) = Some(reason.to_owned());
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Done, 0);
    let warnings: Vec<&str> = fin
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Warning { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    let announced = warnings
        .iter()
        .find(|warning| warning.contains("your own forge token"))
        .unwrap_or_else(|| panic!("no warning says the primary token stood in: {warnings:?}"));
    assert!(announced.contains(reason), "{announced}");
    assert!(
        announced.contains("never enters the sandbox"),
        "{announced}"
    );
    let warned = fin.events.iter().position(|event| {
        matches!(&event.kind, EventKind::Warning { message } if message.as_str().contains(reason))
    });
    let running = fin.events.iter().position(|e| is_phase(e, Phase::Running));
    assert!(
        matches!((warned, running), (Some(w), Some(r)) if w < r),
        "announced before the agent runs"
    );
    let value = &fx.provider.minted()[0].value;
    assert!(!announced.contains(value.as_str()));
    let body = &fx.forge.pull_requests()[0].body;
    assert!(
        body.contains("fallback"),
        "the provenance names the kind: {body}"
    );
    assert!(!body.contains("counting"), "{body}");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_with_keep_is_done_pushes_nothing_and_keeps_the_result_ref_and_the_patch() {
    let fx = Fixture::builder().build();
    let fin = fx.run(brief("fix-login"), Delivery::Keep).await;

    assert_outcome(&fin, Phase::Done, 0);
    assert_eq!(
        fin.path(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::Done
        ]
    );
    assert!(
        fin.reason().contains(&result_ref(fin.id)),
        "{}",
        fin.reason()
    );
    assert!(fx.forge.pushes().is_empty());
    assert!(fx.forge.pull_requests().is_empty());
    assert!(!fin.has("pushed") && !fin.has("pull_request"));
    let commit = fin.collected_commit().expect("a collected event");
    assert_eq!(fx.result_ref(fin.id).as_deref(), Some(commit.as_str()));
    let patch =
        std::fs::read_to_string(run_dir(&fx.state, fin.id).join(PATCH_FILE)).expect("diff.patch");
    assert!(patch.contains(EDITED_FILE), "{patch}");
    assert!(patch.contains(&format!("+fixed by {}", fin.id)), "{patch}");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_changed_nothing_is_done_with_nothing_pushed() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.edits.clear());
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Done, 0);
    assert_eq!(
        fin.reason(),
        "the agent changed nothing; there is nothing to push"
    );
    assert_eq!(fin.path().last(), Some(&Phase::Done));
    assert!(!fin.path().contains(&Phase::Pushing));
    assert!(!fin.has("collected"));
    assert_eq!(fx.result_ref(fin.id), None);
    assert!(fx.forge.pushes().is_empty());
    assert!(fx.forge.pull_requests().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_exits_non_zero_after_saying_why_fails_with_its_reason() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.exec.code = 1;
        s.exec.lines = vec![
            "say trying".into(),
            "fail the model refused the request".into(),
        ];
    });
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert_eq!(
        fin.reason(),
        format!(
            "the agent did not finish: the model refused the request (the agent ({AGENT_PROGRAM}) exited with code 1)"
        )
    );
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_that_exits_non_zero_fails_the_dispatch() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.code = 2);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert_eq!(
        fin.reason(),
        format!("the agent ({AGENT_PROGRAM}) exited with code 2")
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Running));
    assert!(!fin.has("collected"));
    assert_eq!(fx.result_ref(fin.id), None);
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_reports_failure_fails_the_dispatch() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.exec.lines = vec![
            "say reading the failing test".into(),
            "fail the tests would not pass".into(),
        ];
    });
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert_eq!(
        fin.reason(),
        "the agent did not finish: the tests would not pass"
    );
    assert!(fin.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::Transcript(TranscriptItem {
            item: ItemKind::Error,
            ..
        })
    )));
    assert!(!fin.has("collected"));
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_cancelled_before_it_starts_mints_nothing_and_creates_nothing() {
    let fx = Fixture::builder().build();
    fx.cancel.cancel();
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "cancelled while queued");
    assert_eq!(fin.path(), [Phase::Cancelled]);
    assert_eq!(fx.forge.preflights(), 0);
    assert!(fx.runtime.log().images.is_empty());
    fx.assert_clean(&fin, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_provisioning_stops_the_image_pull_and_creates_no_container() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.on_pull = Some(cancel_hook(&fx.cancel));
        s.pull_hangs = true;
    });
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "cancelled during provisioning");
    assert_eq!(
        fin.path(),
        [Phase::Preflight, Phase::Provisioning, Phase::Cancelled]
    );
    let log = fx.runtime.log();
    assert_eq!(log.images.len(), 1, "the pull had begun");
    assert!(log.create_attempts.is_empty());
    assert!(log.execs.is_empty());
    fx.assert_clean(&fin, 1);
}

/// The cancel lands while the image pull completes (a pull that was nearly done, or a cached image):
/// provisioning must still stop before it creates and starts a container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_lands_as_the_image_pull_completes_starts_no_container() {
    let fx = Fixture::builder().build();
    fx.runtime
        .script(|s| s.on_pull = Some(cancel_hook(&fx.cancel)));
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    fx.assert_clean(&fin, 1);
    assert_eq!(
        fx.runtime.log().create_attempts,
        Vec::<String>::new(),
        "the cancel was accepted during provisioning, yet a container was created and started after it"
    );
    assert_eq!(
        fin.path(),
        [Phase::Preflight, Phase::Provisioning, Phase::Cancelled]
    );
    assert_eq!(fin.reason(), "cancelled during provisioning");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_running_stops_the_agent_and_tears_down() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.wait = Wait::Forever);
    let running = fx.start(brief("fix-login"), Delivery::Push);
    let container = fx.next_exec().await;
    assert_eq!(container, running.id.to_string());
    fx.cancel.cancel();
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "cancelled during running");
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Running));
    assert!(fin.has("torn_down"));
    assert!(!fin.has("collected"));
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_collecting_ends_cancelled_and_tears_down() {
    let fx = Fixture::builder().build();
    fx.harness.on_final_usage(cancel_hook(&fx.cancel));
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "cancelled during collecting");
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Collecting));
    assert!(fin.has("torn_down"));
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

/// The same cancel as above, with the import made observable: the blocking pool has one thread, and
/// the fake runtime's container removal (teardown's first step) waits until every blocking task queued
/// before it has run. Whatever the engine does with the import, a result it writes into the user's
/// repository must be one it reports.
#[test]
fn a_cancel_at_the_start_of_collecting_leaves_no_unreported_result_in_the_repository() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fx = Fixture::builder().build();
        fx.harness.on_final_usage(cancel_hook(&fx.cancel));
        fx.runtime
            .script(|s| s.remove_waits_for_blocking_pool = true);
        let fin = fx.run(brief("fix-login"), Delivery::Keep).await;

        assert_outcome(&fin, Phase::Cancelled, 3);
        fx.assert_clean(&fin, 1);
        if let Some(written) = fx.result_ref(fin.id) {
            assert_eq!(
                fin.collected_commit().as_deref(),
                Some(written.as_str()),
                "{} was written at {written} for a dispatch that ended cancelled, and no collected event reported it (events: {:?})",
                result_ref(fin.id),
                fin.names()
            );
            assert_eq!(fx.result(fin.id).reference, Some(result_ref(fin.id)));
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_pushing_ends_cancelled_after_the_push_and_opens_no_pull_request() {
    let fx = Fixture::builder().build();
    fx.forge
        .script(|s| s.on_push = Some(cancel_hook(&fx.cancel)));
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert!(
        fin.reason().contains("no pull request was opened"),
        "{}",
        fin.reason()
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Pushing));
    assert_eq!(fx.forge.pushes().len(), 1);
    assert!(fin.has("pushed"));
    assert!(!fin.has("pull_request"));
    assert!(fx.forge.pull_requests().is_empty());
    assert!(fx.result_ref(fin.id).is_some(), "the result is never lost");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_awaiting_approval_ends_cancelled_with_nothing_pushed() {
    let fx = Fixture::builder().build();
    let mut running = fx.start(brief("fix-login"), Delivery::Review);
    running
        .log
        .until("awaiting approval", |e| {
            is_phase(e, Phase::AwaitingApproval)
        })
        .await;
    fx.cancel.cancel();
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "cancelled while awaiting approval");
    assert_eq!(
        fin.path(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::AwaitingApproval,
            Phase::Cancelled
        ]
    );
    assert!(fx.forge.pushes().is_empty());
    assert!(fx.result_ref(fin.id).is_some(), "the result is never lost");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_at_review_pushes_and_is_done() {
    let fx = Fixture::builder().build();
    let mut running = fx.start(brief("fix-login"), Delivery::Review);
    running
        .log
        .until("awaiting approval", |e| {
            is_phase(e, Phase::AwaitingApproval)
        })
        .await;
    assert!(
        fx.forge.pushes().is_empty(),
        "nothing is pushed before the decision"
    );
    // Nothing of the agent is left while a person reviews: no container (nor anything running in
    // it), no workspace, no outputs; only the credential the push needs stays journaled.
    let dispatch = running.id;
    assert!(fx.runtime.log().live.is_empty(), "the container is gone");
    assert!(!fx.dispatch_dir(dispatch).join("workspace").exists());
    assert!(!fx.dispatch_dir(dispatch).join("outputs").exists());
    let records = fx.journal.records().unwrap().records;
    assert!(
        matches!(
            records[0].resources.as_slice(),
            [Resource::Credential { .. }]
        ),
        "{:?}",
        records[0].resources
    );
    running.decide.send(Decision::Approve).await.unwrap();
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::Done, 0);
    assert_eq!(
        fin.path(),
        [
            Phase::Preflight,
            Phase::Provisioning,
            Phase::Running,
            Phase::Collecting,
            Phase::AwaitingApproval,
            Phase::Pushing,
            Phase::OpeningPr,
            Phase::Done
        ]
    );
    assert_eq!(fx.forge.pushes().len(), 1);
    assert_eq!(fx.forge.pull_requests().len(), 1);
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scoped_credential_written_into_the_result_is_never_pushed_not_even_approved() {
    let fx = Fixture::builder().build();
    // The agent writes the dispatch's own scoped credential into a file of its workspace.
    let (provider, dispatches) = (Arc::clone(&fx.provider), fx.state.join("dispatches"));
    fx.runtime.script(move |s| {
        s.exec.hook = Some(Arc::new(move || {
            let value = provider.minted().last().unwrap().value.clone();
            let dispatch = std::fs::read_dir(&dispatches)
                .unwrap()
                .next()
                .unwrap()
                .unwrap();
            std::fs::write(
                dispatch.path().join("workspace/deploy.txt"),
                format!("token: {value}\n"),
            )
            .unwrap();
        }))
    });
    let running = fx.start(brief("fix-login"), Delivery::Review);
    // An approval sent before there is anything to review does not count, nor would a later one.
    running.decide.send(Decision::Approve).await.unwrap();
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::Failed, 1);
    let reason = fin.reason();
    assert!(
        reason.contains("deploy.txt line 1 (the known value scoped-credential)"),
        "{reason}"
    );
    assert!(reason.contains("never pushed"), "{reason}");
    let value = fx.provider.minted()[0].value.clone();
    assert!(!reason.contains(&value));
    assert!(
        !fin.path().contains(&Phase::AwaitingApproval),
        "{:?}",
        fin.path()
    );
    assert!(fx.forge.pushes().is_empty());
    assert!(fx.forge.pull_requests().is_empty());
    let secrets = fin
        .events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Collected { gate, .. } => Some(gate.secrets.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0].path.as_str(), "deploy.txt");
    assert_eq!(secrets[0].line, Some(1));
    assert_eq!(secrets[0].kind.as_str(), "scoped-credential");
    assert!(secrets[0].known);
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangerous_path_or_a_secret_waits_at_review_and_only_an_approval_pushes_it() {
    let fx = Fixture::builder().build();
    let token = format!("ghp_{}", random_token(36).unwrap());
    fx.runtime.script(|s| {
        s.exec.edits = vec![
            (
                ".github/workflows/ci.yml".to_owned(),
                "on: push\n".to_owned(),
            ),
            (
                "config/app.env".to_owned(),
                format!("MODE=dev\nGH={token}\n"),
            ),
        ]
    });
    let push = fx.start(brief("fix-login"), Delivery::Push).finish().await;
    assert_outcome(&push, Phase::Failed, 1);
    let reason = push.reason();
    for named in [
        "the result needs a person's approval",
        ".github/workflows/ci.yml (CI: .github/**)",
        "config/app.env line 2 (github-token)",
        "not pushed",
    ] {
        assert!(reason.contains(named), "{named:?} not in {reason}");
    }
    assert!(!reason.contains(&token));
    assert!(fx.forge.pushes().is_empty());

    let mut running = fx.start(brief("fix-login"), Delivery::Review);
    let collected = running
        .log
        .until("collected", |e| {
            matches!(e.kind, EventKind::Collected { .. })
        })
        .await;
    let EventKind::Collected { gate, .. } = &collected.kind else {
        unreachable!()
    };
    assert_eq!(gate.held.len(), 1);
    assert_eq!(gate.held[0].path.as_str(), ".github/workflows/ci.yml");
    assert_eq!(gate.held[0].rule.as_str(), "CI: .github/**");
    assert_eq!(
        gate.protected[0].as_str(),
        ".github/workflows/ci.yml (CI: .github/**)"
    );
    assert_eq!(gate.secrets.len(), 1);
    assert_eq!(
        (
            gate.secrets[0].path.as_str(),
            gate.secrets[0].line,
            gate.secrets[0].kind.as_str()
        ),
        ("config/app.env", Some(2), "github-token")
    );
    running
        .log
        .until("awaiting approval", |e| {
            is_phase(e, Phase::AwaitingApproval)
        })
        .await;
    assert!(
        fx.forge.pushes().is_empty(),
        "nothing is pushed before the decision"
    );
    running.decide.send(Decision::Approve).await.unwrap();
    let fin = running.finish().await;
    assert_outcome(&fin, Phase::Done, 0);
    assert_eq!(
        fx.forge.pushes().len(),
        1,
        "a person's explicit approval pushes it"
    );
    fx.assert_clean(&fin, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discard_at_review_ends_cancelled_with_nothing_pushed() {
    let fx = Fixture::builder().build();
    let mut running = fx.start(brief("fix-login"), Delivery::Review);
    running
        .log
        .until("awaiting approval", |e| {
            is_phase(e, Phase::AwaitingApproval)
        })
        .await;
    running.decide.send(Decision::Discard).await.unwrap();
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::Cancelled, 3);
    assert_eq!(fin.reason(), "the result was discarded at review");
    assert_eq!(
        fin.path().iter().rev().nth(1),
        Some(&Phase::AwaitingApproval)
    );
    assert!(fx.forge.pushes().is_empty());
    assert!(fx.forge.pull_requests().is_empty());
    assert!(fx.result_ref(fin.id).is_some(), "the result is never lost");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_the_wall_clock_timeout_ends_timed_out() {
    let mut fx = Fixture::builder()
        .timeout(Duration::from_millis(800))
        .build();
    fx.runtime.script(|s| s.exec.wait = Wait::Forever);
    let running = fx.start(brief("fix-login"), Delivery::Push);
    fx.next_exec().await;
    let fin = running.finish().await;

    assert_outcome(&fin, Phase::TimedOut, 4);
    assert!(
        fin.reason().contains("wall-clock timeout"),
        "{}",
        fin.reason()
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Running));
    assert!(!fx.cancel.is_cancelled(), "nobody cancelled it");
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_error_at_create_fails_the_dispatch_and_leaves_nothing() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| s.create_fails = true);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert!(
        fin.reason().starts_with("provisioning: "),
        "{}",
        fin.reason()
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Provisioning));
    let log = fx.runtime.log();
    assert_eq!(log.create_attempts, [fin.id.to_string()]);
    assert!(log.created.is_empty());
    assert!(log.execs.is_empty());
    fx.assert_clean(&fin, 1);
}

/// DESIGN §4: "a teardown error is logged and reported as a warning" — on every exit once provisioning
/// began, a failed provisioning included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teardown_failure_after_a_failed_provisioning_is_reported_as_a_warning() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.create_fails = true;
        s.remove_fails = true;
    });
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    let paths = fx.dispatch_dir(fin.id);
    assert_left_for_the_sweep(&fx, &fin, &paths);
    fx.assert_credentials_revoked_once(1);
    assert!(
        fin.events.iter().any(|e| matches!(
            &e.kind,
            EventKind::Warning { message } if message.as_str().contains("teardown")
        )),
        "the failed container removal was never reported; events: {:?}",
        fin.names()
    );
    assert!(
        !fx.result(fin.id).teardown_failures.is_empty(),
        "result.json does not record the failed teardown step"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_error_at_exec_fails_the_dispatch() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.fails = true);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert!(
        fin.reason().starts_with("running the agent: "),
        "{}",
        fin.reason()
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Running));
    assert_eq!(fx.runtime.log().execs.len(), 1);
    assert!(fx.forge.pushes().is_empty());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_push_fails_the_dispatch_and_keeps_the_result() {
    let fx = Fixture::builder().build();
    fx.forge.script(|s| s.push_fails = true);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert!(fin.reason().starts_with("push: "), "{}", fin.reason());
    assert!(fin.reason().contains("rejected"), "{}", fin.reason());
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Pushing));
    assert!(!fin.has("pushed"));
    assert!(fx.forge.pull_requests().is_empty());
    assert_eq!(fx.result_ref(fin.id), fin.collected_commit());
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pull_request_fails_the_dispatch_and_says_the_branch_was_pushed() {
    let fx = Fixture::builder().build();
    fx.forge.script(|s| s.pr_fails = true);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert!(
        fin.reason()
            .contains("the branch was pushed but the pull request failed"),
        "{}",
        fin.reason()
    );
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::OpeningPr));
    assert_eq!(fx.forge.pushes().len(), 1);
    assert!(fin.has("pushed"));
    assert!(!fin.has("pull_request"));
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_past_the_cost_ceiling_ends_the_dispatch_with_exit_code_5() {
    let fx = Fixture::builder().cost_ceiling_usd(0.05).build();
    fx.runtime.script(|s| {
        s.exec.lines = vec![
            "say starting".into(),
            "usage fake-model 1000 100 0.03".into(),
            "usage fake-model 1000 100 0.03".into(),
            "done never reached".into(),
        ];
    });
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::CostCeilingHit, 5);
    assert!(fin.reason().contains("ceiling"), "{}", fin.reason());
    assert_eq!(fin.path().iter().rev().nth(1), Some(&Phase::Running));
    let totals: Vec<f64> = fin
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Usage(usage) => Some(usage.total_cost_usd),
            _ => None,
        })
        .collect();
    assert_eq!(totals.len(), 2);
    assert!(totals[1] >= 0.05);
    assert!(!fin.has("collected"));
    assert!(fx.forge.pushes().is_empty());
    // What the agent printed after the ceiling is kept in the run record, not dropped.
    let record = std::fs::read_to_string(run_dir(&fx.state, fin.id).join(EVENTS_FILE)).unwrap();
    assert!(record.contains("never reached"), "{record}");
    fx.assert_clean(&fin, 1);
}

/// Bound: disk. An agent that prints 3 MiB under a 1 MiB record cap leaves a record of about 1 MiB,
/// which says where it stopped keeping the transcript and still holds every phase and the outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_output_is_kept_to_the_records_cap_with_a_marker() {
    let cap = 1024 * 1024;
    let fx = Fixture::builder().max_record_bytes(cap).build();
    let line = format!("say {}", "x".repeat(100));
    fx.runtime.script(|s| {
        s.exec.lines = std::iter::repeat_n(line.clone(), 30_000)
            .chain(["done finished".to_owned()])
            .collect();
    });
    let fin = fx.run(brief("fix-login"), Delivery::Keep).await;
    assert_outcome(&fin, Phase::Done, 0);
    let record = fx
        .state
        .join(stet_engine::dispatch::record::RUNS_DIR)
        .join(fin.id.to_string());
    let events =
        std::fs::read_to_string(record.join(stet_engine::dispatch::record::EVENTS_FILE)).unwrap();
    assert!(
        (events.len() as u64) < cap + 64 * 1024,
        "the events file is {} bytes under a cap of {cap}",
        events.len()
    );
    let markers = events
        .lines()
        .filter(|line| line.contains("reached its cap of 1048576 bytes"))
        .count();
    assert_eq!(markers, 1, "one marker says where the transcript stops");
    let last_phase = events
        .lines()
        .rfind(|line| line.contains("\"phase\""))
        .unwrap();
    assert!(last_phase.contains("\"done\""), "{last_phase}");
    let result = stet_engine::dispatch::record::read_result(&record).unwrap();
    assert_eq!(result.outcome, Phase::Done);
    // The cap is the record's: the consumer saw every line.
    let shown = fin
        .events
        .iter()
        .filter(|event| matches!(event.kind, EventKind::Transcript(_)))
        .count();
    assert_eq!(shown, 30_001);
    assert!(!fx.dispatch_dir(fin.id).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teardown_failure_keeps_the_outcome_warns_and_stays_journaled() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.exec.code = 2;
        s.remove_fails = true;
    });
    let fin = fx.run(brief("fix-login"), Delivery::Keep).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert_eq!(
        fin.reason(),
        format!("the agent ({AGENT_PROGRAM}) exited with code 2"),
        "the teardown's failure does not replace the outcome"
    );
    assert_teardown_left_the_agents_parts(&fx, &fin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_cannot_be_removed_after_the_agent_stops_the_dispatch_before_collecting() {
    let fx = Fixture::builder().build();
    fx.runtime.script(|s| s.remove_fails = true);
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;

    assert_outcome(&fin, Phase::Failed, 1);
    assert!(
        fin.reason()
            .starts_with("the agent's container could not be removed once its work was over: ")
            && fin
                .reason()
                .ends_with("nothing is collected or pushed while it may still run"),
        "{}",
        fin.reason()
    );
    assert!(!fin.has("collected"), "nothing is collected");
    assert_eq!(fx.result_ref(fin.id), None);
    assert!(fx.forge.pushes().is_empty());
    assert_teardown_left_the_agents_parts(&fx, &fin);
}

/// The teardown after a container that could not be removed: the container, workspace and outputs
/// steps failed (the agent may still run there, so its files are not deleted under it), the
/// credential step ran, a warning says so, and what is left stays journaled for the sweep.
fn assert_teardown_left_the_agents_parts(fx: &Fixture, fin: &Finished) {
    let steps = fin
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TornDown { steps, .. } => Some(steps.clone()),
            _ => None,
        })
        .expect("a torn_down event");
    let failed: Vec<&str> = steps
        .iter()
        .filter(|step| step.failure.is_some())
        .map(|step| step.resource.as_str())
        .collect();
    let dir = fx.dispatch_dir(fin.id);
    assert_eq!(
        failed,
        [
            format!("container {}", fin.id),
            format!("workspace {}", dir.join("workspace").display()),
            format!("outputs directory {}", dir.join("outputs").display()),
        ],
        "the agent may still run in the container: its files are not deleted under it"
    );
    assert_eq!(steps.len(), 4, "the credential step still ran: {steps:?}");
    assert!(fin.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::Warning { message } if message.as_str().starts_with("teardown: ")
    )));
    assert!(!fx.result(fin.id).teardown_failures.is_empty());
    assert_left_for_the_sweep(fx, fin, &dir);
    fx.assert_credentials_revoked_once(1);
    fx.assert_run_record(fin);
}

/// When the container could not be removed, it and the dispatch's files stay journaled (and on disk)
/// for the sweep; the credential is revoked regardless.
fn assert_left_for_the_sweep(fx: &Fixture, fin: &Finished, dir: &Path) {
    let records = fx.journal.records().unwrap().records;
    assert_eq!(records.len(), 1);
    let mut left: Vec<String> = records[0]
        .resources
        .iter()
        .map(ToString::to_string)
        .collect();
    left.sort();
    let mut expected = vec![
        format!("container {}", fin.id),
        format!("outputs directory {}", dir.join("outputs").display()),
        format!("workspace {}", dir.join("workspace").display()),
    ];
    expected.sort();
    assert_eq!(left, expected, "what could not be removed stays journaled");
    assert!(dir.join("workspace").exists() && dir.join("outputs").exists());
}

// ---------------------------------------------------------------------------------------------------
// ADR-0018's Confirmation list.
// ---------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_value_appears_in_no_sandbox_process_argv() {
    let fx = Fixture::builder().build();
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;
    assert_outcome(&fin, Phase::Done, 0);

    let minted = fx.provider.minted();
    assert_eq!(minted.len(), 1);
    let log = fx.runtime.log();
    assert!(
        !log.execs.is_empty(),
        "the scan must have something to scan"
    );
    assert!(log.execs.iter().all(|exec| !exec.env.is_empty()));
    assert_eq!(log.created.len(), 1);
    let mut scanned: Vec<String> = Vec::new();
    for exec in &log.execs {
        scanned.extend(exec.argv.iter().cloned());
        scanned.extend(exec.env.iter().map(|(k, v)| format!("{k}={v}")));
        scanned.push(exec.workdir.clone());
        assert!(
            !exec.env.contains_key(CREDENTIAL_ENV),
            "the default path injects no credential into the sandbox"
        );
    }
    for spec in &log.created {
        assert!(!spec.keepalive.is_empty());
        scanned.extend(spec.keepalive.iter().cloned());
        scanned.push(spec.image.to_string());
        scanned.push(spec.workspace.display().to_string());
        scanned.push(spec.outputs.display().to_string());
    }
    for credential in &minted {
        assert!(credential.value.len() >= 20);
        for text in &scanned {
            assert!(
                !text.contains(&credential.value),
                "credential {} appears in {text:?}",
                credential.id
            );
        }
    }
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_push_carries_the_scoped_value_not_the_primary_token() {
    let fx = Fixture::builder().build();
    let primary = random_token(40).unwrap();
    fx.sanitizer
        .register(KnownValue::new("primary-token", &primary).unwrap())
        .unwrap();
    let leak = format!("say found a token in the environment: {primary}");
    fx.runtime.script(|s| s.exec.lines.insert(0, leak));
    let fin = fx.run(brief("fix-login"), Delivery::Push).await;
    assert_outcome(&fin, Phase::Done, 0);

    let minted = fx.provider.minted();
    assert_eq!(minted.len(), 1);
    let pushes = fx.forge.pushes();
    assert_eq!(pushes.len(), 1);
    assert_eq!(
        pushes[0].secret, minted[0].value,
        "the scoped value, exactly"
    );
    assert_eq!(pushes[0].credential, minted[0].id);
    assert_ne!(pushes[0].secret, primary);

    let published: Vec<String> = fin
        .events
        .iter()
        .map(|e| e.to_json_line().unwrap())
        .collect();
    assert!(
        published
            .iter()
            .any(|line| line.contains("[REDACTED:primary-token]")),
        "the leaked line is shown, masked"
    );
    let record = run_dir(&fx.state, fin.id);
    let mut texts = published;
    for file in [EVENTS_FILE, RESULT_FILE, PATCH_FILE] {
        texts.push(std::fs::read_to_string(record.join(file)).unwrap());
    }
    for pr in fx.forge.pull_requests() {
        texts.push(pr.title);
        texts.push(pr.body);
    }
    for text in &texts {
        assert!(!text.contains(&primary), "the primary token leaked: {text}");
        assert!(
            !text.contains(&minted[0].value),
            "the scoped value leaked: {text}"
        );
    }
    assert!(fx.result(fin.id).redactions >= 1);
    fx.assert_clean(&fin, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_dispatches_get_distinct_containers_branches_workspaces_and_credentials() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.wait = Wait::Released);
    let (handle, task, mut log) = fx.dispatcher(2);
    let a = handle
        .dispatch(brief("alpha"), Delivery::Push)
        .await
        .unwrap();
    let b = handle
        .dispatch(brief("bravo"), Delivery::Push)
        .await
        .unwrap();
    let running: BTreeSet<String> = [fx.next_exec().await, fx.next_exec().await].into();
    assert_eq!(running, BTreeSet::from([a.to_string(), b.to_string()]));

    // Both are inside the agent's run at once.
    let specs = fx.runtime.log().created;
    assert_eq!(specs.len(), 2);
    assert_ne!(specs[0].container_name(), specs[1].container_name());
    assert_ne!(specs[0].workspace, specs[1].workspace);
    assert_ne!(specs[0].outputs, specs[1].outputs);
    let minted = fx.provider.minted();
    assert_eq!(minted.len(), 2);
    assert_ne!(minted[0].id, minted[1].id);
    assert_ne!(minted[0].value, minted[1].value);
    let branch_a = dispatched_branch(&mut log, a).await;
    let branch_b = dispatched_branch(&mut log, b).await;
    assert_ne!(branch_a, branch_b);
    let minted_for: BTreeSet<&str> = minted.iter().map(|m| m.branch.as_str()).collect();
    assert_eq!(
        minted_for,
        BTreeSet::from([branch_a.as_str(), branch_b.as_str()])
    );

    fx.runtime.release(2);
    let fin_a = log.finished(a).await;
    let fin_b = log.finished(b).await;
    assert_outcome(&fin_a, Phase::Done, 0);
    assert_outcome(&fin_b, Phase::Done, 0);

    let pushes = fx.forge.pushes();
    assert_eq!(pushes.len(), 2);
    for push in &pushes {
        let own = minted
            .iter()
            .find(|m| m.branch == push.branch)
            .expect("a credential minted for the pushed branch");
        assert_eq!(
            push.secret, own.value,
            "each push carries its own credential"
        );
        assert_eq!(push.credential, own.id);
    }
    for fin in [&fin_a, &fin_b] {
        let commit = fin.collected_commit().unwrap();
        assert_eq!(
            git(&fx.repo, &["show", &format!("{commit}:{EDITED_FILE}")]),
            format!("fixed by {}", fin.id),
            "each result holds only its own workspace's edit"
        );
        fx.assert_reclaimed(fin);
    }
    assert_ne!(fin_a.collected_commit(), fin_b.collected_commit());
    fx.assert_journal_empty();
    fx.assert_credentials_revoked_once(2);
    stop(handle, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_dispatch_waits_for_the_ceiling() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.wait = Wait::Released);
    let (handle, task, mut log) = fx.dispatcher(2);
    let a = handle
        .dispatch(brief("alpha"), Delivery::Push)
        .await
        .unwrap();
    let b = handle
        .dispatch(brief("bravo"), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;
    fx.next_exec().await;
    let c = handle
        .dispatch(brief("charlie"), Delivery::Push)
        .await
        .unwrap();
    log.until("charlie's dispatched event", |e| {
        e.dispatch == c && e.kind.name() == "dispatched"
    })
    .await;

    // Both slots are held by dispatches blocked in their agent's run: charlie cannot have moved.
    log.drain_ready();
    let charlie_phases: Vec<&Event> = log
        .seen
        .iter()
        .filter(|e| e.dispatch == c && e.kind.name() == "phase")
        .collect();
    assert!(
        charlie_phases.is_empty(),
        "charlie left queued: {charlie_phases:?}"
    );
    assert_eq!(fx.forge.preflights(), 2);
    assert_eq!(fx.provider.minted().len(), 2);

    fx.runtime.release(1);
    let first = fx.next_exec().await;
    assert_eq!(first, c.to_string(), "charlie runs once a slot is free");
    // Everything charlie and the finished dispatch published before charlie's exec began is here.
    log.drain_ready();
    let position = |pred: &dyn Fn(&Event) -> bool| log.seen.iter().position(pred);
    let first_finished =
        position(&|e: &Event| (e.dispatch == a || e.dispatch == b) && e.kind.name() == "finished")
            .expect("one of the first two finished");
    let charlie_started = position(&|e: &Event| e.dispatch == c && is_phase(e, Phase::Preflight))
        .expect("charlie's preflight");
    assert!(
        first_finished < charlie_started,
        "charlie started before a slot was free"
    );

    fx.runtime.release(2);
    for id in [a, b, c] {
        let fin = log.finished(id).await;
        assert_outcome(&fin, Phase::Done, 0);
        fx.assert_reclaimed(&fin);
    }
    fx.assert_journal_empty();
    fx.assert_credentials_revoked_once(3);
    stop(handle, task).await;
}

/// A person may take their time at review: meanwhile the slot serves the next dispatch, and the
/// approved one takes a slot again to push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_waiting_at_review_gives_its_slot_to_the_next() {
    let fx = Fixture::builder().build();
    let (handle, task, mut log) = fx.dispatcher(1);
    let a = handle
        .dispatch(brief("alpha"), Delivery::Review)
        .await
        .unwrap();
    log.until("alpha awaits approval", |e| {
        e.dispatch == a && is_phase(e, Phase::AwaitingApproval)
    })
    .await;
    let b = handle
        .dispatch(brief("bravo"), Delivery::Keep)
        .await
        .unwrap();
    // Bounded only so that a held slot fails the test instead of hanging it.
    let bravo = tokio::time::timeout(Duration::from_secs(60), log.finished(b))
        .await
        .expect("bravo never ran: alpha kept its slot while awaiting approval");
    assert_outcome(&bravo, Phase::Done, 0);
    handle.approve(a).await.unwrap();
    let alpha = log.finished(a).await;
    assert_outcome(&alpha, Phase::Done, 0);
    for fin in [&alpha, &bravo] {
        fx.assert_reclaimed(fin);
    }
    fx.assert_journal_empty();
    stop(handle, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_dispatch_of_an_in_flight_brief_is_refused() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.wait = Wait::Released);
    let (handle, task, mut log) = fx.dispatcher(2);
    let a = handle
        .dispatch(brief("alpha"), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;

    let again = handle.dispatch(brief("alpha"), Delivery::Push).await;
    assert_eq!(
        again,
        Err(DispatcherError::BriefInFlight {
            brief: "alpha".into(),
            dispatch: a
        })
    );
    let b = handle
        .dispatch(brief("bravo"), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;

    fx.runtime.release(2);
    for id in [a, b] {
        let fin = log.finished(id).await;
        assert_outcome(&fin, Phase::Done, 0);
        fx.assert_reclaimed(&fin);
    }
    assert_eq!(
        fx.run_records(),
        BTreeSet::from([a.to_string(), b.to_string()]),
        "the refused dispatch left nothing behind"
    );
    fx.assert_journal_empty();
    fx.assert_credentials_revoked_once(2);
    stop(handle, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_dispatch_of_an_in_flight_pull_request_target_is_refused() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| s.exec.wait = Wait::Released);
    let (handle, task, mut log) = fx.dispatcher(2);
    let first = handle
        .dispatch(pr_brief("update-one", 7), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;

    let again = handle
        .dispatch(pr_brief("update-two", 7), Delivery::Push)
        .await;
    assert_eq!(
        again,
        Err(DispatcherError::PullRequestInFlight {
            repo: "octo/app".into(),
            number: 7,
            dispatch: first
        })
    );
    let other = handle
        .dispatch(pr_brief("update-three", 8), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;

    fx.runtime.release(2);
    for id in [first, other] {
        let fin = log.finished(id).await;
        assert_outcome(&fin, Phase::Done, 0);
        assert!(fin.events.iter().any(|e| matches!(
            &e.kind,
            EventKind::PullRequest {
                action: PullRequestAction::Updated,
                ..
            }
        )));
        fx.assert_reclaimed(&fin);
    }
    let updated: BTreeSet<Option<u64>> = fx
        .forge
        .pull_requests()
        .iter()
        .map(|pr| pr.updated)
        .collect();
    assert_eq!(updated, BTreeSet::from([Some(7), Some(8)]));
    let branches: BTreeSet<String> = fx.forge.pushes().into_iter().map(|p| p.branch).collect();
    assert_eq!(
        branches,
        BTreeSet::from(["feature-7".to_owned(), "feature-8".to_owned()])
    );
    assert_eq!(
        fx.run_records(),
        BTreeSet::from([first.to_string(), other.to_string()])
    );
    fx.assert_journal_empty();
    fx.assert_credentials_revoked_once(2);
    stop(handle, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_everything_and_waits_for_every_teardown() {
    let mut fx = Fixture::builder().build();
    fx.runtime.script(|s| {
        s.exec.wait = Wait::Released;
        // Removal takes a trip through another thread, so a shutdown that returned early shows.
        s.remove_waits_for_blocking_pool = true;
    });
    let (handle, task, mut log) = fx.dispatcher(2);
    let a = handle
        .dispatch(brief("alpha"), Delivery::Push)
        .await
        .unwrap();
    let b = handle
        .dispatch(brief("bravo"), Delivery::Push)
        .await
        .unwrap();
    fx.next_exec().await;
    fx.next_exec().await;
    let c = handle
        .dispatch(brief("charlie"), Delivery::Push)
        .await
        .unwrap();
    log.until("charlie's dispatched event", |e| {
        e.dispatch == c && e.kind.name() == "dispatched"
    })
    .await;

    handle.shutdown().await;

    // Everything below holds the moment shutdown returns, without waiting for anything more.
    log.drain_ready();
    for id in [a, b, c] {
        let fin = Finished::from_log(&log, id);
        assert_outcome(&fin, Phase::Cancelled, 3);
        fx.assert_reclaimed(&fin);
    }
    let queued = Finished::from_log(&log, c);
    assert_eq!(queued.reason(), "cancelled while queued");
    assert_eq!(queued.path(), [Phase::Cancelled]);
    for id in [a, b] {
        let fin = Finished::from_log(&log, id);
        assert_eq!(fin.reason(), "cancelled during running");
        assert!(fin.has("torn_down"));
    }
    let runtime = fx.runtime.log();
    assert_eq!(runtime.created.len(), 2);
    assert!(runtime.live.is_empty(), "left running: {:?}", runtime.live);
    fx.assert_journal_empty();
    fx.assert_credentials_revoked_once(2);
    assert!(fx.forge.pushes().is_empty());

    assert_eq!(
        handle.dispatch(brief("delta"), Delivery::Push).await,
        Err(DispatcherError::ShuttingDown)
    );
    stop(handle, task).await;
}

// ---------------------------------------------------------------------------------------------------
// The fixture: a real repository, state directory and journal, with the fakes wired in.
// ---------------------------------------------------------------------------------------------------

struct FixtureBuilder {
    timeout: Duration,
    cost_ceiling_usd: Option<f64>,
    max_record_bytes: u64,
}

impl FixtureBuilder {
    fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn cost_ceiling_usd(mut self, ceiling: f64) -> Self {
        self.cost_ceiling_usd = Some(ceiling);
        self
    }

    fn max_record_bytes(mut self, bytes: u64) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    fn build(self) -> Fixture {
        let repo_dir = tempfile::tempdir().unwrap();
        let state_dir = tempfile::tempdir().unwrap();
        let repo = repo_dir.path().to_owned();
        let state = state_dir.path().to_owned();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "# app\n").unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(
            repo.join("src/lib.rs"),
            "pub fn answer() -> u32 {\n    41\n}\n",
        )
        .unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);

        let (started, exec_started) = mpsc::unbounded_channel();
        let runtime = Arc::new(FakeRuntime::new(started));
        let provider = Arc::new(CountingProvider::default());
        let forge = Arc::new(FakeForge::new(CommitSha::parse(&base).unwrap()));
        let harness = Arc::new(FakeHarness::default());
        let sanitizer = SanitizerHandle::new(TokenSanitizer::new().unwrap());
        let journal = Arc::new(Journal::open(&state.join("journal")).unwrap());
        let service = DispatchService::new(
            Arc::clone(&runtime) as Arc<dyn ContainerRuntime>,
            Arc::clone(&journal),
            &state,
            vec![Arc::clone(&provider) as Arc<dyn CredentialProvider>],
        );
        let settings = DispatchSettings {
            image: ImageRef::parse(&format!("sha256:{}", "5e".repeat(32)), false).unwrap(),
            limits: DispatchLimits::default(),
            network: NetworkPolicy::None,
            user: SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap(),
            keepalive: vec!["/usr/local/bin/stet".into(), "sandbox-idle".into()],
            mounts: stet_engine::dispatch::copy_mode::Mounts::Bind,
            timeout: self.timeout,
            cost_ceiling_usd: self.cost_ceiling_usd,
            max_record_bytes: self.max_record_bytes,
            credential_ttl: Duration::from_secs(600),
            agent: default_agent(),
            import: ImportLimits::default(),
            base: Default::default(),
            protected: ProtectedPaths::default(),
            gateway: None,
            egress: None,
        };
        let parts = Arc::new(DispatchContext {
            repository: repo.clone(),
            forge: Arc::clone(&forge) as Arc<dyn Forge>,
            credentials: Arc::clone(&provider) as Arc<dyn CredentialProvider>,
            harness: Arc::clone(&harness) as Arc<dyn Harness>,
            sanitizer: sanitizer.clone(),
            settings,
        });
        Fixture {
            _dirs: (repo_dir, state_dir),
            repo,
            state,
            base,
            runtime,
            provider,
            forge,
            harness,
            sanitizer,
            journal,
            service,
            parts,
            cancel: CancellationToken::new(),
            exec_started,
        }
    }
}

struct Fixture {
    _dirs: (TempDir, TempDir),
    repo: PathBuf,
    state: PathBuf,
    /// The commit `main` points at: every dispatch's base.
    base: String,
    runtime: Arc<FakeRuntime>,
    provider: Arc<CountingProvider>,
    forge: Arc<FakeForge>,
    harness: Arc<FakeHarness>,
    sanitizer: SanitizerHandle,
    journal: Arc<Journal>,
    service: DispatchService,
    parts: Arc<DispatchContext>,
    /// The cancel of a dispatch started with [`Fixture::start`]; hooks cancel it at exact points.
    cancel: CancellationToken,
    /// The container of every process the fake runtime began to exec, in order.
    exec_started: mpsc::UnboundedReceiver<String>,
}

impl Fixture {
    fn builder() -> FixtureBuilder {
        FixtureBuilder {
            timeout: Duration::from_secs(120),
            cost_ceiling_usd: None,
            max_record_bytes: stet_engine::dispatch::record::DEFAULT_MAX_RECORD_BYTES,
        }
    }

    /// Starts one dispatch through `DispatchService::run`, steered by [`Fixture::cancel`].
    fn start(&self, brief: Brief, delivery: Delivery) -> Running {
        let id = DispatchId::new();
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let (decide, decisions) = mpsc::channel(1);
        let control = DispatchControl {
            cancel: self.cancel.clone(),
            cause: Arc::default(),
            decisions,
            slots: Arc::new(Semaphore::new(1)),
        };
        let run = DispatchRun {
            id,
            brief,
            delivery,
        };
        let task = tokio::spawn(stet_engine::dispatch::run::run(
            self.service.clone(),
            Arc::clone(&self.parts),
            run,
            events,
            control,
        ));
        Running {
            id,
            decide,
            log: EventLog::new(receiver),
            task,
        }
    }

    async fn run(&self, brief: Brief, delivery: Delivery) -> Finished {
        self.start(brief, delivery).finish().await
    }

    fn dispatcher(&self, ceiling: usize) -> (DispatchHandle, JoinHandle<()>, EventLog) {
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let (handle, task) = Dispatcher::start(
            self.service.clone(),
            Arc::clone(&self.parts),
            ceiling,
            events,
        );
        (handle, task, EventLog::new(receiver))
    }

    /// Waits until the fake runtime begins the next exec; returns its container.
    async fn next_exec(&mut self) -> String {
        tokio::time::timeout(DEADLINE, self.exec_started.recv())
            .await
            .expect("no exec began in time")
            .expect("the runtime is alive")
    }

    fn result_ref(&self, dispatch: DispatchId) -> Option<String> {
        let repo = git2::Repository::open(&self.repo).unwrap();
        repo.find_reference(&result_ref(dispatch))
            .ok()
            .and_then(|reference| reference.target())
            .map(|oid| oid.to_string())
    }

    fn result(&self, dispatch: DispatchId) -> stet_engine::dispatch::record::RunResult {
        read_result(&run_dir(&self.state, dispatch)).expect("result.json")
    }

    fn dispatch_dir(&self, dispatch: DispatchId) -> PathBuf {
        self.state.join("dispatches").join(dispatch.to_string())
    }

    fn run_records(&self) -> BTreeSet<String> {
        std::fs::read_dir(self.state.join("runs"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Everything a single-dispatch test checks on its exit path.
    fn assert_clean(&self, fin: &Finished, mints: usize) {
        self.assert_reclaimed(fin);
        self.assert_journal_empty();
        self.assert_credentials_revoked_once(mints);
    }

    /// One dispatch's container removed exactly as created (or never created), its directory gone,
    /// and its run record complete.
    fn assert_reclaimed(&self, fin: &Finished) {
        let name = fin.id.to_string();
        let log = self.runtime.log();
        let created = log
            .created
            .iter()
            .filter(|spec| spec.container_name() == name)
            .count();
        let removed = log
            .removals
            .iter()
            .filter(|(container, outcome)| *container == name && *outcome == Ok(Removal::Removed))
            .count();
        assert!(created <= 1, "{name} was created {created} times");
        assert_eq!(
            removed, created,
            "{name}: created {created} time(s), removed {removed} time(s)"
        );
        assert!(!log.live.contains(&name), "{name} is still running");
        let dir = self.dispatch_dir(fin.id);
        assert!(!dir.exists(), "{} is left behind", dir.display());
        self.assert_run_record(fin);
    }

    /// `events.jsonl` holds exactly the published events, each an `Event`, and `result.json` agrees
    /// with the `finished` event.
    fn assert_run_record(&self, fin: &Finished) {
        let dir = run_dir(&self.state, fin.id);
        let text = std::fs::read_to_string(dir.join(EVENTS_FILE)).expect("events.jsonl");
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines {
            let event: Event = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(event.dispatch, fin.id);
        }
        let published: Vec<String> = fin
            .events
            .iter()
            .map(|e| e.to_json_line().unwrap())
            .collect();
        // What the agent printed after a stop is recorded without being published: the record is
        // what was published, with only transcript items and usage besides.
        let mut extra = Vec::new();
        let mut next = published.iter().peekable();
        for line in &lines {
            if next.peek().is_some_and(|p| p.as_str() == *line) {
                next.next();
            } else {
                extra.push(*line);
            }
        }
        assert!(
            next.peek().is_none(),
            "the run record lacks published events from {:?}",
            next.peek()
        );
        for line in extra {
            let event: Event = serde_json::from_str(line).unwrap();
            assert!(
                matches!(event.kind, EventKind::Transcript(_) | EventKind::Usage(_)),
                "recorded, never published: {line}"
            );
        }
        let result = self.result(fin.id);
        let (outcome, exit_code, _) = fin.end();
        assert_eq!(result.dispatch, fin.id);
        assert_eq!(result.outcome, outcome);
        assert_eq!(result.exit_code, exit_code);
    }

    fn assert_journal_empty(&self) {
        let scan = self.journal.records().unwrap();
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
        assert!(
            scan.records.is_empty(),
            "left in the journal: {:?}",
            scan.records
        );
    }

    fn assert_credentials_revoked_once(&self, mints: usize) {
        let minted = self.provider.minted();
        assert_eq!(minted.len(), mints, "credentials minted");
        let revokes = self.provider.revokes();
        for credential in &minted {
            assert_eq!(
                revokes.get(&credential.id).copied().unwrap_or(0),
                1,
                "credential {} revoked once",
                credential.id
            );
        }
        assert_eq!(
            revokes.len(),
            minted.len(),
            "revoked something never minted: {revokes:?}"
        );
    }
}

/// Shuts a dispatcher down and waits for its task.
async fn stop(handle: DispatchHandle, task: JoinHandle<()>) {
    handle.shutdown().await;
    drop(handle);
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the dispatcher stopped")
        .unwrap();
}

fn brief_with(id: &str, pr: Option<u64>) -> Brief {
    let pr = pr.map(|n| format!("pr = {n}\n")).unwrap_or_default();
    let text = format!(
        "title = \"Fix the {id} problem\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n{pr}\n[[items]]\ntext = \"Make {id} work again\"\n"
    );
    Brief::parse(id, Path::new(&format!("{id}.toml")), &text).unwrap()
}

fn brief(id: &str) -> Brief {
    brief_with(id, None)
}

fn pr_brief(id: &str, number: u64) -> Brief {
    brief_with(id, Some(number))
}

type Hook = Arc<dyn Fn() + Send + Sync>;

fn cancel_hook(token: &CancellationToken) -> Hook {
    let token = token.clone();
    Arc::new(move || token.cancel())
}

/// Locks a fake's state; a panic elsewhere already failed the test, so poisoning is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------------
// Events: reading them as they come, and what a finished dispatch published.
// ---------------------------------------------------------------------------------------------------

/// A dispatch started through the service.
struct Running {
    id: DispatchId,
    decide: mpsc::Sender<Decision>,
    log: EventLog,
    task: JoinHandle<Phase>,
}

impl Running {
    async fn finish(mut self) -> Finished {
        self.log.drain_to_end().await;
        let phase = tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the dispatch ended")
            .unwrap();
        let fin = Finished::from_log(&self.log, self.id);
        assert_eq!(
            fin.phase, phase,
            "the finished event names the phase run returned"
        );
        fin
    }
}

struct EventLog {
    receiver: mpsc::Receiver<Event>,
    seen: Vec<Event>,
}

impl EventLog {
    fn new(receiver: mpsc::Receiver<Event>) -> EventLog {
        EventLog {
            receiver,
            seen: Vec::new(),
        }
    }

    async fn next(&mut self, what: &str) -> Option<Event> {
        let received = tokio::time::timeout(DEADLINE, self.receiver.recv()).await;
        let Ok(event) = received else {
            let names: Vec<&str> = self.seen.iter().map(|e| e.kind.name()).collect();
            panic!("no event in time while waiting for {what}; seen so far: {names:?}");
        };
        let event = event?;
        self.seen.push(event.clone());
        Some(event)
    }

    /// The first event, seen before or arriving now, that matches.
    async fn until(&mut self, what: &str, matches: impl Fn(&Event) -> bool) -> Event {
        if let Some(event) = self.seen.iter().find(|e| matches(e)) {
            return event.clone();
        }
        loop {
            match self.next(what).await {
                Some(event) if matches(&event) => return event,
                Some(_) => {}
                None => panic!("the events ended before {what}"),
            }
        }
    }

    async fn drain_to_end(&mut self) {
        while self.next("the end of the events").await.is_some() {}
    }

    /// Takes what has arrived, without waiting.
    fn drain_ready(&mut self) {
        while let Ok(event) = self.receiver.try_recv() {
            self.seen.push(event);
        }
    }

    async fn finished(&mut self, dispatch: DispatchId) -> Finished {
        self.until("a finished event", |e| {
            e.dispatch == dispatch && e.kind.name() == "finished"
        })
        .await;
        Finished::from_log(self, dispatch)
    }
}

async fn dispatched_branch(log: &mut EventLog, dispatch: DispatchId) -> String {
    let event = log
        .until("a dispatched event", |e| {
            e.dispatch == dispatch && e.kind.name() == "dispatched"
        })
        .await;
    match event.kind {
        EventKind::Dispatched { branch, .. } => branch.into_string(),
        _ => unreachable!(),
    }
}

fn is_phase(event: &Event, phase: Phase) -> bool {
    matches!(event.kind, EventKind::Phase { to, .. } if to == phase)
}

/// What one dispatch published, up to and including `finished`.
#[derive(Debug)]
struct Finished {
    id: DispatchId,
    phase: Phase,
    events: Vec<Event>,
}

impl Finished {
    fn from_log(log: &EventLog, dispatch: DispatchId) -> Finished {
        let events: Vec<Event> = log
            .seen
            .iter()
            .filter(|e| e.dispatch == dispatch)
            .cloned()
            .collect();
        let phase = events
            .iter()
            .find_map(|e| match e.kind {
                EventKind::Finished { outcome, .. } => Some(outcome),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{dispatch} published no finished event"));
        Finished {
            id: dispatch,
            phase,
            events,
        }
    }

    fn names(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.kind.name()).collect()
    }

    fn has(&self, name: &str) -> bool {
        self.names().contains(&name)
    }

    /// The phases moved to, in order (the dispatch starts at `queued`).
    fn path(&self) -> Vec<Phase> {
        self.events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Phase { to, .. } => Some(to),
                _ => None,
            })
            .collect()
    }

    /// The `finished` event's outcome, exit code and reason.
    fn end(&self) -> (Phase, u8, String) {
        match &self.events.last().expect("events").kind {
            EventKind::Finished {
                outcome,
                exit_code,
                reason,
            } => (
                *outcome,
                *exit_code,
                reason
                    .as_ref()
                    .map(|r| r.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            other => panic!("the last event is {}, not finished", other.name()),
        }
    }

    fn reason(&self) -> String {
        self.end().2
    }

    fn collected_commit(&self) -> Option<String> {
        self.events.iter().find_map(|e| match &e.kind {
            EventKind::Collected { commit, .. } => Some(commit.as_str().to_owned()),
            _ => None,
        })
    }

    fn dispatched_branch(&self) -> String {
        self.events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::Dispatched { branch, .. } => Some(branch.as_str().to_owned()),
                _ => None,
            })
            .expect("a dispatched event")
    }
}

/// The `finished` event is the last, there is one, and it carries `phase` and `exit_code`.
fn assert_outcome(fin: &Finished, phase: Phase, exit_code: u8) {
    let finished = fin.names().iter().filter(|n| **n == "finished").count();
    assert_eq!(finished, 1, "one finished event: {:?}", fin.names());
    let (outcome, code, reason) = fin.end();
    assert_eq!(
        (outcome, code),
        (phase, exit_code),
        "reason: {reason:?}; events: {:?}",
        fin.names()
    );
    assert_eq!(fin.phase, phase);
    assert_eq!(
        fin.events.first().map(|e| e.kind.name()),
        Some("dispatched")
    );
}

// ---------------------------------------------------------------------------------------------------
// The fake container runtime.
// ---------------------------------------------------------------------------------------------------

/// How an exec waits before it does its work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Wait {
    #[default]
    None,
    /// Until the exec is dropped (cancel, timeout).
    Forever,
    /// Until [`FakeRuntime::release`] lets it go.
    Released,
}

#[derive(Clone)]
struct ExecScript {
    hook: Option<Hook>,
    fails: bool,
    wait: Wait,
    /// Files written into the workspace (path relative to it, contents), as the agent's edit.
    edits: Vec<(String, String)>,
    /// Printed on stdout, one per line.
    lines: Vec<String>,
    code: i64,
}

impl Default for ExecScript {
    fn default() -> Self {
        ExecScript {
            hook: None,
            fails: false,
            wait: Wait::None,
            edits: vec![(EDITED_FILE.to_owned(), EDIT.to_owned())],
            lines: vec![
                "say reading the code".into(),
                "run cargo test".into(),
                "usage fake-model 1200 300 0.01".into(),
                "done fixed the redirect".into(),
            ],
            code: 0,
        }
    }
}

#[derive(Clone, Default)]
struct RuntimeScript {
    on_pull: Option<Hook>,
    pull_hangs: bool,
    create_fails: bool,
    exec: ExecScript,
    remove_fails: bool,
    /// Removal first waits for a task on the blocking pool, i.e. for every blocking task queued
    /// before it when the pool has one thread.
    remove_waits_for_blocking_pool: bool,
}

#[derive(Debug, Clone)]
struct ExecCall {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    workdir: String,
}

#[derive(Debug, Clone, Default)]
struct RuntimeLog {
    images: Vec<String>,
    create_attempts: Vec<String>,
    created: Vec<SandboxSpec>,
    execs: Vec<ExecCall>,
    kills: Vec<String>,
    removals: Vec<(String, Result<Removal, String>)>,
    live: BTreeSet<String>,
}

struct FakeRuntime {
    script: Mutex<RuntimeScript>,
    log: Mutex<RuntimeLog>,
    release: Semaphore,
    started: mpsc::UnboundedSender<String>,
}

impl fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FakeRuntime")
    }
}

impl FakeRuntime {
    fn new(started: mpsc::UnboundedSender<String>) -> FakeRuntime {
        FakeRuntime {
            script: Mutex::new(RuntimeScript::default()),
            log: Mutex::new(RuntimeLog::default()),
            release: Semaphore::new(0),
            started,
        }
    }

    fn script(&self, change: impl FnOnce(&mut RuntimeScript)) {
        change(&mut lock(&self.script));
    }

    fn log(&self) -> RuntimeLog {
        lock(&self.log).clone()
    }

    /// Lets `n` execs waiting in [`Wait::Released`] go on.
    fn release(&self, n: usize) {
        self.release.add_permits(n);
    }

    fn engine_error(container: &str, operation: &'static str, detail: &str) -> RuntimeError {
        RuntimeError::Engine {
            container: container.to_owned(),
            operation,
            detail: detail.to_owned(),
        }
    }
}

#[async_trait]
impl ContainerRuntime for FakeRuntime {
    async fn ensure_image(
        &self,
        image: &ImageRef,
        progress: Option<mpsc::Sender<PullProgress>>,
    ) -> stet_engine::runtime::Result<()> {
        let (hook, hangs) = {
            let script = lock(&self.script);
            (script.on_pull.clone(), script.pull_hangs)
        };
        lock(&self.log).images.push(image.to_string());
        // As if the image were missing: one progress report, which the theater shows.
        if let Some(progress) = progress {
            let _ = progress
                .send(PullProgress {
                    layer: Some("layer-1".to_owned()),
                    status: "Downloading".to_owned(),
                    current_bytes: Some(1024),
                    total_bytes: Some(4096),
                })
                .await;
        }
        if let Some(hook) = hook {
            hook();
        }
        if hangs {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    async fn create_sandbox(&self, spec: &SandboxSpec) -> stet_engine::runtime::Result<String> {
        let fails = lock(&self.script).create_fails;
        let name = spec.container_name();
        let mut log = lock(&self.log);
        log.create_attempts.push(name.clone());
        if fails {
            return Err(FakeRuntime::engine_error(
                &name,
                "create",
                "the engine refused the container (fake)",
            ));
        }
        log.created.push(spec.clone());
        log.live.insert(name.clone());
        Ok(name)
    }

    async fn exec(
        &self,
        container: &str,
        process: &SandboxProcess,
        output: mpsc::Sender<OutputChunk>,
    ) -> stet_engine::runtime::Result<ExecExit> {
        let script = lock(&self.script).exec.clone();
        let workspace = {
            let mut log = lock(&self.log);
            log.execs.push(ExecCall {
                argv: process.argv.clone(),
                env: process
                    .env
                    .iter()
                    .map(|(key, value)| (key.clone(), value.expose_secret().to_owned()))
                    .collect(),
                workdir: process.workdir.clone(),
            });
            let live = log.live.contains(container);
            log.created
                .iter()
                .find(|spec| spec.container_name() == container)
                .filter(|_| live)
                .map(|spec| spec.workspace.clone())
        };
        let _ = self.started.send(container.to_owned());
        if let Some(hook) = &script.hook {
            hook();
        }
        if script.fails {
            return Err(FakeRuntime::engine_error(
                container,
                "exec",
                "the engine closed the connection (fake)",
            ));
        }
        let Some(workspace) = workspace else {
            return Err(FakeRuntime::engine_error(
                container,
                "exec",
                "no such container",
            ));
        };
        match script.wait {
            Wait::None => {}
            Wait::Forever => std::future::pending::<()>().await,
            Wait::Released => self.release.acquire().await.unwrap().forget(),
        }
        for (path, contents) in &script.edits {
            let target = workspace.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&target, contents.replace("{container}", container)).unwrap();
        }
        for line in &script.lines {
            let chunk = OutputChunk {
                stream: OutputStream::Stdout,
                bytes: format!("{line}\n").into_bytes(),
            };
            if output.send(chunk).await.is_err() {
                return Err(RuntimeError::OutputClosed {
                    container: container.to_owned(),
                });
            }
        }
        Ok(ExecExit {
            code: script.code,
            oom_killed: false,
        })
    }

    async fn kill(&self, container: &str) -> stet_engine::runtime::Result<()> {
        lock(&self.log).kills.push(container.to_owned());
        Ok(())
    }

    async fn remove(&self, container: &str, _force: bool) -> stet_engine::runtime::Result<Removal> {
        let (fails, waits) = {
            let script = lock(&self.script);
            (script.remove_fails, script.remove_waits_for_blocking_pool)
        };
        if waits {
            tokio::task::spawn_blocking(|| ()).await.unwrap();
        }
        let mut log = lock(&self.log);
        if fails {
            let detail = "the daemon did not answer (fake)";
            log.removals
                .push((container.to_owned(), Err(detail.to_owned())));
            return Err(FakeRuntime::engine_error(container, "remove", detail));
        }
        let removal = if log.live.remove(container) {
            Removal::Removed
        } else {
            Removal::AlreadyGone
        };
        log.removals.push((container.to_owned(), Ok(removal)));
        Ok(removal)
    }

    async fn wait(&self, _container: &str) -> stet_engine::runtime::Result<ContainerExit> {
        Ok(ContainerExit {
            code: 0,
            oom_killed: false,
        })
    }

    async fn list_sandboxes(&self) -> stet_engine::runtime::Result<Vec<SandboxContainer>> {
        Ok(lock(&self.log)
            .live
            .iter()
            .map(|name| SandboxContainer {
                name: name.clone(),
                dispatch: name.clone(),
                state_label: None,
                state: "running".into(),
                warm: false,
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------------
// The counting credential provider: the real local provider, with every mint and revoke counted.
// ---------------------------------------------------------------------------------------------------

#[derive(Clone)]
struct MintRecord {
    id: CredentialId,
    value: String,
    branch: String,
}

#[derive(Default)]
struct CountingProvider {
    inner: LocalCredentialProvider,
    minted: Mutex<Vec<MintRecord>>,
    revokes: Mutex<HashMap<CredentialId, usize>>,
    /// When set, each credential says it is the primary token standing in, and why.
    stand_in: Mutex<Option<String>>,
}

impl fmt::Debug for CountingProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingProvider")
            .field("minted", &lock(&self.minted).len())
            .finish()
    }
}

impl CountingProvider {
    fn minted(&self) -> Vec<MintRecord> {
        lock(&self.minted).clone()
    }

    fn revokes(&self) -> HashMap<CredentialId, usize> {
        lock(&self.revokes).clone()
    }
}

#[async_trait]
impl CredentialProvider for CountingProvider {
    fn name(&self) -> &'static str {
        "counting"
    }

    async fn mint(
        &self,
        repository: &str,
        branch: &str,
        ttl: Duration,
    ) -> stet_engine::credential::Result<Minted> {
        let mut minted = self.inner.mint(repository, branch, ttl).await?;
        minted.stand_in = lock(&self.stand_in).clone();
        lock(&self.minted).push(MintRecord {
            id: minted.id.clone(),
            value: minted.value.expose_secret().to_owned(),
            branch: branch.to_owned(),
        });
        Ok(minted)
    }

    async fn revoke(&self, id: &CredentialId) -> stet_engine::credential::Result<Revocation> {
        *lock(&self.revokes).entry(id.clone()).or_default() += 1;
        self.inner.revoke(id).await
    }
}

// ---------------------------------------------------------------------------------------------------
// The fake forge.
// ---------------------------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct ForgeScript {
    on_push: Option<Hook>,
    push_fails: bool,
    pr_fails: bool,
}

#[derive(Debug, Clone)]
struct PushCall {
    branch: String,
    commit: String,
    /// What `credential.host_push_secret()` held.
    secret: String,
    credential: CredentialId,
}

#[derive(Debug, Clone)]
struct PullRequestCall {
    head: String,
    base: String,
    title: String,
    body: String,
    /// The number of the pull request updated; `None` when one was opened.
    updated: Option<u64>,
}

#[derive(Debug, Default)]
struct ForgeLog {
    preflights: usize,
    pushes: Vec<PushCall>,
    pull_requests: Vec<PullRequestCall>,
}

struct FakeForge {
    base: CommitSha,
    script: Mutex<ForgeScript>,
    log: Mutex<ForgeLog>,
}

impl fmt::Debug for FakeForge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FakeForge")
    }
}

const PUSH_URL: &str = "file:///nowhere";

impl FakeForge {
    fn new(base: CommitSha) -> FakeForge {
        FakeForge {
            base,
            script: Mutex::new(ForgeScript::default()),
            log: Mutex::new(ForgeLog::default()),
        }
    }

    fn script(&self, change: impl FnOnce(&mut ForgeScript)) {
        change(&mut lock(&self.script));
    }

    fn preflights(&self) -> usize {
        lock(&self.log).preflights
    }

    fn pushes(&self) -> Vec<PushCall> {
        lock(&self.log).pushes.clone()
    }

    fn pull_requests(&self) -> Vec<PullRequestCall> {
        lock(&self.log).pull_requests.clone()
    }

    fn record_pull_request(&self, draft: &PullRequestDraft, updated: Option<u64>) {
        lock(&self.log).pull_requests.push(PullRequestCall {
            head: draft.head.clone(),
            base: draft.base.clone(),
            title: draft.title.as_str().to_owned(),
            body: draft.body.as_str().to_owned(),
            updated,
        });
    }
}

#[async_trait]
impl Forge for FakeForge {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn diagnose(&self) -> Vec<stet_engine::doctor::Check> {
        Vec::new()
    }

    async fn preflight(&self, target: &Target) -> stet_engine::forge::Result<Preflight> {
        lock(&self.log).preflights += 1;
        Ok(Preflight {
            base_sha: self.base.clone(),
            head: target.pr.map(|number| ResolvedHead {
                number,
                branch: format!("feature-{number}"),
                sha: self.base.clone(),
            }),
            push_url: PUSH_URL.to_owned(),
        })
    }

    async fn push_branch(&self, push: PushBranch<'_>) -> stet_engine::forge::Result<Pushed> {
        let script = lock(&self.script).clone();
        lock(&self.log).pushes.push(PushCall {
            branch: push.branch.to_owned(),
            commit: push.commit.as_str().to_owned(),
            secret: push
                .credential
                .host_push_secret()
                .expose_secret()
                .to_owned(),
            credential: push.credential.id().clone(),
        });
        if let Some(hook) = &script.on_push {
            hook();
        }
        if script.push_fails {
            return Err(ForgeError::from(PushError::Rejected {
                url: PUSH_URL.to_owned(),
                reference: format!("refs/heads/{}", push.branch),
                reason: "pre-receive hook declined (fake)".to_owned(),
            }));
        }
        Ok(Pushed {
            branch: push.branch.to_owned(),
            commit: push.commit.clone(),
            previous: None,
        })
    }

    async fn open_pull_request(
        &self,
        _target: &Target,
        draft: &PullRequestDraft,
    ) -> stet_engine::forge::Result<PullRequest> {
        self.record_pull_request(draft, None);
        if lock(&self.script).pr_fails {
            return Err(ForgeError::Unprocessable {
                forge: "fake",
                detail: "Validation Failed (fake)".to_owned(),
            });
        }
        Ok(PullRequest {
            number: 42,
            url: "https://forge.invalid/octo/app/pull/42".to_owned(),
            opened: true,
        })
    }

    async fn update_pull_request(
        &self,
        _target: &Target,
        number: u64,
        draft: &PullRequestDraft,
    ) -> stet_engine::forge::Result<PullRequest> {
        self.record_pull_request(draft, Some(number));
        if lock(&self.script).pr_fails {
            return Err(ForgeError::Unprocessable {
                forge: "fake",
                detail: "Validation Failed (fake)".to_owned(),
            });
        }
        Ok(PullRequest {
            number,
            url: format!("https://forge.invalid/octo/app/pull/{number}"),
            opened: false,
        })
    }
}

// ---------------------------------------------------------------------------------------------------
// The fake harness and its little output format:
//   say <text> · run <command> · usage <model> <in> <out> <cost> · done <summary> · fail <reason>
// ---------------------------------------------------------------------------------------------------

#[derive(Default)]
struct FakeHarness {
    on_final_usage: Mutex<Option<Hook>>,
}

impl fmt::Debug for FakeHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FakeHarness")
    }
}

impl FakeHarness {
    /// Runs `hook` when the engine reads the final usage: right after the agent's run, just before
    /// collecting begins.
    fn on_final_usage(&self, hook: Hook) {
        *lock(&self.on_final_usage) = Some(hook);
    }
}

impl Harness for FakeHarness {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn version(&self) -> Option<String> {
        Some("0.0-test".to_owned())
    }

    fn model(&self) -> Option<String> {
        None
    }

    fn plan(&self, launch: &HarnessLaunch<'_>) -> stet_engine::harness::Result<HarnessPlan> {
        Ok(HarnessPlan {
            files: vec![StagedFile {
                name: "task.md".to_owned(),
                contents: launch.instructions.as_bytes().to_vec(),
            }],
            processes: vec![SandboxProcess {
                argv: vec![
                    AGENT_PROGRAM.to_owned(),
                    "--task".to_owned(),
                    "/outputs/task.md".to_owned(),
                ],
                env: BTreeMap::from([(
                    "FAKE_AGENT_VERBOSE".to_owned(),
                    SecretValue::new("1".to_owned()),
                )]),
                workdir: "/workspace".to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(FakeParser {
            sanitizer,
            failed: None,
        })
    }

    fn final_usage(
        &self,
        _outputs: &Path,
        _sanitizer: &Arc<TokenSanitizer>,
    ) -> stet_engine::harness::Result<Option<Usage>> {
        let hook = lock(&self.on_final_usage).clone();
        if let Some(hook) = hook {
            hook();
        }
        Ok(None)
    }
}

struct FakeParser {
    sanitizer: Arc<TokenSanitizer>,
    /// What the last `fail` line said.
    failed: Option<SanitizedText>,
}

impl FakeParser {
    fn item(&self, item: ItemKind, text: &str) -> Parsed {
        Parsed::Item(TranscriptItem {
            item,
            text: self.sanitizer.sanitize(text),
        })
    }

    fn usage(&self, fields: &str) -> Option<Parsed> {
        let mut fields = fields.split_whitespace();
        let model = fields.next()?;
        let input_tokens = fields.next()?.parse().ok()?;
        let output_tokens = fields.next()?.parse().ok()?;
        let cost_usd = fields.next().and_then(|cost| cost.parse().ok());
        Some(Parsed::Usage(UsageReport {
            model: self.sanitizer.sanitize(model),
            input_tokens,
            output_tokens,
            cached_tokens: 0,
            cost_usd,
        }))
    }
}

impl OutputParser for FakeParser {
    fn parse(&mut self, line: &OutputLine) -> Vec<Parsed> {
        let text = String::from_utf8_lossy(&line.line.bytes).into_owned();
        let (verb, rest) = text.split_once(' ').unwrap_or((text.as_str(), ""));
        match verb {
            "say" => vec![self.item(ItemKind::Message, rest)],
            "run" => vec![self.item(ItemKind::Command, rest)],
            "usage" => match self.usage(rest) {
                Some(usage) => vec![usage],
                None => vec![self.item(ItemKind::Other, &text)],
            },
            "done" => vec![Parsed::Finish(Finish {
                summary: Some(self.sanitizer.sanitize(rest)),
                shown: self.sanitizer.sanitize(rest),
            })],
            "fail" => {
                self.failed = Some(self.sanitizer.sanitize(rest));
                vec![self.item(ItemKind::Error, rest)]
            }
            _ => vec![self.item(ItemKind::Other, &text)],
        }
    }

    fn failure(&self, finished: bool) -> Option<SanitizedText> {
        self.failed.clone().or_else(|| {
            (!finished).then(|| self.sanitizer.sanitize("the agent never said it was done"))
        })
    }

    fn reported_failure(&self) -> Option<SanitizedText> {
        self.failed.clone()
    }
}
