//! `Config`: what a user sets once — which forge, which credential provider, the agent's identity,
//! import limits, protected paths, how dispatches run (timeout, concurrency, cost ceiling, image,
//! network), which harness runs the agent, which container runtime runs the sandboxes and which
//! model endpoint the gateway forwards to.
//!
//! Read from `$XDG_CONFIG_HOME/stet/config.toml` (the user's), then the repository's `stet.toml`,
//! then a few `STET_*` environment variables (the flags are main.rs's). The repository is untrusted
//! input (DESIGN §5 row 16): its file may set only *project* settings, and only to tighten them —
//! protected paths add, limits, timeouts and ceilings go down, the network stays off. *Machine*
//! settings (anything naming a command, an environment variable, a URL or host, a path outside the
//! repository, an image, a credential provider, the network, a model, a price table or a scenario)
//! come from the user's own file and the environment, or from a repository file the user trusted by
//! its content ([`trust`], `stet trust`). Secrets are only ever referenced (`token_env`,
//! `token_command`, `api_key_env`, a key file's path), never written inline: an inline one is refused.

mod egress;
mod file;
mod layers;
pub mod repository;
mod resolve;
pub mod trust;
pub mod url;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::credential::SecretValue;
use crate::forge::protected::ProtectedPaths;
pub use crate::forge::{CredentialConfig, ForgeConfig};
use crate::git::import::{Identity, ImportLimits};
use crate::git::workspace::BaseLimits;
use crate::harness::HarnessSettings;
use crate::harness::claude::ClaudeSettings;
use crate::harness::codex::CodexSettings;
use crate::harness::openhands::OpenHandsSettings;
use crate::harness::script::ScenarioSource;
use crate::runtime::{MountMode, RuntimeKind};

pub use crate::harness::HarnessKind;
pub use layers::{Class, Reason, Refusal, Rule};
use trust::{ContentHash, TrustStore};

/// The repository's own configuration file, at its root.
pub const REPOSITORY_FILE: &str = "stet.toml";

/// The wall-clock timeout of a dispatch, in seconds (`dispatch.timeout_secs`).
pub const ENV_TIMEOUT_SECS: &str = "STET_TIMEOUT_SECS";
/// How many dispatches run at once (`dispatch.concurrency`).
pub const ENV_CONCURRENCY: &str = "STET_CONCURRENCY";
/// The cost ceiling of a dispatch, in US dollars (`dispatch.cost_ceiling_usd`).
pub const ENV_COST_CEILING_USD: &str = "STET_COST_CEILING_USD";
/// The dispatch image (`dispatch.image`).
pub const ENV_IMAGE: &str = "STET_IMAGE";
/// The harness, `openhands`, `codex`, `claude` or `script` (`harness.kind`).
pub const ENV_HARNESS: &str = "STET_HARNESS";

