//! `Config`: what a user sets once — which forge, which credential provider, the agent's identity,
//! import limits, protected paths, how dispatches run (timeout, concurrency, cost ceiling, image,
//! network), which harness runs the agent and which model endpoint the gateway forwards to. Read from the repository's `stet.toml` over the user's
//! `$XDG_CONFIG_HOME/stet/config.toml` over defaults, field by field, with a few `STET_*` environment
//! variables above both (DESIGN §6: flag > env > repository file > user file > default; the flags are
//! main.rs's). Secrets are only ever referenced (`token_env`, `token_command`, `api_key_env`, a key
//! file's path), never written inline: an inline one is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::dispatch::credential::SecretValue;
use crate::forge::github::{GitHubSettings, RetryPolicy};
use crate::forge::github_app::GitHubAppSettings;
use crate::forge::protected::ProtectedPaths;
use crate::forge::token::TokenSource;
use crate::git::import::{Identity, ImportLimits};
use crate::harness::openhands::OpenHandsSettings;

/// The repository's own configuration file, at its root.
pub const REPOSITORY_FILE: &str = "stet.toml";

const DEFAULT_TOKEN_ENV: &str = "GITHUB_TOKEN";
const DEFAULT_API_URL: &str = "https://api.github.com";
const DEFAULT_GIT_URL: &str = "https://github.com";
const DEFAULT_CREDENTIAL_TTL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_DISPATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const DEFAULT_CONCURRENCY: usize = 2;
const DEFAULT_PACE: f64 = 1.0;
const DEFAULT_MODEL_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The wall-clock timeout of a dispatch, in seconds (`dispatch.timeout_secs`).
pub const ENV_TIMEOUT_SECS: &str = "STET_TIMEOUT_SECS";
/// How many dispatches run at once (`dispatch.concurrency`).
pub const ENV_CONCURRENCY: &str = "STET_CONCURRENCY";
/// The cost ceiling of a dispatch, in US dollars (`dispatch.cost_ceiling_usd`).
pub const ENV_COST_CEILING_USD: &str = "STET_COST_CEILING_USD";
/// The dispatch image (`dispatch.image`).
pub const ENV_IMAGE: &str = "STET_IMAGE";
/// The harness, `openhands` or `script` (`harness.kind`).
pub const ENV_HARNESS: &str = "STET_HARNESS";

/// Why configuration could not be used. Each names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read the configuration: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", file.display())]
    Parse { file: PathBuf, message: String },
    #[error("the model API key variable {variable} (model.api_key_env) {problem}")]
    ModelKey {
        variable: String,
        problem: &'static str,
    },
    #[error(
        "{}: field `{field}` holds a secret inline; reference it instead ({instead})",
        file.display()
    )]
    InlineSecret {
        file: PathBuf,
        field: &'static str,
        instead: &'static str,
    },
    #[error("{origin}: field `{field}`: {problem}")]
    Invalid {
        origin: String,
        field: &'static str,
        problem: String,
    },
    #[error("neither XDG_CONFIG_HOME nor HOME is set, so the user configuration cannot be found")]
    NoConfigDir,
    #[error(
        "harness.kind is \"openhands\" but field `harness.openhands.model` is not set: name the model under [harness.openhands] in {REPOSITORY_FILE} or the user configuration (e.g. model = \"openai/gpt-4.1\"), or run the scripted agent (harness.kind = \"script\", or {ENV_HARNESS}=script)"
    )]
    MissingModel,
}

pub type Result<T> = std::result::Result<T, ConfigError>;

/// Which forge receives results.
#[derive(Debug, Clone, PartialEq)]
pub enum ForgeConfig {
    /// A repository on disk; `None` means the repository stet runs in.
    Local {
        remote: Option<PathBuf>,
    },
    GitHub(GitHubSettings),
}

/// Which provider mints a dispatch's scoped credential.
#[derive(Debug, Clone, PartialEq)]
pub enum CredentialConfig {
    /// The local forge's own short-lived tokens.
    Local,
    /// GitHub App installation tokens limited to the target repository.
    GitHubApp(GitHubAppSettings),
    /// The ADR's fallback: the primary token behind a short TTL; it never enters a sandbox.
    Fallback,
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
    /// The dispatch image reference, checked (pinned by digest) when a dispatch starts; `None`: the
    /// caller's own default.
    pub image: Option<String>,
    /// Let the sandbox reach the network; off, it runs with `--network none`.
    pub allow_network: bool,
}

impl Default for DispatchSettings {
    fn default() -> DispatchSettings {
        DispatchSettings {
            timeout: DEFAULT_DISPATCH_TIMEOUT,
            concurrency: DEFAULT_CONCURRENCY,
            cost_ceiling_usd: None,
            image: None,
            allow_network: false,
        }
    }
}

/// Which harness runs the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum HarnessKind {
    /// The OpenHands CLI, headless (the product).
    #[default]
    #[serde(rename = "openhands")]
    OpenHands,
    /// `stet agent`, the scripted agent of the demo and the tests.
    #[serde(rename = "script")]
    Script,
}

impl HarnessKind {
    /// The name used in configuration and in `STET_HARNESS`.
    pub fn as_str(self) -> &'static str {
        match self {
            HarnessKind::OpenHands => "openhands",
            HarnessKind::Script => "script",
        }
    }
}

/// The scripted agent's settings (`[harness.script]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptHarnessSettings {
    /// The scenario it plays; `None`: its built-in one.
    pub scenario: Option<PathBuf>,
    /// How fast it plays: delays are divided by this; 0 plays without delays.
    pub pace: f64,
}

impl Default for ScriptHarnessSettings {
    fn default() -> ScriptHarnessSettings {
        ScriptHarnessSettings {
            scenario: None,
            pace: DEFAULT_PACE,
        }
    }
}

/// The OpenHands harness's settings (`[harness.openhands]`), before a dispatch needs them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpenHandsHarnessConfig {
    pub model: Option<String>,
}

/// The model endpoint the gateway forwards the agent's requests to (`[model]`); the key stays in
/// stet's process and never enters the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The OpenAI-compatible upstream, e.g. a LiteLLM proxy's `https://…/v1`; `None`: no gateway.
    pub base_url: Option<String>,
    /// The environment variable of stet's own process that holds the model API key.
    pub api_key_env: Option<String>,
    /// A price table over the built-in one (`assets/prices.toml` format).
    pub prices: Option<PathBuf>,
    /// The bound on one model request, from connecting to the end of its response.
    pub request_timeout: Duration,
}

