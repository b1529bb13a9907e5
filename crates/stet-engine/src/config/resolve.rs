//! From layers to a [`Config`]: every setting is read once, by its class ([`Layers`]), before any
//! value is checked, so a repository file the user has not trusted is refused as a whole; then each
//! value is checked and built into the configuration, an error naming the file and line (or the
//! variable) that set it. A new setting is a field in its section (`file.rs`) and a line here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file::{ForgeKind, ProviderKind};
use super::layers::{Layers, Lists, Pick, Reason};
use super::{
    CodexHarnessConfig, Config, ConfigError, CredentialConfig, DispatchSettings, ForgeConfig,
    HarnessConfig, ModelConfig, NetworkConfig, OpenHandsHarnessConfig, Origin, RepositoryFile,
    Result, RuntimeConfig, ScriptHarnessSettings, Sourced, default_agent,
};
use crate::forge::gitea_token::GiteaTokenSettings;
use crate::forge::github_app::GitHubAppSettings;
use crate::forge::protected::ProtectedPaths;
use crate::forge::token::TokenSource;
use crate::git::import::{Identity, ImportLimits};
use crate::git::workspace::BaseLimits;

mod forge;

use forge::{GITEA, GITHUB, GITLAB, RestForgeReads};

pub(super) const DEFAULT_CREDENTIAL_TTL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_DISPATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const DEFAULT_CONCURRENCY: usize = 2;
const DEFAULT_PACE: f64 = 1.0;
pub(super) const DEFAULT_MODEL_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Reads `[forge.<name>]` out of the layers: every field a machine setting.
macro_rules! read_rest_forge {
    ($layers:ident, $name:ident) => {
        RestForgeReads {
            api_url: $layers.machine(
                concat!("forge.", stringify!($name), ".api_url"),
                Reason::Url,
                |s| &s.forge.$name.api_url,
            ),
            git_url: $layers.machine(
                concat!("forge.", stringify!($name), ".git_url"),
                Reason::Url,
                |s| &s.forge.$name.git_url,
            ),
            token_env: $layers.machine(
                concat!("forge.", stringify!($name), ".token_env"),
                Reason::EnvironmentVariable,
                |s| &s.forge.$name.token_env,
            ),
            token_command: $layers.machine(
                concat!("forge.", stringify!($name), ".token_command"),
                Reason::Command,
                |s| &s.forge.$name.token_command,
            ),
        }
    };
}