/// Why configuration could not be used. Each names the file (and line) or the variable, and the field.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ConfigError {
    #[error("{}: cannot read the configuration: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: not read: a repository's {REPOSITORY_FILE} must be a regular file, not a link or anything else (a link could point at any file of yours)",
        file.display()
    )]
    NotARegularFile { file: PathBuf },
    #[error("{}: the configuration is larger than {limit} bytes", file.display())]
    TooLarge { file: PathBuf, limit: u64 },
    #[error("{}: the configuration is not UTF-8 text", file.display())]
    NotUtf8 { file: PathBuf },
    #[error("{}:{line}:{column}: {message}", file.display())]
    Parse {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the model API key variable {variable} (model.api_key_env) {problem}")]
    ModelKey {
        variable: String,
        problem: &'static str,
    },
    #[error("{origin}: field `{field}` holds a secret inline; reference it instead ({instead})")]
    InlineSecret {
        origin: Origin,
        field: &'static str,
        instead: &'static str,
    },
    #[error("{origin}: field `{field}`: {problem}")]
    Invalid {
        origin: Origin,
        field: &'static str,
        problem: String,
    },
    #[error("{}", untrusted_message(refusals))]
    Untrusted { refusals: Vec<Refusal> },
    #[error("neither XDG_CONFIG_HOME nor HOME is set, so the user configuration cannot be found")]
    NoConfigDir,
    #[error(
        "harness.kind is \"openhands\" but field `harness.openhands.model` is not set: name the model under [harness.openhands] in your configuration ({user_file}; e.g. model = \"openai/gpt-4.1\"), or run the scripted agent (harness.kind = \"script\", or {ENV_HARNESS}=script)"
    )]
    MissingModel { user_file: String },
    #[error(
        "harness.kind is \"codex\" but field `harness.codex.model` is not set: name the model under [harness.codex] in your configuration ({user_file}; e.g. model = \"gpt-5.1-codex\"), or run the scripted agent (harness.kind = \"script\", or {ENV_HARNESS}=script)"
    )]
    MissingCodexModel { user_file: String },
    #[error(
        "harness.kind is \"claude\" but field `harness.claude.model` is not set: name the model under [harness.claude] in your configuration ({user_file}; e.g. model = \"claude-sonnet-4-5\"), or run the scripted agent (harness.kind = \"script\", or {ENV_HARNESS}=script)"
    )]
    MissingClaudeModel { user_file: String },
    #[error("{}: is neither a repository's directory nor its {REPOSITORY_FILE}", named.display())]
    NotARepositoryFile { named: PathBuf },
    #[error(transparent)]
    Trust(#[from] trust::TrustError),
    #[error("{detail}")]
    CaBundle { detail: String },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ConfigError>;

/// What an untrusted repository file was refused, each line naming the file, line and field, and
/// how to trust the file.
fn untrusted_message(refusals: &[Refusal]) -> String {
    let file = refusals
        .first()
        .map_or(Path::new(REPOSITORY_FILE), |refusal| refusal.file.as_path());
    let mut message = format!(
        "{}: this repository's configuration is not trusted, so it may only tighten project settings:",
        file.display()
    );
    for refusal in refusals {
        message.push_str(&format!(
            "\n  {}:{}: field `{}` {}",
            refusal.file.display(),
            refusal.line,
            refusal.field,
            refusal.why
        ));
    }
    let root = file.parent().unwrap_or(Path::new("."));
    message.push_str(&format!(
        "\nSet these in your own configuration ({}) instead, or, if you trust this file as it is now, run `stet trust {}` (the trust ends when the file changes).",
        user_file_shown(),
        root.display()
    ));
    message
}

/// How dispatches run (`[dispatch]`).
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchSettings {
    /// The wall-clock limit of one dispatch; past it the dispatch ends `TimedOut`.
    pub timeout: Duration,
    /// How many dispatches may run at once.
    pub concurrency: usize,
    /// A dispatch whose model cost passes this ends `CostCeilingHit`; `None`: no ceiling.
    pub cost_ceiling_usd: Option<f64>,
    /// The most a run record's events file holds of the agent's transcript; past it the record says
    /// so once and keeps phases, usage and the outcome only.
    pub max_record_bytes: u64,
    /// The dispatch image reference, checked (pinned by digest) when a dispatch starts; `None`: the
    /// caller's own default.
    pub image: Option<String>,
    /// Let the sandbox reach the network; off, it runs with `--network none`.
    pub allow_network: bool,
}

/// The scripted agent's settings (`[harness.script]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptHarnessSettings {
    /// The scenario it plays; `None`: its built-in one.
    pub scenario: Option<PathBuf>,
    /// How fast it plays: delays are divided by this; 0 plays without delays.
    pub pace: f64,
}

/// The OpenHands harness's settings (`[harness.openhands]`), before a dispatch needs them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpenHandsHarnessConfig {
    /// The model the agent asks for (`harness.openhands.model`); `None` until one is configured:
    /// there is no default.
    pub model: Option<String>,
}

/// The Codex harness's settings (`[harness.codex]`), before a dispatch needs them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CodexHarnessConfig {
    /// The model Codex asks for (`harness.codex.model`); `None` until one is configured: there is
    /// no default.
    pub model: Option<String>,
}

/// The Claude Code harness's settings (`[harness.claude]`), before a dispatch needs them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClaudeHarnessConfig {
    /// The model Claude Code asks for (`harness.claude.model`); `None` until one is configured:
    /// there is no default.
    pub model: Option<String>,
}

