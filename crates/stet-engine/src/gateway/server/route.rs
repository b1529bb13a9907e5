//! The routes the gateway serves and the wire API behind each: the gateway's HTTP surface. A route
//! of a wire API takes the registry's implementation of it (`wire::of`), for its request policy,
//! its headers and key, its error shape and, when its answers are billed, its meter;
//! `POST /v1/messages/count_tokens` is checked and forwarded but free, and `GET /v1/models` passes
//! through unmetered.

use http::Method;

use crate::gateway::policy::WireApi;
use crate::gateway::wire::{self, Wire};

/// The routes the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    ChatCompletions,
    Responses,
    Messages,
    /// Anthropic's token counting: free, so not metered, but its body passes the Messages policy.
    CountTokens,
    Models,
}

impl Route {
    /// Every route, in the order of the not-served reply's list.
    #[cfg(test)]
    pub(super) const ALL: &[Route] = &[
        Route::ChatCompletions,
        Route::Responses,
        Route::Messages,
        Route::CountTokens,
        Route::Models,
    ];

    pub(super) fn of(method: &Method, path: &str) -> Option<Route> {
        match (method, path) {
            (&Method::POST, "/v1/chat/completions") => Some(Route::ChatCompletions),
            (&Method::POST, "/v1/responses") => Some(Route::Responses),
            (&Method::POST, "/v1/messages") => Some(Route::Messages),
            (&Method::POST, "/v1/messages/count_tokens") => Some(Route::CountTokens),
            (&Method::GET, "/v1/models") => Some(Route::Models),
            _ => None,
        }
    }

    /// The path after `/v1/`, appended to the upstream base URL.
    pub(super) fn rest(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat/completions",
            Route::Responses => "responses",
            Route::Messages => "messages",
            Route::CountTokens => "messages/count_tokens",
            Route::Models => "models",
        }
    }

    /// The wire API whose request policy the route's bodies pass; `None` on a route whose body is
    /// not forwarded.
    pub(super) fn api(self) -> Option<WireApi> {
        match self {
            Route::ChatCompletions => Some(WireApi::ChatCompletions),
            Route::Responses => Some(WireApi::Responses),
            Route::Messages | Route::CountTokens => Some(WireApi::Messages),
            Route::Models => None,
        }
    }

    /// The implementation of the route's wire API when its answers are billed, from the registry:
    /// the route's requests are metered (their responses carry usage) exactly when it has one.
    pub(super) fn wire(self) -> Option<&'static dyn Wire> {
        match self {
            Route::CountTokens => None,
            _ => self.api().and_then(wire::of),
        }
    }

    /// The wire API whose headers, key and error shape (for the gateway's own replies) the route's
    /// requests and replies take.
    pub(super) fn shape(self) -> &'static dyn Wire {
        self.api().and_then(wire::of).unwrap_or_else(wire::fallback)
    }
}

/// The error shape of the reply to a path the gateway does not serve: Anthropic's under
/// `/v1/messages` (batches), whose clients read only theirs, OpenAI's elsewhere.
pub(super) fn shape_of_unserved(path: &str) -> &'static dyn Wire {
    if path.starts_with("/v1/messages") {
        Route::Messages.shape()
    } else {
        wire::fallback()
    }
}

#[cfg(test)]
mod tests;