/// Reads every setting out of `layers`, refuses what a repository file may not set, then checks and
/// builds the configuration.
pub(super) fn resolve(layers: &mut Layers, repository_file: RepositoryFile) -> Result<Config> {
    let defaults = ImportLimits::default();
    let forge_kind = layers.machine("forge.kind", Reason::Forge, |s| &s.forge.kind);
    let remote = layers.machine("forge.local.remote", Reason::HostPath, |s| {
        &s.forge.local.remote
    });
    let github = read_rest_forge!(layers, github);
    let gitea = read_rest_forge!(layers, gitea);
    let gitlab = read_rest_forge!(layers, gitlab);
    let provider = layers.machine("credentials.provider", Reason::CredentialProvider, |s| {
        &s.credentials.provider
    });
    let ttl_seconds = layers.at_most(
        "credentials.ttl_seconds",
        |s| &s.credentials.ttl_seconds,
        Some(DEFAULT_CREDENTIAL_TTL.as_secs()),
    );
    let app_id = layers.machine("credentials.github_app.app_id", Reason::Credential, |s| {
        &s.credentials.github_app.app_id
    });
    let installation_id = layers.machine(
        "credentials.github_app.installation_id",
        Reason::Credential,
        |s| &s.credentials.github_app.installation_id,
    );
    let private_key = layers.machine(
        "credentials.github_app.private_key",
        Reason::HostPath,
        |s| &s.credentials.github_app.private_key,
    );
    let gitea_user = layers.machine("credentials.gitea.user", Reason::Credential, |s| {
        &s.credentials.gitea.user
    });
    let gitea_password =
        layers.machine("credentials.gitea.password_command", Reason::Command, |s| {
            &s.credentials.gitea.password_command
        });
    let gitea_otp = layers.machine("credentials.gitea.otp_command", Reason::Command, |s| {
        &s.credentials.gitea.otp_command
    });
    let agent_name = layers.machine("agent.name", Reason::Identity, |s| &s.agent.name);
    let agent_email = layers.machine("agent.email", Reason::Identity, |s| &s.agent.email);
    let max_files = layers.at_most(
        "import.max_files",
        |s| &s.import.max_files,
        Some(defaults.max_files),
    );
    let max_file_bytes = layers.at_most(
        "import.max_file_bytes",
        |s| &s.import.max_file_bytes,
        Some(defaults.max_file_bytes),
    );
    let max_total_bytes = layers.at_most(
        "import.max_total_bytes",
        |s| &s.import.max_total_bytes,
        Some(defaults.max_total_bytes),
    );
    let max_path_bytes = layers.at_most(
        "import.max_path_bytes",
        |s| &s.import.max_path_bytes,
        Some(defaults.max_path_bytes),
    );
    let base_defaults = BaseLimits::default();
    let base_files = layers.at_most(
        "base.max_files",
        |s| &s.base.max_files,
        Some(base_defaults.max_files),
    );
    let base_file_bytes = layers.at_most(
        "base.max_file_bytes",
        |s| &s.base.max_file_bytes,
        Some(base_defaults.max_file_bytes),
    );
    let base_total_bytes = layers.at_most(
        "base.max_total_bytes",
        |s| &s.base.max_total_bytes,
        Some(base_defaults.max_total_bytes),
    );
    let base_path_bytes = layers.at_most(
        "base.max_path_bytes",
        |s| &s.base.max_path_bytes,
        Some(base_defaults.max_path_bytes),
    );
    let base_depth = layers.at_most(
        "base.max_depth",
        |s| &s.base.max_depth,
        Some(base_defaults.max_depth as u64),
    );
    let inbox_defaults = crate::inbox::InboxLimits::default();
    let max_briefs = layers.at_most(
        "inbox.max_briefs",
        |s| &s.inbox.max_briefs,
        Some(inbox_defaults.max_briefs),
    );
    let max_inbox_bytes = layers.at_most(
        "inbox.max_total_bytes",
        |s| &s.inbox.max_total_bytes,
        Some(inbox_defaults.max_total_bytes),
    );
    let protected = layers.adds("review.protected_paths", |s| &s.review.protected_paths);
    let timeout_secs = layers.at_most(
        "dispatch.timeout_secs",
        |s| &s.dispatch.timeout_secs,
        Some(DEFAULT_DISPATCH_TIMEOUT.as_secs()),
    );
    let concurrency = layers.at_most(
        "dispatch.concurrency",
        |s| &s.dispatch.concurrency,
        Some(DEFAULT_CONCURRENCY as u64),
    );
    let cost_ceiling_usd = layers.at_most(
        "dispatch.cost_ceiling_usd",
        |s| &s.dispatch.cost_ceiling_usd,
        None,
    );
    let max_record_bytes = layers.at_most(
        "dispatch.max_record_bytes",
        |s| &s.dispatch.max_record_bytes,
        Some(crate::dispatch::record::DEFAULT_MAX_RECORD_BYTES),
    );
    let image = layers.machine("dispatch.image", Reason::Image, |s| &s.dispatch.image);
    let allow_network = layers.stays_off("dispatch.allow_network", Reason::Network, |s| {
        &s.dispatch.allow_network
    });
    let runtime_kind = layers.machine("runtime.kind", Reason::Runtime, |s| &s.runtime.kind);
    let runtime_engine = layers.machine("runtime.engine", Reason::Runtime, |s| &s.runtime.engine);
    let runtime_host = layers.machine("runtime.host", Reason::Runtime, |s| &s.runtime.host);
    let mounts = layers.machine("runtime.mounts", Reason::Runtime, |s| &s.runtime.mounts);
    let warm = layers.machine("runtime.warm", Reason::Runtime, |s| &s.runtime.warm);
    let harness_kind = layers.machine("harness.kind", Reason::Agent, |s| &s.harness.kind);
    let scenario = layers.machine("harness.script.scenario", Reason::Scenario, |s| {
        &s.harness.script.scenario
    });
    let pace = layers.free("harness.script.pace", |s| &s.harness.script.pace);
    let picks: [(_, Pick<String>); 3] = [
        ("harness.openhands.model", |s| &s.harness.openhands.model),
        ("harness.codex.model", |s| &s.harness.codex.model),
        ("harness.claude.model", |s| &s.harness.claude.model),
    ];
    let [model, codex_model, claude_model] =
        picks.map(|(field, pick)| layers.machine(field, Reason::Model, pick));
    let base_url = layers.machine("model.base_url", Reason::Url, |s| &s.model.base_url);
    let model_api = layers.machine("model.api", Reason::Model, |s| &s.model.api);
    let api_key_env = layers.machine("model.api_key_env", Reason::EnvironmentVariable, |s| {
        &s.model.api_key_env
    });
    let prices = layers.machine("model.prices", Reason::PriceTable, |s| &s.model.prices);
    let model_timeout_secs = layers.at_most(
        "model.request_timeout_secs",
        |s| &s.model.request_timeout_secs,
        Some(DEFAULT_MODEL_REQUEST_TIMEOUT.as_secs()),
    );
    let max_concurrent_requests = layers.at_most(
        "model.max_concurrent_requests",
        |s| &s.model.max_concurrent_requests,
        Some(crate::gateway::DEFAULT_MAX_CONCURRENT_REQUESTS as u64),
    );
    let allow = layers.machine("model.allow", Reason::Model, |s| &s.model.allow);
    let repository_path = match &repository_file {
        RepositoryFile::Trusted { path, .. } => Some(path.clone()),
        RepositoryFile::Untrusted(_) | RepositoryFile::None => None,
    };
    let provider_tools = layers.machine("model.provider_tools", Reason::ProviderTools, |s| {
        &s.model.provider_tools
    });
    let ca_bundle = layers.machine("network.ca_bundle", Reason::HostPath, |s| {
        &s.network.ca_bundle
    });
    let egress = super::egress::read(layers);
    if !layers.refusals().is_empty() {
        return Err(ConfigError::Untrusted {
            refusals: layers.refusals_by_line(),
        });
    }

    let (forge_kind, kind_origin) = forge_kind
        .map_or((ForgeKind::Local, Origin::Default), |kind| {
            (kind.value, kind.origin)
        });
    github.check(&GITHUB)?;
    gitea.check(&GITEA)?;
    gitlab.check(&GITLAB)?;
    let forge = match forge_kind {
        ForgeKind::Local => ForgeConfig::Local {
            remote: remote.map(Sourced::into_path),
        },
        ForgeKind::GitHub => ForgeConfig::GitHub(github.settings(&GITHUB, &kind_origin)?),
        ForgeKind::Gitea => ForgeConfig::Gitea(gitea.settings(&GITEA, &kind_origin)?),
        ForgeKind::GitLab => ForgeConfig::GitLab(gitlab.settings(&GITLAB, &kind_origin)?),
    };
    let provider = provider.unwrap_or(Sourced {
        value: match forge_kind {
            ForgeKind::Local => ProviderKind::Local,
            ForgeKind::GitHub => ProviderKind::GitHubApp,
            ForgeKind::Gitea if gitea_password.is_some() => ProviderKind::GiteaToken,
            ForgeKind::Gitea => ProviderKind::Fallback,
            ForgeKind::GitLab => ProviderKind::GitLabProjectToken,
        },
        origin: Origin::Default,
        rank: 0,
    });
    let credentials = match (forge_kind, provider.value) {
        (ForgeKind::Local, ProviderKind::Local) => CredentialConfig::Local,
        (ForgeKind::GitHub | ForgeKind::GitLab, ProviderKind::Fallback) => {
            CredentialConfig::Fallback {
                reason: "credentials.provider = \"fallback\" in the configuration".to_owned(),
            }
        }
        (ForgeKind::Gitea, ProviderKind::Fallback) => CredentialConfig::Fallback {
            reason: match provider.origin {
                Origin::Default => "Gitea mints a narrow token only with the account's password, and [credentials.gitea] names no password_command".to_owned(),
                _ => "credentials.provider = \"fallback\" in the configuration".to_owned(),
            },
        },
        (ForgeKind::GitHub, ProviderKind::GitHubApp) => {
            let missing = |field| {
                ConfigError::Invalid {
                origin: provider.origin.clone(),
                field,
                problem: "the github-app credential provider needs it (or set credentials.provider = \"fallback\")".to_owned(),
            }
            };
            CredentialConfig::GitHubApp(GitHubAppSettings {
                api_url: github.api_url(&GITHUB, &kind_origin)?,
                app_id: app_id
                    .ok_or_else(|| missing("credentials.github_app.app_id"))?
                    .value,
                installation_id: installation_id
                    .ok_or_else(|| missing("credentials.github_app.installation_id"))?
                    .value,
                private_key: private_key
                    .ok_or_else(|| missing("credentials.github_app.private_key"))?
                    .into_path(),
            })
        }
        (ForgeKind::Gitea, ProviderKind::GiteaToken) => {
            let password = command(gitea_password, "credentials.gitea.password_command")?
                .ok_or_else(|| ConfigError::Invalid {
                    origin: provider.origin.clone(),
                    field: "credentials.gitea.password_command",
                    problem: "the gitea-token provider mints with the account's password: name a command that prints it (or set credentials.provider = \"fallback\")".to_owned(),
                })?;
            CredentialConfig::GiteaToken(GiteaTokenSettings {
                api_url: gitea.api_url(&GITEA, &kind_origin)?,
                user: non_empty(gitea_user, "credentials.gitea.user")?,
                password: TokenSource::Command(password),
                otp: command(gitea_otp, "credentials.gitea.otp_command")?.map(TokenSource::Command),
            })
        }
        (ForgeKind::GitLab, ProviderKind::GitLabProjectToken) => {
            CredentialConfig::GitLabProjectToken
        }
        (kind, other) => {
            return Err(ConfigError::Invalid {
                origin: provider.origin,
                field: "credentials.provider",
                problem: format!(
                    "{:?} does not mint credentials for the {} forge; it takes {}",
                    other.label(),
                    kind.label(),
                    kind.providers()
                ),
            });
        }
    };
    let credential_ttl = match ttl_seconds {
        None => DEFAULT_CREDENTIAL_TTL,
        Some(Sourced { value, origin, .. }) if !(60..=3600).contains(&value) => {
            return Err(invalid(
                origin,
                "credentials.ttl_seconds",
                format!("{value} is outside 60..=3600: a scoped credential is short-lived"),
            ));
        }
        Some(ttl) => Duration::from_secs(ttl.value),
    };
    let default_identity = default_agent();
    let agent = Identity {
        name: agent_name.map_or(default_identity.name, |name| name.value),
        email: match agent_email {
            None => default_identity.email,
            Some(Sourced { value, origin, .. })
                if !value.contains('@') || value.contains(['<', '>', '\n']) =>
            {
                return Err(invalid(
                    origin,
                    "agent.email",
                    format!("{value:?} is not an email address"),
                ));
            }
            Some(email) => email.value,
        },
    };
    let import = ImportLimits {
        max_files: max_files.map_or(defaults.max_files, |found| found.value),
        max_file_bytes: max_file_bytes.map_or(defaults.max_file_bytes, |found| found.value),
        max_total_bytes: max_total_bytes.map_or(defaults.max_total_bytes, |found| found.value),
        max_path_bytes: max_path_bytes.map_or(defaults.max_path_bytes, |found| found.value),
    };
    let base = BaseLimits {
        max_files: base_files.map_or(base_defaults.max_files, |found| found.value),
        max_file_bytes: base_file_bytes.map_or(base_defaults.max_file_bytes, |found| found.value),
        max_total_bytes: base_total_bytes
            .map_or(base_defaults.max_total_bytes, |found| found.value),
        max_path_bytes: base_path_bytes.map_or(base_defaults.max_path_bytes, |found| found.value),
        max_depth: match base_depth {
            None => base_defaults.max_depth,
            Some(Sourced { value, origin, .. })
                if !(1..=crate::git::import::MAX_DEPTH as u64).contains(&value) =>
            {
                return Err(invalid(
                    origin,
                    "base.max_depth",
                    format!(
                        "{value} is outside 1..={} (the import walks no deeper)",
                        crate::git::import::MAX_DEPTH
                    ),
                ));
            }
            Some(depth) => depth.value as usize,
        },
    };
    let inbox = crate::inbox::InboxLimits {
        max_briefs: max_briefs.map_or(inbox_defaults.max_briefs, |found| found.value),
        max_total_bytes: max_inbox_bytes
            .map_or(inbox_defaults.max_total_bytes, |found| found.value),
    };
    let protected_paths = protected_paths(protected)?;
    let dispatch = DispatchSettings {
        timeout: match timeout_secs {
            None => DEFAULT_DISPATCH_TIMEOUT,
            Some(Sourced { value, origin, .. }) if !(60..=86_400).contains(&value) => {
                return Err(invalid(
                    origin,
                    "dispatch.timeout_secs",
                    format!("{value} is outside 60..=86400 (one minute to one day)"),
                ));
            }
            Some(secs) => Duration::from_secs(secs.value),
        },
        concurrency: match concurrency {
            None => DEFAULT_CONCURRENCY,
            Some(Sourced { value, origin, .. }) => usize::try_from(value)
                .ok()
                .filter(|count| (1..=64).contains(count))
                .ok_or_else(|| {
                    invalid(
                        origin,
                        "dispatch.concurrency",
                        format!("{value} is outside 1..=64"),
                    )
                })?,
        },
        cost_ceiling_usd: match cost_ceiling_usd {
            None => None,
            Some(Sourced { value, origin, .. }) if !value.is_finite() || value <= 0.0 => {
                return Err(invalid(
                    origin,
                    "dispatch.cost_ceiling_usd",
                    format!("{value} is not a positive number of US dollars"),
                ));
            }
            Some(usd) => Some(usd.value),
        },
        max_record_bytes: match max_record_bytes {
            None => crate::dispatch::record::DEFAULT_MAX_RECORD_BYTES,
            Some(Sourced { value, origin, .. }) if value < 1024 * 1024 => {
                return Err(invalid(
                    origin,
                    "dispatch.max_record_bytes",
                    format!("{value} is under 1048576 (1 MiB)"),
                ));
            }
            Some(bytes) => bytes.value,
        },
        image: non_empty(image, "dispatch.image")?,
        allow_network: allow_network.as_ref().is_some_and(|allowed| allowed.value),
    };
    let bridge = allow_network
        .filter(|allowed| allowed.value)
        .map(|allowed| allowed.origin);
    let harness = HarnessConfig {
        kind: harness_kind.map(|kind| kind.value).unwrap_or_default(),
        script: ScriptHarnessSettings {
            scenario: scenario.map(Sourced::into_path),
            pace: match pace {
                None => DEFAULT_PACE,
                Some(Sourced { value, origin, .. }) if !(0.0..=100.0).contains(&value) => {
                    return Err(invalid(
                        origin,
                        "harness.script.pace",
                        format!("{value} is outside 0.0..=100.0"),
                    ));
                }
                Some(pace) => pace.value,
            },
        },
        openhands: OpenHandsHarnessConfig {
            model: non_empty(model, "harness.openhands.model")?,
        },
        codex: CodexHarnessConfig {
            model: non_empty(codex_model, "harness.codex.model")?,
        },
        claude: super::ClaudeHarnessConfig {
            model: non_empty(claude_model, "harness.claude.model")?,
        },
    };
    let runtime = RuntimeConfig {
        kind: runtime_kind.map(|kind| kind.value).unwrap_or_default(),
        engine: runtime_engine
            .map(|engine| engine.value)
            .unwrap_or_default(),
        host: super::url::checked_engine_host(runtime_host)?,
        warm: checked_warm(warm, mounts.as_ref().map(|mounts| mounts.value))?,
        mounts: mounts.map(|mounts| mounts.value),
    };
    let model = ModelConfig {
        base_url: checked_url(base_url, "model.base_url")?,
        api: model_api.map(|api| api.value),
        api_key_env: match api_key_env {
            None => None,
            Some(Sourced { value, origin, .. }) if !is_variable_name(&value) => {
                return Err(invalid(
                    origin,
                    "model.api_key_env",
                    format!(
                        "{value:?} is not the name of an environment variable (letters, digits and _)"
                    ),
                ));
            }
            Some(name) => Some(name.value),
        },
        prices: prices.map(Sourced::into_path),
        request_timeout: match model_timeout_secs {
            None => DEFAULT_MODEL_REQUEST_TIMEOUT,
            Some(Sourced { value, origin, .. }) if !(1..=3600).contains(&value) => {
                return Err(invalid(
                    origin,
                    "model.request_timeout_secs",
                    format!("{value} is outside 1..=3600"),
                ));
            }
            Some(secs) => Duration::from_secs(secs.value),
        },
        max_concurrent_requests: match max_concurrent_requests {
            None => crate::gateway::DEFAULT_MAX_CONCURRENT_REQUESTS,
            Some(Sourced { value, origin, .. }) if !(1..=64).contains(&value) => {
                return Err(invalid(
                    origin,
                    "model.max_concurrent_requests",
                    format!("{value} is outside 1..=64"),
                ));
            }
            Some(count) => count.value as usize,
        },
        allow: allow.map(|allow| allow.value),
        provider_tools: match provider_tools {
            None => std::collections::BTreeMap::new(),
            Some(Sourced { value, origin, .. }) => {
                if let Some((name, price)) = value
                    .iter()
                    .find(|(_, price)| !(price.is_finite() && **price >= 0.0))
                {
                    return Err(invalid(
                        origin,
                        "model.provider_tools",
                        format!("{name:?} costs {price}, not a price in dollars per call"),
                    ));
                }
                value
            }
        },
    };
    let network = NetworkConfig {
        ca_bundle: match ca_bundle {
            Some(Sourced { origin, .. })
                if repository_path
                    .as_ref()
                    .is_some_and(|path| origin.file() == *path) =>
            {
                return Err(invalid(
                    origin,
                    "network.ca_bundle",
                    "is read only from your own configuration ($XDG_CONFIG_HOME/stet/config.toml), never from a repository's, trusted or not: the certificate authorities stet trusts are the machine's".to_owned(),
                ));
            }
            other => other.map(Sourced::into_path),
        },
        egress: super::egress::resolve(egress, bridge.as_ref(), repository_path.as_deref())?,
    };
    Ok(Config {
        forge,
        credentials,
        credential_ttl,
        agent,
        import,
        base,
        protected_paths,
        dispatch,
        harness,
        runtime,
        model,
        repository_file,
        inbox,
        network,
    })
}