/// The model endpoint the gateway forwards the agent's requests to (`[model]`); the key stays in
/// stet's process and never enters the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The upstream, e.g. a LiteLLM proxy's `https://…/v1` or `https://api.anthropic.com/v1`;
    /// `None`: no gateway.
    pub base_url: Option<String>,
    /// The wire API the agent speaks to it (`[model] api`: `chat`, `responses` or `anthropic`);
    /// `None`: the harness's own ([`ModelConfig::api_for`]).
    pub api: Option<crate::gateway::policy::WireApi>,
    /// The environment variable of stet's own process that holds the model API key.
    pub api_key_env: Option<String>,
    /// A price table over the built-in one (`assets/prices.toml` format).
    pub prices: Option<PathBuf>,
    /// The bound on one model request, from connecting to the end of its response.
    pub request_timeout: Duration,
    /// The most model requests one dispatch has in flight at once.
    pub max_concurrent_requests: usize,
    /// Models the agent may call besides the harness's configured one (`[model] allow`); `None`:
    /// the configured model (and the helper models its harness is documented to use) only.
    pub allow: Option<Vec<String>>,
    /// Provider-executed tools enabled by name, each with its price per call in dollars
    /// (`[model] provider_tools`); empty: none.
    pub provider_tools: std::collections::BTreeMap<String, f64>,
}

impl ModelConfig {
    /// The wire API a dispatch run by `harness` speaks, the only one its gateway serves: `[model]
    /// api` when set, else the harness's ([`default_api`]); `None`: every API is served.
    pub fn api_for(&self, harness: HarnessKind) -> Option<crate::gateway::policy::WireApi> {
        self.api.or_else(|| default_api(harness))
    }
    /// The model API key, read through `env` from the variable `api_key_env` names (`None` when it
    /// names none); an unset, empty or non-UTF-8 variable is an error naming it.
    pub fn api_key(
        &self,
        env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Option<SecretValue>> {
        let Some(variable) = &self.api_key_env else {
            return Ok(None);
        };
        let problem = |problem| ConfigError::ModelKey {
            variable: variable.clone(),
            problem,
        };
        let value = env(variable)
            .ok_or_else(|| problem("is not set in stet's environment"))?
            .into_string()
            .map_err(|_| problem("is not valid UTF-8"))?;
        if value.trim().is_empty() {
            return Err(problem("is empty"));
        }
        Ok(Some(SecretValue::new(value)))
    }
}

/// The wire API each harness speaks when `[model] api` does not say (the harness registry's
/// [`HarnessKind::default_wire_api`]).
pub fn default_api(harness: HarnessKind) -> Option<crate::gateway::policy::WireApi> {
    harness.default_wire_api()
}

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            base_url: None,
            api: None,
            api_key_env: None,
            prices: None,
            request_timeout: resolve::DEFAULT_MODEL_REQUEST_TIMEOUT,
            max_concurrent_requests: crate::gateway::DEFAULT_MAX_CONCURRENT_REQUESTS,
            allow: None,
            provider_tools: std::collections::BTreeMap::new(),
        }
    }
}

/// Which harness runs the agent, and each harness's settings (`[harness]`).
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessConfig {
    /// Which harness runs (`harness.kind`; default OpenHands).
    pub kind: HarnessKind,
    /// The scripted agent's settings (`[harness.script]`).
    pub script: ScriptHarnessSettings,
    /// The OpenHands harness's settings (`[harness.openhands]`).
    pub openhands: OpenHandsHarnessConfig,
    /// The Codex harness's settings (`[harness.codex]`).
    pub codex: CodexHarnessConfig,
    /// The Claude Code harness's settings (`[harness.claude]`).
    pub claude: ClaudeHarnessConfig,
}

impl HarnessConfig {
    /// The OpenHands harness's settings; an error naming `harness.openhands.model` when no model
    /// is configured (there is no default model: the choice and its cost are the user's).
    pub fn openhands_settings(&self) -> Result<OpenHandsSettings> {
        let model = self
            .openhands
            .model
            .clone()
            .ok_or_else(|| ConfigError::MissingModel {
                user_file: user_file_shown(),
            })?;
        Ok(OpenHandsSettings::new(model))
    }

    /// The Codex harness's settings; an error naming `harness.codex.model` when no model is
    /// configured.
    pub fn codex_settings(&self) -> Result<CodexSettings> {
        let model = self
            .codex
            .model
            .clone()
            .ok_or_else(|| ConfigError::MissingCodexModel {
                user_file: user_file_shown(),
            })?;
        Ok(CodexSettings::new(model))
    }

