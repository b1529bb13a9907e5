//! One pass over a request body that checks it and writes it anew: a JSON visitor that knows, from
//! where it stands (the top level, a tool, an input item, a content part…), what may stand there,
//! refuses a duplicated key in any object, and writes each value it accepts to the output. No
//! document is built: memory is the output plus one small hash per key of the objects open at once
//! (a hash collision refuses a request, it never lets one through), and the nesting depth is
//! serde_json's (128).

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, RandomState};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Checked, ProviderCall, Refusal, RequestPolicy, Rule, WireApi, rules};

/// The longest key a refusal's field path repeats.
const SHOWN_KEY: usize = 64;

/// The longest tool type or model name a refusal repeats to the agent.
const SHOWN_VALUE: usize = 128;

pub(super) fn check(policy: &RequestPolicy, api: WireApi, raw: &[u8]) -> Result<Checked, Refusal> {
    let mut cx = Cx {
        policy,
        api,
        path: Vec::new(),
        out: Vec::with_capacity(raw.len() + 64),
        calls: Vec::new(),
        refusal: None,
        last_type: None,
        host: None,
        hasher: RandomState::new(),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(raw);
    let walked = Walk {
        cx: &mut cx,
        at: At::Root,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end());
    if let Some(refusal) = cx.refusal.take() {
        return Err(refusal);
    }
    if walked.is_err() {
        return Err(Refusal {
            api,
            field: "(body)".to_owned(),
            value_kind: "not JSON",
            shown: None,
            rule: Rule::NotJson,
        });
    }
    Ok(Checked {
        body: cx.out,
        provider_calls: cx.calls,
    })
}

/// One step of the path to a value.
#[derive(Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// What the walk carries from value to value.
struct Cx<'p> {
    policy: &'p RequestPolicy,
    api: WireApi,
    path: Vec<Step>,
    out: Vec<u8>,
    calls: Vec<ProviderCall>,
    refusal: Option<Refusal>,
    /// The last `type` string read (a tool's, whose check waits for the whole tool).
    last_type: Option<String>,
    /// The first host an enabled provider tool names (its `server_url`).
    host: Option<String>,
    hasher: RandomState,
}

impl Cx<'_> {
    /// The path as a refusal names it: `tools[0].type`.
    fn field(&self) -> String {
        let mut field = String::new();
        for step in &self.path {
            match step {
                Step::Index(index) => field.push_str(&format!("[{index}]")),
                Step::Key(key) => {
                    let plain = !key.is_empty()
                        && key.len() <= SHOWN_KEY
                        && key
                            .bytes()
                            .all(|byte| byte.is_ascii_alphanumeric() || b"_-".contains(&byte));
                    if plain {
                        if !field.is_empty() {
                            field.push('.');
                        }
                        field.push_str(key);
                    } else {
                        let cut: String = key.chars().take(SHOWN_KEY).collect();
                        field.push_str(&format!("[{}]", serde_json::Value::from(cut)));
                    }
                }
            }
        }
        if field.is_empty() {
            "(body)".to_owned()
        } else {
            field
        }
    }

    /// Records the refusal and returns the error that stops the walk.
    fn refuse<E: de::Error>(
        &mut self,
        rule: Rule,
        value_kind: &'static str,
        shown: Option<&str>,
    ) -> E {
        if self.refusal.is_none() {
            self.refusal = Some(Refusal {
                api: self.api,
                field: self.field(),
                value_kind,
                shown: shown.map(|value| value.chars().take(SHOWN_VALUE).collect()),
                rule,
            });
        }
        E::custom("refused by the request policy")
    }

    fn enabled(&self, name: &str) -> Option<f64> {
        self.policy.provider_tools.get(name).copied()
    }

    fn write_str(&mut self, text: &str) {
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.out, text);
    }
}

/// Where a value stands, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Root,
    /// Anything: only duplicated keys are refused (schemas, arguments, metadata).
    Free,
    Model,
    Tools,
    Tool,
    ToolType,
    ToolChoice,
    ToolChoiceType,
    Include,
    IncludeEntry,
    /// `messages` or `input`: an array of items (or, on Responses, a string).
    Items,
    Item,
    ItemType,
    /// A `content`: an array of parts, or a string.
    Parts,
    Part,
    PartType,
    Source,
    SourceType,
    /// A URL the provider would fetch, or an object holding one as `url`.
    Url,
    /// Data the request carries (base64 or a `data:` URL) or a stored file's id: never a URL.
    Inline,
    /// A switch: `true`, `false` or null (`"true"` is read as true by lax upstreams and as
    /// not-a-stream by the meter).
    Flag,
    /// Inside an enabled provider tool or field: anything, its host noted.
    Enabled,
    /// A field by which the provider works from state stet cannot see: only null or false pass.
    Unseen,
    /// A URL naming the host an enabled provider tool reaches.
    Host,
}