/// A command's argv, unless it names no program: then an error naming its origin and `field`.
fn command(argv: Option<Sourced<Vec<String>>>, field: &'static str) -> Result<Option<Vec<String>>> {
    match argv {
        Some(Sourced { value, origin, .. })
            if value
                .first()
                .is_none_or(|program| program.trim().is_empty()) =>
        {
            Err(invalid(
                origin,
                field,
                "needs a program to run and its arguments, e.g. [\"pass\", \"show\", \"forge\"]"
                    .to_owned(),
            ))
        }
        other => Ok(other.map(|argv| argv.value)),
    }
}

/// The built-in rules, the user's patterns and every repository file's, each list checked on its
/// own so an error names the file that holds the pattern. Nothing removes a built-in rule.
fn protected_paths(Lists { base, added }: Lists<String>) -> Result<ProtectedPaths> {
    let mut paths = ProtectedPaths::default();
    for list in base.into_iter().chain(added) {
        paths = paths.extended(&list.value).map_err(|error| {
            invalid(
                list.origin.clone(),
                "review.protected_paths",
                error.to_string(),
            )
        })?;
    }
    Ok(paths)
}

/// The URL, checked by the one URL rule.
fn checked_url(url: Option<Sourced<String>>, field: &'static str) -> Result<Option<String>> {
    match url {
        None => Ok(None),
        Some(Sourced { value, origin, .. }) => match super::url::check(&value) {
            Ok(()) => Ok(Some(value)),
            Err(error) => Err(invalid(origin, field, error.to_string())),
        },
    }
}

