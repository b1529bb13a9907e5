//! One pass over a request body's JSON that finds what its worst case depends on beyond its top-level
//! fields — image and file parts, stored-file references, tools the provider runs, audio output —
//! without building the document: a hostile body of tiny values would cost the host tens of times its
//! size as a `serde_json::Value`. Memory is bounded by the nesting depth (serde_json stops at 128).
//!
//! Only the request's content counts: a tool's definition (its name, description and parameter
//! schema) and the output format's schema describe data and hold no part the provider reads, so a
//! property named `audio_url` or `file_id` in a schema (Codex's sub-agent tools have one) is no
//! audio part and no stored file. What a tool's `type` says still counts, nested tools included.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::gateway::policy::{WireApi, client_tool};

/// What the walk found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// Objects whose `type` is an image part (each `type` key counts: duplicates over-count).
    pub(super) attachments: u64,
    /// The first file, audio or video part: the provider reads it at a size the request does not
    /// show (a document's pages, a recording's length).
    pub(super) unbounded_media: Option<String>,
    /// Some object names a stored file (`file_id` not null).
    pub(super) stored_file: bool,
    /// The `type` of a top-level tool (or of one a client tool nests, as a Responses `namespace`
    /// does) the provider runs itself: anything the wire API's policy does not call a client tool.
    pub(super) hosted_tool: Option<String>,
    /// Top-level `modalities` asks for audio.
    pub(super) audio_output: bool,
}

