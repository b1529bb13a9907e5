//! Unit tests of `crate::display::markdown`, in a file of their own so the module reads as code.

use super::*;
use proptest::prelude::*;

fn inert(text: &str) -> String {
    inert_markdown(text).text
}

#[test]
fn images_become_text_naming_their_source() {
    let shown = inert_markdown("Done ![x](https://attacker.example/?d=abc) ok");
    assert_eq!(
        shown.text,
        "Done x (image: `https://attacker.example/?d=abc`) ok"
    );
    assert_eq!(shown.defanged, 1);
    assert_eq!(
        inert("![](https://a.example/p.png \"title\")"),
        "(image: `https://a.example/p.png`)"
    );
    assert_eq!(
        inert("![logo][l]\n[l]: https://e.example/l.png"),
        "logo (image: `https://e.example/l.png`)\n\\[l\\]: `https://e.example/l.png`"
    );
    assert_eq!(inert("![a]()"), "a (image)");
}

#[test]
fn links_keep_their_text_and_show_their_target_as_code() {
    assert_eq!(
        inert("see [docs](https://docs.example/a_(b)) now"),
        "see docs (`https://docs.example/a_(b)`) now"
    );
    assert_eq!(
        inert("[a](<https://e.example/x y> 'title')"),
        "a (`https://e.example/x y`)"
    );
    assert_eq!(
        inert("[https://good.example](https://evil.example)"),
        "`https://good.example` (`https://evil.example`)"
    );
    assert_eq!(
        inert("[https://same.example/](https://same.example/)"),
        "`https://same.example/`"
    );
    assert_eq!(inert("[](https://e.example/)"), "`https://e.example/`");
    assert_eq!(inert("[no target]()"), "no target");
}

#[test]
fn reference_links_and_their_definitions_are_both_inert() {
    let shown = inert_markdown(
        "See [the report][r], [R][] and [r].\n\n   [r]: https://evil.example/r?x=1 \"Report\"",
    );
    assert_eq!(
        shown.text,
        "See the report (`https://evil.example/r?x=1`), R (`https://evil.example/r?x=1`) and r (`https://evil.example/r?x=1`).\n\n   \\[r\\]: `https://evil.example/r?x=1` \"Report\""
    );
    assert_eq!(shown.defanged, 4);
    assert_eq!(
        inert("[x]: <https://e.example/>"),
        "\\[x\\]: `https://e.example/`"
    );
    // A definition with its destination on the next line is not rewritten as one, and is inert.
    assert_eq!(
        inert("[x]:\nhttps://e.example/"),
        "\\[x\\]:\n`https://e.example/`"
    );
    assert_eq!(
        inert("[undefined] and [a][b]"),
        "\\[undefined\\] and \\[a\\]\\[b\\]"
    );
}

#[test]
fn autolinks_bare_urls_hosts_and_addresses_become_code() {
    assert_eq!(
        inert("<https://evil.example/x>"),
        "`https://evil.example/x`"
    );
    assert_eq!(inert("<me@evil.example>"), "`me@evil.example`");
    assert_eq!(inert("<irc:channel>"), "`irc:channel`");
    assert_eq!(
        inert("go to https://evil.example/a."),
        "go to `https://evil.example/a`."
    );
    assert_eq!(
        inert("(see https://e.example/x) and HTTPS://EVIL.EXAMPLE/Y, hTTp://z.example"),
        "(see `https://e.example/x`) and `HTTPS://EVIL.EXAMPLE/Y`, `hTTp://z.example`"
    );
    assert_eq!(
        inert("www.evil.example/p and WWW.EVIL.EXAMPLE"),
        "`www.evil.example/p` and `WWW.EVIL.EXAMPLE`"
    );
    assert_eq!(inert("path/https://e.example"), "path/`https://e.example`");
    assert_eq!(
        inert("mail me@evil.example now"),
        "mail `me@evil.example` now"
    );
    assert_eq!(inert("git@github.com:o/r.git"), "`git@github.com`:o/r.git");
    assert_eq!(inert("ping @someone"), "ping @someone");
    assert_eq!(
        inert("JaVaScRiPt:alert(1) data:text/html,x mailto:a@b.example"),
        "`JaVaScRiPt:alert(1)` `data:text/html,x` `mailto:a@b.example`"
    );
    // Words that only look like a scheme stay prose.
    assert_eq!(
        inert("the data: it is fine; localhost:8080; C:\\x"),
        "the data: it is fine; localhost:8080; C:\\\\x"
    );
}

#[test]
fn dangerous_schemes_in_links_are_shown_not_followed() {
    assert_eq!(
        inert("[x](javascript:alert(1))"),
        "x (`javascript:alert(1)`)"
    );
    assert_eq!(
        inert("[x](data:text/html;base64,PHN2Zz4=)"),
        "x (`data:text/html;base64,PHN2Zz4=`)"
    );
    assert_eq!(
        inert("[x](JAVASCRIPT:alert`1`)"),
        "x (`` JAVASCRIPT:alert`1` ``)"
    );
}

