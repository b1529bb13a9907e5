//! The configuration file format, one type per `[section]`, every value kept with its span so the
//! merge can say which file and line set it. A file is parsed into a [`Layer`]: the settings, where
//! they came from (the user's file, a repository's, an environment variable), and the file's line
//! starts. Inline secrets and settings that moved are refused here, before anything is merged.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::{
    ConfigError, ENV_CONCURRENCY, ENV_COST_CEILING_USD, ENV_HARNESS, ENV_IMAGE, ENV_TIMEOUT_SECS,
    FileRole, HarnessKind, Origin, Result,
};
use crate::runtime::{MountMode, RuntimeKind};

/// One setting as a file spells it: absent, or a value and where in the file it is.
pub(super) type Setting<T> = Option<Spanned<T>>;

/// A whole configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct FileSettings {
    pub forge: ForgeSection,
    pub credentials: CredentialsSection,
    pub agent: AgentSection,
    pub import: ImportSection,
    pub base: BaseSection,
    pub review: ReviewSection,
    pub dispatch: DispatchSection,
    pub harness: HarnessSection,
    pub runtime: RuntimeSection,
    pub model: ModelSection,
    pub inbox: InboxSection,
    pub network: NetworkSection,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ForgeKind {
    Local,
    GitHub,
    Gitea,
    GitLab,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ProviderKind {
    Local,
    #[serde(rename = "github-app")]
    GitHubApp,
    GiteaToken,
    #[serde(rename = "gitlab-project-token")]
    GitLabProjectToken,
    Fallback,
}

impl ForgeKind {
    pub(super) fn label(self) -> &'static str {
        match self {
            ForgeKind::Local => "local",
            ForgeKind::GitHub => "github",
            ForgeKind::Gitea => "gitea",
            ForgeKind::GitLab => "gitlab",
        }
    }

    /// The credential providers this forge takes, as an error lists them.
    pub(super) fn providers(self) -> &'static str {
        match self {
            ForgeKind::Local => "\"local\"",
            ForgeKind::GitHub => "\"github-app\" or \"fallback\"",
            ForgeKind::Gitea => "\"gitea-token\" or \"fallback\"",
            ForgeKind::GitLab => "\"gitlab-project-token\" or \"fallback\"",
        }
    }
}

impl ProviderKind {
    pub(super) fn label(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::GitHubApp => "github-app",
            ProviderKind::GiteaToken => "gitea-token",
            ProviderKind::GitLabProjectToken => "gitlab-project-token",
            ProviderKind::Fallback => "fallback",
        }
    }
}

/// `[forge]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ForgeSection {
    pub kind: Setting<ForgeKind>,
    pub local: LocalSection,
    pub github: RestForgeSection,
    pub gitea: RestForgeSection,
    pub gitlab: RestForgeSection,
}

/// `[forge.local]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct LocalSection {
    pub remote: Setting<PathBuf>,
}

/// `[forge.github]`, `[forge.gitea]`, `[forge.gitlab]`: a forge reached over its REST API.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RestForgeSection {
    pub api_url: Setting<String>,
    pub git_url: Setting<String>,
    pub token_env: Setting<String>,
    pub token_command: Setting<Vec<String>>,
    /// Only here to refuse it with a useful message.
    token: Setting<toml::Value>,
}

/// `[credentials]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct CredentialsSection {
    pub provider: Setting<ProviderKind>,
    pub ttl_seconds: Setting<u64>,
    pub github_app: GitHubAppSection,
    pub gitea: GiteaCredentialsSection,
}

/// `[credentials.gitea]`: the account whose password mints Gitea access tokens.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct GiteaCredentialsSection {
    pub user: Setting<String>,
    pub password_command: Setting<Vec<String>>,
    pub otp_command: Setting<Vec<String>>,
    /// Only here to refuse an inline password with a useful message.
    password: Setting<toml::Value>,
    /// Only here to refuse an inline one-time secret with a useful message.
    otp: Setting<toml::Value>,
}

/// `[credentials.github_app]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct GitHubAppSection {
    pub app_id: Setting<u64>,
    pub installation_id: Setting<u64>,
    pub private_key: Setting<PathBuf>,
    /// Only here to refuse an inline key with a useful message.
    private_key_pem: Setting<toml::Value>,
}