/// Walks `raw` (a JSON document, a request of `api`) and says what it holds.
pub(super) fn scan(raw: &[u8], api: WireApi) -> Result<Found, serde_json::Error> {
    let mut found = Found::default();
    let mut deserializer = serde_json::Deserializer::from_slice(raw);
    Walk {
        found: &mut found,
        place: Place::Root,
        api,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

/// The types of content part that carry an image, whose tokens the provider bounds by resizing it.
fn is_attachment(kind: &str) -> bool {
    matches!(kind, "image_url" | "input_image" | "image")
}

/// The types of content part, and the keys, that carry a file, audio or video.
fn is_unbounded_media(name: &str) -> bool {
    matches!(
        name,
        "file"
            | "input_file"
            | "file_url"
            | "file_data"
            | "input_audio"
            | "audio_url"
            | "video"
            | "video_url"
            | "input_video"
    )
}

/// Where in the document a value sits, as far as the walk cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    /// The top-level `tools` array.
    Tools,
    /// One element of it.
    Tool,
    /// The top-level `modalities` array.
    Modalities,
    /// A description of data, not content: inside a tool's definition (apart from its `type` and
    /// the tools it nests) or an output format. Nothing here counts.
    Schema,
    Elsewhere,
}

struct Walk<'a> {
    found: &'a mut Found,
    place: Place,
    api: WireApi,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, text: &str) -> Result<(), E> {
        if self.place == Place::Modalities && text == "audio" {
            self.found.audio_output = true;
        }
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let place = match self.place {
            Place::Tools => Place::Tool,
            Place::Modalities => Place::Modalities,
            Place::Schema => Place::Schema,
            _ => Place::Elsewhere,
        };
        while seq
            .next_element_seed(Walk {
                found: &mut *self.found,
                place,
                api: self.api,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let api = self.api;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = match (self.place, key) {
                (Place::Schema, _) => Key::Other(None),
                (Place::Tool, kept @ (Key::Type | Key::Other(Some(TopKey::Tools)))) => kept,
                (Place::Tool, _) => Key::Other(Some(TopKey::Schema)),
                (_, key) => key,
            };
            match key {
                Key::Type => {
                    let kind = map.next_value_seed(TypeSeed {
                        found: &mut *self.found,
                        api,
                    })?;
                    if let Some(kind) = kind {
                        if is_unbounded_media(&kind) && self.found.unbounded_media.is_none() {
                            self.found.unbounded_media = Some(kind.clone());
                        }
                        if is_attachment(&kind) {
                            self.found.attachments = self.found.attachments.saturating_add(1);
                        }
                        if self.place == Place::Tool
                            && !client_tool(api, Some(&kind))
                            && self.found.hosted_tool.is_none()
                        {
                            self.found.hosted_tool = Some(kind);
                        }
                    }
                }
                Key::FileId => {
                    if map.next_value_seed(NotNull {
                        found: &mut *self.found,
                        api,
                    })? {
                        self.found.stored_file = true;
                    }
                }
                Key::Media(name) => {
                    if self.found.unbounded_media.is_none() {
                        self.found.unbounded_media = Some(name.to_owned());
                    }
                    map.next_value_seed(Walk {
                        found: &mut *self.found,
                        place: Place::Elsewhere,
                        api,
                    })?;
                }
                Key::Other(top) => {
                    let place = match (self.place, top) {
                        (Place::Root | Place::Tool, Some(TopKey::Tools)) => Place::Tools,
                        (Place::Root, Some(TopKey::Modalities)) => Place::Modalities,
                        (Place::Root | Place::Tool, Some(TopKey::Schema)) => Place::Schema,
                        (Place::Schema, _) => Place::Schema,
                        _ => Place::Elsewhere,
                    };
                    map.next_value_seed(Walk {
                        found: &mut *self.found,
                        place,
                        api,
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// The keys the walk tells apart.
enum Key {
    Type,
    FileId,
    /// A key that names a file, audio or video (`file_url`, `video_url`, …).
    Media(&'static str),
    Other(Option<TopKey>),
}

/// Keys that matter at the top level (and `tools` in a tool too).
#[derive(Clone, Copy)]
enum TopKey {
    Tools,
    Modalities,
    /// An output format (`text`, `response_format`), or any key of a tool's definition but `type`
    /// and `tools`.
    Schema,
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Key;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "type" => Key::Type,
            "file_id" => Key::FileId,
            "tools" => Key::Other(Some(TopKey::Tools)),
            "modalities" => Key::Other(Some(TopKey::Modalities)),
            "text" | "response_format" => Key::Other(Some(TopKey::Schema)),
            "file_url" => Key::Media("file_url"),
            "file_data" => Key::Media("file_data"),
            "audio_url" => Key::Media("audio_url"),
            "video_url" => Key::Media("video_url"),
            "input_audio" => Key::Media("input_audio"),
            _ => Key::Other(None),
        })
    }
}

/// A `type` value: its text when it is a string (bounded: a longer one names no type the walk knows),
/// otherwise walked for what it holds.
struct TypeSeed<'a> {
    found: &'a mut Found,
    api: WireApi,
}

/// The longest `type` text kept.
const MAX_TYPE: usize = 64;

impl<'de> DeserializeSeed<'de> for TypeSeed<'_> {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Option<String>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TypeSeed<'_> {
    type Value = Option<String>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_str<E>(self, text: &str) -> Result<Option<String>, E> {
        Ok(Some(text.chars().take(MAX_TYPE).collect()))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<String>, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
            api: self.api,
        }
        .visit_seq(seq)?;
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<String>, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
            api: self.api,
        }
        .visit_map(map)?;
        Ok(None)
    }
}

/// A `file_id` value: whether it is anything but null (walked for what it holds either way).
struct NotNull<'a> {
    found: &'a mut Found,
    api: WireApi,
}

impl<'de> DeserializeSeed<'de> for NotNull<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NotNull<'_> {
    type Value = bool;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
            api: self.api,
        }
        .visit_seq(seq)?;
        Ok(true)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
            api: self.api,
        }
        .visit_map(map)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn found(body: serde_json::Value) -> Found {
        scan(body.to_string().as_bytes(), WireApi::ChatCompletions).unwrap()
    }

    fn responses(body: &serde_json::Value) -> Found {
        scan(body.to_string().as_bytes(), WireApi::Responses).unwrap()
    }

    /// The first request of the real Codex 0.163 with its sub-agent tools on (its default), as
    /// `tests/fixtures/codex/capture.sh` records it: the `multi_agent_v1` namespace's `spawn_agent`
    /// and `send_input` take input items whose schema names `audio_url`, `image_url` and more.
    #[test]
    fn codexs_own_request_with_its_sub_agent_tools_holds_no_part_and_no_hosted_tool() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/codex/multi-agent.request-1.json"
        );
        let raw = std::fs::read(path).unwrap();
        assert!(
            String::from_utf8_lossy(&raw).contains("\"audio_url\""),
            "the capture's schema names audio_url"
        );
        assert_eq!(scan(&raw, WireApi::Responses).unwrap(), Found::default());
    }

    /// Codex's own requests with an MCP server (its tools in a `namespace`) and with the hosted web
    /// search on, as `tests/fixtures/codex/capture.sh` records them: the first holds nothing the
    /// provider runs, the second the web search, which the gateway refuses unless priced.
    #[test]
    fn codexs_mcp_tools_are_its_own_and_its_web_search_is_the_providers() {
        let request = |name: &str| {
            let path = format!(
                "{}/../../tests/fixtures/codex/{name}.request-1.json",
                env!("CARGO_MANIFEST_DIR")
            );
            scan(&std::fs::read(path).unwrap(), WireApi::Responses).unwrap()
        };
        assert_eq!(request("mcp"), Found::default());
        assert_eq!(
            request("web-search").hosted_tool.as_deref(),
            Some("web_search")
        );
    }

    #[test]
    fn a_schema_names_no_part_but_a_real_part_still_counts() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "audio_url": {"type": "string"}, "file_id": {"type": "string"},
            "video_url": {"type": "string"}, "input_audio": {"type": "object"},
            "kind": {"type": "image_url"}}});
        let tools = serde_json::json!({"tools": [
            {"type": "function", "name": "f", "parameters": schema},
            {"type": "namespace", "name": "ns", "description": "d", "tools": [
                {"type": "function", "name": "g", "parameters": schema}]}],
            "text": {"format": {"type": "json_schema", "name": "out", "schema": schema}}});
        assert_eq!(responses(&tools), Found::default());
        let chat = serde_json::json!({"tools": [{"type": "function",
            "function": {"name": "f", "parameters": schema}}],
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}});
        assert_eq!(found(chat), Found::default());
        // The same tools beside a real audio part, or a stored file, in the input.
        let mut with_audio = tools.clone();
        with_audio["input"] = serde_json::json!([{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]);
        assert_eq!(
            responses(&with_audio).unbounded_media.as_deref(),
            Some("input_audio")
        );
        let mut keyed = tools.clone();
        keyed["input"] = serde_json::json!([{"content": [{"audio_url": "https://x/a.wav"}]}]);
        assert_eq!(
            responses(&keyed).unbounded_media.as_deref(),
            Some("audio_url")
        );
        let mut stored = tools;
        stored["input"] =
            serde_json::json!([{"content": [{"type": "input_file", "file_id": "f"}]}]);
        assert!(responses(&stored).stored_file);
    }

    #[test]
    fn a_hosted_tool_counts_even_nested_in_a_namespace_and_client_tools_are_the_apis_own() {
        let nested = serde_json::json!({"tools": [{"type": "namespace", "name": "ns",
            "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}]});
        assert_eq!(
            responses(&nested).hosted_tool.as_deref(),
            Some("web_search")
        );
        // `namespace` and `local_shell` are client tools of the Responses API only.
        let local = serde_json::json!({"tools": [{"type": "local_shell"}, {"type": "namespace", "tools": []}]});
        assert_eq!(responses(&local).hosted_tool, None);
        assert_eq!(found(local).hosted_tool.as_deref(), Some("local_shell"));
        // A tool's `type` is read where it stands, whatever else the tool holds.
        let hosted = serde_json::json!({"tools": [{"name": "x", "type": "file_search",
            "vector_store_ids": ["vs_1"]}]});
        assert_eq!(
            responses(&hosted).hosted_tool.as_deref(),
            Some("file_search")
        );
    }

    #[test]
    fn image_and_file_parts_are_counted_wherever_they_sit() {
        let body = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/b.png"}}
        ]}], "input": [{"content": [{"type": "input_image", "image_url": "x"}]}]});
        assert_eq!(found(body).attachments, 3);
        // Escapes spell the same type; a duplicated key counts twice.
        let raw = br#"{"messages":[{"content":[{"type":"text","type":"image\u005furl"}]}]}"#;
        assert_eq!(scan(raw, WireApi::ChatCompletions).unwrap().attachments, 1);
        let raw = br#"{"m":[{"type":"image_url","type":"input_image"}]}"#;
        assert_eq!(scan(raw, WireApi::ChatCompletions).unwrap().attachments, 2);
    }

    #[test]
    fn file_audio_and_video_parts_are_found_by_type_or_key() {
        // The first found names it (keys are walked in the order written).
        for (raw, named) in [
            (
                r#"{"m":[{"type":"file","file":{"file_data":"AAAA"}}]}"#,
                "file",
            ),
            (
                r#"{"input":[{"content":[{"file_url":"https://x/a.pdf","type":"input_file"}]}]}"#,
                "file_url",
            ),
            (
                r#"{"m":[{"type":"video_url","video_url":{"url":"https://x/v.mp4"}}]}"#,
                "video_url",
            ),
            (
                r#"{"m":[{"type":"input_audio","input_audio":{"data":"AAAA"}}]}"#,
                "input_audio",
            ),
            (
                r#"{"m":[{"kind":"x","audio_url":"https://x/a.wav"}]}"#,
                "audio_url",
            ),
        ] {
            let found = scan(raw.as_bytes(), WireApi::Responses).unwrap();
            assert_eq!(found.unbounded_media.as_deref(), Some(named), "{raw}");
        }
        assert_eq!(
            found(serde_json::json!({"m": [{"type": "text"}]})).unbounded_media,
            None
        );
    }

    #[test]
    fn a_stored_file_a_hosted_tool_and_audio_output_are_found() {
        assert!(
            found(serde_json::json!({"input": [{"content": [{"type": "input_file", "file_id": "file-1"}]}]}))
                .stored_file
        );
        assert!(!found(serde_json::json!({"x": {"file_id": null}})).stored_file);
        assert_eq!(
            found(
                serde_json::json!({"tools": [{"type": "function"}, {"type": "web_search_preview"}]})
            )
            .hosted_tool
            .as_deref(),
            Some("web_search_preview")
        );
        // A tool object nested elsewhere is not a top-level tool.
        assert_eq!(
            found(serde_json::json!({"messages": [{"tools": [{"type": "web_search"}]}]}))
                .hosted_tool,
            None
        );
        assert!(found(serde_json::json!({"modalities": ["text", "audio"]})).audio_output);
        assert!(!found(serde_json::json!({"x": {"modalities": ["audio"]}})).audio_output);
    }

    #[test]
    fn a_body_that_is_not_json_is_an_error() {
        assert!(scan(b"{\"a\": ", WireApi::Responses).is_err());
        assert!(scan(b"{} trailing", WireApi::Responses).is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            scan(deep.as_bytes(), WireApi::Responses).is_err(),
            "serde_json's depth limit holds"
        );
    }
}
