//! Known-value masking: the exact secrets stet itself handles, and the encodings they travel in.
//!
//! A shape rule cannot recognise a random scoped credential or a model key of an unknown format, but
//! stet knows those values. Each registered value is masked raw, base64-encoded at each of the three
//! byte alignments it can take inside a longer encoded blob (standard and URL-safe alphabets),
//! percent-encoded and JSON-escaped.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

use super::{Result, SanitizeError};

/// Shorter values would mask ordinary words.
pub const MIN_KNOWN_VALUE_LEN: usize = 8;
/// Longer values would not fit the redactor's look-ahead window in every encoding.
pub const MAX_KNOWN_VALUE_LEN: usize = 1024;
/// An encoded fragment shorter than this is too likely to occur by chance to be masked.
const MIN_ENCODED_FRAGMENT: usize = 8;

/// One exact value to mask, with the label its marker carries (`[REDACTED:<label>]`).
#[derive(Clone)]
pub struct KnownValue {
    label: String,
    value: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for KnownValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownValue")
            .field("label", &self.label)
            .field("value", &"<withheld>")
            .finish()
    }
}

impl KnownValue {
    /// A value to mask. Labels are short kebab-case words (`scoped-credential`, `model-key`).
    pub fn new(label: &str, value: &str) -> Result<KnownValue> {
        let label_ok = !label.is_empty()
            && label.len() <= 40
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !label_ok {
            return Err(SanitizeError::KnownValueLabel(label.to_owned()));
        }
        // A line end inside a value would let a stream's finished line go out before the value's
        // rest arrived; no credential holds one.
        if value.contains(['\n', '\r']) {
            return Err(SanitizeError::KnownValueLineBreak {
                label: label.to_owned(),
            });
        }
        let len = value.len();
        if !(MIN_KNOWN_VALUE_LEN..=MAX_KNOWN_VALUE_LEN).contains(&len) {
            return Err(SanitizeError::KnownValueLength {
                label: label.to_owned(),
                len,
            });
        }
        Ok(KnownValue {
            label: label.to_owned(),
            value: zeroize::Zeroizing::new(value.to_owned()),
        })
    }

    /// The label its mask shows (`[REDACTED:<label>]`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Every spelling of the value to mask, longest first, without duplicates.
    pub fn spellings(&self) -> Vec<zeroize::Zeroizing<String>> {
        let raw = self.value.as_bytes();
        let mut out: Vec<String> = vec![self.value.to_string()];
        for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
            for shift in 0..3 {
                out.push(stable_base64_core(&engine, raw, shift));
            }
        }
        out.push(percent_encode(raw, false));
        out.push(percent_encode(raw, true));
        out.push(json_escape(&self.value));
        // The ways source code spells a string byte by byte: an agent that writes the value into a
        // file escaped so is still caught (and shown masked).
        for (form, separator) in BYTE_FORMS {
            let spelled: Vec<String> = raw.iter().map(|&byte| form(byte)).collect();
            out.push(spelled.join(separator));
        }
        out.retain(|s| s.len() >= MIN_ENCODED_FRAGMENT);
        out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        out.dedup();
        out.into_iter().map(zeroize::Zeroizing::new).collect()
    }
}

