//! The one display policy for agent text (DESIGN §5 row 19): which characters of it never reach a
//! sink, and how the part of it bound for a forge is made inert. Every sink that shows agent text
//! builds on this module rather than on a rule of its own, so a reviewer checks one list.
//!
//! * [`invisible`] decides, character by character, what text may hold: control characters,
//!   bidirectional controls, zero-width characters and every other format (Unicode `Cf`) or
//!   default-ignorable code point are removed, and line or paragraph separators become newlines.
//!   They make text display differently from what it says (a reversed filename, a hidden
//!   instruction, a token split so no rule sees it), and nothing an agent legitimately writes needs
//!   them. The harness parsers apply it to every transcript item, so events and the run record hold
//!   none; names that must stay distinct (paths) show them as escapes instead.
//! * [`markdown`] rewrites agent text that a forge renders (the pull request body, the commit
//!   message) so that nothing in it is fetched or clickable: links keep their text and show their
//!   target in a code span, images become text naming their source, HTML and autolinks are shown,
//!   never interpreted.
//!
//! [`forge_text`] applies both with the sanitizer, in the order that matters.

pub mod invisible;
pub mod markdown;

use std::sync::Arc;

use crate::sanitize::{SanitizedText, TokenSanitizer};

pub use invisible::{Treatment, escaped_invisible, one_line, treatment, without_invisible};
pub use markdown::{code_span, for_terminal, inert_markdown, table_cell_code};

/// Agent text ready for a forge, and what was done to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeText {
    /// Secrets masked, no invisible character, no live link, image or HTML.
    pub text: SanitizedText,
    /// How many invisible characters were removed.
    pub invisible_removed: usize,
    /// How many links, images, autolinks and reference definitions were made inert.
    pub links_defanged: usize,
}

/// `text`, written by an agent, made safe to send to a forge as markdown.
///
/// Invisible characters go first: a zero-width space inside a token would hide it from the
/// sanitizer. Secrets are masked next, while every URL and value is still spelled as the agent wrote
/// it. The markup is made inert last, and the result passes the sanitizer once more, so what leaves
/// is sanitized by construction.
pub fn forge_text(sanitizer: &Arc<TokenSanitizer>, text: &str) -> ForgeText {
    let visible = without_invisible(text);
    let masked = sanitizer.sanitize(&visible.text);
    let inert = inert_markdown(masked.as_str());
    ForgeText {
        text: sanitizer.sanitize(&inert.text),
        invisible_removed: visible.removed,
        links_defanged: inert.defanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sanitize::KnownValue;

    #[test]
    fn a_token_split_by_a_zero_width_space_is_masked_not_revealed() {
        let secret = format!("canary-{}", uuid::Uuid::new_v4().simple());
        let sanitizer = Arc::new(
            TokenSanitizer::with_known_values(vec![KnownValue::new("model-key", &secret).unwrap()])
                .unwrap(),
        );
        let (head, tail) = secret.split_at(10);
        let shown = forge_text(&sanitizer, &format!("key {head}\u{200b}{tail} end"));
        assert_eq!(shown.text.as_str(), "key [REDACTED:model-key] end");
        assert_eq!((shown.invisible_removed, shown.links_defanged), (1, 0));
    }

    #[test]
    fn userinfo_in_a_link_target_is_masked_before_the_link_is_rewritten() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let password = uuid::Uuid::new_v4().simple().to_string();
        let shown = forge_text(
            &sanitizer,
            &format!("[the log](https://bot:{password}@ci.example/log)"),
        );
        assert!(!shown.text.as_str().contains(&password), "{shown:?}");
        assert!(
            shown.text.as_str().starts_with("the log (`https://"),
            "{shown:?}"
        );
        assert_eq!(shown.links_defanged, 1);
    }

    #[test]
    fn a_redaction_marker_never_becomes_a_link() {
        let sanitizer = Arc::new(TokenSanitizer::new().unwrap());
        let token = format!("ghp_{}", "a1B2".repeat(9));
        for (written, shown) in [
            (
                format!("{token}(https://attacker.example/)"),
                "\\[REDACTED:github-token\\](`https://attacker.example/`)",
            ),
            (
                format!("{token}: https://attacker.example/"),
                "\\[REDACTED:github-token\\]: `https://attacker.example/`",
            ),
            (
                format!("token {token} gone"),
                "token [REDACTED:github-token] gone",
            ),
        ] {
            assert_eq!(forge_text(&sanitizer, &written).text.as_str(), shown);
        }
    }
}