    /// Claude Code's settings; an error naming `harness.claude.model` when no model is
    /// configured.
    pub fn claude_settings(&self) -> Result<ClaudeSettings> {
        let model = self
            .claude
            .model
            .clone()
            .ok_or_else(|| ConfigError::MissingClaudeModel {
                user_file: user_file_shown(),
            })?;
        Ok(ClaudeSettings::new(model))
    }

    /// The settings of the harness `kind` chooses, for the harness registry
    /// ([`crate::harness::from_settings`]); an error naming the field a setting it needs lacks.
    pub fn settings(&self) -> Result<HarnessSettings> {
        Ok(match self.kind {
            HarnessKind::OpenHands => HarnessSettings::OpenHands(self.openhands_settings()?),
            HarnessKind::Codex => HarnessSettings::Codex(self.codex_settings()?),
            HarnessKind::Claude => HarnessSettings::Claude(self.claude_settings()?),
            HarnessKind::Script => HarnessSettings::Script {
                scenario: match &self.script.scenario {
                    Some(path) => ScenarioSource::File(path.clone()),
                    None => ScenarioSource::Demo,
                },
                pace: self.script.pace,
            },
        })
    }
}

/// Which container runtime runs the sandboxes (`[runtime]`): machine settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeConfig {
    /// Which engine (`runtime.kind`; default the local Docker engine).
    pub kind: RuntimeKind,
    /// Which engine serves that API (`runtime.engine`: Docker, or Podman's compatible service).
    pub engine: crate::runtime::endpoint::Engine,
    /// Where it listens (`runtime.host`, as the docker CLI takes it); `None`: the environment's
    /// `DOCKER_HOST`, docker context, or the engine's usual socket.
    pub host: Option<String>,
    /// How the workspace and outputs reach the sandbox (`runtime.mounts`); `None`: as the engine's
    /// address says ([`crate::runtime::endpoint::Endpoint::mounts`]: bind for a local socket, copy
    /// otherwise).
    pub mounts: Option<MountMode>,
    /// How many idle, hardened sandboxes the warm pool keeps started (`runtime.warm`; default 0,
    /// no pool): copy mode only ([`crate::dispatch::pool`]).
    pub warm: usize,
}

/// The most idle sandboxes `runtime.warm` may keep started.
pub const MAX_WARM: usize = 16;

impl RuntimeConfig {
    /// What [`crate::runtime::connect`] takes.
    pub fn choice(&self) -> crate::runtime::EngineChoice<'_> {
        crate::runtime::EngineChoice {
            kind: self.kind,
            engine: self.engine,
            host: self.host.as_deref(),
        }
    }
}

/// Which repository file a configuration was read with, and whether it was trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepositoryFile {
    /// No repository file was read (there is none, or no repository).
    None,
    /// Read untrusted: project settings only, and only to tighten them.
    Untrusted(PathBuf),
    /// Read trusted: it could set machine settings too.
    Trusted {
        /// The trusted file.
        path: PathBuf,
        /// The content the user trusted, which the file still has.
        hash: ContentHash,
    },
}

impl RepositoryFile {
    /// A few words for the theater's status line; `None` when no repository file was read.
    pub fn status(&self) -> Option<String> {
        match self {
            RepositoryFile::None => None,
            RepositoryFile::Untrusted(_) => Some(format!(
                "{REPOSITORY_FILE}: not trusted (project settings only)"
            )),
            RepositoryFile::Trusted { hash, .. } => Some(format!(
                "{REPOSITORY_FILE}: trusted (sha256 {})",
                hash.short()
            )),
        }
    }
}

impl fmt::Display for RepositoryFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepositoryFile::None => write!(f, "no repository {REPOSITORY_FILE}"),
            RepositoryFile::Untrusted(path) => write!(
                f,
                "{} (not trusted: it may only tighten project settings; `stet trust` lets it set machine settings)",
                path.display()
            ),
            RepositoryFile::Trusted { path, hash } => write!(
                f,
                "{} (trusted: sha256 {}; machine settings allowed)",
                path.display(),
                hash.short()
            ),
        }
    }
}

