//! How stet speaks of a file of the user's that it reads without owning it — a scenario, a price
//! table, an app's private key, any path a configuration names: by its name and the place and kind
//! of a problem, never by its text. A configuration that names `~/.pgpass` by mistake, or on a
//! trusted repository's say-so, gets "line 1, column 10: not valid TOML", never the password.

/// Where a TOML problem in `text` is and what kind it is, quoting nothing of `text`: the TOML
/// parser's own words for a syntax error (a fixed vocabulary: "key with no value, expected `=`"),
/// else `kind` (the caller's words for a value or key its format does not accept).
pub fn toml_problem(text: &str, error: &toml::de::Error, kind: &str) -> String {
    match toml::from_str::<toml::Table>(text) {
        Err(syntax) => format!(
            "{}: not valid TOML ({})",
            place(text, syntax.span()),
            syntax.message()
        ),
        Ok(_) => format!("{}: {kind}", place(text, error.span())),
    }
}

/// `line L, column C` of the start of `span` in `text`; `the file` when there is no span.
pub fn place(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else {
        return "the file".to_owned();
    };
    let (line, column) = line_and_column(text, span.start);
    format!("line {line}, column {column}")
}

/// The 1-based line, and column in characters, of byte `offset` of `text` (an offset inside a
/// character counts as that character's start).
pub fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.bytes().filter(|byte| *byte == b'\n').count() + 1;
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary() -> String {
        format!("canary{}", uuid::Uuid::new_v4().simple())
    }

    #[test]
    fn a_syntax_error_is_placed_and_named_in_the_parsers_words_only() {
        let secret = canary();
        let text = format!("db.example.invalid:5432:app:admin:{secret}\n");
        let error = toml::from_str::<toml::Table>(&text).unwrap_err();
        let problem = toml_problem(&text, &error, "unused");
        assert!(problem.starts_with("line 1, column "), "{problem}");
        assert!(problem.contains("not valid TOML"), "{problem}");
        assert!(!problem.contains(&secret), "{problem}");
        assert!(!problem.contains("admin"), "{problem}");
    }

    #[test]
    fn a_data_error_is_placed_and_named_in_the_callers_words() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Format {
            input: f64,
        }
        assert_eq!(toml::from_str::<Format>("input = 1.5").unwrap().input, 1.5);
        let secret = canary();
        let text = format!("\nAWS_SECRET_ACCESS_KEY = \"{secret}\"\n");
        let error = toml::from_str::<Format>(&text).unwrap_err();
        assert!(
            error.to_string().contains("AWS_SECRET_ACCESS_KEY"),
            "the parser's own message quotes the key"
        );
        let problem = toml_problem(&text, &error, "a key the format does not hold");
        assert_eq!(problem, "line 2, column 1: a key the format does not hold");
        let text = format!("input = \"{secret}\"\n");
        let error = toml::from_str::<Format>(&text).unwrap_err();
        assert!(
            error.to_string().contains(&secret),
            "serde quotes the value"
        );
        let problem = toml_problem(&text, &error, "a value of the wrong type");
        assert!(!problem.contains(&secret), "{problem}");
        assert!(problem.starts_with("line 1, column 9: "), "{problem}");
    }

    #[test]
    fn lines_and_columns_count_characters_from_one() {
        assert_eq!(line_and_column("ab\ncé\nx", 0), (1, 1));
        assert_eq!(line_and_column("ab\ncé\nx", 3), (2, 1));
        assert_eq!(line_and_column("ab\ncé\nx", 7), (3, 1));
        assert_eq!(line_and_column("ab", 99), (1, 3));
        assert_eq!(place("x", None), "the file");
    }
}