/// One byte as source code escapes it, and what goes between two such bytes.
type ByteForm = (fn(u8) -> String, &'static str);

/// Every byte-by-byte spelling of a value that is masked: percent-encoding of every byte, C and
/// JSON escapes, byte arrays, HTML character references and plain hex, in either case.
const BYTE_FORMS: &[ByteForm] = &[
    (|b| format!("%{b:02x}"), ""),
    (|b| format!("%{b:02X}"), ""),
    (|b| format!("\\x{b:02x}"), ""),
    (|b| format!("\\x{b:02X}"), ""),
    (|b| format!("\\u{b:04x}"), ""),
    (|b| format!("\\u{b:04X}"), ""),
    (|b| format!("0x{b:02x}"), ", "),
    (|b| format!("0x{b:02X}"), ", "),
    (|b| format!("0x{b:02x}"), ","),
    (|b| format!("0x{b:02X}"), ","),
    (|b| format!("&#{b};"), ""),
    (|b| format!("&#x{b:x};"), ""),
    (|b| format!("&#x{b:X};"), ""),
    (|b| format!("{b:02x}"), ""),
    (|b| format!("{b:02X}"), ""),
];

/// The base64 characters of `raw` that do not depend on its neighbours when `raw` starts `shift`
/// bytes into a 3-byte group of a longer encoded blob.
fn stable_base64_core(engine: &base64::engine::GeneralPurpose, raw: &[u8], shift: usize) -> String {
    let mut shifted = vec![0u8; shift];
    shifted.extend_from_slice(raw);
    let encoded = engine.encode(&shifted);
    // Characters mixing prefix bits with value bits: none, the first two, or the first three.
    let skip = [0, 2, 3][shift];
    let total = shifted.len();
    let full_groups = total / 3;
    let tail_bytes = total % 3;
    // In a trailing partial group only characters made entirely of value bits are stable.
    let stable_end = full_groups * 4 + (tail_bytes * 8) / 6;
    let end = stable_end.min(encoded.len());
    encoded.get(skip..end).unwrap_or_default().to_owned()
}

fn percent_encode(raw: &[u8], lowercase: bool) -> String {
    let mut out = String::with_capacity(raw.len() * 3);
    for &byte in raw {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else if lowercase {
            out.push_str(&format!("%{byte:02x}"));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn json_escape(value: &str) -> String {
    let quoted = serde_json::Value::String(value.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_cores_occur_in_any_blob_that_embeds_the_value() {
        let value = b"s3cr3t-value/with+chars";
        for prefix_len in 0..6 {
            for suffix_len in 0..4 {
                let mut blob = vec![b'x'; prefix_len];
                blob.extend_from_slice(value);
                blob.extend(std::iter::repeat_n(b'y', suffix_len));
                for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
                    let encoded = engine.encode(&blob);
                    let core = stable_base64_core(&engine, value, prefix_len % 3);
                    assert!(core.len() >= 20, "core too short: {core}");
                    assert!(
                        encoded.contains(&core),
                        "{prefix_len}/{suffix_len}: {core} not in {encoded}"
                    );
                }
            }
        }
    }

    #[test]
    fn spellings_cover_percent_and_json_forms_only_when_they_differ() {
        let plain = KnownValue::new("model-key", "abcdefgh12345678").unwrap();
        let spellings: Vec<String> = plain.spellings().iter().map(|s| s.to_string()).collect();
        assert_eq!(
            spellings
                .iter()
                .filter(|s| s.as_str() == "abcdefgh12345678")
                .count(),
            1
        );

        let odd = KnownValue::new("model-key", "pa ss\"wo/rd\\x").unwrap();
        let spellings: Vec<String> = odd.spellings().iter().map(|s| s.to_string()).collect();
        assert!(spellings.contains(&"pa%20ss%22wo%2Frd%5Cx".to_owned()));
        assert!(spellings.contains(&"pa%20ss%22wo%2frd%5cx".to_owned()));
        assert!(spellings.contains(&r#"pa ss\"wo/rd\\x"#.to_owned()));
    }

    #[test]
    fn a_value_escaped_byte_by_byte_the_ways_source_code_does_is_masked() {
        let value = format!("key-{}", uuid::Uuid::new_v4().simple());
        let sanitizer = std::sync::Arc::new(
            crate::sanitize::TokenSanitizer::with_known_values(vec![
                KnownValue::new("model-key", &value).unwrap(),
            ])
            .unwrap(),
        );
        let bytes = value.as_bytes();
        let spelled = |form: &dyn Fn(u8) -> String, separator: &str| {
            bytes
                .iter()
                .map(|&b| form(b))
                .collect::<Vec<_>>()
                .join(separator)
        };
        for written in [
            spelled(&|b| format!("\\x{b:02x}"), ""),
            spelled(&|b| format!("\\u{b:04X}"), ""),
            spelled(&|b| format!("0x{b:02x}"), ", "),
            spelled(&|b| format!("%{b:02X}"), ""),
            spelled(&|b| format!("&#{b};"), ""),
            spelled(&|b| format!("{b:02x}"), ""),
        ] {
            let line = format!("const KEY: &str = \"{written}\";");
            let shown = sanitizer.sanitize(&line);
            assert_eq!(
                shown.as_str(),
                "const KEY: &str = \"[REDACTED:model-key]\";",
                "{written}"
            );
        }
    }

    #[test]
    fn values_too_short_too_long_or_badly_labelled_are_refused() {
        assert!(matches!(
            KnownValue::new("k", "short"),
            Err(SanitizeError::KnownValueLength { .. })
        ));
        let long = "a".repeat(MAX_KNOWN_VALUE_LEN + 1);
        assert!(matches!(
            KnownValue::new("k", &long),
            Err(SanitizeError::KnownValueLength { .. })
        ));
        assert!(matches!(
            KnownValue::new("Bad Label", "abcdefghij"),
            Err(SanitizeError::KnownValueLabel(_))
        ));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let value = KnownValue::new("model-key", "canary-value-123456").unwrap();
        assert!(!format!("{value:?}").contains("canary-value"));
    }
}
