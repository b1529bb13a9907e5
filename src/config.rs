//! `Config`: what a user sets once — which forge, which credential provider, the agent's identity,
//! import limits, protected paths. Read from the repository's `stet.toml` over the user's
//! `$XDG_CONFIG_HOME/stet/config.toml` over defaults, field by field. Secrets are only ever referenced
//! (`token_env`, `token_command`, a key file's path), never written inline: an inline one is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::forge::github::{GitHubSettings, RetryPolicy};
use crate::forge::github_app::GitHubAppSettings;
use crate::forge::protected::ProtectedPaths;
use crate::forge::token::TokenSource;
use crate::git::import::{Identity, ImportLimits};

/// The repository's own configuration file, at its root.
pub const REPOSITORY_FILE: &str = "stet.toml";

const DEFAULT_TOKEN_ENV: &str = "GITHUB_TOKEN";
const DEFAULT_API_URL: &str = "https://api.github.com";
const DEFAULT_GIT_URL: &str = "https://github.com";
const DEFAULT_CREDENTIAL_TTL: Duration = Duration::from_secs(15 * 60);

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

/// Everything configurable that the forge and git layers need.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub forge: ForgeConfig,
    pub credentials: CredentialConfig,
    pub credential_ttl: Duration,
    pub agent: Identity,
    pub import: ImportLimits,
    pub protected_paths: ProtectedPaths,
}

impl Config {
    /// Reads the user file and, when `repository` is given, the repository's `stet.toml` over it.
    /// Missing files are fine; every other problem is an error naming the file.
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
        Config::from_layers(&layers)
    }

    /// Builds the configuration from `(file, text)` layers, later layers winning field by field.
    pub fn from_layers(layers: &[(PathBuf, String)]) -> Result<Config> {
        let mut merged = Layer::default();
        for (file, text) in layers {
            merged = Layer::parse(file, text)?.over(merged);
        }
        merged.finish()
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

/// A value and the file it came from, so a later check can name its origin.
#[derive(Debug, Clone)]
struct Sourced<T> {
    value: T,
    file: PathBuf,
}

fn sourced<T>(file: &Path, value: T) -> Sourced<T> {
    Sourced {
        value,
        file: file.to_owned(),
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

impl Layer {
    fn parse(file: &Path, text: &str) -> Result<Layer> {
        let raw: RawFile = toml::from_str(text).map_err(|error| ConfigError::Parse {
            file: file.to_owned(),
            message: error.to_string().trim_end().to_owned(),
        })?;
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
                            file,
                            "forge.github.token_command",
                            "set token_env or token_command, not both",
                        ));
                    }
                    (Some(name), None) if name.trim().is_empty() => {
                        return Err(invalid(file, "forge.github.token_env", "is empty"));
                    }
                    (None, Some(argv)) if argv.first().is_none_or(|c| c.trim().is_empty()) => {
                        return Err(invalid(
                            file,
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
        Ok(layer)
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
            file: PathBuf::from("(default)"),
        });
        let credentials = match (forge_kind, provider.value) {
            (ForgeKind::Local, ProviderKind::Local) => CredentialConfig::Local,
            (ForgeKind::GitHub, ProviderKind::Fallback) => CredentialConfig::Fallback,
            (ForgeKind::GitHub, ProviderKind::GitHubApp) => {
                let origin = provider.file.display().to_string();
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
                    origin: provider.file.display().to_string(),
                    field: "credentials.provider",
                    problem: format!(
                        "{:?} mints GitHub credentials; the local forge uses provider \"local\"",
                        other.label()
                    ),
                });
            }
            (ForgeKind::GitHub, ProviderKind::Local) => {
                return Err(ConfigError::Invalid {
                    origin: provider.file.display().to_string(),
                    field: "credentials.provider",
                    problem: "the local provider cannot mint GitHub credentials; use \"github-app\" or \"fallback\"".to_owned(),
                });
            }
        };
        let credential_ttl = match self.ttl_seconds {
            None => DEFAULT_CREDENTIAL_TTL,
            Some(Sourced { value, file }) if !(60..=3600).contains(&value) => {
                return Err(invalid(
                    &file,
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
                Some(Sourced { value, file })
                    if !value.contains('@') || value.contains(['<', '>', '\n']) =>
                {
                    return Err(invalid(
                        &file,
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
            Some(Sourced { value, file }) => ProtectedPaths::new(&value)
                .map_err(|error| invalid(&file, "review.protected_paths", &error.to_string()))?,
        };
        Ok(Config {
            forge,
            credentials,
            credential_ttl,
            agent,
            import,
            protected_paths,
        })
    }
}

/// Who commits a result when configuration names nobody (`.invalid` is reserved: it never delivers).
pub fn default_agent() -> Identity {
    Identity {
        name: "stet agent".to_owned(),
        email: "agent@stet.invalid".to_owned(),
    }
}

fn invalid(file: &Path, field: &'static str, problem: &str) -> ConfigError {
    ConfigError::Invalid {
        origin: file.display().to_string(),
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
}
