//! Tokens broken over two lines, from the attacker's side: every token is generated here at run
//! time, broken at every place after its prefix, fed whole, in two reads split at the line break,
//! and a byte at a time; nothing of 8 or more consecutive token characters may come out.

use std::sync::Arc;

use proptest::prelude::*;

use super::super::{Redactor, TokenSanitizer};

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const WORD: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_";
const URLSAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A token of each family: (prefix, random part). `sk-` keys carry a digit, as real ones do.
fn token(family: usize, seed: u64) -> (&'static str, String) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut body = |alphabet: &[u8], len: usize| -> String {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(alphabet[(state % alphabet.len() as u64) as usize])
            })
            .collect()
    };
    match family % 5 {
        0 => ("ghp_", body(ALNUM, 36)),
        1 => (
            "github_pat_",
            format!("{}_{}", body(ALNUM, 22), body(ALNUM, 59)),
        ),
        2 => ("glpat-", body(URLSAFE, 20)),
        3 => ("sk-ant-", format!("api03-{}7AA", body(URLSAFE, 90))),
        _ => (
            "sk-",
            format!("proj-{}9{}", body(URLSAFE, 30), body(WORD, 40)),
        ),
    }
}

fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

fn in_reads(sanitizer: &Arc<TokenSanitizer>, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut redactor = Redactor::new(Arc::clone(sanitizer));
    let mut out = Vec::new();
    let mut from = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    for cut in cuts {
        redactor.push(&input[from..cut.max(from)], &mut out);
        from = cut.max(from);
    }
    redactor.push(&input[from..], &mut out);
    redactor.finish(&mut out);
    out
}

/// The first 8-byte piece of `token` that `out` shows, if any.
fn clear_piece(out: &[u8], token: &str) -> Option<String> {
    token
        .as_bytes()
        .windows(8)
        .find(|piece| out.windows(8).any(|w| w == *piece))
        .map(|piece| String::from_utf8_lossy(piece).into_owned())
}

#[test]
fn a_token_broken_after_its_prefix_is_masked_in_both_halves_in_any_reads() {
    let sanitizer = sanitizer();
    for family in 0..5 {
        let (prefix, body) = token(family, family as u64 + 1);
        let whole = format!("{prefix}{body}");
        for at in 0..=body.len() {
            for line_break in ["\n", "\r\n"] {
                let text = format!(
                    "the key: {prefix}{}{line_break}{} rest of the line\nnext\n",
                    &body[..at],
                    &body[at..]
                );
                let input = text.as_bytes();
                let at_break = text.find(line_break).unwrap();
                let once = sanitizer.redact(input);
                let shown = String::from_utf8_lossy(&once);
                assert_eq!(
                    clear_piece(&once, &whole),
                    None,
                    "{prefix} cut at {at}: {shown}"
                );
                assert!(shown.starts_with("the key: [REDACTED:"), "{shown}");
                assert!(shown.ends_with(" rest of the line\nnext\n"), "{shown}");
                assert_eq!(
                    shown.matches('\n').count(),
                    3,
                    "the lines stay lines: {shown}"
                );
                let split_at_break = in_reads(&sanitizer, input, &[at_break + line_break.len()]);
                let bytewise = in_reads(&sanitizer, input, &(0..input.len()).collect::<Vec<_>>());
                assert_eq!(split_at_break, once, "{prefix} cut at {at}, two reads");
                assert_eq!(bytewise, once, "{prefix} cut at {at}, a byte at a time");
            }
        }
    }
}

#[test]
fn the_first_half_goes_out_before_the_second_line_arrives() {
    let sanitizer = sanitizer();
    let (prefix, body) = token(0, 9);
    let mut redactor = Redactor::new(Arc::clone(&sanitizer));
    let mut out = Vec::new();
    redactor.push(
        format!("token {prefix}{}\n", &body[..20]).as_bytes(),
        &mut out,
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        "token [REDACTED:github-token]\n",
        "a first half of 8 or more is decided at its line's end"
    );
    redactor.push(&body.as_bytes()[20..30], &mut out);
    redactor.push(format!("{} done\n", &body[30..]).as_bytes(), &mut out);
    redactor.finish(&mut out);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "token [REDACTED:github-token]\n done\n"
    );
    assert_eq!(redactor.masked(), 1);
}

#[test]
fn a_named_value_broken_after_its_prefix_is_masked_in_both_halves() {
    let sanitizer = sanitizer();
    let (prefix, body) = token(0, 3);
    let text = format!("GITHUB_TOKEN={prefix}{}\n{}\n", &body[..5], &body[5..]);
    let out = sanitizer.redact(text.as_bytes());
    assert_eq!(clear_piece(&out, &format!("{prefix}{body}")), None);
    assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2);
}

#[test]
fn near_misses_are_left_untouched() {
    let sanitizer = sanitizer();
    let (_, body) = token(0, 5);
    let (_, whole_gitlab) = token(2, 6);
    let near_misses = [
        // Seven characters in all: too short to be a token.
        format!("prefix ghp_{}\n{} and more\n", &body[..3], &body[3..7]),
        // Glued to a word: not at a token boundary.
        format!("xghp_{}\n{} and more\n", &body[..10], &body[10..20]),
        // A blank before the line break: the token ended on its line.
        format!("ghp_{} \n{} and more\n", &body[..10], &body[10..20]),
        // A blank line between.
        format!("ghp_{}\n\n{} and more\n", &body[..4], &body[4..20]),
        // Prose: `sk-` and hyphenated words, no digit.
        "pip install sk-\nlearn-compatible estimators\n".to_owned(),
        "the sk-learn\ncompatible API\n".to_owned(),
        // A whole token at a line's end does not eat the next line.
        format!("glpat-{whole_gitlab}\nnext line\n"),
    ];
    for text in &near_misses[..6] {
        let out = sanitizer.redact(text.as_bytes());
        assert_eq!(String::from_utf8_lossy(&out), *text);
    }
    let out = String::from_utf8(sanitizer.redact(near_misses[6].as_bytes())).unwrap();
    assert_eq!(out, "[REDACTED:gitlab-token]\nnext line\n");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn no_break_of_a_generated_token_leaves_eight_characters_in_clear(
        family in 0usize..5,
        seed in any::<u64>(),
        at in any::<prop::sample::Index>(),
        crlf in any::<bool>(),
        before in prop::sample::select(vec!["", "key: ", "  ", "echo '", "\u{1b}[32m", "{\"t\":\""]),
        after in prop::sample::select(vec!["", " rest", "\n", "'", "\"}", ", more"]),
        cuts in prop::collection::vec(0usize..400, 0..8),
    ) {
        let sanitizer = sanitizer();
        let (prefix, body) = token(family, seed);
        let at = at.index(body.len() + 1);
        let line_break = if crlf { "\r\n" } else { "\n" };
        let text = format!("{before}{prefix}{}{line_break}{}{after}", &body[..at], &body[at..]);
        let once = sanitizer.redact(text.as_bytes());
        prop_assert_eq!(clear_piece(&once, &format!("{prefix}{body}")), None, "{}", String::from_utf8_lossy(&once));
        prop_assert_eq!(in_reads(&sanitizer, text.as_bytes(), &cuts), once);
    }
}
