//! The routes the gateway serves and the wire API behind each: the gateway's HTTP surface. A route
//! of a wire API takes the registry's implementation of it (`wire::of`); `GET /v1/models` passes
//! through unmetered.

use http::Method;

use crate::gateway::policy::WireApi;
use crate::gateway::wire::{self, Wire};

/// The routes the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    ChatCompletions,
    Responses,
    Models,
}

impl Route {
    /// Every route, in the order of the not-served reply's list.
    #[cfg(test)]
    pub(super) const ALL: &[Route] = &[Route::ChatCompletions, Route::Responses, Route::Models];

    pub(super) fn of(method: &Method, path: &str) -> Option<Route> {
        match (method, path) {
            (&Method::POST, "/v1/chat/completions") => Some(Route::ChatCompletions),
            (&Method::POST, "/v1/responses") => Some(Route::Responses),
            (&Method::GET, "/v1/models") => Some(Route::Models),
            _ => None,
        }
    }

    /// The path after `/v1/`, appended to the upstream base URL.
    pub(super) fn rest(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat/completions",
            Route::Responses => "responses",
            Route::Models => "models",
        }
    }

    /// The wire API whose request policy the route's bodies pass; `None` on a route whose body is
    /// not forwarded.
    pub(super) fn api(self) -> Option<WireApi> {
        match self {
            Route::ChatCompletions => Some(WireApi::ChatCompletions),
            Route::Responses => Some(WireApi::Responses),
            Route::Models => None,
        }
    }

    /// The implementation of the route's wire API, from the registry: the route's requests are
    /// metered (their responses carry usage) exactly when it has one.
    pub(super) fn wire(self) -> Option<&'static dyn Wire> {
        self.api().and_then(wire::of)
    }

    /// The error shape of the gateway's own replies on this route.
    pub(super) fn error_shape(self) -> &'static dyn Wire {
        self.wire().unwrap_or_else(wire::fallback)
    }
}

#[cfg(test)]
mod tests;