/// The value, unless it is blank: then an error naming its origin and `field`.
fn non_empty(value: Option<Sourced<String>>, field: &'static str) -> Result<Option<String>> {
    match value {
        Some(Sourced { value, origin, .. }) if value.trim().is_empty() => {
            Err(invalid(origin, field, "is empty".to_owned()))
        }
        other => Ok(other.map(|sourced| sourced.value)),
    }
}

/// `runtime.warm`: at most [`super::MAX_WARM`], and only in copy mode, since a pooled container
/// is started before its dispatch exists and bind mounts cannot be added to a running container.
fn checked_warm(
    warm: Option<Sourced<u64>>,
    mounts: Option<crate::runtime::MountMode>,
) -> Result<usize> {
    let Some(Sourced { value, origin, .. }) = warm else {
        return Ok(0);
    };
    let count = usize::try_from(value)
        .ok()
        .filter(|count| *count <= super::MAX_WARM)
        .ok_or_else(|| {
            invalid(
                origin.clone(),
                "runtime.warm",
                format!("{value} is outside 0..={}", super::MAX_WARM),
            )
        })?;
    if count > 0 && mounts == Some(crate::runtime::MountMode::Bind) {
        return Err(invalid(
            origin,
            "runtime.warm",
            format!(
                "{value} needs runtime.mounts = \"copy\": a pooled sandbox is started before its dispatch, and bind mounts cannot be added to a running container"
            ),
        ));
    }
    Ok(count)
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

fn invalid(origin: Origin, field: &'static str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        origin,
        field,
        problem,
    }
}

impl Sourced<PathBuf> {
    /// The path, `~/` expanded to the home directory and a relative path taken relative to the
    /// directory of the file that names it.
    pub(super) fn into_path(self) -> PathBuf {
        let directory = match &self.origin {
            Origin::File { path, .. } => path.parent().unwrap_or(Path::new(".")).to_owned(),
            Origin::Default | Origin::Environment(_) => PathBuf::from("."),
        };
        resolve_path(&directory, self.value)
    }
}

/// `~/x` expands to the home directory; a relative path is relative to `directory`.
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
