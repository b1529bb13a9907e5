//! `stet demo`: the whole theater on a scratch repository, with nothing to configure but Docker.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use stet_engine::dispatch::order::Delivery;

use super::EXIT_USAGE;
use super::args::DispatchArgs;
use super::headless::dispatch_and_watch;
use super::session::select_briefs;
use super::sink::{EventSink, HumanProgress, JsonLines};
use super::terminal::on_a_terminal;
use super::theater::open_theater;

/// `stet demo`: the scratch repository, the offline image, the scripted agent and the local forge.
/// On a terminal, without `--headless`, `--brief` or `--all`, it opens the theater over the scratch
/// repository's inbox and dispatches nothing by itself; otherwise it dispatches the first brief (or
/// those chosen) and pushes, printing progress for a person or the JSON Lines events.
pub(crate) async fn demo(
    dir: Option<PathBuf>,
    pace: f64,
    headless: bool,
    args: DispatchArgs,
) -> anyhow::Result<ExitCode> {
    use stet_engine::engine::{EngineOptions, ImageChoice};
    use stet_engine::harness::script::ScenarioSource;
    use stet_engine::harness::{HarnessSettings, from_settings};
    if !(pace.is_finite() && (0.0..=stet_protocol::scenario::MAX_PACE).contains(&pace)) {
        eprintln!(
            "stet: --pace {pace} is out of range (0 to {})",
            stet_protocol::scenario::MAX_PACE
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let state_dir = stet_engine::state_dir::prepare_default()?;
    let dir = dir.unwrap_or_else(|| state_dir.join("demo"));
    let setup = stet_engine::demo::prepare(&dir)?;
    // The scratch forge was made anew: pull requests of an earlier demo refer to branches it no
    // longer holds.
    stet_engine::forge::local::LocalForge::new(setup.remote.clone(), &state_dir)
        .close_open_reviews()?;
    // Only the demo's own configuration (but for `[runtime]`, below): nothing else the user configured
    // changes what the demo does. stet wrote that file itself, so it is trusted: `stet` run in the
    // scratch repository reads it as the demo does, until its content changes.
    let written = stet_engine::config::repository::read(&setup.repo)?
        .context("the demo's scratch repository has no stet.toml")?;
    stet_engine::config::trust::TrustStore::in_state_dir(&state_dir)
        .trust(&written.path, &written.hash)?;
    let mut config =
        stet_engine::config::Config::from_files(&[stet_engine::config::ConfigFile::new(
            written.path,
            written.text,
            stet_engine::config::FileRole::TrustedRepository,
        )])?;
    // Except the machine's `[runtime]` (the user's own file): the demo runs on the engine this
    // machine runs sandboxes on, and reaches the sandbox the way it does (bind mounts or copies).
    if let Ok(users) = stet_engine::config::Config::load(
        None,
        &stet_engine::config::trust::TrustStore::in_state_dir(&state_dir),
    ) {
        config.runtime = users.runtime;
    }
    // The demo's own deterministic model on loopback, behind the real gateway: the agent's asks go
    // through the relay and the gateway meters them, with no account anywhere.
    let model = stet_scripted_model::ScriptedModel::serve(std::net::SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        0,
    )))
    .await
    .context("starting the demo's scripted model")?;
    config.model.base_url = Some(model.base_url());
    // Except where its sandboxes run: the engine the user configured (`[runtime] engine`, `host`),
    // as `DOCKER_HOST` would say it.
    config.runtime = super::maintenance::configured_runtime();
    let where_it_is = format!(
        "stet demo: scratch repository {} (forge: {})",
        setup.repo.display(),
        setup.remote.display()
    );
    let closing_hint = format!(
        "see the pull request with `stet reviews`; the run records are under {}/runs",
        state_dir.display()
    );
    let options = EngineOptions {
        repository: setup.repo.clone(),
        state_dir,
        timeout: args.timeout.unwrap_or(config.dispatch.timeout),
        cost_ceiling_usd: args.cost_ceiling.or(config.dispatch.cost_ceiling_usd),
        concurrency: config.dispatch.concurrency,
        network: stet_engine::runtime::NetworkPolicy::None,
        image: ImageChoice::Offline,
        harness: from_settings(HarnessSettings::Script {
            scenario: ScenarioSource::Demo,
            pace,
        }),
        config,
    };
    if !headless && args.briefs.is_empty() && !args.all && on_a_terminal() {
        let inbox = stet_engine::inbox::Inbox::load_within(
            &stet_engine::inbox::Inbox::default_dir(&setup.repo),
            &options.config.inbox,
        )?;
        // Nothing goes to stdout while the theater owns the screen; the hints come after it (not
        // at all when the terminal hung up).
        let end = open_theater(options, &inbox).await?;
        model.shutdown().await;
        if end.shown {
            let _ = writeln!(std::io::stdout(), "{where_it_is}\n{closing_hint}");
        }
        return Ok(end.code);
    }
    let briefs = select_briefs(
        &setup.repo,
        &DispatchArgs {
            all: args.all,
            briefs: if args.briefs.is_empty() && !args.all {
                setup
                    .briefs
                    .first()
                    .map(|path| vec![path.display().to_string()])
                    .unwrap_or_default()
            } else {
                args.briefs.clone()
            },
            ..args.clone()
        },
        &options.config.inbox,
    )?;
    let mut sink: Box<dyn EventSink> = if headless {
        Box::new(JsonLines::new(
            std::io::stdout(),
            std::io::stderr().is_terminal(),
        ))
    } else {
        let _ = writeln!(std::io::stdout(), "{where_it_is}");
        Box::new(HumanProgress::new(std::io::stdout()))
    };
    let code = dispatch_and_watch(options, briefs, Delivery::Push, sink.as_mut()).await?;
    if !headless {
        // After a run whose terminal hung up, there is nobody to tell.
        let _ = writeln!(std::io::stdout(), "{closing_hint}");
    }
    model.shutdown().await;
    Ok(code)
}
