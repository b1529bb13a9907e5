//! Assembles the dispatch engine for one stet process: the container runtime the configuration names
//! (`[runtime]`), the journal, the forge and
//! its credential provider, the harness and the sandbox image — and sweeps what crashed dispatches left
//! behind before anything new starts (ADR-0018 row 7). `--headless`, `stet demo` and the TUI all start
//! the engine through here, so they run dispatches the same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::Config;
use crate::credential::CredentialProvider;
use crate::dispatch::dispatcher::{DispatchHandle, Dispatcher};
use crate::dispatch::journal::Journal;
use crate::dispatch::service::{
    DispatchContext, DispatchService, DispatchSettings, GatewaySettings, SweepReport,
};
use crate::gateway::prices::PriceTable;
use crate::harness::Harness;
use crate::runtime::{
    DEFAULT_SANDBOX_UID, DispatchLimits, ImageRef, NetworkPolicy, RuntimeError, RuntimeSetup,
    SandboxUser,
};
use stet_protocol::event::Event;
use stet_sanitize::sanitize::{KnownValue, SanitizerHandle};

/// How many events may wait for a slow consumer before the engine waits for it.
pub const EVENT_BUFFER: usize = 1024;

/// Why the engine could not be built from its options.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum EngineError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("building the offline sandbox image from {binary}: {source}")]
    Image {
        binary: PathBuf,
        source: crate::image::ImageError,
    },
    #[error("the offline sandbox image: {0}")]
    Sandbox(#[source] crate::image::ImageError),
    #[error("the sandbox user: {0}")]
    User(std::io::Error),
    #[error(
        "stet runs sandboxes as uid {uid} when it runs as root, but {by} has that uid on this host: a host process with it could reach a running sandbox's files; remove that account (or stop that process), or run stet as an ordinary user"
    )]
    SandboxUidInUse { uid: u32, by: String },
    #[error(
        "runtime.warm = {warm} needs copy mode, and the engine at {host} is a local socket, which gets bind mounts unless runtime.mounts = \"copy\" (a pooled sandbox is started before its dispatch, and bind mounts cannot be added to a running container): set runtime.mounts = \"copy\", or runtime.warm = 0"
    )]
    WarmNeedsCopy { warm: usize, host: String },
    #[error("journal: {0}")]
    Journal(#[from] crate::dispatch::journal::JournalError),
    #[error(transparent)]
    Forge(#[from] crate::forge::ForgeError),
    #[error("sweeping what earlier dispatches left behind: {0}")]
    Sweep(#[from] crate::dispatch::service::ServiceError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("the model API key cannot be masked in output: {0}")]
    MaskKey(stet_sanitize::sanitize::SanitizeError),
    #[error("reading the price table {}: {source}", path.display())]
    Prices {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
    #[error("the model gateway's socket directory: {0}")]
    SocketDir(#[from] crate::dispatch::socket_dir::SocketDirError),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, EngineError>;

/// The invoking user, or, when stet runs as root, the fixed sandbox uid provided no account or
/// process of the host uses it.
fn sandbox_user() -> Result<SandboxUser> {
    let user = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).map_err(EngineError::User)?;
    if user.uid == DEFAULT_SANDBOX_UID
        && let Some(by) = crate::runtime::host_use_of(user.uid)
    {
        return Err(EngineError::SandboxUidInUse { uid: user.uid, by });
    }
    Ok(user)
}

/// The launch-time limits probe ([`RuntimeSetup::check_limits`]), journaled like a sandbox: its
/// container is recorded before it exists, so a crash while it does leaves a record by which the
/// next sweep removes it on its engine. The record closes once the container is known gone (it is
/// asked to go again, which finds it already gone unless the probe's own removal failed).
pub async fn journaled_probe(
    runtime: &dyn RuntimeSetup,
    journal: &Journal,
    image: &ImageRef,
    limits: &DispatchLimits,
) -> Result<()> {
    let record = stet_protocol::event::DispatchId::new();
    let name = format!(
        "stet-limits-probe-{}",
        record.to_string().trim_start_matches("stet-dispatch-")
    );
    let container = crate::dispatch::journal::Resource::Container {
        name: name.clone(),
        engine: runtime.location(),
    };
    let mut entry = journal.begin(record)?;
    entry.intend(container.clone())?;
    let checked = runtime.check_limits_as(&name, image, limits).await;
    if runtime.remove(&name, true).await.is_ok() {
        entry.released(&container)?;
        entry.close()?;
    }
    Ok(checked?)
}

/// Which image sandboxes run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageChoice {
    /// A configured reference (pinned by digest, or a local image id).
    Configured(ImageRef),
    /// The offline image built from this stet executable (built when missing): the scripted agent's.
    Offline,
}

/// Everything the engine is built from; filled from configuration and flags by the caller.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The user's repository (its root; bare or not).
    pub repository: PathBuf,
    /// Where stet keeps its state: journal, run records, dispatch directories.
    pub state_dir: PathBuf,
    /// The resolved configuration.
    pub config: Config,
    /// Which image sandboxes run.
    pub image: ImageChoice,
    /// The agent every dispatch runs.
    pub harness: Arc<dyn Harness>,
    /// Wall-clock limit on each dispatch's agent work.
    pub timeout: Duration,
    /// The model cost a dispatch may reach, in US dollars; `None`: no ceiling.
    pub cost_ceiling_usd: Option<f64>,
    /// How many dispatches may run at once.
    pub concurrency: usize,
    /// Whether sandboxes get a network.
    pub network: NetworkPolicy,
}

/// A ready engine: start a dispatcher on it.
#[derive(Debug)]
pub struct Engine {
    /// The shared parts every dispatch runs with.
    pub service: DispatchService,
    /// Where results go and which agent runs.
    pub parts: Arc<DispatchContext>,
    /// How many dispatches may run at once.
    pub concurrency: usize,
    /// What the launch-time sweep reclaimed.
    pub sweep: SweepReport,
}

impl Engine {
    /// Connects to the configured container runtime (an unreachable engine is an error that says
    /// so), makes the image present, builds the forge, and sweeps orphans of earlier runs.
    pub async fn assemble(options: EngineOptions, sanitizer: &SanitizerHandle) -> Result<Engine> {
        let api = options.config.model.api_for(options.config.harness.kind);
        let gateway = gateway_settings(
            &options.config.model,
            options.harness.model(),
            api,
            sanitizer,
        )?;
        let runtime = crate::runtime::connect(options.config.runtime.choice()).await?;
        let image = match options.image {
            ImageChoice::Configured(image) => image,
            ImageChoice::Offline => {
                let binary = crate::image::sandbox_executable().map_err(EngineError::Sandbox)?;
                let built = runtime
                    .offline_image(&binary)
                    .await
                    .map_err(|source| EngineError::Image { binary, source })?;
                ImageRef::LocalId { id: built.id }
            }
        };
        let config = &options.config;
        // Bind mounts for a local socket, copies for a remote engine; bind asked of a remote
        // engine is refused here, before anything is provisioned.
        let mounts = runtime
            .endpoint()
            .mounts(config.runtime.mounts)
            .map_err(RuntimeError::from)?;
        if config.runtime.warm > 0 && mounts == crate::runtime::MountMode::Bind {
            return Err(EngineError::WarmNeedsCopy {
                warm: config.runtime.warm,
                host: runtime.endpoint().host.clone(),
            });
        }
        let limits = DispatchLimits {
            // No one file may take more than the dispatch's whole disk bound.
            file_bytes: i64::try_from(crate::dispatch::disk_watch::bound_for(
                config.import.max_total_bytes,
            ))
            .unwrap_or(i64::MAX),
            ..DispatchLimits::default()
        };
        // Fail closed before any dispatch: an engine that would drop a cap is refused here (an
        // image not pulled yet is checked the same way when its first sandbox is created).
        // A pass is remembered per engine, image and limits (`runtime::limits_cache`): the probe
        // container costs a few hundred milliseconds, and every sandbox's create is read back anyway.
        let journal = Arc::new(Journal::open(&options.state_dir.join("journal"))?);
        if runtime.image_present(&image).await.unwrap_or(false) {
            let cache = crate::runtime::limits_cache::LimitsCache::in_state_dir(&options.state_dir);
            let key =
                crate::runtime::limits_cache::key(runtime.fingerprint().await, &image, &limits);
            let (_, checked) = crate::runtime::limits_cache::probe_unless_remembered(
                &cache,
                key,
                journaled_probe(runtime.as_ref(), &journal, &image, &limits),
            )
            .await;
            checked?;
        }
        let setup = crate::forge::from_settings(
            &options.config.forge,
            &options.config.credentials,
            &options.repository,
            &options.state_dir,
            sanitizer,
        )?;
        let providers: Vec<Arc<dyn CredentialProvider>> = vec![Arc::clone(&setup.credentials)];
        let service = DispatchService::new(runtime, journal, &options.state_dir, providers);
        let egress = egress_settings(&options.config);
        if gateway.is_some() || egress.is_some() {
            // Every dispatch's channel sockets go here: refuse at launch, not at the first dispatch.
            service.socket_place().prepare()?;
        }
        let sweep = service.sweep_orphans().await?;
        let user = sandbox_user()?;
        let keepalive = vec![
            crate::image::BINARY_PATH.to_owned(),
            "sandbox-idle".to_owned(),
        ];
        let service = match config.runtime.warm {
            0 => service,
            size => {
                // Started after the sweep, which would otherwise see its first containers.
                let shape = crate::dispatch::pool::WarmShape {
                    image: image.clone(),
                    limits,
                    user,
                    keepalive: keepalive.clone(),
                    state_label: crate::runtime::state_label(&options.state_dir),
                };
                let pool = crate::dispatch::pool::WarmPool::start(
                    service.runtime(),
                    service.journal_handle(),
                    size,
                    shape,
                );
                service.with_pool(pool)
            }
        };
        let parts = DispatchContext {
            repository: options.repository,
            forge: setup.forge,
            credentials: setup.credentials,
            harness: options.harness,
            sanitizer: sanitizer.clone(),
            settings: DispatchSettings {
                image,
                limits,
                network: options.network,
                user,
                keepalive,
                mounts: match mounts {
                    crate::runtime::MountMode::Bind => crate::dispatch::copy_mode::Mounts::Bind,
                    crate::runtime::MountMode::Copy => {
                        crate::dispatch::copy_mode::Mounts::copy(config.import)
                    }
                },
                timeout: options.timeout,
                cost_ceiling_usd: options.cost_ceiling_usd,
                max_record_bytes: config.dispatch.max_record_bytes,
                credential_ttl: config.credential_ttl,
                agent: config.agent.clone(),
                import: config.import,
                base: config.base,
                protected: config.protected_paths.clone(),
                gateway,
                egress,
            },
        };
        Ok(Engine {
            service,
            parts: Arc::new(parts),
            concurrency: options.concurrency,
            sweep,
        })
    }

    /// Starts the dispatcher: commands go through the handle, events come out of the receiver.
    pub fn start(
        self,
    ) -> (
        DispatchHandle,
        mpsc::Receiver<Event>,
        tokio::task::JoinHandle<()>,
    ) {
        let (events, receiver) = mpsc::channel(EVENT_BUFFER);
        let (handle, task) = Dispatcher::start(self.service, self.parts, self.concurrency, events);
        (handle, receiver, task)
    }
}

/// The egress proxy's settings when `[network]` allows hosts, with the hosts of the forge and the
/// model endpoint added to those never reached: stet holds their credentials, and the agent must
/// have no path to them but stet's own.
fn egress_settings(config: &crate::config::Config) -> Option<crate::egress::EgressSettings> {
    let mut egress = config.network.egress.clone()?;
    let forge = match &config.forge {
        crate::config::ForgeConfig::Local { .. } => Vec::new(),
        crate::config::ForgeConfig::GitHub(settings)
        | crate::config::ForgeConfig::Gitea(settings)
        | crate::config::ForgeConfig::GitLab(settings) => {
            vec![settings.api_url.as_str(), settings.git_url.as_str()]
        }
    };
    let urls = forge.into_iter().chain(config.model.base_url.as_deref());
    for host in urls.filter_map(|url| url.parse::<hyper::Uri>().ok()?.host().map(str::to_owned)) {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        if !egress.policy.never.contains(&host) {
            egress.policy.never.push(host);
        }
    }
    Some(egress)
}

/// The model gateway's settings when `[model] base_url` is set: the key read from the variable
/// `api_key_env` names (and registered with the sanitizer, so it is masked wherever it could show),
/// and the built-in price table with the user's file laid over it.
fn gateway_settings(
    model: &crate::config::ModelConfig,
    harness_model: Option<String>,
    api: Option<crate::gateway::policy::WireApi>,
    sanitizer: &SanitizerHandle,
) -> Result<Option<GatewaySettings>> {
    let Some(upstream) = &model.base_url else {
        return Ok(None);
    };
    let api_key = model.api_key(&|name| std::env::var_os(name))?;
    if let Some(key) = &api_key {
        KnownValue::new("model-key", key.expose_secret())
            .and_then(|known| sanitizer.register(known))
            .map_err(EngineError::MaskKey)?;
    }
    let builtin = PriceTable::builtin();
    let prices = match &model.prices {
        None => builtin,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| EngineError::Prices {
                path: path.clone(),
                source,
            })?;
            PriceTable::from_toml(&text, &path.display().to_string())?.merged_over(&builtin)
        }
    };
    Ok(Some(GatewaySettings {
        upstream: upstream.clone(),
        api_key,
        prices: Arc::new(prices),
        request_timeout: model.request_timeout,
        limits: crate::gateway::GatewayLimits {
            max_concurrent_requests: model.max_concurrent_requests,
            ..crate::gateway::GatewayLimits::default()
        },
        policy: Arc::new(request_policy(model, harness_model, api)),
    }))
}

