//! The secret scan against results built in real repositories. Every secret is made at run time.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use git2::FileMode;

use super::*;
use crate::credential::random_token;
use crate::git::changes::trees::changes;
use stet_sanitize::sanitize::KnownValue;

const FILE: FileMode = FileMode::Blob;

fn github_token() -> String {
    format!("ghp_{}", random_token(36).unwrap())
}

fn shapes_only() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

fn knowing(label: &str, value: &str) -> Arc<TokenSanitizer> {
    Arc::new(
        TokenSanitizer::with_known_values(vec![KnownValue::new(label, value).unwrap()]).unwrap(),
    )
}

/// `(path, line, kind, known)` of each finding when `before` becomes `after`.
fn found(
    before: &[(&str, &str)],
    after: &[(&str, &str)],
    sanitizer: &Arc<TokenSanitizer>,
) -> Vec<(String, Option<usize>, String, bool)> {
    let spec = |files: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec()))
            .collect()
    };
    let (before, after) = (spec(before), spec(after));
    let entries = |files: &[(String, Vec<u8>)]| -> Vec<(String, FileMode, Vec<u8>)> {
        files
            .iter()
            .map(|(path, bytes)| (path.clone(), FILE, bytes.clone()))
            .collect()
    };
    let (before, after) = (entries(&before), entries(&after));
    found_in(&before, &after, sanitizer)
}

fn found_in(
    before: &[(String, FileMode, Vec<u8>)],
    after: &[(String, FileMode, Vec<u8>)],
    sanitizer: &Arc<TokenSanitizer>,
) -> Vec<(String, Option<usize>, String, bool)> {
    let read = changes(&borrowed(before), &borrowed(after));
    scan(&read, sanitizer)
        .into_iter()
        .map(|finding| (finding.path, finding.line, finding.kind, finding.known))
        .collect()
}

fn borrowed(files: &[(String, FileMode, Vec<u8>)]) -> Vec<(&str, FileMode, &[u8])> {
    files
        .iter()
        .map(|(path, mode, bytes)| (path.as_str(), *mode, bytes.as_slice()))
        .collect()
}

fn one(path: &str, line: usize, kind: &str, known: bool) -> (String, Option<usize>, String, bool) {
    (path.to_owned(), Some(line), kind.to_owned(), known)
}

#[test]
fn a_token_on_an_added_line_is_found_with_its_file_line_and_kind() {
    let token = github_token();
    assert_eq!(
        found(
            &[("app.env", "MODE=dev\n")],
            &[("app.env", &format!("MODE=dev\nGH_TOKEN={token}\n"))],
            &shapes_only()
        ),
        vec![one("app.env", 2, "github-token", false)]
    );
}

#[test]
fn a_secret_the_base_already_held_is_not_new() {
    let token = github_token();
    let base = format!("# fixture\nTOKEN={token}\nend\n");
    let sanitizer = shapes_only();
    // Unchanged, on an untouched line.
    assert!(
        found(
            &[("f.txt", &base)],
            &[("f.txt", &format!("{base}more\n"))],
            &sanitizer
        )
        .is_empty()
    );
    // On an edited line, or in a file moved elsewhere: the value was there before.
    assert!(
        found(
            &[("f.txt", &base)],
            &[(
                "f.txt",
                &base
                    .replace("# fixture", "# fixture, edited")
                    .replace("TOKEN=", "TOKEN = ")
            )],
            &sanitizer
        )
        .is_empty()
    );
    assert!(found(&[("f.txt", &base)], &[("moved/f.txt", &base)], &sanitizer).is_empty());
    // Only removed: nothing is pushed.
    assert!(found(&[("f.txt", &base)], &[("f.txt", "end\n")], &sanitizer).is_empty());
    // A new token next to the old one is found.
    let fresh = github_token();
    assert_eq!(
        found(
            &[("f.txt", &base)],
            &[("f.txt", &format!("{base}NEW={fresh}\n"))],
            &sanitizer
        ),
        vec![one("f.txt", 4, "github-token", false)]
    );
}

#[test]
fn a_known_value_is_found_in_every_disguise_even_if_the_base_held_it() {
    let value = random_token(40).unwrap();
    let sanitizer = knowing("model-key", &value);
    let (first, second) = value.split_at(20);
    let wrapped = STANDARD.encode(format!("key: {value}\n").repeat(3));
    let wrapped: Vec<String> = wrapped
        .as_bytes()
        .chunks(16)
        .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
        .collect();
    let utf16: String = value.chars().flat_map(|c| [c, '\0']).collect();
    for (name, text) in [
        ("raw", format!("KEY={value}\n")),
        (
            "split over lines",
            format!("a = \"{first}\" +\n    \"{second}\"\n"),
        ),
        (
            "implicit concatenation",
            format!("a = (\"{first}\"\n     \"{second}\")\n"),
        ),
        ("spread by spaces", format!("{first}   \n{second}\n")),
        (
            "zero-width characters",
            format!("{first}\u{200b}{second}\n"),
        ),
        ("base64 wrapped at 16 columns", wrapped.join("\n")),
        ("utf-16", format!("\0\0{utf16}\0")),
        ("json escaped", serde_json::to_string(&value).unwrap()),
        (
            "hex",
            value
                .bytes()
                .map(|byte| format!("{byte:02x}"))
                .collect::<String>(),
        ),
    ] {
        let findings = found(&[], &[("x.txt", &text)], &sanitizer);
        assert!(
            findings
                .iter()
                .any(|(path, line, kind, known)| path == "x.txt"
                    && line.is_some()
                    && kind == "model-key"
                    && *known),
            "{name}: {findings:?}"
        );
    }
    let base = format!("KEY={value}\n");
    assert_eq!(
        found(&[("x.txt", &base)], &[("y.txt", &base)], &sanitizer),
        vec![one("y.txt", 1, "model-key", true)],
        "a known value is never pushed, even one the base held"
    );
    assert_eq!(
        found(&[], &[(&format!("keys/{value}.txt"), "x\n")], &sanitizer),
        vec![(
            format!("keys/{value}.txt"),
            None,
            "model-key".to_owned(),
            true
        )],
        "in a file's name"
    );
}

