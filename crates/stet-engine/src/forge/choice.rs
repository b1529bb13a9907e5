//! Which forge receives results and which provider mints a dispatch's scoped credential, as the
//! configuration chooses them: the forge's registry ([`super::from_settings`]) reads only these, never
//! the whole configuration.

use std::path::PathBuf;

use super::gitea_token::GiteaTokenSettings;
use super::github_app::GitHubAppSettings;
use super::settings::ForgeSettings;

/// Which forge receives results.
#[derive(Debug, Clone, PartialEq)]
pub enum ForgeConfig {
    /// A repository on disk.
    Local {
        /// The repository that receives results; `None` means the repository stet runs in.
        remote: Option<PathBuf>,
    },
    /// GitHub or GitHub Enterprise.
    GitHub(ForgeSettings),
    /// Gitea or Forgejo (the same API).
    Gitea(ForgeSettings),
    /// GitLab, self-managed or gitlab.com.
    GitLab(ForgeSettings),
}

/// Which provider mints a dispatch's scoped credential.
#[derive(Debug, Clone, PartialEq)]
pub enum CredentialConfig {
    /// The local forge's own short-lived tokens.
    Local,
    /// GitHub App installation tokens limited to the target repository.
    GitHubApp(GitHubAppSettings),
    /// Gitea access tokens of the `write:repository` scope, minted with the account's password.
    GiteaToken(GiteaTokenSettings),
    /// GitLab project access tokens of the target project (`write_repository`, Developer).
    GitLabProjectToken,
    /// The ADR's fallback: the primary token behind a short TTL; it never enters a sandbox.
    Fallback {
        /// Why no narrow credential is minted, naming the setting that would change it.
        reason: String,
    },
}