#[test]
fn html_is_shown_as_text() {
    assert_eq!(
        inert("<img src=\"https://evil.example/p.png\">"),
        "&lt;img src=\"`https://evil.example/p.png`\">"
    );
    assert_eq!(
        inert("<a href='javascript:alert(1)'>x</a>"),
        "&lt;a href='`javascript:alert(1)`'>x&lt;/a>"
    );
    assert_eq!(
        inert("<!-- stet:provenance --> <picture><source srcset=//e.example/a>"),
        "&lt;!-- stet:provenance --> &lt;picture>&lt;source srcset=//e.example/a>"
    );
    assert_eq!(inert("if a < b && c > d"), "if a &lt; b && c > d");
}

#[test]
fn character_references_are_shown_not_decoded() {
    assert_eq!(
        inert("&lt;img src=x&gt; &#x202E;rtl &#60; &amp; R&D & co"),
        "&amp;lt;img src=x&amp;gt; &amp;#x202E;rtl &amp;#60; &amp;amp; R&D & co"
    );
}

#[test]
fn code_spans_keep_their_text_whatever_it_holds() {
    assert_eq!(
        inert("Run `curl https://x.example/i.sh` and `![a](https://e.example/)`"),
        "Run `curl https://x.example/i.sh` and `![a](https://e.example/)`"
    );
    assert_eq!(inert("``a ` b``"), "``a ` b``");
    assert_eq!(inert("`` `x` ``"), "`` `x` ``");
    assert_eq!(inert("a ` b <c>"), "a \\` b &lt;c>");
    assert_eq!(inert("a ```x"), "a \\`\\`\\`x");
    // At the start of a line the same backticks open a (here empty) fenced block.
    assert_eq!(inert("```x"), "```\n```");
    assert_eq!(
        inert("`a``b` https://e.example/`c`"),
        "```a``b``` `https://e.example/` `c`"
    );
}

#[test]
fn fences_keep_their_content_lose_their_info_string_and_always_close() {
    assert_eq!(
        inert("before\n```html\n<img src=\"https://x.example/\">\n```\nafter <b>"),
        "before\n```\n<img src=\"https://x.example/\">\n```\nafter &lt;b>"
    );
    assert_eq!(inert("~~~ mermaid\n````\n~~~"), "`````\n````\n`````");
    assert_eq!(
        inert("```\n![x](https://e.example/)"),
        "```\n![x](https://e.example/)\n```"
    );
    // Four spaces of indentation open no fence, so the tildes are escaped.
    assert_eq!(inert("    ~~~"), "    \\~~~");
}

#[test]
fn nested_and_escaped_tricks_stay_inert() {
    let shown = inert_markdown("[![badge](https://img.example/b.svg)](https://site.example/)");
    assert_eq!(
        shown.text,
        "badge (image: `https://img.example/b.svg`) (`https://site.example/`)"
    );
    assert_eq!(shown.defanged, 2);
    assert_eq!(
        inert("\\![x](https://e.example/)"),
        "\\\\x (image: `https://e.example/`)"
    );
    assert_eq!(
        inert("!\\[x\\](https://e.example/)"),
        "!\\\\x\\\\ (`https://e.example/`)"
    );
    assert_eq!(
        inert("$\\href{https://e.example/}{x}$"),
        "\\$\\\\href{`https://e.example/}{x}$`"
    );
    assert_eq!(inert("- [ ] todo [^1]"), "- \\[ \\] todo \\[^1\\]");
    assert_eq!(
        inert("[^1]: https://e.example/"),
        "\\[^1\\]: `https://e.example/`"
    );
}

#[test]
fn no_table_can_split_a_code_span() {
    assert_eq!(
        inert("a | b\n--|--\n`x|<img src=y>` | c\n:-:"),
        "a | b\n\\--|--\n`x|<img src=y>` | c\n\\:-:"
    );
    assert_eq!(inert("---"), "\\---");
    assert_eq!(inert("- item"), "- item");
}

#[test]
fn prose_and_markup_that_cannot_fetch_pass_through() {
    let text = "## Summary\n\n- **Fixed** the _loop_ (twice)\n> quoted\n1. Grüße 😀 中文 #12";
    assert_eq!(
        inert_markdown(text),
        Inert {
            text: text.to_owned(),
            defanged: 0
        }
    );
}

#[test]
fn code_spans_are_delimited_so_nothing_closes_them_early() {
    assert_eq!(code_span("plain"), "`plain`");
    assert_eq!(code_span("a`b"), "``a`b``");
    assert_eq!(code_span("`x"), "`` `x ``");
    assert_eq!(code_span(" x "), "`  x  `");
    assert_eq!(code_span("two\nlines"), "`two lines`");
    assert_eq!(code_span(""), "");
    assert_eq!(table_cell_code("a|<img>"), "`a\u{a6}<img>`");
}

