//! A GitHub App authenticates with a JSON Web Token it signs itself (RS256, ten minutes at most):
//! the app's RSA private key is read once from its PEM file and stays in this process's memory.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::Utc;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use zeroize::Zeroizing;

/// How far back a token's issue time is set, for clocks that run ahead of GitHub's.
const CLOCK_SLACK_SECS: i64 = 60;
/// How long a token is valid; GitHub accepts ten minutes at most, counted from its own clock.
const LIFETIME_SECS: i64 = 9 * 60;

/// The app's identity and private key.
pub(crate) struct AppKey {
    app_id: u64,
    key: RsaKeyPair,
    random: SystemRandom,
}

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppKey")
            .field("app_id", &self.app_id)
            .field("key", &"<withheld>")
            .finish()
    }
}

/// Why a key file could not be used; it never quotes the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("is not a PEM file")]
    NotPem,
    #[error("is not an RSA private key (PKCS#1 or PKCS#8) of 2048 to 4096 bits")]
    NotRsa,
}

impl AppKey {
    /// Reads an RSA private key from PEM text: GitHub's `BEGIN RSA PRIVATE KEY` (PKCS#1) or
    /// `BEGIN PRIVATE KEY` (PKCS#8). An encrypted key is refused.
    pub(crate) fn from_pem(app_id: u64, pem: &[u8]) -> Result<AppKey, KeyError> {
        let text = std::str::from_utf8(pem).map_err(|_| KeyError::NotPem)?;
        let (label, der) = pem_block(text).ok_or(KeyError::NotPem)?;
        let key = match label {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
            _ => return Err(KeyError::NotRsa),
        }
        .map_err(|_| KeyError::NotRsa)?;
        Ok(AppKey {
            app_id,
            key,
            random: SystemRandom::new(),
        })
    }

    /// A fresh token: `{"alg":"RS256","typ":"JWT"}`, issued a minute ago by the app, valid nine
    /// minutes.
    pub(crate) fn jwt(&self) -> Result<Zeroizing<String>, String> {
        let now = Utc::now().timestamp();
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = URL_SAFE_NO_PAD.encode(format!(
            r#"{{"iat":{},"exp":{},"iss":{}}}"#,
            now - CLOCK_SLACK_SECS,
            now + LIFETIME_SECS,
            self.app_id
        ));
        let mut token = Zeroizing::new(format!("{header}.{claims}"));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &self.random,
                token.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "the app's JWT could not be signed".to_owned())?;
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(&signature));
        Ok(token)
    }
}

/// The first PEM block of `text`: its label and its decoded contents. A block with headers
/// (`Proc-Type: 4,ENCRYPTED`) does not decode.
fn pem_block(text: &str) -> Option<(&str, Zeroizing<Vec<u8>>)> {
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + "-----BEGIN ".len()..];
    let (label, rest) = rest.split_once("-----")?;
    let end = rest.find(&format!("-----END {label}-----"))?;
    let body: Zeroizing<String> = Zeroizing::new(
        rest[..end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect(),
    );
    let der = Zeroizing::new(STANDARD.decode(body.as_bytes()).ok()?);
    Some((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_pem_rsa_key_is_refused_by_kind() {
        assert_eq!(AppKey::from_pem(1, b"hello").unwrap_err(), KeyError::NotPem);
        let not_base64 = b"-----BEGIN RSA PRIVATE KEY-----\n!!!\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(
            AppKey::from_pem(1, not_base64).unwrap_err(),
            KeyError::NotPem
        );
        let not_a_key =
            b"-----BEGIN RSA PRIVATE KEY-----\naGVsbG8=\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(
            AppKey::from_pem(1, not_a_key).unwrap_err(),
            KeyError::NotRsa
        );
        let certificate = b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
        assert_eq!(
            AppKey::from_pem(1, certificate).unwrap_err(),
            KeyError::NotRsa
        );
        let encrypted = b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\naGVsbG8=\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(
            AppKey::from_pem(1, encrypted).unwrap_err(),
            KeyError::NotPem
        );
    }
}