/// Everything configurable that the engine, the forge and the git layers need.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub(crate) forge: ForgeConfig,
    /// Which provider mints a dispatch's scoped credential (`[credentials]`).
    pub credentials: CredentialConfig,
    /// How long a scoped credential lives (`credentials.ttl_seconds`, 60 to 3600; default 15 min).
    pub credential_ttl: Duration,
    /// Author and committer of result commits (`[agent]`).
    pub agent: Identity,
    /// Bounds on what an import reads from a workspace (`[import]`).
    pub import: ImportLimits,
    /// Bounds on the base a workspace is materialized from (`[base]`).
    pub base: BaseLimits,
    /// Paths whose change holds a result for review: the defaults plus `review.protected_paths`.
    pub protected_paths: ProtectedPaths,
    /// How dispatches run (`[dispatch]`).
    pub dispatch: DispatchSettings,
    /// Which harness runs the agent (`[harness]`).
    pub harness: HarnessConfig,
    /// Which container runtime runs the sandboxes (`[runtime]`).
    pub runtime: RuntimeConfig,
    /// Where the agent's model requests go (`[model]`).
    pub model: ModelConfig,
    /// The repository file this configuration was read with.
    pub repository_file: RepositoryFile,
    /// How much of an inbox stet reads (`[inbox]`).
    pub inbox: crate::inbox::InboxLimits,
    /// How stet's own HTTPS requests reach the network (`[network]`).
    pub network: NetworkConfig,
}

/// How stet's own HTTPS requests — to the forge, for git and to the model endpoint — reach the
/// network (`[network]`): a machine setting, read only from the user's own configuration. The proxy
/// comes from `HTTPS_PROXY`/`NO_PROXY`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkConfig {
    /// A PEM file of certificate authorities trusted besides the webpki roots
    /// (`network.ca_bundle`), for a forge or a model endpoint behind a private CA.
    pub ca_bundle: Option<PathBuf>,
    /// The agent's egress through the host's proxy (`network.allow`, `presets`, …); `None`: the
    /// sandbox reaches nothing (its host names of the forge and model are filled in by the engine).
    pub egress: Option<crate::egress::EgressSettings>,
}

impl NetworkConfig {
    /// Reads the CA bundle (when one is set) and makes it trusted by every HTTPS client stet makes
    /// from now on; an unreadable bundle, or one without a certificate, is an error naming it.
    pub fn install(&self) -> Result<()> {
        let roots =
            match &self.ca_bundle {
                None => None,
                Some(path) => Some(crate::https::read_ca_bundle(path).map_err(|err| {
                    ConfigError::CaBundle {
                        detail: err.to_string(),
                    }
                })?),
            };
        crate::https::install_machine_roots(roots);
        Ok(())
    }
}

/// Whose a configuration file is, which decides what it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRole {
    /// The user's own configuration: any setting.
    User,
    /// A repository's `stet.toml` the user has not trusted: project settings only, tighten-only.
    Repository,
    /// A repository's `stet.toml` the user trusted by its content (or that stet itself wrote).
    TrustedRepository,
}

/// One configuration file's text, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The file's path, as errors name it.
    pub path: PathBuf,
    /// The file's contents.
    pub text: String,
    /// Whose file it is.
    pub role: FileRole,
}

impl ConfigFile {
    /// The file at `path` with contents `text`, read as `role`.
    pub fn new(path: impl Into<PathBuf>, text: impl Into<String>, role: FileRole) -> ConfigFile {
        ConfigFile {
            path: path.into(),
            text: text.into(),
            role,
        }
    }
}

impl Config {
    /// Reads the user file and, when `repository` is given, the repository's `stet.toml` over it
    /// (trusted when `trust` holds its path and content), then the `STET_*` variables of the process
    /// environment over both, and installs the machine's CA bundle ([`NetworkConfig::install`]).
    /// Missing files are fine; every other problem is an error naming the file or the variable.
    pub fn load(repository: Option<&Path>, trust: &TrustStore) -> Result<Config> {
        let mut files = Vec::new();
        if let Some(user) = read_user_file()? {
            files.push(user);
        }
        if let Some(root) = repository
            && let Some(found) = repository::read(root)?
        {
            let role = if trust.is_trusted(&found.path, &found.hash)? {
                FileRole::TrustedRepository
            } else {
                FileRole::Repository
            };
            files.push(ConfigFile::new(found.path, found.text, role));
        }
        let config = Config::from_files_and_env(&files, &process_env)?;
        config.network.install()?;
        Ok(config)
    }

    /// Builds the configuration from `files`, lowest first, by their roles.
    pub fn from_files(files: &[ConfigFile]) -> Result<Config> {
        Config::from_files_and_env(files, &|_| None)
    }