#[test]
fn long_hostile_input_is_rewritten_in_linear_time() {
    for hostile in [
        "[".repeat(64 * 1024),
        format!("https://e.example/{}", ")".repeat(64 * 1024)),
        "`".repeat(300) + &"` ".repeat(30_000),
        "a@".repeat(32 * 1024),
        "[x](".repeat(16 * 1024),
    ] {
        let started = std::time::Instant::now();
        let shown = inert(&hostile);
        assert!(!shown.is_empty());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?} for {} bytes",
            started.elapsed(),
            hostile.len()
        );
    }
}

/// Each line of `written` outside the fenced blocks it holds, with what a forge reads there as
/// markup: every code span stood in for by a space, every escaped character by another.
fn markup_lines(written: &str) -> Vec<(&str, String)> {
    let mut lines = Vec::new();
    let mut fence: Option<&str> = None;
    for line in written.split('\n') {
        if let Some(open) = fence {
            if line == open {
                fence = None;
            }
            continue;
        }
        if line.starts_with("```") && line.bytes().all(|b| b == b'`') {
            fence = Some(line);
            continue;
        }
        let bytes = line.as_bytes();
        let mut markup = String::new();
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b'\\' => {
                    markup.push(' ');
                    at += 2;
                }
                b'`' => {
                    let run = bytes[at..].iter().take_while(|b| **b == b'`').count();
                    let mut close = at + run;
                    loop {
                        let next = close
                            + bytes[close..]
                                .iter()
                                .position(|b| *b == b'`')
                                .unwrap_or_else(|| panic!("unclosed code span in {written:?}"));
                        let length = bytes[next..].iter().take_while(|b| **b == b'`').count();
                        close = next + length;
                        if length == run {
                            break;
                        }
                    }
                    markup.push(' ');
                    at = close;
                }
                _ => {
                    let end = bytes[at..]
                        .iter()
                        .position(|b| matches!(b, b'\\' | b'`'))
                        .map_or(bytes.len(), |offset| at + offset);
                    markup.push_str(&line[at..end]);
                    at = end;
                }
            }
        }
        lines.push((line, markup));
    }
    assert!(fence.is_none(), "unclosed fence in {written:?}");
    lines
}

fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "![",
        "[",
        "]",
        "(",
        ")",
        "<",
        ">",
        "`",
        "``",
        "```",
        "~~~",
        "\\",
        "&",
        "#x3C;",
        ";",
        "&lt;",
        "https://e.example/?d=",
        "HTTPS://",
        "www.",
        "WWW.",
        "@",
        "me",
        ".example",
        "javascript:",
        "data:",
        "mailto:",
        ":",
        "//",
        "img src=",
        "\"",
        "'",
        " ",
        "\n",
        "|",
        "-",
        "---",
        "$",
        "[REDACTED:github-token]",
        "x",
        "\u{e9}",
        "a]: ",
        "   [a]: ",
        "^",
    ])
}

proptest! {
    #[test]
    fn nothing_outside_code_can_link_fetch_or_render_html(
        pieces in prop::collection::vec(fragment(), 0..40)
    ) {
        let input = pieces.concat();
        let written = inert(&input);
        let forbidden = regex::Regex::new(concat!(
            r"(?i)<|\$|[a-z][a-z0-9+.-]*://|(^|[^a-z0-9])www\.",
            r"|(^|[^a-z0-9+.-])(javascript|vbscript|data|mailto|xmpp|file):[a-z0-9/%]",
            r"|[a-z0-9._+-]@[a-z0-9_-]+\.[a-z0-9]|&(#[0-9]+|#x[0-9a-f]+|[a-z0-9]+);",
        ))
        .unwrap();
        for (line, markup) in markup_lines(&written) {
            prop_assert!(!could_be_table_delimiter(line), "{line:?} in {written:?}");
            let markup = markup.replace("[REDACTED:github-token]", " ");
            let stray = forbidden
                .find_iter(&markup)
                .find(|found| !matches!(found.as_str(), "&lt;" | "&amp;"));
            prop_assert!(stray.is_none(), "{stray:?} outside code in {written:?} (from {input:?})");
            prop_assert!(!markup.contains(['[', ']']), "a bracket outside code in {written:?} (from {input:?})");
        }
    }
}

#[test]
fn the_terminal_reads_back_the_references_the_rewrite_wrote_and_no_others() {
    let agent = "a <name> & &lt; &#x41; x";
    let inert = inert_markdown(agent).text;
    assert!(inert.contains("&lt;name>"), "{inert}");
    assert_eq!(for_terminal(&inert), agent);
    assert_eq!(for_terminal("&amp;lt; &&lt; &"), "&lt; &< &");
}
