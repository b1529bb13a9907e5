//! The commands that look after stet's host state: `stet image build-local`, `sweep`, `doctor`,
//! `trust` and `reviews`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use stet_engine::config::RuntimeConfig;
use stet_engine::credential::{CredentialProvider, LocalCredentialProvider};
use stet_engine::dispatch::journal::Journal;
use stet_engine::dispatch::service::DispatchService;
use stet_engine::runtime::RuntimeSetup;
use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};

use super::EXIT_USAGE;
use super::session::{install_logging, load_config, repository_root};

/// The container runtime the configuration in effect here names (the repository's too, inside one).
/// When there is none, or it cannot be read, the default: these commands never needed the rest of
/// it, and the commands that do say what is wrong with it.
pub(crate) fn configured_runtime() -> RuntimeConfig {
    let Ok(state_dir) = stet_engine::state_dir::locate() else {
        return RuntimeConfig::default();
    };
    let trust = stet_engine::config::trust::TrustStore::in_state_dir(&state_dir);
    let root = repository_root("look up the configured runtime").ok();
    stet_engine::config::Config::load(root.as_deref(), &trust)
        .map(|config| config.runtime)
        .unwrap_or_default()
}

/// The configured engine, or the exit-2 message saying it is unreachable.
pub(crate) async fn connect_engine() -> Result<Arc<dyn RuntimeSetup>, ExitCode> {
    stet_engine::runtime::connect(configured_runtime().choice())
        .await
        .map_err(|err| {
            let _ = writeln!(std::io::stderr(), "stet: {err}");
            ExitCode::from(EXIT_USAGE)
        })
}

