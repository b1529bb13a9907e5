//! How a REST client authenticates: the `Authorization` header (and Gitea's one-time code) for each
//! kind of credential, built fresh per request and marked sensitive.

use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use zeroize::Zeroizing;

use crate::credential::SecretValue;
use crate::forge::app_jwt::AppKey;
use crate::forge::{ForgeError, Result};

/// How a client authenticates to the API.
pub(crate) enum Auth {
    /// `Authorization: Bearer <token>`: a primary token (GitHub, GitLab), or a minted token revoking
    /// itself.
    Bearer(SecretValue),
    /// `Authorization: token <token>`: Gitea's and Forgejo's spelling.
    Token(SecretValue),
    /// `Authorization: Basic <user:password>`, with Gitea's `X-Gitea-OTP` when a one-time code is
    /// given: the only way Gitea mints and deletes access tokens.
    Basic {
        /// The account's login name.
        user: String,
        /// Its password.
        password: SecretValue,
        /// The current one-time code of its second factor, when it has one.
        otp: Option<SecretValue>,
    },
    /// A GitHub App: `Authorization: Bearer <JWT>`, a fresh JWT signed with the app's key per request.
    GitHubApp(Box<AppKey>),
}

/// Gitea's header for the second factor's one-time code.
const GITEA_OTP: &str = "x-gitea-otp";

impl Auth {
    /// The headers for the next request, each marked sensitive so no debug output shows it.
    pub(super) fn headers(&self, forge: &'static str) -> Result<Vec<(HeaderName, HeaderValue)>> {
        let uncarriable = |what: &str| ForgeError::Token {
            forge,
            detail: format!("the {what} contains characters an HTTP header cannot carry"),
        };
        let sensitive = |text: &str, what: &str| {
            let mut value = HeaderValue::try_from(text).map_err(|_| uncarriable(what))?;
            value.set_sensitive(true);
            Ok::<_, ForgeError>(value)
        };
        // Stricter than a header value: no space, no byte beyond ASCII.
        let word = |token: &str, what: &str| {
            if token.bytes().all(|b| b.is_ascii_graphic()) {
                Ok(())
            } else {
                Err(uncarriable(what))
            }
        };
        let authorization = match self {
            Auth::Bearer(token) => {
                word(token.expose_secret(), "token")?;
                Zeroizing::new(format!("Bearer {}", token.expose_secret()))
            }
            Auth::Token(token) => {
                word(token.expose_secret(), "token")?;
                Zeroizing::new(format!("token {}", token.expose_secret()))
            }
            Auth::Basic { user, password, .. } => {
                if user.contains(':') || user.chars().any(char::is_control) {
                    return Err(uncarriable("user name"));
                }
                let pair = Zeroizing::new(format!("{user}:{}", password.expose_secret()));
                Zeroizing::new(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair.as_bytes())
                ))
            }
            Auth::GitHubApp(key) => {
                let jwt = key
                    .jwt()
                    .map_err(|detail| ForgeError::Token { forge, detail })?;
                word(&jwt, "token")?;
                Zeroizing::new(format!("Bearer {}", jwt.as_str()))
            }
        };
        let mut headers = vec![(AUTHORIZATION, sensitive(&authorization, "token")?)];
        if let Auth::Basic { otp: Some(otp), .. } = self {
            word(otp.expose_secret(), "one-time code")?;
            headers.push((
                HeaderName::from_static(GITEA_OTP),
                sensitive(otp.expose_secret(), "one-time code")?,
            ));
        }
        Ok(headers)
    }
}
