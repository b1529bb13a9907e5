//! The GitHub forge's requests go out through octocrab (issue 29, item 13): octocrab builds each
//! request — its method, absolute URL, JSON body and GitHub's API-version header — and hands it to a
//! service stack of stet's own, built with `OctocrabBuilder::new_empty()` and no octocrab
//! authentication. The stack is a layer that lets only requests under the configured API through
//! over a service that reads octocrab's body bounded and sends it with stet's REST client ([`Rest`]),
//! which keeps every property octocrab's own client, redirect and retry features would not: the
//! credential attached only for the API's exact origin (scheme, host and port), redirects followed
//! only within it, answers read bounded, a POST the forge may have acted on never sent again, one
//! deadline per request, and every error text sanitized. An error of the stack comes back out of
//! octocrab as the [`ForgeError`] it was.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use octocrab::{AuthState, OctoBody, Octocrab, OctocrabBuilder};
use serde_json::Value;
use tower_service::Service;
use zeroize::Zeroizing;

use super::rest::{Reply, Rest};
use super::{ForgeError, Result};

/// The largest request body sent: stet's own JSON about one pull request is a few KiB (a pull
/// request's body is bounded well below this).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The forge's API through octocrab over stet's stack.
pub(crate) struct OctocrabClient {
    octocrab: Octocrab,
    rest: Arc<Rest>,
}

impl OctocrabClient {
    /// A client sending through `rest`. Must run inside the async runtime: octocrab's buffer spawns
    /// its worker on it.
    pub(crate) fn new(rest: Arc<Rest>) -> OctocrabClient {
        let octocrab = OctocrabBuilder::new_empty()
            .with_service(RestService {
                rest: Arc::clone(&rest),
            })
            .with_layer(&ApiOnlyLayer {
                rest: Arc::clone(&rest),
            })
            .with_auth(AuthState::None)
            .build()
            .unwrap_or_else(|never| match never {});
        OctocrabClient { octocrab, rest }
    }

    /// [`Rest::send`] through octocrab: `path` is relative to the API URL, its segments encoded.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply> {
        let url = format!("{}{path}", self.rest.api_url());
        let sent = match method {
            Method::GET => self.octocrab._get(url.as_str()).await,
            Method::POST => self.octocrab._post(url.as_str(), body).await,
            Method::PATCH => self.octocrab._patch(url.as_str(), body).await,
            other => {
                return Err(ForgeError::Protocol {
                    forge: self.rest.forge(),
                    detail: format!("{other} {path}: not a method stet sends to GitHub"),
                });
            }
        };
        let response = sent.map_err(|error| self.unwrapped(error))?;
        let status = response.status();
        // The stack read the answer whole and bounded: this only takes it back out.
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|error| self.unwrapped(error))?
            .to_bytes();
        Ok(Reply {
            status,
            body: Zeroizing::new(String::from_utf8_lossy(&bytes).into_owned()),
        })
    }

    /// The [`ForgeError`] the stack failed with, out of octocrab's error; any other error of
    /// octocrab's (a URL it could not parse, say) as a protocol error in sanitized words.
    fn unwrapped(&self, error: octocrab::Error) -> ForgeError {
        if let octocrab::Error::Service { source, .. } = error {
            return match source.downcast::<ForgeError>() {
                Ok(forge) => *forge,
                Err(other) => self.protocol(&other.to_string()),
            };
        }
        self.protocol(&error.to_string())
    }

    fn protocol(&self, detail: &str) -> ForgeError {
        ForgeError::Protocol {
            forge: self.rest.forge(),
            detail: self.rest.shown(detail),
        }
    }
}

type Answer = std::result::Result<Response<Full<Bytes>>, ForgeError>;
type Answering = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Refuses, before anything is sent, a request octocrab made for a URL that is not under the
/// configured API (only stet's own paths are asked for; this makes it so whatever octocrab does).
pub(crate) struct ApiOnlyLayer {
    rest: Arc<Rest>,
}

impl<S> tower_layer::Layer<S> for ApiOnlyLayer {
    type Service = ApiOnly<S>;

    fn layer(&self, inner: S) -> ApiOnly<S> {
        ApiOnly {
            inner,
            rest: Arc::clone(&self.rest),
        }
    }
}

/// [`ApiOnlyLayer`]'s service.
#[derive(Clone)]
pub(crate) struct ApiOnly<S> {
    inner: S,
    rest: Arc<Rest>,
}

impl<S> Service<Request<OctoBody>> for ApiOnly<S>
where
    S: Service<Request<OctoBody>, Response = Response<Full<Bytes>>, Error = ForgeError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Full<Bytes>>;
    type Error = ForgeError;
    type Future = Answering;

    fn poll_ready(
        &mut self,
        context: &mut Context<'_>,
    ) -> Poll<std::result::Result<(), ForgeError>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<OctoBody>) -> Answering {
        if path_under(&self.rest, &request.uri().to_string()).is_none() {
            let refused = ForgeError::Protocol {
                forge: self.rest.forge(),
                detail: self.rest.shown(&format!(
                    "{} is not under the configured API; it was not sent",
                    request.uri()
                )),
            };
            return Box::pin(async move { Err(refused) });
        }
        Box::pin(self.inner.call(request))
    }
}

/// The part of `url` after the API URL, when `url` is under it.
fn path_under<'u>(rest: &Rest, url: &'u str) -> Option<&'u str> {
    url.strip_prefix(rest.api_url())
        .filter(|path| path.starts_with('/'))
}

/// The bottom of the stack: octocrab's request body read whole (at most [`MAX_REQUEST_BYTES`]),
/// then sent by stet's REST client, which reads the answer whole and bounded.
#[derive(Clone)]
pub(crate) struct RestService {
    rest: Arc<Rest>,
}

impl Service<Request<OctoBody>> for RestService {
    type Response = Response<Full<Bytes>>;
    type Error = ForgeError;
    type Future = Answering;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::result::Result<(), ForgeError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<OctoBody>) -> Answering {
        let rest = Arc::clone(&self.rest);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let url = parts.uri.to_string();
            let Some(path) = path_under(&rest, &url) else {
                return Err(ForgeError::Protocol {
                    forge: rest.forge(),
                    detail: rest.shown(&format!(
                        "{url} is not under the configured API; it was not sent"
                    )),
                });
            };
            let bytes = Limited::new(body, MAX_REQUEST_BYTES)
                .collect()
                .await
                .map_err(|error| ForgeError::Protocol {
                    forge: rest.forge(),
                    detail: rest.shown(&format!(
                        "the body of {} {path} could not be read (at most {} MiB): {error}",
                        parts.method,
                        MAX_REQUEST_BYTES / (1024 * 1024)
                    )),
                })?
                .to_bytes();
            let payload = (!bytes.is_empty()).then(|| Zeroizing::new(bytes.to_vec()));
            let reply = rest
                .send_payload(parts.method.clone(), path, payload, &parts.headers)
                .await?;
            let mut response =
                Response::new(Full::new(Bytes::copy_from_slice(reply.body.as_bytes())));
            *response.status_mut() = reply.status;
            Ok(response)
        })
    }
}

impl std::fmt::Debug for OctocrabClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OctocrabClient")
            .field("api_url", &self.rest.api_url())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