/// The JSON kinds a value may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "boolean",
            Kind::Number => "number",
            Kind::String => "string",
            Kind::Array => "array",
            Kind::Object => "object",
        }
    }
}

impl At {
    /// Whether a value of `kind` may stand here.
    fn takes(self, kind: Kind) -> bool {
        match self {
            At::Free | At::Enabled => true,
            At::Unseen => matches!(kind, Kind::Null | Kind::Bool),
            At::Root => kind == Kind::Object,
            _ if kind == Kind::Null => true,
            At::Model
            | At::ToolType
            | At::ToolChoiceType
            | At::IncludeEntry
            | At::ItemType
            | At::PartType
            | At::SourceType
            | At::Inline
            | At::Host => kind == Kind::String,
            At::Flag => kind == Kind::Bool,
            At::Tools | At::Include => kind == Kind::Array,
            At::Tool | At::Item | At::Part | At::Source => kind == Kind::Object,
            At::ToolChoice | At::Url => matches!(kind, Kind::String | Kind::Object),
            At::Items | At::Parts => matches!(kind, Kind::String | Kind::Array),
        }
    }

    /// What an element of an array standing here is.
    fn element(self) -> At {
        match self {
            At::Tools => At::Tool,
            At::Include => At::IncludeEntry,
            At::Items => At::Item,
            At::Parts => At::Part,
            At::Enabled => At::Enabled,
            _ => At::Free,
        }
    }
}

