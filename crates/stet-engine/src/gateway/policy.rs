//! The request policy of each wire API (DESIGN §5 row 24): the model channel is not a way out. An
//! agent's request body is parsed once (a duplicated key is refused, never resolved), checked and
//! written anew from what each API documents, so the upstream receives stet's re-serialization and
//! never the agent's bytes. Only tools the client executes pass; provider-executed tools, routers'
//! plug-ins and URLs the provider would fetch are refused unless the machine configuration enables
//! one by name with a per-call price (`[model] provider_tools`); only the models the user allows
//! (`[model] allow`) pass. A refusal names the field and the setting that would allow it.

mod rules;
mod walk;

pub(crate) use rules::client_tool;
pub(crate) use rules::fields as forwarded_fields;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

crate::kinds::kinds! {
    /// The wire APIs the gateway serves or will serve: each has its own policy and error shape.
    pub enum WireApi {
        /// OpenAI's `POST /v1/chat/completions`.
        #[default]
        ChatCompletions = "chat",
        /// OpenAI's `POST /v1/responses`.
        Responses = "responses",
        /// Anthropic's `POST /v1/messages`.
        Messages = "anthropic",
    }
}

impl WireApi {
    /// How replies and events name the API.
    pub fn name(self) -> &'static str {
        match self {
            WireApi::ChatCompletions => "Chat Completions",
            WireApi::Responses => "Responses",
            WireApi::Messages => "Anthropic Messages",
        }
    }
}

/// What the user allows a dispatch's requests: which models, and which provider-executed tools at
/// what price per call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestPolicy {
    /// The models a request may name; `None` when no model is known to stet (the scripted agent),
    /// and then only a routing suffix (`:online`, …) is refused.
    pub models: Option<BTreeSet<String>>,
    /// Provider-executed tools and fields enabled by name (a tool's `type`, or a top-level field
    /// such as `web_search_options`), with the dollars each call costs.
    pub provider_tools: BTreeMap<String, f64>,
    /// The wire API the dispatch's agent speaks (`[model] api`): the routes of the others are not
    /// served (404). `None` serves every API's routes.
    pub api: Option<WireApi>,
}

/// A provider-executed tool a request enables, as the configuration priced it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderCall {
    /// The name it was enabled by.
    pub name: String,
    /// Dollars per call.
    pub price_usd: f64,
    /// The host the request names for it (a remote MCP server's), when it names one.
    pub host: Option<String>,
}

/// A request that passed: the body to send, written anew, and what it asks of the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The re-serialized body.
    pub body: Vec<u8>,
    /// Enabled provider tools the request uses.
    pub provider_calls: Vec<ProviderCall>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The body is not one JSON object.
    NotJson,
    /// An object holds a key twice.
    DuplicateKey,
    /// A field the API does not document (or real clients do not send).
    Undocumented,
    /// A tool, field or item by which the provider acts for the agent.
    ProviderTool,
    /// A router's plug-in.
    Plugin,
    /// A URL the provider would fetch.
    RemoteUrl,
    /// A model the user does not allow.
    Model,
    /// A routing suffix on the model name.
    RoutingSuffix,
    /// A provider prefix on the model name that routes elsewhere.
    ProviderPrefix,
    /// A field by which the provider works from state the request does not carry, or after it.
    UnseenWork,
}

impl Rule {
    /// The rule as events and the run record name it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::NotJson => "not_json",
            Rule::DuplicateKey => "duplicate_key",
            Rule::Undocumented => "undocumented_field",
            Rule::ProviderTool => "provider_tool",
            Rule::Plugin => "plugin",
            Rule::RemoteUrl => "remote_url",
            Rule::Model => "model_not_allowed",
            Rule::RoutingSuffix => "routing_suffix",
            Rule::ProviderPrefix => "provider_prefix",
            Rule::UnseenWork => "unseen_work",
        }
    }

    /// The setting that would allow what was refused, when one can.
    pub fn setting(self) -> Option<&'static str> {
        match self {
            Rule::ProviderTool | Rule::Plugin | Rule::RemoteUrl => Some("[model] provider_tools"),
            Rule::Model | Rule::RoutingSuffix | Rule::ProviderPrefix => Some("[model] allow"),
            Rule::NotJson | Rule::DuplicateKey | Rule::Undocumented | Rule::UnseenWork => None,
        }
    }
}

