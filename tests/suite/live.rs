//! What the live suites of the real agent CLIs (`openhands_live`, `codex_live`, `claude_live`)
//! share: each harness's dispatch image, built once per test process by
//! `docker/dispatch/build-offline` with this build's stet-sandbox inside, a project whose user
//! configuration selects the harness, a model behind stet's gateway and that image, and (for the
//! suites that script their model with wiremock) the mock server on loopback.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, OnceLock};

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Respond};

use super::headless::{Project, toml_string};
use super::support::{docker, serving_runtime};

/// One harness as a live suite runs it.
pub(super) struct LiveHarness {
    /// `harness.kind`, and `build-offline --harness`.
    pub(super) kind: &'static str,
    /// `harness.<kind>.model`.
    pub(super) model: &'static str,
    /// The model the upstream is asked for, as the price table names it.
    pub(super) priced: &'static str,
    /// The variable of stet's environment holding the model key.
    pub(super) key_env: &'static str,
}

/// The dispatch image of `harness` (`build-offline --harness <harness>`), made once per test
/// process; its ID.
pub(super) fn live_image(harness: &'static str) -> String {
    static IMAGES: OnceLock<Mutex<HashMap<&'static str, String>>> = OnceLock::new();
    // Held while building: the builds share the root filesystem's cache and the machine's cores.
    let mut images = IMAGES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(id) = images.get(harness) {
        return id.clone();
    }
    let _ = docker();
    let builder = concat!(env!("CARGO_MANIFEST_DIR"), "/docker/dispatch/build-offline");
    let output = Command::new(builder)
        .args([
            "--harness",
            harness,
            "--stet",
            env!("CARGO_BIN_EXE_stet-sandbox"),
        ])
        .output()
        .unwrap_or_else(|error| panic!("running {builder}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{builder} --harness {harness} failed ({}):\n{stderr}",
        output.status
    );
    let id = stdout.lines().last().unwrap_or_default().trim().to_owned();
    assert!(
        id.starts_with("sha256:") && id.len() == 71,
        "{builder} printed no image id: {stdout:?}\n{stderr}"
    );
    images.insert(harness, id.clone());
    id
}

/// The notes project of a live test, configured for one harness, and the model key stet is given.
pub(super) struct LiveProject {
    pub(super) project: Project,
    pub(super) key: String,
    key_env: &'static str,
}

impl LiveProject {
    /// The project with `harness`'s image, its model at `base_url` (the upstream's, `/v1`
    /// included) behind the gateway, the local forge, and a price table for the upstream's model.
    /// The gateway holds a ceiling only for a model it can price, reserving each request's worst case
    /// (a token a byte of its prompt) first; prices this low let the CLIs' large prompts fit under
    /// the tests' ceilings, and the upstream's cost header is what each answer costs.
    pub(super) fn new(harness: &LiveHarness, base_url: &str) -> LiveProject {
        let image = live_image(harness.kind);
        let project = Project::new("");
        let remote = toml_string(&project.remote);
        let prices = project.home.path().join("prices.toml");
        std::fs::write(
            &prices,
            format!(
                "[models.\"{}\"]\ninput = 0.01\noutput = 0.01\n",
                harness.priced
            ),
        )
        .unwrap();
        let prices = toml_string(&prices);
        let LiveHarness {
            kind,
            model,
            key_env,
            ..
        } = harness;
        std::fs::write(
            project.home.user_config(),
            format!(
                "[forge]\nkind = \"local\"\n\n[forge.local]\nremote = {remote}\n\n\
                 [harness]\nkind = \"{kind}\"\n\n[harness.{kind}]\nmodel = \"{model}\"\n\n\
                 [model]\nbase_url = \"{base_url}\"\napi_key_env = \"{key_env}\"\nprices = {prices}\n\n\
                 [dispatch]\nimage = \"{image}\"\n"
            ),
        )
        .unwrap();
        LiveProject {
            project,
            key: format!("live-key-{}", uuid::Uuid::new_v4().simple()),
            key_env,
        }
    }

    /// `stet --headless --brief tidy-notes <extra>` with the model key in stet's environment.
    pub(super) fn headless(&self, extra: &[&str]) -> Command {
        let mut command = self.project.headless(extra);
        command.env(self.key_env, &self.key);
        command
    }
}

/// A wiremock model on loopback answering `POST <route>`, and the runtime serving it; `arrived`
/// receives what the responder sends as each request arrives.
pub(super) struct Mocked {
    pub(super) server: MockServer,
    pub(super) arrived: Receiver<usize>,
    pub(super) runtime: tokio::runtime::Runtime,
}

/// Serves the responder `respond` makes from the server's port (the agent's probe tries to reach
/// it) and the sender of arrivals.
pub(super) fn mocked<R: Respond + 'static>(
    route: &str,
    respond: impl FnOnce(u16, Mutex<Sender<usize>>) -> R,
) -> Mocked {
    let runtime = serving_runtime();
    let (sender, arrived) = channel();
    let listener = std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
    let responder = respond(listener.local_addr().unwrap().port(), Mutex::new(sender));
    let server = runtime.block_on(async {
        let server = MockServer::builder().listener(listener).start().await;
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(responder)
            .mount(&server)
            .await;
        server
    });
    Mocked {
        server,
        arrived,
        runtime,
    }
}