/// `[agent]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct AgentSection {
    pub name: Setting<String>,
    pub email: Setting<String>,
}

/// `[import]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ImportSection {
    pub max_files: Setting<u64>,
    pub max_file_bytes: Setting<u64>,
    pub max_total_bytes: Setting<u64>,
    pub max_path_bytes: Setting<u64>,
}

/// `[base]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct BaseSection {
    pub max_files: Setting<u64>,
    pub max_file_bytes: Setting<u64>,
    pub max_total_bytes: Setting<u64>,
    pub max_path_bytes: Setting<u64>,
    pub max_depth: Setting<u64>,
}

/// `[inbox]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct InboxSection {
    pub max_briefs: Setting<u64>,
    pub max_total_bytes: Setting<u64>,
}

/// `[network]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct NetworkSection {
    pub ca_bundle: Setting<PathBuf>,
    pub sandbox_ca_bundle: Setting<PathBuf>,
    pub allow: Setting<Vec<String>>,
    pub presets: Setting<Vec<String>>,
    pub allow_http: Setting<bool>,
    pub egress: Setting<bool>,
    pub deny: Setting<Vec<String>>,
    pub max_upload_bytes: Setting<u64>,
    pub review_upload_bytes: Setting<u64>,
    pub loopback_for_tests: Setting<bool>,
}

/// `[review]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ReviewSection {
    pub protected_paths: Setting<Vec<String>>,
}

/// `[dispatch]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct DispatchSection {
    pub timeout_secs: Setting<u64>,
    pub concurrency: Setting<u64>,
    pub cost_ceiling_usd: Setting<f64>,
    pub max_record_bytes: Setting<u64>,
    pub image: Setting<String>,
    pub allow_network: Setting<bool>,
}

/// `[harness]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct HarnessSection {
    pub kind: Setting<HarnessKind>,
    pub script: ScriptSection,
    pub openhands: OpenHandsSection,
    pub codex: CodexSection,
    pub claude: ClaudeSection,
}

/// `[runtime]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RuntimeSection {
    pub kind: Setting<RuntimeKind>,
    pub engine: Setting<crate::runtime::endpoint::Engine>,
    pub host: Setting<String>,
    pub mounts: Setting<MountMode>,
    pub warm: Setting<u64>,
}

/// `[harness.script]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ScriptSection {
    pub scenario: Setting<PathBuf>,
    pub pace: Setting<f64>,
}

/// `[harness.openhands]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct OpenHandsSection {
    pub model: Setting<String>,
    /// Only here to say where the endpoint went (`[model]`).
    base_url: Setting<toml::Value>,
    /// Only here to say where the key's variable went (`[model]`).
    api_key_env: Setting<toml::Value>,
    /// Only here to refuse an inline key with a useful message.
    api_key: Setting<toml::Value>,
}

/// `[harness.codex]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct CodexSection {
    pub model: Setting<String>,
}

/// `[harness.claude]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ClaudeSection {
    pub model: Setting<String>,
}

/// `[model]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ModelSection {
    pub base_url: Setting<String>,
    pub api: Setting<crate::gateway::policy::WireApi>,
    pub api_key_env: Setting<String>,
    pub prices: Setting<PathBuf>,
    pub request_timeout_secs: Setting<u64>,
    pub max_concurrent_requests: Setting<u64>,
    pub allow: Setting<Vec<String>>,
    pub provider_tools: Setting<std::collections::BTreeMap<String, f64>>,
    /// Only here to refuse an inline key with a useful message.
    api_key: Setting<toml::Value>,
}

/// Where a layer's settings came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LayerSource {
    File { path: PathBuf, role: FileRole },
    Environment(&'static str),
}

/// One file's (or one environment variable's) settings.
#[derive(Debug)]
pub(super) struct Layer {
    pub source: LayerSource,
    pub settings: FileSettings,
    line_starts: Vec<usize>,
}