struct Walk<'c, 'p> {
    cx: &'c mut Cx<'p>,
    at: At,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Walk<'_, '_> {
    /// Refuses a value of a kind that may not stand here.
    fn shape<E: de::Error>(&mut self, kind: Kind) -> Result<(), E> {
        if self.at.takes(kind) {
            return Ok(());
        }
        let rule = match self.at {
            At::Root => Rule::NotJson,
            At::Unseen => Rule::UnseenWork,
            _ => Rule::Undocumented,
        };
        Err(self.cx.refuse(rule, kind.name(), None))
    }

    /// Checks a string standing here, before it is written.
    fn string<E: de::Error>(&mut self, text: &str) -> Result<(), E> {
        self.shape(Kind::String)?;
        let api = self.cx.api;
        let refuse = |cx: &mut Cx, rule| Err(cx.refuse(rule, "string", Some(text)));
        match self.at {
            At::Model => {
                if let Err(rule) = self.cx.policy.model(text) {
                    return refuse(self.cx, rule);
                }
            }
            At::ToolType => self.cx.last_type = Some(text.to_owned()),
            At::ToolChoice if !rules::tool_choice_word(api, text) => {
                return refuse(self.cx, Rule::Undocumented);
            }
            At::ToolChoiceType
                if !rules::tool_choice_type(api, text) && self.cx.enabled(text).is_none() =>
            {
                return refuse(self.cx, Rule::ProviderTool);
            }
            At::IncludeEntry if !rules::include_entry(text) => {
                return refuse(self.cx, Rule::ProviderTool);
            }
            At::ItemType if !rules::item_type(api, text) => {
                let provider = text.contains("call") || text.starts_with("mcp");
                return refuse(
                    self.cx,
                    if provider {
                        Rule::ProviderTool
                    } else {
                        Rule::Undocumented
                    },
                );
            }
            At::PartType if !rules::part_type(api, text) => {
                let provider = ["tool", "search", "fetch", "mcp", "code", "container"]
                    .iter()
                    .any(|word| text.contains(word));
                return refuse(
                    self.cx,
                    if provider {
                        Rule::ProviderTool
                    } else {
                        Rule::Undocumented
                    },
                );
            }
            At::SourceType if !rules::source_type(text) => {
                let rule = if text == "url" {
                    Rule::RemoteUrl
                } else {
                    Rule::Undocumented
                };
                return refuse(self.cx, rule);
            }
            At::Url
                if !text
                    .get(..5)
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:")) =>
            {
                return Err(self.cx.refuse(Rule::RemoteUrl, "string", None));
            }
            At::Inline if names_a_scheme(text) => {
                return Err(self.cx.refuse(Rule::RemoteUrl, "string", None));
            }
            At::Host if self.cx.host.is_none() => self.cx.host = host_of(text),
            _ => {}
        }
        Ok(())
    }

    /// What the value of `key` is, in an object standing here; `None` refuses the key as
    /// undocumented.
    fn child(&mut self, key: &str) -> Option<At> {
        let api = self.cx.api;
        Some(match self.at {
            // Only the API's own fields: `input` on Chat Completions or `messages` on Responses
            // is another API's, and undocumented here.
            At::Root if !rules::fields(api).contains(&key) => return None,
            At::Root => match key {
                "model" => At::Model,
                "tools" => At::Tools,
                "tool_choice" => At::ToolChoice,
                "include" => At::Include,
                "stream" => At::Flag,
                _ if rules::unseen_work_fields(api).contains(&key) => At::Unseen,
                "messages" | "input" => At::Items,
                // Documented as a string; read as items wherever an upstream takes an array.
                "instructions" => At::Items,
                "system" if api == WireApi::Messages => At::Parts,
                _ => At::Free,
            },
            At::Tool => match key {
                "type" => At::ToolType,
                "tools" => At::Tools,
                "server_url" => At::Host,
                _ if rules::tool_key(api, key) => At::Free,
                _ => At::Enabled,
            },
            At::ToolChoice => match key {
                "type" => At::ToolChoiceType,
                "tools" => At::Tools,
                _ => At::Free,
            },
            At::Item => match key {
                "type" => At::ItemType,
                "content" | "output" => At::Parts,
                _ => At::Free,
            },
            At::Part => match key {
                "type" => At::PartType,
                "source" => At::Source,
                "content" => At::Parts,
                "image_url" => At::Url,
                // Chat Completions' `{"type": "file", "file": {"file_data", "file_id"}}`.
                "file" => At::Part,
                _ if rules::url_key(key) => At::Url,
                _ if rules::inline_key(key) => At::Inline,
                _ => At::Free,
            },
            At::Source => match key {
                "type" => At::SourceType,
                "url" => At::Url,
                "content" => At::Parts,
                _ => At::Free,
            },
            At::Url => match key {
                "url" => At::Url,
                _ => At::Free,
            },
            At::Enabled => match key {
                "server_url" | "url" => At::Host,
                _ => At::Enabled,
            },
            _ => At::Free,
        })
    }

    /// Decides a tool once its object is read: a client tool passes with documented keys only; a
    /// provider tool passes when enabled by its type, and is noted with its price and host.
    fn tool<E: de::Error>(
        &mut self,
        kind: Option<String>,
        unknown_key: Option<String>,
    ) -> Result<(), E> {
        let api = self.cx.api;
        let host = self.cx.host.take();
        if rules::client_tool(api, kind.as_deref()) {
            if let Some(key) = unknown_key {
                self.cx.path.push(Step::Key(key));
                return Err(self.cx.refuse(Rule::Undocumented, "value", None));
            }
            return Ok(());
        }
        let priced = kind.as_deref().and_then(|kind| self.cx.enabled(kind));
        match (kind, priced) {
            (Some(kind), Some(price_usd)) => {
                self.cx.calls.push(ProviderCall {
                    name: kind,
                    price_usd,
                    host,
                });
                Ok(())
            }
            (Some(kind), None) => {
                self.cx.path.push(Step::Key("type".to_owned()));
                Err(self.cx.refuse(Rule::ProviderTool, "string", Some(&kind)))
            }
            (None, _) => {
                self.cx.path.push(Step::Key("type".to_owned()));
                Err(self.cx.refuse(Rule::Undocumented, "missing", None))
            }
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.shape(Kind::Null)?;
        if self.at == At::Model && self.cx.policy.models.is_some() {
            // No model lets the upstream pick one (a proxy's default, a query's).
            return Err(self.cx.refuse(Rule::Model, "null", None));
        }
        self.cx.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_bool<E: de::Error>(mut self, value: bool) -> Result<(), E> {
        self.shape(Kind::Bool)?;
        if self.at == At::Unseen && value {
            return Err(self.cx.refuse(Rule::UnseenWork, "boolean", None));
        }
        self.cx
            .out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(mut self, value: i64) -> Result<(), E> {
        self.shape(Kind::Number)?;
        self.cx.out.extend_from_slice(value.to_string().as_bytes());
        Ok(())
    }

    fn visit_u64<E: de::Error>(mut self, value: u64) -> Result<(), E> {
        self.shape(Kind::Number)?;
        self.cx.out.extend_from_slice(value.to_string().as_bytes());
        Ok(())
    }

    fn visit_f64<E: de::Error>(mut self, value: f64) -> Result<(), E> {
        self.shape(Kind::Number)?;
        let _ = serde_json::to_writer(&mut self.cx.out, &value);
        Ok(())
    }

    fn visit_str<E: de::Error>(mut self, value: &str) -> Result<(), E> {
        self.string(value)?;
        self.cx.write_str(value);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.shape(Kind::Array)?;
        let element = self.at.element();
        self.cx.out.push(b'[');
        let mut index = 0;
        loop {
            self.cx.path.push(Step::Index(index));
            if index > 0 {
                self.cx.out.push(b',');
            }
            let more = seq.next_element_seed(Walk {
                cx: self.cx,
                at: element,
            })?;
            self.cx.path.pop();
            if more.is_none() {
                if index > 0 {
                    self.cx.out.pop();
                }
                break;
            }
            index += 1;
        }
        self.cx.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.shape(Kind::Object)?;
        let mut seen = HashSet::new();
        let mut tool_type = None;
        let mut unknown_key = None;
        let mut named_model = false;
        if self.at == At::Tool {
            self.cx.host = None;
        }
        self.cx.out.push(b'{');
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            self.cx.path.push(Step::Key(key.clone()));
            if !seen.insert(self.cx.hasher.hash_one(&key)) {
                let kind = map.next_value_seed(KindOf)?;
                return Err(self.cx.refuse(Rule::DuplicateKey, kind.name(), None));
            }
            let api = self.cx.api;
            let provider_field =
                self.at == At::Root && rules::provider_fields(api).contains(&key.as_str());
            let price = provider_field.then(|| self.cx.enabled(&key)).flatten();
            let child = match price {
                Some(_) => Some(At::Enabled),
                None => self.child(&key),
            };
            let Some(at) = child else {
                let kind = map.next_value_seed(KindOf)?;
                let rule = match (provider_field, key.as_str()) {
                    (true, "plugins") => Rule::Plugin,
                    (true, _) => Rule::ProviderTool,
                    _ => Rule::Undocumented,
                };
                return Err(self.cx.refuse(rule, kind.name(), None));
            };
            // A key no client tool documents (`server_url` on a function tool too), refused once
            // the tool turns out to be a client tool.
            if self.at == At::Tool && !rules::tool_key(api, &key) && unknown_key.is_none() {
                unknown_key = Some(key.clone());
            }
            named_model |= self.at == At::Root && at == At::Model;
            if !first {
                self.cx.out.push(b',');
            }
            first = false;
            self.cx.write_str(&key);
            self.cx.out.push(b':');
            if price.is_some() {
                self.cx.host = None;
            }
            map.next_value_seed(Walk { cx: self.cx, at })?;
            if at == At::ToolType {
                tool_type = self.cx.last_type.take();
            }
            if let Some(price_usd) = price {
                let host = self.cx.host.take();
                self.cx.calls.push(ProviderCall {
                    name: key.clone(),
                    price_usd,
                    host,
                });
            }
            self.cx.path.pop();
        }
        self.cx.out.push(b'}');
        if self.at == At::Tool {
            self.tool(tool_type, unknown_key)?;
        }
        if self.at == At::Root && !named_model && self.cx.policy.models.is_some() {
            self.cx.path.push(Step::Key("model".to_owned()));
            return Err(self.cx.refuse(Rule::Model, "missing", None));
        }
        Ok(())
    }
}

/// Skips a value, saying only what kind it was.
struct KindOf;

impl<'de> DeserializeSeed<'de> for KindOf {
    type Value = Kind;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KindOf {
    type Value = Kind;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Bool)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Number)
    }
    fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::String)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kind::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kind::Object)
    }
}

/// Whether `text`, which should be base64, a `data:` URL or a file id, names another scheme
/// (`https:`, `gs:`, `file:`…): base64 and ids hold no `:`.
fn names_a_scheme(text: &str) -> bool {
    let data = text
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"));
    !data && text.contains(':')
}

/// The host of a URL (`scheme://host[:port]/…`), for the audit.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (!host.is_empty()).then(|| host.chars().take(SHOWN_VALUE).collect())
}