/// The request policy of a dispatch's gateway: the models the user allows (`[model] allow`, and
/// always the harness's configured model as the agent sends it upstream) and the provider tools
/// `[model] provider_tools` enables. With neither a configured model nor `[model] allow` (the
/// scripted agent names its models in its scenario) any model passes but a routing suffix. OpenHands
/// 1.16 calls no helper model besides the configured one. Only `api`'s routes are served (every
/// API's when `None`).
fn request_policy(
    model: &crate::config::ModelConfig,
    harness_model: Option<String>,
    api: Option<crate::gateway::policy::WireApi>,
) -> crate::gateway::policy::RequestPolicy {
    let mut models: Option<std::collections::BTreeSet<String>> = model
        .allow
        .as_ref()
        .map(|allow| allow.iter().cloned().collect());
    if let Some(configured) = harness_model {
        let models = models.get_or_insert_with(Default::default);
        // LiteLLM sends `openai/<m>` and `litellm_proxy/<m>` upstream as `<m>`.
        for prefix in ["openai/", "litellm_proxy/"] {
            if let Some(bare) = configured.strip_prefix(prefix) {
                models.insert(bare.to_owned());
            }
        }
        models.insert(configured);
    }
    crate::gateway::policy::RequestPolicy {
        models,
        provider_tools: model.provider_tools.clone(),
        api,
    }
}

/// The credential provider `config` selects for the checkout at `repository`: what `stet sweep` needs
/// to revoke the credentials crashed dispatches left (a Gitea token never expires on its own).
pub fn configured_credentials(
    config: &Config,
    repository: &Path,
    state_dir: &Path,
    sanitizer: &SanitizerHandle,
) -> std::result::Result<Arc<dyn CredentialProvider>, crate::forge::ForgeError> {
    Ok(crate::forge::from_settings(
        &config.forge,
        &config.credentials,
        repository,
        state_dir,
        sanitizer,
    )?
    .credentials)
}
