//! The REST forges' sections (`[forge.github]`, `[forge.gitea]`, `[forge.gitlab]`): what each is
//! called and defaults to, and how a section the layers set becomes the forge's settings.

use super::{Origin, Result, Sourced, checked_url, command, invalid};
use crate::forge::rest::RetryPolicy;
use crate::forge::settings::ForgeSettings;
use crate::forge::token::TokenSource;

/// What each REST forge's settings are called and default to.
pub(super) struct ForgeDefaults {
    api_url_field: &'static str,
    git_url_field: &'static str,
    token_env_field: &'static str,
    token_command_field: &'static str,
    /// `None`: the setting is required (a self-hosted forge has no well-known address).
    api_url: Option<&'static str>,
    /// What the API's path is below the web address, to find `git_url` from `api_url`.
    api_path: &'static str,
    /// The git address when `api_url` does not end in `api_path` (GitHub's own `api.github.com`);
    /// `None`: `git_url` is then required.
    git_url: Option<&'static str>,
    token_env: &'static str,
}

pub(super) const GITHUB: ForgeDefaults = ForgeDefaults {
    api_url_field: "forge.github.api_url",
    git_url_field: "forge.github.git_url",
    token_env_field: "forge.github.token_env",
    token_command_field: "forge.github.token_command",
    api_url: Some("https://api.github.com"),
    api_path: "/api/v3",
    git_url: Some("https://github.com"),
    token_env: "GITHUB_TOKEN",
};

pub(super) const GITEA: ForgeDefaults = ForgeDefaults {
    api_url_field: "forge.gitea.api_url",
    git_url_field: "forge.gitea.git_url",
    token_env_field: "forge.gitea.token_env",
    token_command_field: "forge.gitea.token_command",
    api_url: None,
    api_path: "/api/v1",
    git_url: None,
    token_env: "GITEA_TOKEN",
};

pub(super) const GITLAB: ForgeDefaults = ForgeDefaults {
    api_url_field: "forge.gitlab.api_url",
    git_url_field: "forge.gitlab.git_url",
    token_env_field: "forge.gitlab.token_env",
    token_command_field: "forge.gitlab.token_command",
    api_url: Some("https://gitlab.com/api/v4"),
    api_path: "/api/v4",
    git_url: None,
    token_env: "GITLAB_TOKEN",
};

/// One REST forge's section as the layers set it.
pub(super) struct RestForgeReads {
    pub(super) api_url: Option<Sourced<String>>,
    pub(super) git_url: Option<Sourced<String>>,
    pub(super) token_env: Option<Sourced<String>>,
    pub(super) token_command: Option<Sourced<Vec<String>>>,
}

impl RestForgeReads {
    /// The API's URL: as set, or the forge's well-known one; required where there is none (the
    /// error is placed where the forge was chosen, `chosen`).
    pub(super) fn api_url(&self, forge: &ForgeDefaults, chosen: &Origin) -> Result<String> {
        match (
            checked_url(self.api_url.clone(), forge.api_url_field)?,
            forge.api_url,
        ) {
            (Some(url), _) => Ok(url),
            (None, Some(default)) => Ok(default.to_owned()),
            (None, None) => Err(invalid(
                chosen.clone(),
                forge.api_url_field,
                format!(
                    "is required by this forge kind: its REST API, e.g. \"https://git.example.com{}\"",
                    forge.api_path
                ),
            )),
        }
    }

    /// Checks what is set, whichever forge is chosen: a bad value is an error even in a section not
    /// in use.
    pub(super) fn check(&self, forge: &ForgeDefaults) -> Result<()> {
        checked_url(self.api_url.clone(), forge.api_url_field)?;
        checked_url(self.git_url.clone(), forge.git_url_field)?;
        token_source(self.token_env.clone(), self.token_command.clone(), forge)?;
        Ok(())
    }

    /// The forge's settings: `git_url` defaults to `api_url` without its API path (GitHub's own
    /// `api.github.com` to `github.com`), the token to the forge's usual variable.
    pub(super) fn settings(&self, forge: &ForgeDefaults, chosen: &Origin) -> Result<ForgeSettings> {
        let api_url = self.api_url(forge, chosen)?;
        let git_url = match checked_url(self.git_url.clone(), forge.git_url_field)? {
            Some(url) => url,
            None => match api_url.trim_end_matches('/').strip_suffix(forge.api_path) {
                Some(web) if !web.ends_with('/') && web.contains("://") => web.to_owned(),
                _ if let Some(git_url) = forge.git_url => git_url.to_owned(),
                _ => {
                    return Err(invalid(
                        self.api_url
                            .as_ref()
                            .map_or_else(|| chosen.clone(), |url| url.origin.clone()),
                        forge.git_url_field,
                        format!(
                            "is required: {api_url:?} does not end in {:?}, so the address repositories are pushed to cannot be worked out from it",
                            forge.api_path
                        ),
                    ));
                }
            },
        };
        let token = token_source(self.token_env.clone(), self.token_command.clone(), forge)?
            .unwrap_or_else(|| TokenSource::Env(forge.token_env.to_owned()));
        Ok(ForgeSettings {
            api_url,
            git_url,
            token,
            retry: RetryPolicy::default(),
        })
    }
}

/// The token reference of the highest layer that names one (a layer naming both was refused when it
/// was parsed); a blank one is an error.
fn token_source(
    token_env: Option<Sourced<String>>,
    token_command: Option<Sourced<Vec<String>>>,
    forge: &ForgeDefaults,
) -> Result<Option<TokenSource>> {
    let env_wins = match (&token_env, &token_command) {
        (Some(env), Some(command)) => env.rank > command.rank,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if env_wins {
        return match token_env {
            Some(Sourced { value, origin, .. }) if value.trim().is_empty() => Err(invalid(
                origin,
                forge.token_env_field,
                "is empty".to_owned(),
            )),
            other => Ok(other.map(|name| TokenSource::Env(name.value))),
        };
    }
    Ok(command(token_command, forge.token_command_field)?.map(TokenSource::Command))
}
