//! `stet agent check`: the demo program's tests, as text checks on its files, because the sandbox
//! image holds no compiler and no shell. A checks file lists `[[check]]` tables: a `name`, a `file`
//! relative to the root, and strings it must (`contains`) and must not (`not_contains`) hold.

use std::io::Write;
use std::path::Path;

use serde::Deserialize;

use super::{AgentError, Result};

/// The largest checks file, and the largest checked file, read, in bytes.
pub const MAX_CHECK_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChecksFile {
    #[serde(default)]
    check: Vec<Check>,
}

/// One check of one file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Check {
    name: String,
    file: String,
    #[serde(default)]
    contains: Vec<String>,
    #[serde(default)]
    not_contains: Vec<String>,
}

/// Runs the checks in `file` against the files under `root`, printing `ok <name>` or
/// `FAILED <name>: <why>` for each and a summary line; returns 0 when every check passed, 1 otherwise.
pub fn check(file: &Path, root: &Path, out: &mut dyn Write) -> Result<u8> {
    let text = read_bounded(file).map_err(|source| AgentError::ReadChecks {
        file: file.to_owned(),
        source,
    })?;
    let checks = parse_checks(file, &text)?;
    let mut failed = 0usize;
    for check in &checks {
        let line = match verdict(check, root) {
            None => format!("ok {}", check.name),
            Some(why) => {
                failed += 1;
                format!("FAILED {}: {why}", check.name)
            }
        };
        writeln!(out, "{line}").map_err(AgentError::Write)?;
    }
    writeln!(out, "{} passed, {failed} failed", checks.len() - failed)
        .map_err(AgentError::Write)?;
    out.flush().map_err(AgentError::Write)?;
    Ok(u8::from(failed > 0))
}

fn parse_checks(file: &Path, text: &str) -> Result<Vec<Check>> {
    let parsed: ChecksFile = toml::from_str(text).map_err(|error| AgentError::ChecksSyntax {
        file: file.to_owned(),
        message: error.to_string().trim_end().to_owned(),
    })?;
    if parsed.check.is_empty() {
        return Err(AgentError::CheckField {
            file: file.to_owned(),
            check: 0,
            field: "check".to_owned(),
            problem: "the file has no `[[check]]` tables".to_owned(),
        });
    }
    for (offset, check) in parsed.check.iter().enumerate() {
        let field_error = |field: &str, problem: &str| AgentError::CheckField {
            file: file.to_owned(),
            check: offset + 1,
            field: field.to_owned(),
            problem: problem.to_owned(),
        };
        if check.name.trim().is_empty() {
            return Err(field_error("name", "is empty"));
        }
        if check.file.is_empty() {
            return Err(field_error("file", "is an empty path"));
        }
        if check.contains.is_empty() && check.not_contains.is_empty() {
            return Err(field_error(
                "contains",
                "a check needs `contains` or `not_contains`",
            ));
        }
    }
    Ok(parsed.check)
}

/// Why `check` fails, or `None` when it passes.
fn verdict(check: &Check, root: &Path) -> Option<String> {
    let path = root.join(&check.file);
    let text = match read_bounded(&path) {
        Ok(text) => text,
        Err(error) => return Some(format!("{} cannot be read: {error}", check.file)),
    };
    let missing: Vec<String> = check
        .contains
        .iter()
        .filter(|wanted| !text.contains(wanted.as_str()))
        .map(|wanted| format!("{wanted:?}"))
        .collect();
    let present: Vec<String> = check
        .not_contains
        .iter()
        .filter(|unwanted| text.contains(unwanted.as_str()))
        .map(|unwanted| format!("{unwanted:?}"))
        .collect();
    let mut reasons = Vec::new();
    if !missing.is_empty() {
        reasons.push(format!("{} lacks {}", check.file, missing.join(", ")));
    }
    if !present.is_empty() {
        reasons.push(format!("{} still has {}", check.file, present.join(", ")));
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// A UTF-8 file of at most [`MAX_CHECK_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CHECK_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CHECK_BYTES {
        return Err(std::io::Error::other(format!(
            "it is larger than {MAX_CHECK_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::other("it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_checks(checks: &str, files: &[(&str, &str)]) -> (Result<u8>, String) {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let file = root.path().join("checks.toml");
        std::fs::write(&file, checks).unwrap();
        let mut out = Vec::new();
        let code = check(&file, root.path(), &mut out);
        (code, String::from_utf8(out).unwrap())
    }

    const CHECKS: &str = r#"
[[check]]
name = "greets by name"
file = "src/main.rs"
contains = ["Hello, {name}!"]

[[check]]
name = "no placeholder left"
file = "src/main.rs"
not_contains = ["FIXME"]
"#;

    #[test]
    fn passing_checks_print_ok_and_return_zero() {
        let (code, out) = run_checks(
            CHECKS,
            &[("src/main.rs", "println!(\"Hello, {name}!\");\n")],
        );
        assert_eq!(code.unwrap(), 0);
        assert_eq!(
            out,
            "ok greets by name\nok no placeholder left\n2 passed, 0 failed\n"
        );
    }

    #[test]
    fn failing_checks_say_why_and_return_one() {
        let (code, out) = run_checks(CHECKS, &[("src/main.rs", "FIXME\n")]);
        assert_eq!(code.unwrap(), 1);
        assert_eq!(
            out,
            "FAILED greets by name: src/main.rs lacks \"Hello, {name}!\"\n\
             FAILED no placeholder left: src/main.rs still has \"FIXME\"\n\
             0 passed, 2 failed\n"
        );
    }

    #[test]
    fn a_missing_file_fails_its_check() {
        let (code, out) = run_checks(CHECKS, &[]);
        assert_eq!(code.unwrap(), 1);
        assert!(
            out.starts_with("FAILED greets by name: src/main.rs cannot be read: "),
            "{out}"
        );
    }

    #[test]
    fn a_malformed_checks_file_is_an_error_naming_the_file_check_and_field() {
        let (code, _) = run_checks(
            "[[check]]\nname = \"a\"\nfile = \"x\"\ncontains = [\"y\"]\n[[check]]\nname = \"b\"\nfile = \"x\"\n",
            &[],
        );
        let message = code.unwrap_err().to_string();
        assert!(
            message.contains("checks.toml: check 2: field `contains`"),
            "{message}"
        );
        let (code, _) = run_checks("[[check]]\nname = \"a\"\nfile = \"x\"\nwhat = 1\n", &[]);
        let message = code.unwrap_err().to_string();
        assert!(message.contains("checks.toml"), "{message}");
        assert!(message.contains("what"), "{message}");
    }

    #[test]
    fn a_missing_checks_file_is_an_error_naming_it() {
        let mut out = Vec::new();
        let message = check(
            Path::new("/nonexistent/checks.toml"),
            Path::new("/"),
            &mut out,
        )
        .unwrap_err()
        .to_string();
        assert!(message.contains("/nonexistent/checks.toml"), "{message}");
    }
}