    /// [`Config::from_files`] with the `STET_*` variables `env` finds above every file. A variable
    /// that is empty counts as unset.
    pub fn from_files_and_env(
        files: &[ConfigFile],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let mut repository_file = RepositoryFile::None;
        let mut parsed = Vec::new();
        for file in files {
            parsed.push(file::Layer::parse(&file.path, &file.text, file.role)?);
            match file.role {
                FileRole::User => {}
                FileRole::Repository => {
                    repository_file = RepositoryFile::Untrusted(file.path.clone());
                }
                FileRole::TrustedRepository => {
                    repository_file = RepositoryFile::Trusted {
                        path: file.path.clone(),
                        hash: ContentHash::of(file.text.as_bytes()),
                    };
                }
            }
        }
        parsed.extend(file::Layer::from_env(env)?);
        resolve::resolve(&mut layers::Layers::new(parsed), repository_file)
    }

    /// What the repository file `file` would be refused if it were not trusted, over the user's
    /// configuration: what trusting it allows. Empty when it sets only what it may set anyway.
    pub fn refused_untrusted(file: &repository::RepositoryFileText) -> Result<Vec<Refusal>> {
        let mut files = Vec::new();
        if let Some(user) = read_user_file()? {
            files.push(user);
        }
        files.push(ConfigFile::new(
            file.path.clone(),
            file.text.clone(),
            FileRole::Repository,
        ));
        match Config::from_files_and_env(&files, &process_env) {
            Err(ConfigError::Untrusted { refusals, .. }) => Ok(refusals),
            Ok(_) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }
}

/// Every setting stet reads, with its class (the table in docs/security.md).
pub fn settings_catalog() -> Vec<(&'static str, Class)> {
    let mut layers = layers::Layers::new(Vec::new());
    // With no layer every read succeeds, so every setting is in the catalog.
    let _ = resolve::resolve(&mut layers, RepositoryFile::None);
    layers.catalog().to_vec()
}

/// The process environment, for the `STET_*` variables.
fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

/// The user's configuration file, when there is one.
fn read_user_file() -> Result<Option<ConfigFile>> {
    let file = user_file()?;
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(Some(ConfigFile::new(file, text, FileRole::User))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read { file, source }),
    }
}

/// `$XDG_CONFIG_HOME/stet/config.toml`, or `~/.config/stet/config.toml`.
pub fn user_file() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|home| PathBuf::from(home).join(".config"))
            .ok_or(ConfigError::NoConfigDir)?,
    };
    Ok(base.join("stet").join("config.toml"))
}

/// The user's configuration file as advice names it: the path this process resolves (the one place
/// that accepts every setting), or how it is found when neither `XDG_CONFIG_HOME` nor `HOME` is set.
pub fn user_file_shown() -> String {
    user_file().map_or_else(
        |_| "$XDG_CONFIG_HOME/stet/config.toml".to_owned(),
        |file| file.display().to_string(),
    )
}

/// Where a setting's value came from, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Nobody set it.
    Default,
    /// A file, at a line.
    File {
        /// The file.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
    },
    /// An environment variable.
    Environment(&'static str),
}

impl Origin {
    /// The file; empty for a value that came from no file.
    pub fn file(&self) -> PathBuf {
        match self {
            Origin::File { path, .. } => path.clone(),
            Origin::Default | Origin::Environment(_) => PathBuf::new(),
        }
    }

    /// The line in the file; 0 for a value that came from no file.
    pub fn line(&self) -> usize {
        match self {
            Origin::File { line, .. } => *line,
            Origin::Default | Origin::Environment(_) => 0,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => write!(f, "(default)"),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Environment(variable) => write!(f, "environment variable {variable}"),
        }
    }
}

/// A value and where it came from; `rank` is its layer's place, lowest first.
#[derive(Debug, Clone)]
struct Sourced<T> {
    value: T,
    origin: Origin,
    rank: usize,
}

impl<T> Sourced<T> {
    fn new(value: T, origin: Origin, rank: usize) -> Sourced<T> {
        Sourced {
            value,
            origin,
            rank,
        }
    }
}

/// Who commits a result when configuration names nobody (`.invalid` is reserved: it never delivers).
pub fn default_agent() -> Identity {
    Identity {
        name: "stet agent".to_owned(),
        email: "agent@stet.invalid".to_owned(),
    }
}

#[cfg(test)]
mod tests;
