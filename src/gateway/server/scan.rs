//! One pass over a request body's JSON that finds what its worst case depends on beyond its top-level
//! fields — image and file parts, stored-file references, tools the provider runs, audio output —
//! without building the document: a hostile body of tiny values would cost the host tens of times its
//! size as a `serde_json::Value`. Memory is bounded by the nesting depth (serde_json stops at 128).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// What the walk found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// Objects whose `type` is an image or file part (each `type` key counts: duplicates over-count).
    pub(super) attachments: u64,
    /// Some object names a stored file (`file_id` not null).
    pub(super) stored_file: bool,
    /// The `type` of a top-level tool the provider runs itself (anything but `function` or `custom`).
    pub(super) hosted_tool: Option<String>,
    /// Top-level `modalities` asks for audio.
    pub(super) audio_output: bool,
}

/// Walks `raw` (a JSON document) and says what it holds.
pub(super) fn scan(raw: &[u8]) -> Result<Found, serde_json::Error> {
    let mut found = Found::default();
    let mut deserializer = serde_json::Deserializer::from_slice(raw);
    Walk {
        found: &mut found,
        place: Place::Root,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

/// The types of content part that carry an image or a file.
fn is_attachment(kind: &str) -> bool {
    matches!(
        kind,
        "image_url" | "input_image" | "image" | "file" | "input_file"
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
    Elsewhere,
}

struct Walk<'a> {
    found: &'a mut Found,
    place: Place,
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
            _ => Place::Elsewhere,
        };
        while seq
            .next_element_seed(Walk {
                found: &mut *self.found,
                place,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key {
                Key::Type => {
                    let kind = map.next_value_seed(TypeSeed {
                        found: &mut *self.found,
                    })?;
                    if let Some(kind) = kind {
                        if is_attachment(&kind) {
                            self.found.attachments = self.found.attachments.saturating_add(1);
                        }
                        if self.place == Place::Tool
                            && !matches!(kind.as_str(), "function" | "custom")
                            && self.found.hosted_tool.is_none()
                        {
                            self.found.hosted_tool = Some(kind);
                        }
                    }
                }
                Key::FileId => {
                    if map.next_value_seed(NotNull {
                        found: &mut *self.found,
                    })? {
                        self.found.stored_file = true;
                    }
                }
                Key::Other(top) => {
                    let place = match (self.place, top) {
                        (Place::Root, Some(TopKey::Tools)) => Place::Tools,
                        (Place::Root, Some(TopKey::Modalities)) => Place::Modalities,
                        _ => Place::Elsewhere,
                    };
                    map.next_value_seed(Walk {
                        found: &mut *self.found,
                        place,
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
    Other(Option<TopKey>),
}

/// Keys that matter at the top level only.
#[derive(Clone, Copy)]
enum TopKey {
    Tools,
    Modalities,
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
            _ => Key::Other(None),
        })
    }
}

/// A `type` value: its text when it is a string (bounded: a longer one names no type the walk knows),
/// otherwise walked for what it holds.
struct TypeSeed<'a> {
    found: &'a mut Found,
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
        }
        .visit_seq(seq)?;
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<String>, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
        }
        .visit_map(map)?;
        Ok(None)
    }
}

/// A `file_id` value: whether it is anything but null (walked for what it holds either way).
struct NotNull<'a> {
    found: &'a mut Found,
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
        }
        .visit_seq(seq)?;
        Ok(true)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        Walk {
            found: self.found,
            place: Place::Elsewhere,
        }
        .visit_map(map)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn found(body: serde_json::Value) -> Found {
        scan(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn image_and_file_parts_are_counted_wherever_they_sit() {
        let body = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA"}}
        ]}], "input": [{"content": [{"type": "input_image", "image_url": "x"}]}]});
        assert_eq!(found(body).attachments, 3);
        // Escapes spell the same type; a duplicated key counts twice.
        let raw = br#"{"messages":[{"content":[{"type":"text","type":"image\u005furl"}]}]}"#;
        assert_eq!(scan(raw).unwrap().attachments, 1);
        let raw = br#"{"m":[{"type":"image_url","type":"input_file"}]}"#;
        assert_eq!(scan(raw).unwrap().attachments, 2);
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
        assert!(scan(b"{\"a\": ").is_err());
        assert!(scan(b"{} trailing").is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            scan(deep.as_bytes()).is_err(),
            "serde_json's depth limit holds"
        );
    }
}