impl Layer {
    /// Parses `text`, the content of `path` read in `role`.
    pub(crate) fn parse(path: &Path, text: &str, role: FileRole) -> Result<Layer> {
        let line_starts = line_starts(text);
        let settings: FileSettings = toml::from_str(text).map_err(|error| {
            let (line, column) =
                line_and_column(&line_starts, error.span().map_or(0, |span| span.start));
            ConfigError::Parse {
                file: path.to_owned(),
                line,
                column,
                message: stet_sanitize::display::escaped_invisible(error.message()).into_owned(),
            }
        })?;
        let layer = Layer {
            source: LayerSource::File {
                path: path.to_owned(),
                role,
            },
            settings,
            line_starts,
        };
        layer.refuse_inline_secrets_and_moved_fields()?;
        Ok(layer)
    }

    /// The `STET_*` variables `env` finds, one layer each, in a fixed order; a value that is not a
    /// number where one is wanted is an error naming the variable (ranges are checked with the
    /// files' values). A variable that is empty counts as unset.
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Layer>> {
        let read = |variable: &'static str| {
            env(variable)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let origin = |variable| Origin::Environment(variable);
        let whole_number = |variable: &'static str, field: &'static str, unit: &str| {
            read(variable)
                .map(|text| {
                    text.parse::<u64>().map_err(|_| ConfigError::Invalid {
                        origin: origin(variable),
                        field,
                        problem: format!("{text:?} is not a whole number of {unit}"),
                    })
                })
                .transpose()
        };
        let mut layers = Vec::new();
        let mut push = |variable: &'static str, set: &dyn Fn(&mut FileSettings)| {
            let mut settings = FileSettings::default();
            set(&mut settings);
            layers.push(Layer {
                source: LayerSource::Environment(variable),
                settings,
                line_starts: vec![0],
            });
        };
        if let Some(secs) = whole_number(ENV_TIMEOUT_SECS, "dispatch.timeout_secs", "seconds")? {
            push(ENV_TIMEOUT_SECS, &|s| {
                s.dispatch.timeout_secs = unspanned(secs)
            });
        }
        if let Some(count) = whole_number(ENV_CONCURRENCY, "dispatch.concurrency", "dispatches")? {
            push(ENV_CONCURRENCY, &|s| {
                s.dispatch.concurrency = unspanned(count)
            });
        }
        if let Some(text) = read(ENV_COST_CEILING_USD) {
            let usd = text.parse::<f64>().map_err(|_| ConfigError::Invalid {
                origin: origin(ENV_COST_CEILING_USD),
                field: "dispatch.cost_ceiling_usd",
                problem: format!("{text:?} is not a number of US dollars"),
            })?;
            push(ENV_COST_CEILING_USD, &|s| {
                s.dispatch.cost_ceiling_usd = unspanned(usd);
            });
        }
        if let Some(image) = read(ENV_IMAGE) {
            push(ENV_IMAGE, &|s| s.dispatch.image = unspanned(image.clone()));
        }
        if let Some(text) = read(ENV_HARNESS) {
            let Some(kind) = HarnessKind::from_name(&text) else {
                let names: Vec<String> = HarnessKind::ALL
                    .iter()
                    .map(|kind| format!("{:?}", kind.as_str()))
                    .collect();
                return Err(ConfigError::Invalid {
                    origin: origin(ENV_HARNESS),
                    field: "harness.kind",
                    problem: format!("{text:?} is not a harness: use {}", names.join(" or ")),
                });
            };
            push(ENV_HARNESS, &|s| s.harness.kind = unspanned(kind));
        }
        Ok(layers)
    }

    /// Where the value at `span` of this layer came from.
    pub(crate) fn origin(&self, span: std::ops::Range<usize>) -> Origin {
        match &self.source {
            LayerSource::File { path, .. } => Origin::File {
                path: path.clone(),
                line: line_and_column(&self.line_starts, span.start).0,
            },
            LayerSource::Environment(variable) => Origin::Environment(variable),
        }
    }

    /// Whether this is a repository's file the user has not trusted.
    pub(crate) fn is_untrusted_repository(&self) -> bool {
        matches!(
            self.source,
            LayerSource::File {
                role: FileRole::Repository,
                ..
            }
        )
    }

    /// Whether this is a repository's file, trusted or not.
    pub(crate) fn is_repository(&self) -> bool {
        matches!(
            self.source,
            LayerSource::File {
                role: FileRole::Repository | FileRole::TrustedRepository,
                ..
            }
        )
    }

    fn refuse_inline_secrets_and_moved_fields(&self) -> Result<()> {
        let settings = &self.settings;
        let inline = [
            (
                &settings.forge.github.token,
                "forge.github.token",
                "token_env = \"GITHUB_TOKEN\" or token_command = [\"gh\", \"auth\", \"token\"]",
            ),
            (
                &settings.forge.gitea.token,
                "forge.gitea.token",
                "token_env = \"GITEA_TOKEN\" or token_command = [\"pass\", \"show\", \"gitea/token\"]",
            ),
            (
                &settings.forge.gitlab.token,
                "forge.gitlab.token",
                "token_env = \"GITLAB_TOKEN\" or token_command = [\"glab\", \"auth\", \"token\"]",
            ),
            (
                &settings.credentials.gitea.password,
                "credentials.gitea.password",
                "password_command = [\"pass\", \"show\", \"gitea/password\"]",
            ),
            (
                &settings.credentials.gitea.otp,
                "credentials.gitea.otp",
                "otp_command = [\"pass\", \"otp\", \"gitea\"] (a command that prints the current code)",
            ),
            (
                &settings.credentials.github_app.private_key_pem,
                "credentials.github_app.private_key_pem",
                "private_key = \"path/to/app.pem\"",
            ),
            (
                &settings.harness.openhands.api_key,
                "harness.openhands.api_key",
                "api_key_env = \"OPENAI_API_KEY\" under [model]",
            ),
            (
                &settings.model.api_key,
                "model.api_key",
                "api_key_env = \"OPENAI_API_KEY\"",
            ),
        ];
        for (value, field, instead) in inline {
            if let Some(value) = value {
                return Err(ConfigError::InlineSecret {
                    origin: self.origin(value.span()),
                    field,
                    instead,
                });
            }
        }
        for (value, field) in [
            (
                &settings.harness.openhands.base_url,
                "harness.openhands.base_url",
            ),
            (
                &settings.harness.openhands.api_key_env,
                "harness.openhands.api_key_env",
            ),
        ] {
            if let Some(value) = value {
                return Err(ConfigError::Invalid {
                    origin: self.origin(value.span()),
                    field,
                    problem: "moved to [model] (base_url, api_key_env): the gateway keeps the key on the host".to_owned(),
                });
            }
        }
        for (section, field) in [
            (&settings.forge.github, "forge.github.token_command"),
            (&settings.forge.gitea, "forge.gitea.token_command"),
            (&settings.forge.gitlab, "forge.gitlab.token_command"),
        ] {
            if let (Some(_), Some(command)) = (&section.token_env, &section.token_command) {
                return Err(ConfigError::Invalid {
                    origin: self.origin(command.span()),
                    field,
                    problem: "set token_env or token_command, not both".to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// A value set from outside any file.
fn unspanned<T>(value: T) -> Setting<T> {
    Some(Spanned::new(0..0, value))
}

/// The byte offset where each line of `text` starts.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(index, _)| index + 1))
        .collect()
}

/// The 1-based line and column (in characters) of byte `offset`.
fn line_and_column(line_starts: &[usize], offset: usize) -> (usize, usize) {
    let line = line_starts.partition_point(|start| *start <= offset).max(1);
    let start = line_starts.get(line - 1).copied().unwrap_or(0);
    (line, offset.saturating_sub(start) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one() {
        let starts = line_starts("ab\ncd\n\nx");
        assert_eq!(line_and_column(&starts, 0), (1, 1));
        assert_eq!(line_and_column(&starts, 1), (1, 2));
        assert_eq!(line_and_column(&starts, 3), (2, 1));
        assert_eq!(line_and_column(&starts, 6), (3, 1));
        assert_eq!(line_and_column(&starts, 7), (4, 1));
    }

    #[test]
    fn escape_sequences_in_a_quoted_key_do_not_reach_the_terminal() {
        let error = Layer::parse(
            Path::new("/r/stet.toml"),
            "[dispatch]\n\"\\u001b]52;c;aGk=\\u0007\" = 1\n",
            FileRole::Repository,
        )
        .unwrap_err()
        .to_string();
        assert!(
            !error.contains('\u{1b}') && !error.contains('\u{7}'),
            "{error:?}"
        );
        assert!(error.starts_with("/r/stet.toml:2:"), "{error}");
    }
}