/// A refused request: where, what kind of value, and why. `shown` is the value itself only where it
/// is a name from a closed vocabulary (a tool type, a model), for the agent's reply; events carry
/// the field and the kind, never the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The API whose policy refused it.
    pub api: WireApi,
    /// Where: `tools[0].type`, `model`, `(body)`.
    pub field: String,
    /// The JSON kind of the value there: `string`, `object`, ….
    pub value_kind: &'static str,
    /// The value, when it is a name the reply may repeat.
    pub shown: Option<String>,
    /// Why.
    pub rule: Rule,
}

impl Refusal {
    /// The reply's message: the field, why, and the setting that would allow it.
    pub fn message(&self) -> String {
        let at = match &self.shown {
            Some(value) => format!("`{} = {value:?}`", self.field),
            None => format!("`{}`", self.field),
        };
        let api = self.api.name();
        let why = match self.rule {
            Rule::NotJson => format!("the body of a {api} request must be one JSON object"),
            Rule::DuplicateKey => {
                format!("{at} is given twice; stet does not guess which one counts")
            }
            Rule::Undocumented => format!(
                "{at} is not a {api} field stet forwards (only documented fields are forwarded)"
            ),
            Rule::ProviderTool => format!(
                "{at} makes the provider act on the network or bill a call for the agent; enable it by name with its per-call price in [model] provider_tools of your machine configuration"
            ),
            Rule::Plugin => format!(
                "{at} adds a router's plug-in; enable it by name with its per-call price in [model] provider_tools of your machine configuration"
            ),
            Rule::RemoteUrl => format!(
                "{at} names a URL the provider would fetch; send the data inline (a data: URL or base64)"
            ),
            Rule::Model => format!(
                "{at} is not a model this dispatch may call; add it to [model] allow in your machine configuration"
            ),
            Rule::RoutingSuffix => format!(
                "{at} carries a routing suffix that adds a plug-in or another provider; name the model in [model] allow to use it as is"
            ),
            Rule::ProviderPrefix => format!(
                "{at} carries a provider prefix that routes elsewhere; name the model in [model] allow to use it as is"
            ),
            Rule::UnseenWork => format!(
                "{at} makes the provider work from state stored upstream, or after the reply, which stet can neither see nor meter; send the whole input with each request (store: false) and stream instead of running in the background"
            ),
        };
        format!("stet gateway: {why}")
    }
}

impl RequestPolicy {
    /// Checks `raw`, a request body for `api`, and writes it anew; or says why it is refused.
    pub fn check(&self, api: WireApi, raw: &[u8]) -> Result<Checked, Refusal> {
        walk::check(self, api, raw)
    }

    /// Whether `model` may be called, or the rule refusing it.
    fn model(&self, model: &str) -> Result<(), Rule> {
        // Anywhere in the name, not only at its end: `x:online:free` and `x:online ` route too.
        let lower = model.to_ascii_lowercase();
        let suffixed = rules::ROUTING_SUFFIXES
            .iter()
            .any(|suffix| lower.contains(suffix));
        let Some(models) = &self.models else {
            return if suffixed {
                Err(Rule::RoutingSuffix)
            } else {
                Ok(())
            };
        };
        if models.contains(model) {
            return Ok(());
        }
        if suffixed || model.contains(':') {
            return Err(Rule::RoutingSuffix);
        }
        if model.contains('/') {
            return Err(Rule::ProviderPrefix);
        }
        Err(Rule::Model)
    }
}