pub(crate) async fn image_build_local(binary: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let binary = match binary {
        Some(binary) => binary,
        None => stet_engine::image::sandbox_executable()?,
    };
    let engine = match connect_engine().await {
        Ok(engine) => engine,
        Err(code) => return Ok(code),
    };
    let image = engine
        .offline_image(&binary)
        .await
        .with_context(|| format!("building the sandbox image from {}", binary.display()))?;
    println!("{} {}", image.id, image.tag);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn sweep(json: bool) -> anyhow::Result<ExitCode> {
    let state_dir = stet_engine::state_dir::prepare_default()?;
    let handle = SanitizerHandle::new(TokenSanitizer::new()?);
    let _log_guard = install_logging(&handle);
    let engine = match connect_engine().await {
        Ok(engine) => engine,
        Err(code) => return Ok(code),
    };
    let journal = Arc::new(Journal::open(&state_dir.join("journal"))?);
    let mut providers: Vec<Arc<dyn CredentialProvider>> =
        vec![Arc::new(LocalCredentialProvider::default())];
    // Inside a repository, its forge's provider too: only it can revoke what it minted.
    if let Ok(root) = repository_root("run stet sweep") {
        let configured = load_config(&root).and_then(|config| {
            Ok(stet_engine::engine::configured_credentials(
                &config, &root, &state_dir, &handle,
            )?)
        });
        match configured {
            Ok(provider) if provider.name() != "local" => providers.push(provider),
            Ok(_) => {}
            Err(error) => eprintln!(
                "stet: warning: the configured forge's credentials cannot be revoked by this sweep: {error:#}"
            ),
        }
    }
    let service = DispatchService::new(engine, journal, &state_dir, providers);
    let report = service.sweep_orphans().await?;
    tracing::info!(?report, "sweep finished");
    // The report quotes the engine's and the forge's answers: shown under the display policy.
    if json {
        super::json::print(&mut std::io::stdout().lock(), &super::json::sweep(&report))?;
    } else {
        print!(
            "{}",
            stet_sanitize::display::without_invisible(&report.to_string()).text
        );
    }
    Ok(if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `stet doctor`: what a dispatch from here needs, in the order it needs it (the configuration,
/// the engine, the harness's image, the model endpoint, the prices, the host, the forge), and what
/// could not be checked from here. It changes nothing on disk.
pub(crate) async fn doctor(json: bool) -> anyhow::Result<ExitCode> {
    let running = std::env::current_exe().context("finding the running stet executable")?;
    let binary = stet_engine::image::sandbox_executable_beside(&running);
    let state = stet_engine::state_dir::locate();
    let repository = repository_root("run stet doctor").map_err(|error| format!("{error:#}"));
    let config = match &state {
        Ok(state_dir) => {
            let trust = stet_engine::config::trust::TrustStore::in_state_dir(state_dir);
            stet_engine::config::Config::load(repository.as_deref().ok(), &trust)
                .map_err(|error| format!("{error:#}"))
        }
        Err(error) => Err(format!(
            "not read: the trust record lives in the state directory: {error}"
        )),
    };
    let runtime_config = config
        .as_ref()
        .map(|config| config.runtime.clone())
        .unwrap_or_default();
    let runtime = stet_engine::runtime::unconnected(runtime_config.choice());
    let mut report = stet_engine::doctor::DoctorReport::default();
    report.checks.push(stet_engine::doctor::configuration_check(
        &repository,
        &config,
    ));
    let host = stet_engine::doctor::diagnose(runtime.clone(), state, &binary).await;
    report.checks.extend(host.checks);
    if let Ok(config) = &config {
        report
            .checks
            .extend(stet_engine::doctor::dispatch_checks(config, &runtime).await);
    }
    report.unchecked = stet_engine::doctor::unchecked(&repository);
    if repository.is_ok() {
        let state = stet_engine::state_dir::locate();
        report
            .checks
            .extend(stet_engine::doctor::forge_checks(repository, config, &state).await);
    }
    if json {
        super::json::print(&mut std::io::stdout().lock(), &super::json::doctor(&report))?;
    } else {
        print!("{report}");
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `stet trust`: trusts, revokes or lists repository configuration files.
pub(crate) fn trust(
    path: Option<PathBuf>,
    revoke: bool,
    list: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use stet_engine::config::{Config, REPOSITORY_FILE, repository};
    // A repository's path is outside input (a clone's directory is named after its URL).
    let shown = |path: &std::path::Path| {
        stet_sanitize::display::escaped_invisible(&path.display().to_string()).into_owned()
    };
    let store =
        stet_engine::config::trust::TrustStore::in_state_dir(&stet_engine::state_dir::locate()?);
    let mut out = std::io::stdout().lock();
    if list {
        let entries = store.entries()?;
        let now = |entry: &stet_engine::config::trust::TrustEntry| match entry
            .path
            .parent()
            .map(repository::read)
        {
            Some(Ok(Some(found))) if entry.covers(&found.path, &found.hash) => "trusted",
            Some(Ok(Some(_))) => "changed",
            Some(Ok(None)) => "gone",
            None | Some(Err(_)) => "unreadable",
        };
        if json {
            let files: Vec<super::json::TrustedFile<'_>> = entries
                .iter()
                .map(|entry| super::json::TrustedFile {
                    path: &entry.path,
                    sha256: &entry.sha256,
                    since: entry.trusted_at,
                    now: now(entry),
                })
                .collect();
            super::json::print(&mut out, &super::json::trusted(&store.file(), &files))?;
            return Ok(ExitCode::SUCCESS);
        }
        if entries.is_empty() {
            writeln!(
                out,
                "no trusted files (the record is {})",
                shown(&store.file())
            )?;
        }
        for entry in entries {
            let now = match now(&entry) {
                "changed" => "changed since: not trusted",
                "unreadable" => "unreadable: not trusted",
                said => said,
            };
            writeln!(
                out,
                "{}  sha256 {}  since {}  ({now})",
                shown(&entry.path),
                entry.sha256.chars().take(12).collect::<String>(),
                entry.trusted_at.format("%Y-%m-%d %H:%M"),
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let root = match path {
        Some(named) => repository::root_of(&named)?,
        None => repository_root("run stet trust")?,
    };
    if revoke {
        let file = repository::file_path(&root)?;
        if store.revoke(&file)? {
            writeln!(
                out,
                "no longer trusted: {}: it may only tighten project settings again",
                shown(&file)
            )?;
        } else {
            writeln!(out, "{} was not trusted", shown(&file))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let found = repository::read(&root)?
        .with_context(|| format!("{} has no {REPOSITORY_FILE} to trust", root.display()))?;
    let allowed = Config::refused_untrusted(&found)?;
    store.trust(&found.path, &found.hash)?;
    writeln!(
        out,
        "trusted {} (sha256 {})",
        shown(&found.path),
        found.hash
    )?;
    if allowed.is_empty() {
        writeln!(
            out,
            "it sets nothing a repository's file may not set anyway"
        )?;
    } else {
        writeln!(out, "it may now set:")?;
        for refusal in &allowed {
            writeln!(out, "  line {}: {}", refusal.line, refusal.field)?;
        }
    }
    writeln!(
        out,
        "until its content changes; `stet trust --revoke` takes the trust back"
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn reviews(number: Option<u64>, json: bool) -> anyhow::Result<ExitCode> {
    use stet_sanitize::display::{escaped_invisible, for_terminal, one_line, without_invisible};
    let state_dir = stet_engine::state_dir::locate()?;
    let dir = state_dir.join(stet_engine::forge::local::REVIEWS_DIR);
    let mut out = std::io::stdout().lock();
    // Every field of a record came from outside (a brief, the agent, the forge's repository): names
    // are shown with what the display policy hides escaped, text with it removed.
    let name = |text: &str| escaped_invisible(text).into_owned();
    let path = |path: &std::path::Path| name(&path.to_string_lossy());
    // One record at a time: each is at most MAX_REVIEW_RECORD_BYTES, however many there are.
    let mut listed = 0;
    let mut found = None;
    let mut written = Ok(());
    if json && number.is_none() {
        // Streamed like the list: one record in memory at a time.
        write!(out, "{}", super::json::reviews_opening(&dir))?;
    }
    stet_engine::forge::local::each_review(&dir, |record| {
        match number {
            None if json && written.is_ok() => {
                let separator = if listed == 0 { "" } else { "," };
                listed += 1;
                written = write!(out, "{separator}{}", super::json::review(&record, false));
            }
            None if written.is_ok() => {
                listed += 1;
                written = writeln!(
                    out,
                    "#{:<4} {:<6} {} -> {}  {}  ({} at {}, updated {})",
                    record.number,
                    record.state.as_str(),
                    name(&record.head),
                    name(&record.base),
                    one_line(&record.title),
                    name(&record.repo),
                    path(&record.remote),
                    record.updated.format("%Y-%m-%d %H:%M")
                );
            }
            Some(number) if found.is_none() && record.number == number => found = Some(record),
            _ => {}
        }
        Ok(())
    })?;
    written?;
    if json {
        let value = match (number, found) {
            (None, _) => {
                writeln!(out, "]}}")?;
                return Ok(ExitCode::SUCCESS);
            }
            (Some(_), Some(record)) => super::json::one_review(&record),
            (Some(number), None) => {
                eprintln!("stet: no review #{number} in {}", path(&dir));
                return Ok(ExitCode::FAILURE);
            }
        };
        super::json::print(&mut out, &value)?;
        return Ok(ExitCode::SUCCESS);
    }
    if number.is_none() {
        listed += super::salvaged::show(&mut out, &state_dir)?;
    }
    match number {
        None if listed == 0 => writeln!(out, "no reviews yet in {}", path(&dir))?,
        None => {}
        Some(number) => match found {
            Some(record) => writeln!(
                out,
                "#{} {} ({})\n{} -> {} in {}\nopened {}, updated {}\n\n{}",
                record.number,
                one_line(&record.title),
                record.state.as_str(),
                name(&record.head),
                name(&record.base),
                path(&record.remote),
                record.created.format("%Y-%m-%d %H:%M"),
                record.updated.format("%Y-%m-%d %H:%M"),
                without_invisible(&for_terminal(&record.body)).text
            )?,
            None => {
                eprintln!("stet: no review #{number} in {}", path(&dir));
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