impl ModelConfig {
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

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            base_url: None,
            api_key_env: None,
            prices: None,
            request_timeout: DEFAULT_MODEL_REQUEST_TIMEOUT,
        }
    }
}

/// Which harness runs the agent, and each harness's settings (`[harness]`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HarnessConfig {
    pub kind: HarnessKind,
    pub script: ScriptHarnessSettings,
    pub openhands: OpenHandsHarnessConfig,
}

impl HarnessConfig {
    /// The OpenHands harness's settings; an error naming `harness.openhands.model` when no model
    /// is configured (there is no default model: the choice and its cost are the user's).
    pub fn openhands_settings(&self) -> Result<OpenHandsSettings> {
        let model = self
            .openhands
            .model
            .clone()
            .ok_or(ConfigError::MissingModel)?;
        Ok(OpenHandsSettings::new(model))
    }
}

/// Everything configurable that the engine, the forge and the git layers need.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub forge: ForgeConfig,
    pub credentials: CredentialConfig,
    pub credential_ttl: Duration,
    pub agent: Identity,
    pub import: ImportLimits,
    pub protected_paths: ProtectedPaths,
    pub dispatch: DispatchSettings,
    pub harness: HarnessConfig,
    pub model: ModelConfig,
}

impl Config {
    /// Reads the user file and, when `repository` is given, the repository's `stet.toml` over it,
    /// then the `STET_*` variables of the process environment over both. Missing files are fine;
    /// every other problem is an error naming the file or the variable.
    pub fn load(repository: Option<&Path>) -> Result<Config> {
        let mut files = vec![user_file()?];
        if let Some(root) = repository {
            files.push(root.join(REPOSITORY_FILE));
        }
        let mut layers = Vec::new();
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => layers.push((file, text)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(ConfigError::Read { file, source }),
            }
        }
        Config::from_layers_and_env(&layers, &|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// Builds the configuration from `(file, text)` layers, later layers winning field by field.
    pub fn from_layers(layers: &[(PathBuf, String)]) -> Result<Config> {
        Config::from_layers_and_env(layers, &|_| None)
    }

    /// [`Config::from_layers`] with the `STET_*` variables `env` finds above every file. A variable
    /// that is empty counts as unset.
    pub fn from_layers_and_env(
        layers: &[(PathBuf, String)],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let mut merged = Layer::default();
        for (file, text) in layers {
            merged = Layer::parse(file, text)?.over(merged);
        }
        Layer::from_env(env)?.over(merged).finish()
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

/// A value and where it came from (a file, an environment variable), so a later check can name it.
#[derive(Debug, Clone)]
struct Sourced<T> {
    value: T,
    origin: String,
}

fn sourced<T>(file: &Path, value: T) -> Sourced<T> {
    Sourced {
        value,
        origin: file.display().to_string(),
    }
}

/// One file's settings, every field optional, paths already resolved against the file's directory.
#[derive(Debug, Clone, Default)]
struct Layer {
    forge_kind: Option<Sourced<ForgeKind>>,
    local_remote: Option<PathBuf>,
    api_url: Option<String>,
    git_url: Option<String>,
    token: Option<TokenSource>,
    provider: Option<Sourced<ProviderKind>>,
    ttl_seconds: Option<Sourced<u64>>,
    app_id: Option<u64>,
    installation_id: Option<u64>,
    private_key: Option<PathBuf>,
    agent_name: Option<String>,
    agent_email: Option<Sourced<String>>,
    max_files: Option<u64>,
    max_file_bytes: Option<u64>,
    max_total_bytes: Option<u64>,
    protected_paths: Option<Sourced<Vec<String>>>,
    timeout_secs: Option<Sourced<u64>>,
    concurrency: Option<Sourced<u64>>,
    cost_ceiling_usd: Option<Sourced<f64>>,
    image: Option<Sourced<String>>,
    allow_network: Option<bool>,
    harness_kind: Option<HarnessKind>,
    scenario: Option<PathBuf>,
    pace: Option<Sourced<f64>>,
    model: Option<Sourced<String>>,
    base_url: Option<Sourced<String>>,
    api_key_env: Option<Sourced<String>>,
    prices: Option<PathBuf>,
    model_timeout_secs: Option<Sourced<u64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ForgeKind {
    Local,
    GitHub,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum ProviderKind {
    Local,
    #[serde(rename = "github-app")]
    GitHubApp,
    Fallback,
}

impl ProviderKind {
    fn label(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::GitHubApp => "github-app",
            ProviderKind::Fallback => "fallback",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    forge: Option<RawForge>,
    credentials: Option<RawCredentials>,
    agent: Option<RawAgent>,
    import: Option<RawImport>,
    review: Option<RawReview>,
    dispatch: Option<RawDispatch>,
    harness: Option<RawHarness>,
    model: Option<RawModel>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForge {
    kind: Option<ForgeKind>,
    local: Option<RawLocal>,
    github: Option<RawGitHub>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocal {
    remote: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGitHub {
    api_url: Option<String>,
    git_url: Option<String>,
    token_env: Option<String>,
    token_command: Option<Vec<String>>,
    /// Only here to refuse it with a useful message.
    token: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredentials {
    provider: Option<ProviderKind>,
    ttl_seconds: Option<u64>,
    github_app: Option<RawGitHubApp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGitHubApp {
    app_id: Option<u64>,
    installation_id: Option<u64>,
    private_key: Option<PathBuf>,
    /// Only here to refuse an inline key with a useful message.
    private_key_pem: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: Option<String>,
    email: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImport {
    max_files: Option<u64>,
    max_file_bytes: Option<u64>,
    max_total_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReview {
    protected_paths: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDispatch {
    timeout_secs: Option<u64>,
    concurrency: Option<u64>,
    cost_ceiling_usd: Option<f64>,
    image: Option<String>,
    allow_network: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHarness {
    kind: Option<HarnessKind>,
    script: Option<RawScript>,
    openhands: Option<RawOpenHands>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    scenario: Option<PathBuf>,
    pace: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOpenHands {
    model: Option<String>,
    /// Only here to say where the endpoint went (`[model]`).
    base_url: Option<toml::Value>,
    /// Only here to say where the key's variable went (`[model]`).
    api_key_env: Option<toml::Value>,
    /// Only here to refuse an inline key with a useful message.
    api_key: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    base_url: Option<String>,
    api_key_env: Option<String>,
    prices: Option<PathBuf>,
    request_timeout_secs: Option<u64>,
    /// Only here to refuse an inline key with a useful message.
    api_key: Option<toml::Value>,
}

impl Layer {
    fn parse(file: &Path, text: &str) -> Result<Layer> {
        let raw: RawFile = toml::from_str(text).map_err(|error| ConfigError::Parse {
            file: file.to_owned(),
            message: error.to_string().trim_end().to_owned(),
        })?;
        let origin = file.display().to_string();
        let directory = file.parent().unwrap_or(Path::new("."));
        let resolve = |path: PathBuf| resolve_path(directory, path);
        let mut layer = Layer::default();
        if let Some(forge) = raw.forge {
            layer.forge_kind = forge.kind.map(|kind| sourced(file, kind));
            layer.local_remote = forge.local.and_then(|local| local.remote).map(resolve);
            if let Some(github) = forge.github {
                if github.token.is_some() {
                    return Err(ConfigError::InlineSecret {
                        file: file.to_owned(),
                        field: "forge.github.token",
                        instead: "token_env = \"GITHUB_TOKEN\" or token_command = [\"gh\", \"auth\", \"token\"]",
                    });
                }
                layer.token = match (github.token_env, github.token_command) {
                    (Some(_), Some(_)) => {
                        return Err(invalid(
                            &origin,
                            "forge.github.token_command",
                            "set token_env or token_command, not both",
                        ));
                    }
                    (Some(name), None) if name.trim().is_empty() => {
                        return Err(invalid(&origin, "forge.github.token_env", "is empty"));
                    }
                    (None, Some(argv)) if argv.first().is_none_or(|c| c.trim().is_empty()) => {
                        return Err(invalid(
                            &origin,
                            "forge.github.token_command",
                            "needs a program to run, e.g. [\"gh\", \"auth\", \"token\"]",
                        ));
                    }
                    (Some(name), None) => Some(TokenSource::Env(name)),
                    (None, Some(argv)) => Some(TokenSource::Command(argv)),
                    (None, None) => None,
                };
                layer.api_url = github.api_url;
                layer.git_url = github.git_url;
            }
        }
        if let Some(credentials) = raw.credentials {
            layer.provider = credentials.provider.map(|kind| sourced(file, kind));
            layer.ttl_seconds = credentials.ttl_seconds.map(|ttl| sourced(file, ttl));
            if let Some(app) = credentials.github_app {
                if app.private_key_pem.is_some() {
                    return Err(ConfigError::InlineSecret {
                        file: file.to_owned(),
                        field: "credentials.github_app.private_key_pem",
                        instead: "private_key = \"path/to/app.pem\"",
                    });
                }
                layer.app_id = app.app_id;
                layer.installation_id = app.installation_id;
                layer.private_key = app.private_key.map(resolve);
            }
        }
        if let Some(agent) = raw.agent {
            layer.agent_name = agent.name;
            layer.agent_email = agent.email.map(|email| sourced(file, email));
        }
        if let Some(import) = raw.import {
            layer.max_files = import.max_files;
            layer.max_file_bytes = import.max_file_bytes;
            layer.max_total_bytes = import.max_total_bytes;
        }
        if let Some(review) = raw.review {
            layer.protected_paths = review
                .protected_paths
                .map(|patterns| sourced(file, patterns));
        }
        if let Some(dispatch) = raw.dispatch {
            layer.timeout_secs = dispatch.timeout_secs.map(|secs| sourced(file, secs));
            layer.concurrency = dispatch.concurrency.map(|count| sourced(file, count));
            layer.cost_ceiling_usd = dispatch.cost_ceiling_usd.map(|usd| sourced(file, usd));
            layer.image = dispatch.image.map(|image| sourced(file, image));
            layer.allow_network = dispatch.allow_network;
        }
        if let Some(harness) = raw.harness {
            layer.harness_kind = harness.kind;
            if let Some(script) = harness.script {
                layer.scenario = script.scenario.map(resolve);
                layer.pace = script.pace.map(|pace| sourced(file, pace));
            }
            if let Some(openhands) = harness.openhands {
                if openhands.api_key.is_some() {
                    return Err(ConfigError::InlineSecret {
                        file: file.to_owned(),
                        field: "harness.openhands.api_key",
                        instead: "api_key_env = \"OPENAI_API_KEY\" under [model]",
                    });
                }
                for (field, set) in [
                    ("harness.openhands.base_url", openhands.base_url.is_some()),
                    (
                        "harness.openhands.api_key_env",
                        openhands.api_key_env.is_some(),
                    ),
                ] {
                    if set {
                        return Err(invalid(
                            &origin,
                            field,
                            "moved to [model] (base_url, api_key_env): the gateway keeps the key on the host",
                        ));
                    }
                }
                layer.model = openhands.model.map(|model| sourced(file, model));
            }
        }
        if let Some(model) = raw.model {
            if model.api_key.is_some() {
                return Err(ConfigError::InlineSecret {
                    file: file.to_owned(),
                    field: "model.api_key",
                    instead: "api_key_env = \"OPENAI_API_KEY\"",
                });
            }
            layer.base_url = model.base_url.map(|url| sourced(file, url));
            layer.api_key_env = model.api_key_env.map(|name| sourced(file, name));
            layer.prices = model.prices.map(resolve);
            layer.model_timeout_secs = model.request_timeout_secs.map(|secs| sourced(file, secs));
        }
        Ok(layer)
    }

    /// The `STET_*` variables `env` finds, as a layer; a value that is not a number where one is
    /// wanted is an error naming the variable (ranges are checked with the files' values).
    fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Layer> {
        let read = |variable: &'static str| {
            env(variable)
                .filter(|value| !value.trim().is_empty())
                .map(|value| Sourced {
                    value: value.trim().to_owned(),
                    origin: format!("environment variable {variable}"),
                })
        };
        let number = |variable: &'static str, field: &'static str, unit: &str| {
            read(variable)
                .map(|text| {
                    text.value
                        .parse::<u64>()
                        .map(|value| Sourced {
                            value,
                            origin: text.origin.clone(),
                        })
                        .map_err(|_| {
                            invalid(
                                &text.origin,
                                field,
                                &format!("{:?} is not a whole number of {unit}", text.value),
                            )
                        })
                })
                .transpose()
        };
        let cost_ceiling_usd = read(ENV_COST_CEILING_USD)
            .map(|text| {
                text.value
                    .parse::<f64>()
                    .map(|value| Sourced {
                        value,
                        origin: text.origin.clone(),
                    })
                    .map_err(|_| {
                        invalid(
                            &text.origin,
                            "dispatch.cost_ceiling_usd",
                            &format!("{:?} is not a number of US dollars", text.value),
                        )
                    })
            })
            .transpose()?;
        let harness_kind = read(ENV_HARNESS)
            .map(|text| match text.value.as_str() {
                "openhands" => Ok(HarnessKind::OpenHands),
                "script" => Ok(HarnessKind::Script),
                other => Err(invalid(
                    &text.origin,
                    "harness.kind",
                    &format!("{other:?} is not a harness: use \"openhands\" or \"script\""),
                )),
            })
            .transpose()?;
        Ok(Layer {
            timeout_secs: number(ENV_TIMEOUT_SECS, "dispatch.timeout_secs", "seconds")?,
            concurrency: number(ENV_CONCURRENCY, "dispatch.concurrency", "dispatches")?,
            cost_ceiling_usd,
            image: read(ENV_IMAGE),
            harness_kind,
            ..Layer::default()
        })
    }

    /// `self` over `under`: each field set here wins.
    fn over(self, under: Layer) -> Layer {
        Layer {
            forge_kind: self.forge_kind.or(under.forge_kind),
            local_remote: self.local_remote.or(under.local_remote),
            api_url: self.api_url.or(under.api_url),
            git_url: self.git_url.or(under.git_url),
            token: self.token.or(under.token),
            provider: self.provider.or(under.provider),
            ttl_seconds: self.ttl_seconds.or(under.ttl_seconds),
            app_id: self.app_id.or(under.app_id),
            installation_id: self.installation_id.or(under.installation_id),
            private_key: self.private_key.or(under.private_key),
            agent_name: self.agent_name.or(under.agent_name),
            agent_email: self.agent_email.or(under.agent_email),
            max_files: self.max_files.or(under.max_files),
            max_file_bytes: self.max_file_bytes.or(under.max_file_bytes),
            max_total_bytes: self.max_total_bytes.or(under.max_total_bytes),
            protected_paths: self.protected_paths.or(under.protected_paths),
            timeout_secs: self.timeout_secs.or(under.timeout_secs),
            concurrency: self.concurrency.or(under.concurrency),
            cost_ceiling_usd: self.cost_ceiling_usd.or(under.cost_ceiling_usd),
            image: self.image.or(under.image),
            allow_network: self.allow_network.or(under.allow_network),
            harness_kind: self.harness_kind.or(under.harness_kind),
            scenario: self.scenario.or(under.scenario),
            pace: self.pace.or(under.pace),
            model: self.model.or(under.model),
            base_url: self.base_url.or(under.base_url),
            api_key_env: self.api_key_env.or(under.api_key_env),
            prices: self.prices.or(under.prices),
            model_timeout_secs: self.model_timeout_secs.or(under.model_timeout_secs),
        }
    }

    fn finish(self) -> Result<Config> {
        let forge_kind = self
            .forge_kind
            .as_ref()
            .map_or(ForgeKind::Local, |kind| kind.value);
        let api_url = self.api_url.unwrap_or_else(|| DEFAULT_API_URL.to_owned());
        let forge = match forge_kind {
            ForgeKind::Local => ForgeConfig::Local {
                remote: self.local_remote,
            },
            ForgeKind::GitHub => ForgeConfig::GitHub(GitHubSettings {
                api_url: api_url.clone(),
                git_url: self.git_url.unwrap_or_else(|| DEFAULT_GIT_URL.to_owned()),
                token: self
                    .token
                    .unwrap_or_else(|| TokenSource::Env(DEFAULT_TOKEN_ENV.to_owned())),
                retry: RetryPolicy::default(),
            }),
        };
        let provider = self.provider.clone().unwrap_or(Sourced {
            value: match forge_kind {
                ForgeKind::Local => ProviderKind::Local,
                ForgeKind::GitHub => ProviderKind::GitHubApp,
            },
            origin: "(default)".to_owned(),
        });
        let credentials = match (forge_kind, provider.value) {
            (ForgeKind::Local, ProviderKind::Local) => CredentialConfig::Local,
            (ForgeKind::GitHub, ProviderKind::Fallback) => CredentialConfig::Fallback,
            (ForgeKind::GitHub, ProviderKind::GitHubApp) => {
                let origin = provider.origin.clone();
                let missing = |field| {
                    ConfigError::Invalid {
                    origin: origin.clone(),
                    field,
                    problem: "the github-app credential provider needs it (or set credentials.provider = \"fallback\")".to_owned(),
                }
                };
                CredentialConfig::GitHubApp(GitHubAppSettings {
                    api_url,
                    app_id: self
                        .app_id
                        .ok_or_else(|| missing("credentials.github_app.app_id"))?,
                    installation_id: self
                        .installation_id
                        .ok_or_else(|| missing("credentials.github_app.installation_id"))?,
                    private_key: self
                        .private_key
                        .ok_or_else(|| missing("credentials.github_app.private_key"))?,
                })
            }
            (ForgeKind::Local, other) => {
                return Err(ConfigError::Invalid {
                    origin: provider.origin.clone(),
                    field: "credentials.provider",
                    problem: format!(
                        "{:?} mints GitHub credentials; the local forge uses provider \"local\"",
                        other.label()
                    ),
                });
            }
            (ForgeKind::GitHub, ProviderKind::Local) => {
                return Err(ConfigError::Invalid {
                    origin: provider.origin.clone(),
                    field: "credentials.provider",
                    problem: "the local provider cannot mint GitHub credentials; use \"github-app\" or \"fallback\"".to_owned(),
                });
            }
        };
        let credential_ttl = match self.ttl_seconds {
            None => DEFAULT_CREDENTIAL_TTL,
            Some(Sourced { value, origin }) if !(60..=3600).contains(&value) => {
                return Err(invalid(
                    &origin,
                    "credentials.ttl_seconds",
                    &format!("{value} is outside 60..=3600: a scoped credential is short-lived"),
                ));
            }
            Some(Sourced { value, .. }) => Duration::from_secs(value),
        };
        let defaults = default_agent();
        let agent = Identity {
            name: self.agent_name.unwrap_or(defaults.name),
            email: match self.agent_email {
                None => defaults.email,
                Some(Sourced { value, origin })
                    if !value.contains('@') || value.contains(['<', '>', '\n']) =>
                {
                    return Err(invalid(
                        &origin,
                        "agent.email",
                        &format!("{value:?} is not an email address"),
                    ));
                }
                Some(Sourced { value, .. }) => value,
            },
        };
        let default_limits = ImportLimits::default();
        let import = ImportLimits {
            max_files: self.max_files.unwrap_or(default_limits.max_files),
            max_file_bytes: self.max_file_bytes.unwrap_or(default_limits.max_file_bytes),
            max_total_bytes: self
                .max_total_bytes
                .unwrap_or(default_limits.max_total_bytes),
        };
        let protected_paths = match self.protected_paths {
            None => ProtectedPaths::default(),
            Some(Sourced { value, origin }) => ProtectedPaths::new(&value)
                .map_err(|error| invalid(&origin, "review.protected_paths", &error.to_string()))?,
        };
        let dispatch = DispatchSettings {
            timeout: match self.timeout_secs {
                None => DEFAULT_DISPATCH_TIMEOUT,
                Some(Sourced { value, origin }) if !(60..=86_400).contains(&value) => {
                    return Err(invalid(
                        &origin,
                        "dispatch.timeout_secs",
                        &format!("{value} is outside 60..=86400 (one minute to one day)"),
                    ));
                }
                Some(Sourced { value, .. }) => Duration::from_secs(value),
            },
            concurrency: match self.concurrency {
                None => DEFAULT_CONCURRENCY,
                Some(Sourced { value, origin }) => usize::try_from(value)
                    .ok()
                    .filter(|count| (1..=64).contains(count))
                    .ok_or_else(|| {
                        invalid(
                            &origin,
                            "dispatch.concurrency",
                            &format!("{value} is outside 1..=64"),
                        )
                    })?,
            },
            cost_ceiling_usd: match self.cost_ceiling_usd {
                None => None,
                Some(Sourced { value, origin }) if !value.is_finite() || value <= 0.0 => {
                    return Err(invalid(
                        &origin,
                        "dispatch.cost_ceiling_usd",
                        &format!("{value} is not a positive number of US dollars"),
                    ));
                }
                Some(Sourced { value, .. }) => Some(value),
            },
            image: non_empty(self.image, "dispatch.image")?,
            allow_network: self.allow_network.unwrap_or(false),
        };
        let harness = HarnessConfig {
            kind: self.harness_kind.unwrap_or_default(),
            script: ScriptHarnessSettings {
                scenario: self.scenario,
                pace: match self.pace {
                    None => DEFAULT_PACE,
                    Some(Sourced { value, origin }) if !(0.0..=100.0).contains(&value) => {
                        return Err(invalid(
                            &origin,
                            "harness.script.pace",
                            &format!("{value} is outside 0.0..=100.0"),
                        ));
                    }
                    Some(Sourced { value, .. }) => value,
                },
            },
            openhands: OpenHandsHarnessConfig {
                model: non_empty(self.model, "harness.openhands.model")?,
            },
        };
        let model = ModelConfig {
            base_url: match self.base_url {
                None => None,
                Some(Sourced { value, origin })
                    if !(value.starts_with("http://") || value.starts_with("https://")) =>
                {
                    return Err(invalid(
                        &origin,
                        "model.base_url",
                        &format!("{value:?} is not an http:// or https:// URL"),
                    ));
                }
                Some(Sourced { value, .. }) => Some(value),
            },
            api_key_env: match self.api_key_env {
                None => None,
                Some(Sourced { value, origin })
                    if value.is_empty()
                        || !value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                {
                    return Err(invalid(
                        &origin,
                        "model.api_key_env",
                        &format!(
                            "{value:?} is not the name of an environment variable (letters, digits and _)"
                        ),
                    ));
                }
                Some(Sourced { value, .. }) => Some(value),
            },
            prices: self.prices,
            request_timeout: match self.model_timeout_secs {
                None => DEFAULT_MODEL_REQUEST_TIMEOUT,
                Some(Sourced { value, origin }) if !(1..=3600).contains(&value) => {
                    return Err(invalid(
                        &origin,
                        "model.request_timeout_secs",
                        &format!("{value} is outside 1..=3600"),
                    ));
                }
                Some(Sourced { value, .. }) => Duration::from_secs(value),
            },
        };
        Ok(Config {
            forge,
            credentials,
            credential_ttl,
            agent,
            import,
            protected_paths,
            dispatch,
            harness,
            model,
        })
    }
}

/// The value, unless it is blank: then an error naming its origin and `field`.
fn non_empty(value: Option<Sourced<String>>, field: &'static str) -> Result<Option<String>> {
    match value {
        Some(Sourced { value, origin }) if value.trim().is_empty() => {
            Err(invalid(&origin, field, "is empty"))
        }
        other => Ok(other.map(|sourced| sourced.value)),
    }
}

/// Who commits a result when configuration names nobody (`.invalid` is reserved: it never delivers).
pub fn default_agent() -> Identity {
    Identity {
        name: "stet agent".to_owned(),
        email: "agent@stet.invalid".to_owned(),
    }
}

fn invalid(origin: &str, field: &'static str, problem: &str) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.to_owned(),
        field,
        problem: problem.to_owned(),
    }
}

/// `~/x` expands to the home directory; a relative path is relative to the file that names it.
fn resolve_path(directory: &Path, path: PathBuf) -> PathBuf {
    if let Ok(rest) = path.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    if path.is_absolute() {
        path
    } else {
        directory.join(path)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn layer(file: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(file), text.to_owned())
    }

    #[test]
    fn no_files_give_the_local_forge_with_defaults() {
        let config = Config::from_layers(&[]).unwrap();
        assert_eq!(config.forge, ForgeConfig::Local { remote: None });
        assert_eq!(config.credentials, CredentialConfig::Local);
        assert_eq!(config.credential_ttl, DEFAULT_CREDENTIAL_TTL);
        assert_eq!(config.agent, default_agent());
        assert_eq!(config.import, ImportLimits::default());
        assert_eq!(config.protected_paths, ProtectedPaths::default());
        assert_eq!(
            config.dispatch,
            DispatchSettings {
                timeout: Duration::from_secs(1800),
                concurrency: 2,
                cost_ceiling_usd: None,
                image: None,
                allow_network: false,
            }
        );
        assert_eq!(
            config.harness,
            HarnessConfig {
                kind: HarnessKind::OpenHands,
                script: ScriptHarnessSettings {
                    scenario: None,
                    pace: 1.0,
                },
                openhands: OpenHandsHarnessConfig::default(),
            }
        );
    }

    #[test]
    fn the_example_file_parses_and_states_the_defaults() {
        let example = layer(
            "assets/config.example.toml",
            include_str!("../assets/config.example.toml"),
        );
        assert_eq!(
            Config::from_layers(&[example]).unwrap(),
            Config::from_layers(&[]).unwrap()
        );
    }

    #[test]
    fn the_repository_file_wins_field_by_field_over_the_user_file() {
        let user = layer(
            "/home/u/.config/stet/config.toml",
            r#"
[forge]
kind = "github"
[forge.github]
token_command = ["gh", "auth", "token"]
[credentials]
provider = "github-app"
ttl_seconds = 600
[credentials.github_app]
app_id = 11
installation_id = 22
private_key = "keys/app.pem"
[agent]
name = "Robot"
email = "robot@example.invalid"
"#,
        );
        let repository = layer(
            "/src/app/stet.toml",
            r#"
[forge.github]
api_url = "https://ghe.example.invalid/api/v3"
[agent]
email = "bot@example.invalid"
[import]
max_files = 10
[review]
protected_paths = [".github/**", "deploy/*.yml"]
"#,
        );
        let config = Config::from_layers(&[user, repository]).unwrap();
        let ForgeConfig::GitHub(github) = &config.forge else {
            panic!("{:?}", config.forge)
        };
        assert_eq!(github.api_url, "https://ghe.example.invalid/api/v3");
        assert_eq!(github.git_url, DEFAULT_GIT_URL);
        assert_eq!(
            github.token,
            TokenSource::Command(vec!["gh".into(), "auth".into(), "token".into()])
        );
        let CredentialConfig::GitHubApp(app) = &config.credentials else {
            panic!("{:?}", config.credentials)
        };
        assert_eq!((app.app_id, app.installation_id), (11, 22));
        assert_eq!(
            app.private_key,
            Path::new("/home/u/.config/stet/keys/app.pem")
        );
        assert_eq!(app.api_url, "https://ghe.example.invalid/api/v3");
        assert_eq!(config.credential_ttl, Duration::from_secs(600));
        assert_eq!(config.agent.name, "Robot");
        assert_eq!(config.agent.email, "bot@example.invalid");
        assert_eq!(config.import.max_files, 10);
        assert_eq!(
            config.import.max_total_bytes,
            ImportLimits::default().max_total_bytes
        );
        assert!(
            config
                .protected_paths
                .matching(".github/CODEOWNERS")
                .is_some()
        );
        assert!(config.protected_paths.matching("deploy/prod.yml").is_some());
    }

    #[test]
    fn an_inline_token_or_key_is_refused_and_named() {
        for (text, field) in [
            ("[forge.github]\ntoken = \"abc\"\n", "forge.github.token"),
            (
                "[credentials.github_app]\nprivate_key_pem = \"x\"\n",
                "credentials.github_app.private_key_pem",
            ),
        ] {
            let error = Config::from_layers(&[layer("/r/stet.toml", text)]).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, ConfigError::InlineSecret { .. }),
                "{message}"
            );
            assert!(message.starts_with("/r/stet.toml: field `"), "{message}");
            assert!(message.contains(field), "{message}");
            assert!(!message.contains("abc"), "{message}");
        }
    }

    #[test]
    fn unknown_fields_and_bad_values_name_the_file_and_the_line() {
        let error = Config::from_layers(&[layer("/r/stet.toml", "[forge]\nkind = \"gitlab\"\n")])
            .unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("/r/stet.toml: "), "{message}");
        assert!(message.contains("line 2"), "{message}");
        assert!(message.contains("gitlab"), "{message}");
        let error =
            Config::from_layers(&[layer("/r/stet.toml", "[agent]\nnmae = \"x\"\n")]).unwrap_err();
        assert!(error.to_string().contains("nmae"), "{error}");
    }

    #[test]
    fn inconsistent_settings_are_refused_with_the_field() {
        let cases = [
            (
                "[forge]\nkind = \"github\"\n",
                "credentials.github_app.app_id",
            ),
            (
                "[credentials]\nprovider = \"fallback\"\n",
                "credentials.provider",
            ),
            (
                "[forge]\nkind = \"github\"\n[credentials]\nprovider = \"local\"\n",
                "credentials.provider",
            ),
            (
                "[credentials]\nttl_seconds = 86400\n",
                "credentials.ttl_seconds",
            ),
            ("[agent]\nemail = \"nobody\"\n", "agent.email"),
            (
                "[review]\nprotected_paths = [\"/abs\"]\n",
                "review.protected_paths",
            ),
            (
                "[forge.github]\ntoken_env = \"A\"\ntoken_command = [\"b\"]\n",
                "forge.github.token_command",
            ),
            (
                "[forge.github]\ntoken_command = []\n",
                "forge.github.token_command",
            ),
        ];
        for (text, field) in cases {
            let error = Config::from_layers(&[layer("/r/stet.toml", text)]).unwrap_err();
            assert!(
                matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn the_fallback_provider_needs_no_app_settings() {
        let config = Config::from_layers(&[layer(
            "/r/stet.toml",
            "[forge]\nkind = \"github\"\n[forge.github]\ntoken_env = \"MY_TOKEN\"\n[credentials]\nprovider = \"fallback\"\n",
        )])
        .unwrap();
        assert_eq!(config.credentials, CredentialConfig::Fallback);
        let ForgeConfig::GitHub(github) = config.forge else {
            panic!()
        };
        assert_eq!(github.token, TokenSource::Env("MY_TOKEN".into()));
    }

    #[test]
    fn a_relative_local_remote_is_relative_to_its_file() {
        let config = Config::from_layers(&[layer(
            "/src/app/stet.toml",
            "[forge.local]\nremote = \"../upstream\"\n",
        )])
        .unwrap();
        assert_eq!(
            config.forge,
            ForgeConfig::Local {
                remote: Some(PathBuf::from("/src/app/../upstream"))
            }
        );
    }

    /// An environment holding only `variables`.
    fn env_of(variables: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let variables: Vec<(String, String)> = variables
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        move |name: &str| {
            variables
                .iter()
                .find(|(known, _)| known == name)
                .map(|(_, value)| value.clone())
        }
    }

    const USER_DISPATCH: &str = r#"
[dispatch]
timeout_secs = 600
concurrency = 4
cost_ceiling_usd = 2.5
image = "registry.example.invalid/user@sha256:aaaa"
allow_network = true
[harness]
kind = "script"
[harness.script]
scenario = "scenarios/slow.toml"
pace = 0.5
[harness.openhands]
model = "openai/gpt-4.1-mini"
[model]
base_url = "http://127.0.0.1:4000/v1"
api_key_env = "USER_MODEL_KEY"
prices = "prices.toml"
request_timeout_secs = 90
"#;

    #[test]
    fn dispatch_and_harness_settings_come_from_the_files_field_by_field() {
        let user = layer("/home/u/.config/stet/config.toml", USER_DISPATCH);
        let repository = layer(
            "/src/app/stet.toml",
            "[dispatch]\nconcurrency = 1\ncost_ceiling_usd = 3\n[harness.openhands]\nmodel = \"openai/gpt-4.1\"\n",
        );
        let config = Config::from_layers(&[user, repository]).unwrap();
        assert_eq!(
            config.dispatch,
            DispatchSettings {
                timeout: Duration::from_secs(600),
                concurrency: 1,
                cost_ceiling_usd: Some(3.0),
                image: Some("registry.example.invalid/user@sha256:aaaa".to_owned()),
                allow_network: true,
            }
        );
        assert_eq!(config.harness.kind, HarnessKind::Script);
        assert_eq!(
            config.harness.script,
            ScriptHarnessSettings {
                scenario: Some(PathBuf::from("/home/u/.config/stet/scenarios/slow.toml")),
                pace: 0.5,
            }
        );
        assert_eq!(
            config.harness.openhands,
            OpenHandsHarnessConfig {
                model: Some("openai/gpt-4.1".to_owned()),
            }
        );
        assert_eq!(
            config.model,
            ModelConfig {
                base_url: Some("http://127.0.0.1:4000/v1".to_owned()),
                api_key_env: Some("USER_MODEL_KEY".to_owned()),
                prices: Some(PathBuf::from("/home/u/.config/stet/prices.toml")),
                request_timeout: Duration::from_secs(90),
            }
        );
        let settings = config.harness.openhands_settings().unwrap();
        assert_eq!(settings.model, "openai/gpt-4.1");
        assert_eq!(
            settings.version,
            crate::harness::openhands::OPENHANDS_VERSION
        );
    }

    #[test]
    fn the_environment_wins_over_every_file() {
        let user = layer("/home/u/.config/stet/config.toml", USER_DISPATCH);
        let repository = layer(
            "/src/app/stet.toml",
            "[dispatch]\ntimeout_secs = 900\nimage = \"registry.example.invalid/repo@sha256:bbbb\"\n",
        );
        let env = env_of(&[
            (ENV_TIMEOUT_SECS, "120"),
            (ENV_CONCURRENCY, " 8 "),
            (ENV_COST_CEILING_USD, "0.75"),
            (ENV_IMAGE, "registry.example.invalid/env@sha256:cccc"),
            (ENV_HARNESS, "openhands"),
        ]);
        let config =
            Config::from_layers_and_env(&[user.clone(), repository.clone()], &env).unwrap();
        assert_eq!(
            config.dispatch,
            DispatchSettings {
                timeout: Duration::from_secs(120),
                concurrency: 8,
                cost_ceiling_usd: Some(0.75),
                image: Some("registry.example.invalid/env@sha256:cccc".to_owned()),
                allow_network: true,
            }
        );
        assert_eq!(config.harness.kind, HarnessKind::OpenHands);

        let blank = env_of(&[(ENV_TIMEOUT_SECS, ""), (ENV_HARNESS, "  ")]);
        let config = Config::from_layers_and_env(&[user, repository], &blank).unwrap();
        assert_eq!(config.dispatch.timeout, Duration::from_secs(900));
        assert_eq!(config.harness.kind, HarnessKind::Script);

        let script = Config::from_layers_and_env(&[], &env_of(&[(ENV_HARNESS, "script")])).unwrap();
        assert_eq!(script.harness.kind, HarnessKind::Script);
    }

    #[test]
    fn bad_environment_values_name_the_variable_and_the_field() {
        let cases = [
            (ENV_TIMEOUT_SECS, "30m", "dispatch.timeout_secs"),
            (ENV_TIMEOUT_SECS, "59", "dispatch.timeout_secs"),
            (ENV_TIMEOUT_SECS, "86401", "dispatch.timeout_secs"),
            (ENV_CONCURRENCY, "-1", "dispatch.concurrency"),
            (ENV_CONCURRENCY, "0", "dispatch.concurrency"),
            (ENV_CONCURRENCY, "65", "dispatch.concurrency"),
            (ENV_COST_CEILING_USD, "five", "dispatch.cost_ceiling_usd"),
            (ENV_COST_CEILING_USD, "0", "dispatch.cost_ceiling_usd"),
            (ENV_COST_CEILING_USD, "NaN", "dispatch.cost_ceiling_usd"),
            (ENV_COST_CEILING_USD, "inf", "dispatch.cost_ceiling_usd"),
            (ENV_HARNESS, "aider", "harness.kind"),
        ];
        for (variable, value, field) in cases {
            let error =
                Config::from_layers_and_env(&[], &env_of(&[(variable, value)])).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
                "{variable}={value}: {message}"
            );
            assert!(
                message.starts_with(&format!("environment variable {variable}: field `{field}`")),
                "{message}"
            );
        }
    }

    #[test]
    fn bad_dispatch_and_harness_values_name_the_file_and_the_field() {
        let cases = [
            ("[dispatch]\ntimeout_secs = 59\n", "dispatch.timeout_secs"),
            (
                "[dispatch]\ntimeout_secs = 86401\n",
                "dispatch.timeout_secs",
            ),
            ("[dispatch]\nconcurrency = 0\n", "dispatch.concurrency"),
            ("[dispatch]\nconcurrency = 65\n", "dispatch.concurrency"),
            (
                "[dispatch]\ncost_ceiling_usd = 0.0\n",
                "dispatch.cost_ceiling_usd",
            ),
            (
                "[dispatch]\ncost_ceiling_usd = -1.5\n",
                "dispatch.cost_ceiling_usd",
            ),
            (
                "[dispatch]\ncost_ceiling_usd = inf\n",
                "dispatch.cost_ceiling_usd",
            ),
            (
                "[dispatch]\ncost_ceiling_usd = nan\n",
                "dispatch.cost_ceiling_usd",
            ),
            ("[dispatch]\nimage = \" \"\n", "dispatch.image"),
            ("[harness.script]\npace = -0.1\n", "harness.script.pace"),
            ("[harness.script]\npace = 100.5\n", "harness.script.pace"),
            (
                "[harness.openhands]\nmodel = \"\"\n",
                "harness.openhands.model",
            ),
            ("[model]\nbase_url = \"127.0.0.1:4000\"\n", "model.base_url"),
            ("[model]\napi_key_env = \"MY KEY\"\n", "model.api_key_env"),
            ("[model]\napi_key_env = \"\"\n", "model.api_key_env"),
            (
                "[model]\nrequest_timeout_secs = 0\n",
                "model.request_timeout_secs",
            ),
            (
                "[harness.openhands]\nbase_url = \"http://127.0.0.1:4000/v1\"\n",
                "harness.openhands.base_url",
            ),
            (
                "[harness.openhands]\napi_key_env = \"KEY\"\n",
                "harness.openhands.api_key_env",
            ),
        ];
        for (text, field) in cases {
            let error = Config::from_layers(&[layer("/r/stet.toml", text)]).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
                "{text}: {message}"
            );
            assert!(
                message.starts_with(&format!("/r/stet.toml: field `{field}`")),
                "{message}"
            );
        }
        for (text, wanted) in [
            ("[harness]\nkind = \"aider\"\n", "aider"),
            ("[dispatch]\ntimeout_secs = -5\n", "timeout_secs"),
            ("[dispatch]\nallow_network = \"yes\"\n", "allow_network"),
            ("[harness.openhands]\nmodle = \"x\"\n", "modle"),
        ] {
            let error = Config::from_layers(&[layer("/r/stet.toml", text)]).unwrap_err();
            let message = error.to_string();
            assert!(matches!(error, ConfigError::Parse { .. }), "{message}");
            assert!(message.starts_with("/r/stet.toml: "), "{message}");
            assert!(message.contains(wanted), "{text}: {message}");
        }
    }

    #[test]
    fn the_model_key_is_read_from_the_named_variable_and_its_absence_named() {
        let key = format!("fake-{}", uuid::Uuid::new_v4().simple());
        let model = ModelConfig {
            api_key_env: Some("STET_TEST_MODEL_KEY".to_owned()),
            ..ModelConfig::default()
        };
        let found = model
            .api_key(&|name| (name == "STET_TEST_MODEL_KEY").then(|| key.clone().into()))
            .unwrap()
            .unwrap();
        assert_eq!(found.expose_secret(), key);
        for present in [None, Some(" ")] {
            let error = model
                .api_key(&|_| present.map(std::ffi::OsString::from))
                .unwrap_err()
                .to_string();
            assert!(error.contains("STET_TEST_MODEL_KEY"), "{error}");
            assert!(error.contains("model.api_key_env"), "{error}");
        }
        assert!(ModelConfig::default().api_key(&|_| None).unwrap().is_none());
    }

    #[test]
    fn an_inline_model_api_key_is_refused_and_not_echoed() {
        let key = format!("fake-{}", uuid::Uuid::new_v4().simple());
        for (table, field) in [
            (
                "[harness.openhands]\nmodel = \"m\"",
                "harness.openhands.api_key",
            ),
            ("[model]", "model.api_key"),
        ] {
            let text = format!("{table}\napi_key = \"{key}\"\n");
            let error = Config::from_layers(&[layer("/r/stet.toml", &text)]).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, ConfigError::InlineSecret { field: f, .. } if f == field),
                "{message}"
            );
            assert!(message.contains("api_key_env"), "{message}");
            assert!(!message.contains(&key), "{message}");
        }
    }

    #[test]
    fn the_openhands_harness_without_a_model_is_an_error_when_a_dispatch_needs_it() {
        let config = Config::from_layers(&[]).unwrap();
        assert_eq!(config.harness.kind, HarnessKind::OpenHands);
        let error = config.harness.openhands_settings().unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ConfigError::MissingModel), "{message}");
        assert!(message.contains("harness.openhands.model"), "{message}");
        assert!(message.contains(ENV_HARNESS), "{message}");
    }

    #[test]
    fn whole_numbers_are_accepted_for_dollars_and_pace() {
        let config = Config::from_layers(&[layer(
            "/r/stet.toml",
            "[dispatch]\ncost_ceiling_usd = 5\n[harness.script]\npace = 0\n",
        )])
        .unwrap();
        assert_eq!(config.dispatch.cost_ceiling_usd, Some(5.0));
        assert_eq!(config.harness.script.pace, 0.0);
        assert_eq!(HarnessKind::OpenHands.as_str(), "openhands");
        assert_eq!(HarnessKind::Script.as_str(), "script");
    }
}