#[test]
fn a_generated_token_is_found_split_or_base64_encoded() {
    let sanitizer = shapes_only();
    let token = github_token();
    let (head, tail) = token.split_at(14);
    for (name, text) in [
        (
            "split with +",
            format!("let t = \"{head}\" +\n  \"{tail}\";\n"),
        ),
        (
            "split with a continuation",
            format!("T=\"{head}\\\n{tail}\"\n"),
        ),
        ("base64", format!("blob: {}\n", STANDARD.encode(&token))),
        ("base64 wrapped", {
            let encoded = STANDARD.encode(format!("token {token}"));
            let (a, b) = encoded.split_at(20);
            format!("{a}\n{b}\n")
        }),
    ] {
        let findings = found(&[], &[("s.txt", &text)], &sanitizer);
        assert!(
            findings
                .iter()
                .any(|(_, line, kind, known)| line.is_some() && kind == "github-token" && !known),
            "{name}: {findings:?}"
        );
    }
}

#[test]
fn a_token_deep_in_a_long_encoded_run_is_found_and_findings_per_file_are_bounded() {
    let sanitizer = shapes_only();
    let mut blob = "x".repeat(100 * 1024).into_bytes();
    blob.extend_from_slice(format!(" {} ", github_token()).as_bytes());
    let findings = found(&[], &[("big.b64", &STANDARD.encode(&blob))], &sanitizer);
    // The encoded prefix is seen as it is, and the token once decoded.
    assert_eq!(
        findings,
        vec![
            one("big.b64", 1, "encoded-token", false),
            one("big.b64", 1, "github-token", false)
        ]
    );

    let many: String = (0..100)
        .map(|_| format!("T={}\n", github_token()))
        .collect();
    let findings = found(&[], &[("many.env", &many)], &sanitizer);
    assert_eq!(findings.len(), MAX_FINDINGS_PER_FILE);
    let value = random_token(40).unwrap();
    let findings = found(
        &[],
        &[("many.env", &format!("{many}KEY={value}\n"))],
        &knowing("primary-token", &value),
    );
    assert!(
        findings
            .iter()
            .any(|(_, line, _, known)| *known && *line == Some(101)),
        "a known value is reported however many shapes came first: {findings:?}"
    );
}

#[test]
fn ordinary_code_and_hashes_are_not_secrets() {
    let sha = "3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";
    let code = format!(
        r#"commit {sha}
checksum = "{sha}{sha}"
let password = request.form["password"];
password = get_password()
password: ${{DB_PASSWORD}}
PASSWORD = os.environ["PASSWORD"]
db_password = settings.DB_PASSWORD
password = "<your password here>"
password = "password"
api_key = os.getenv("API_KEY")
api_key: config.api_key
headers["Authorization"] = f"Bearer {{token}}"
Authorization: Bearer $TOKEN
DATABASE_URL=postgres://postgres:postgres@localhost:5432/app
git clone https://github.com/octo/app.git
uses: actions/checkout@v4
from sklearn.linear_model import LogisticRegression
id = "6f1c1a52-3a43-4d0f-9a57-1f2f6a0b9c11"
integrity sha512-Q8M5mTLmQX5kPfoC0b8Q6W9vYk2kN1V5PJ8V5H3o1LgS3Jj6Vt0c2ZbJt7b1b7Q6h9eHb3l2P8K1J3XhZc9qKQ==
curl -s https://example.com/api
const ghp = "ghp_"; // prefix only
"#
    );
    let findings = found(&[], &[("src/app.py", &code)], &shapes_only());
    assert!(findings.is_empty(), "{findings:#?}");
}

#[test]
fn keyword_rules_count_for_a_literal_that_looks_like_a_secret() {
    // Random, and drawn again in the 1.5 % of cases with no digit: such a token does not look like
    // a secret by the rule's own measure (letters and digits mixed).
    let value = std::iter::repeat_with(|| random_token(24).unwrap())
        .find(|token| token.bytes().any(|b| b.is_ascii_digit()))
        .unwrap();
    let findings = found(
        &[],
        &[(
            "settings.py",
            &format!(
                "PASSWORD = \"{value}\"\napi_key: {value}\nDB=postgres://app:{value}@db/app\n"
            ),
        )],
        &shapes_only(),
    );
    assert_eq!(
        findings,
        vec![
            one("settings.py", 1, "password", false),
            one("settings.py", 2, "api-key", false),
            one("settings.py", 3, "url-credentials", false),
        ]
    );
}

#[test]
fn the_rewriting_patterns_compile() {
    assert!(SPREAD.is_some() && JOINERS.is_some() && NULS.is_some());
    assert!(BASE64_RUNS.is_some() && HEX_RUNS.is_some());
}
