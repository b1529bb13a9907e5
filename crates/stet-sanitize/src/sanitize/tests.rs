//! Unit and property tests of the sanitizer. Secrets are generated here at run time; none is written
//! literally in the repository.

use std::sync::Arc;

use base64::Engine as _;
use proptest::prelude::*;

use super::rules::{LOOKBACK, WINDOW};
use super::*;

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const URLSAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const UPPER_DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const DIGITS: &[u8] = b"0123456789";
const HEX: &[u8] = b"0123456789abcdef";

/// A deterministic generator of random-looking token bodies.
struct Fake(u64);

impl Fake {
    fn new(seed: u64) -> Fake {
        Fake(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn body(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| char::from(alphabet[(self.next() % alphabet.len() as u64) as usize]))
            .collect()
    }

    fn jwt(&mut self) -> String {
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            r#"{{"iss":"{}","exp":1790000000}}"#,
            self.body(DIGITS, 7)
        ));
        format!("{header}.{payload}.{}", self.body(URLSAFE, 420))
    }
}

/// One generated secret per shape rule: (expected kind, the secret, how it appears in text).
fn secrets(seed: u64) -> Vec<(&'static str, String, String)> {
    let mut f = Fake::new(seed);
    let mut out = Vec::new();
    let mut bare = |kind: &'static str, secret: String| out.push((kind, secret.clone(), secret));
    bare("github-token", format!("ghp_{}", f.body(ALNUM, 36)));
    bare("github-token", format!("gho_{}", f.body(ALNUM, 36)));
    bare("github-token", format!("ghu_{}", f.body(ALNUM, 36)));
    bare("github-token", format!("ghs_{}", f.body(ALNUM, 36)));
    bare("github-token", format!("ghr_{}", f.body(ALNUM, 36)));
    let installation = format!("ghs_{}_{}", f.body(DIGITS, 7), f.jwt());
    assert!(installation.len() > 480, "{}", installation.len());
    bare("github-token", installation);
    bare(
        "github-token",
        format!("github_pat_{}_{}", f.body(ALNUM, 22), f.body(ALNUM, 59)),
    );
    bare("openai-key", format!("sk-{}", f.body(ALNUM, 48)));
    bare("openai-key", format!("sk-proj-{}", f.body(URLSAFE, 156)));
    bare("openai-key", format!("sk-svcacct-{}", f.body(URLSAFE, 120)));
    bare("openai-key", format!("sk-admin-{}", f.body(URLSAFE, 120)));
    bare(
        "anthropic-key",
        format!("sk-ant-api03-{}AA", f.body(URLSAFE, 93)),
    );
    bare(
        "slack-token",
        format!(
            "xoxb-{}-{}-{}",
            f.body(DIGITS, 12),
            f.body(DIGITS, 13),
            f.body(ALNUM, 24)
        ),
    );
    bare(
        "slack-token",
        format!("xoxp-{}-{}", f.body(DIGITS, 12), f.body(ALNUM, 32)),
    );
    bare(
        "slack-token",
        format!(
            "xapp-1-A{}-{}-{}",
            f.body(UPPER_DIGITS, 10),
            f.body(DIGITS, 13),
            f.body(ALNUM, 64)
        ),
    );
    bare(
        "aws-access-key-id",
        format!("AKIA{}", f.body(UPPER_DIGITS, 16)),
    );
    bare(
        "aws-access-key-id",
        format!("ASIA{}", f.body(UPPER_DIGITS, 16)),
    );
    bare("gitlab-token", format!("glpat-{}", f.body(URLSAFE, 20)));
    bare("npm-token", format!("npm_{}", f.body(ALNUM, 36)));
    bare("huggingface-token", format!("hf_{}", f.body(LETTERS, 34)));
    bare("stripe-key", format!("sk_live_{}", f.body(ALNUM, 24)));
    bare("stripe-key", format!("rk_live_{}", f.body(ALNUM, 24)));
    bare("google-api-key", format!("AIza{}", f.body(URLSAFE, 35)));
    bare("jwt", f.jwt());

    // Secrets that only count in context: (kind, secret, the text around it with SECRET in its place).
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("me:{}", f.body(ALNUM, 12)));
    let webhook = format!(
        "T{}/B{}/{}",
        f.body(UPPER_DIGITS, 8),
        f.body(UPPER_DIGITS, 8),
        f.body(ALNUM, 24)
    );
    let ghp = format!("ghp_{}", f.body(ALNUM, 36));
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let in_context = [
        (
            "slack-webhook",
            webhook,
            "https://hooks.slack.com/services/SECRET",
        ),
        (
            "authorization",
            f.body(URLSAFE, 40),
            "Authorization: Bearer SECRET",
        ),
        ("authorization", basic, "authorization: Basic SECRET"),
        (
            "authorization",
            f.body(ALNUM, 40),
            r#""Authorization": "token SECRET""#,
        ),
        (
            "password",
            f.body(ALNUM, 16),
            "protocol=https\nhost=example.com\nusername=me\npassword=SECRET\n",
        ),
        (
            "password",
            f.body(ALNUM, 16),
            "machine example.com login me password SECRET",
        ),
        (
            "password",
            f.body(ALNUM, 16),
            "machine h\n  login me\n  password SECRET\n",
        ),
        (
            "basic-auth",
            format!("me:{}", f.body(ALNUM, 14)),
            "$ curl -sS -u SECRET https://api.example.com/x",
        ),
        (
            "url-credentials",
            format!("deploy:{}", f.body(ALNUM, 18)),
            "fetching https://SECRET@git.example.com/o/r.git",
        ),
        (
            "url-credentials",
            format!("app:{}", f.body(ALNUM, 12)),
            "DATABASE_URL=postgres://SECRET@db:5432/app",
        ),
        (
            "url-credentials",
            f.body(ALNUM, 40),
            "remote: https://SECRET@github.com/o/r",
        ),
        (
            "aws-secret-key",
            f.body(ALNUM, 40),
            "aws_secret_access_key = SECRET",
        ),
        ("api-key", f.body(ALNUM, 32), "X-Api-Key: SECRET"),
        (
            "basic-auth",
            format!("me:{}", f.body(ALNUM, 14)),
            "$ curl -u SECRET https://api.example.com/x",
        ),
        (
            "basic-auth",
            format!("me:{}", f.body(ALNUM, 14)),
            "wget --user=SECRET https://api.example.com/x",
        ),
        ("named-secret", f.body(HEX, 40), "GITEA_TOKEN=SECRET"),
        ("encoded-token", b64(&ghp), "echo SECRET | base64 -d"),
        (
            "encoded-token",
            b64(&format!("T={ghp}")),
            "printf %s SECRET | base64 --decode",
        ),
        ("encoded-token", b64(&format!("x {ghp}")), "data: SECRET"),
        (
            "encoded-token",
            b64(&format!("sk-ant-api03-{}", f.body(URLSAFE, 40))),
            "key=SECRET",
        ),
        (
            "encoded-token",
            b64(&format!("glpat-{}", f.body(URLSAFE, 20))),
            "SECRET",
        ),
        (
            "encoded-token",
            b64(&format!(
                "tok xoxb-{}-{}",
                f.body(DIGITS, 12),
                f.body(ALNUM, 24)
            )),
            "SECRET",
        ),
        (
            "github-token",
            format!("ghp\\u005f{}", f.body(ALNUM, 36)),
            r#"{"env":"SECRET"}"#,
        ),
        (
            "aws-secret-key",
            f.body(ALNUM, 40),
            r#"{"Credentials": {"AccessKeyId": "x", "SecretAccessKey": "SECRET"}}"#,
        ),
        (
            "npm-token",
            format!("{}-{}", f.body(HEX, 8), f.body(HEX, 12)),
            "//registry.npmjs.org/:_authToken=SECRET",
        ),
        (
            "docker-auth",
            b64(&format!("me:{}", f.body(ALNUM, 16))),
            r#"{"auths": {"ghcr.io": {"auth": "SECRET"}}}"#,
        ),
        (
            "azure-key",
            b64(&f.body(ALNUM, 64)),
            "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=SECRET;EndpointSuffix=core.windows.net",
        ),
        (
            "github-token",
            format!("ghp_{}", f.body(ALNUM, 36)),
            "export DEMO_TOKEN=SECRET",
        ),
        (
            "github-token",
            format!("ghp_{}", f.body(ALNUM, 36)),
            "DB_PASSWORD=SECRET",
        ),
        (
            "named-secret",
            f.body(LETTERS, 9),
            "export CI_JOB_TOKEN='SECRET'",
        ),
        (
            "named-secret",
            f.body(ALNUM, 20),
            "DEPLOY_ACCESS_KEY: SECRET",
        ),
        (
            "named-secret",
            f.body(URLSAFE, 30),
            "  AUTH_TOKEN = \"SECRET\"",
        ),
    ];
    for (kind, secret, template) in in_context {
        let text = template.replace("SECRET", &secret);
        out.push((kind, secret, text));
    }
    out
}

fn sanitizer() -> Arc<TokenSanitizer> {
    Arc::new(TokenSanitizer::new().unwrap())
}

fn redact(text: &str) -> String {
    String::from_utf8(sanitizer().redact(text.as_bytes())).unwrap()
}

fn redact_chunked(sanitizer: &Arc<TokenSanitizer>, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut redactor = Redactor::new(Arc::clone(sanitizer));
    let mut out = Vec::new();
    let mut last = 0;
    for &cut in cuts {
        let cut = cut.clamp(last, input.len());
        redactor.push(&input[last..cut], &mut out);
        last = cut;
    }
    redactor.push(&input[last..], &mut out);
    redactor.finish(&mut out);
    out
}

#[test]
fn every_shape_rule_masks_its_secret_and_names_the_kind() {
    for (kind, secret, text) in secrets(1) {
        let line = format!("before {text} after");
        let out = redact(&line);
        assert!(!out.contains(&secret), "{kind} leaked: {out}");
        assert!(
            out.contains(&format!("[REDACTED:{kind}]")),
            "{kind} not named: {out}"
        );
        assert!(
            out.starts_with("before ") && out.ends_with(" after"),
            "{kind} context lost: {out}"
        );
    }
}

#[test]
fn the_context_around_a_value_secret_is_kept() {
    assert_eq!(
        redact("git clone https://deploy:hunter2hunter2@git.example.com/o/r.git"),
        "git clone https://[REDACTED:url-credentials]@git.example.com/o/r.git"
    );
    let token = Fake::new(9).body(ALNUM, 40);
    assert_eq!(
        redact(&format!("Authorization: Bearer {token}\r\n")),
        "Authorization: Bearer [REDACTED:authorization]\r\n"
    );
}

#[test]
fn a_value_under_a_name_that_says_secret_is_masked_whatever_its_shape() {
    let value = Fake::new(12).body(LETTERS, 12);
    for name in ["APP_SECRET", "APP_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"] {
        let out = redact(&format!("{name}={value}"));
        assert_eq!(out, format!("{name}=[REDACTED:named-secret]"));
    }
}

#[test]
fn sanitized_text_is_visible_text_and_an_invisible_split_hides_no_token() {
    let body = Fake::new(21).body(ALNUM, 36);
    let split = format!("\u{202e}token ghp_\u{200b}{body}\u{1b}[0m\r\ndone");
    assert_eq!(
        sanitizer().sanitize(&split).as_str(),
        "token [REDACTED:github-token]\ndone"
    );
}

/// What an attack on the redactor found, kept: each input leaks nothing it names.
#[test]
fn a_hostile_reviewers_inputs_leak_nothing() {
    let mut f = Fake::new(31);
    let token = format!("ghp_{}", f.body(ALNUM, 36));
    let password = f.body(ALNUM, 14);
    let key_line = f.body(ALNUM, 64);
    let key = KnownValue::new("scoped-credential", &format!("stet-{}", f.body(ALNUM, 30))).unwrap();
    let known = key.spellings()[0].to_string();
    let sanitizer = Arc::new(TokenSanitizer::with_known_values(vec![key]).unwrap());
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            format!(
                "curl -H \"Authorization: token {token}\" --user admin:{password} https://api\n"
            ),
            vec![&token, &password],
        ),
        (
            format!(
                "curl https://deploy:{password}@host/x -H 'X: {known}' -u admin:{password} x\n"
            ),
            vec![&password, &known],
        ),
        (
            format!("password=sk-{password}-horse-battery\n"),
            vec![&password],
        ),
        (
            format!("GITEA_TOKEN=sk-{password}abcdefgh\n"),
            vec![&password],
        ),
        (
            format!("api_key=sk-{password}abcdefghijkl\n"),
            vec![&password],
        ),
        (
            format!(
                "-----BEGIN RSA \u{1b}[01;31m\u{1b}[KPRIVATE KEY\u{1b}[m\u{1b}[K-----\n{key_line}\n-----END RSA PRIVATE KEY-----\nafter\n"
            ),
            vec![&key_line],
        ),
        (
            format!("curl -su admin:{password} https://x\n"),
            vec![&password],
        ),
        (
            format!("curl -ku admin:{password} https://x\n"),
            vec![&password],
        ),
        (format!("curl -u :{password} https://x\n"), vec![&password]),
        (
            format!("curl https://x \\\n-u admin:{password}\n"),
            vec![&password],
        ),
        (
            format!("curl https://x \\\n--user admin:{password}\n"),
            vec![&password],
        ),
        (
            format!("password=\"{password} horse battery\"\n"),
            vec![&password, "horse"],
        ),
        (format!("DB_PASSWORD=p@ss;{password}\n"), vec![&password]),
        (
            format!("curl --user \"admin:{password} with space\" x\n"),
            vec![&password, "with space"],
        ),
        (
            format!("password=AKIAABCDEFGHIJKLMNOP-{password}!x\n"),
            vec![&password],
        ),
        (format!("ADMIN_SECRET=$uper{password}!\n"), vec![&password]),
        (format!("CLIENT_SECRET={{{password}}}\n"), vec![&password]),
        (format!("AIza{}{token}\n", f.body(ALNUM, 35)), vec![&token]),
    ];
    for (input, secrets) in &cases {
        let once = sanitizer.redact(input.as_bytes());
        let shown = String::from_utf8_lossy(&once);
        for secret in secrets {
            assert!(
                !shown.contains(secret),
                "{secret:?} leaked from {input:?}: {shown}"
            );
        }
        assert_eq!(sanitizer.redact(&once), once, "sanitizing {input:?} twice");
    }
    for input in [
        "[pypi]\npassword = hunter2xyz\n".to_owned(),
        format!("curl -u bot/{token} https://api\n"),
    ] {
        let once = sanitizer.redact(input.as_bytes());
        assert_eq!(sanitizer.redact(&once), once, "sanitizing {input:?} twice");
    }
    assert!(KnownValue::new("model-key", "first-line-of-it\nsecond-line").is_err());
}

/// The second attack on the redactor, kept: no leak, no panic, and any chunking shows what the
/// whole shows.
#[test]
fn a_second_attacks_inputs_leak_nothing_and_stream_as_the_whole() {
    let mut f = Fake::new(41);
    let secret = f.body(ALNUM, 24);
    let key = f.body(ALNUM, 64);
    let sanitizer = sanitizer();
    let mut cases: Vec<Vec<u8>> = vec![
        format!("{{\"type\":\"command\",\"text\":\"export PGPASSWORD=\\\"{secret}\\\" && psql\"}}\n")
            .into_bytes(),
        format!("-----\u{1b}[01;31m\u{1b}[KBEGIN\u{1b}[m\u{1b}[K RSA PRIVATE KEY-----\n{key}\n-----END RSA PRIVATE KEY-----\nok\n")
            .into_bytes(),
        format!("{{\"text\":\"-----BEGIN RSA \\u001b[01;31mPRIVATE\\u001b[m KEY-----\"}}\n{{\"text\":\"{key}\"}}\n{{\"text\":\"-----END RSA PRIVATE KEY-----\"}}\n")
            .into_bytes(),
        [&b"DB_PASSWORD=h\xe9"[..], secret.as_bytes(), b"\n"].concat(),
        [&b"curl https://h/caf\xe9 -u admin:"[..], secret.as_bytes(), b"\n"].concat(),
        format!("GITEA_TOKEN=${{PFX}}{secret}\nAPP_SECRET=$(true){secret}\nDEPLOY_TOKEN=<{secret}\n")
            .into_bytes(),
        format!("password={}AKIA{}{}\n", " ".repeat(8164), f.body(UPPER_DIGITS, 16), secret.to_ascii_uppercase())
            .into_bytes(),
    ];
    let mut deferred_then_key = "a".repeat(130_000).into_bytes();
    deferred_then_key.extend_from_slice(
        format!("\ncurl https://x -d -----BEGIN RSA PRIVATE KEY----- -u user:{secret}\n{}\n-----END RSA PRIVATE KEY-----\n", "0".repeat(1000)).as_bytes(),
    );
    cases.push(deferred_then_key);
    for input in &cases {
        let whole = sanitizer.redact(input);
        let shown = String::from_utf8_lossy(&whole);
        for leaked in [&secret, &key, &secret.to_ascii_uppercase()] {
            assert!(
                !shown.contains(leaked.as_str()),
                "{leaked:?} leaked: {shown:.300}"
            );
        }
        let step = (input.len() / 97).max(1);
        for cut in (0..input.len()).step_by(step) {
            assert_eq!(
                redact_chunked(&sanitizer, input, &[cut]),
                whole,
                "cut at {cut}"
            );
        }
        let pieces: Vec<usize> = (1..input.len()).step_by(65_536).collect();
        assert_eq!(redact_chunked(&sanitizer, input, &pieces), whole);
    }
    // An END line longer than a short wait, cut in the middle, ends the block as the whole does.
    let long_end = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{key}\n-----END {}RSA PRIVATE KEY-----\nvisible after\n",
        "\u{1b}[1m".repeat(30)
    );
    let whole = sanitizer.redact(long_end.as_bytes());
    assert!(String::from_utf8_lossy(&whole).contains("visible after"));
    for cut in 60..long_end.len() {
        assert_eq!(
            redact_chunked(&sanitizer, long_end.as_bytes(), &[cut]),
            whole,
            "cut at {cut}"
        );
    }
}

#[test]
fn ordinary_text_is_left_untouched() {
    // Assembled at run time so the repository holds nothing shaped like a key.
    let long_hyphenated_word =
        ["task-runner", "configurationvalidatorwithmanyletters done"].concat();
    let clean = [
        long_hyphenated_word.as_str(),
        "the desk-organiser-and-whiteboard-cleaning-rota is up",
        "a sketch of ghost_town and skeleton-keys",
        "commit 3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a (HEAD -> main)",
        "image sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "id 123e4567-e89b-12d3-a456-426614174000",
        r#"<script integrity="sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC">"#,
        "remote: git@github.com:octo/app.git",
        "mail jane.doe+stet@example.com about it",
        "see https://github.com/octo/app/pull/42 and https://git@github.com/o/r",
        "the password is required; enter your password below",
        "npm_config_cache=/tmp/npm sk-short hf_hub ASIA AKIAPREFIX",
        "docker run -u 1000:1000 image",
        "-----BEGIN PUBLIC KEY----- is not a private key",
        "ssh://git@example.com:22/o/r.git",
        "curl -s -o out.json https://api.example.com/x",
        "curl -uuser https://x (a user without one)",
        "MAX_TOKENS=4096 and MAX_TOKEN_LENGTH=12",
        "GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
        "export GITEA_TOKEN=$TOKEN and API_TOKEN=<your token>",
        "the_token=used lowercase in code, NEXT_TOKEN_ID=7",
        "PREV_SECRET=",
        "GIT_COMMIT=3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a",
        "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
        r#"{"auth": "basic", "SecretAccessKey": ""}"#,
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "AccountKey= is set in the connection string",
        "ghp\\u005fshort",
    ];
    for text in clean {
        assert_eq!(redact(text), text);
    }
}

#[test]
fn tokens_next_to_ansi_codes_and_inside_json_strings_are_masked() {
    let token = format!("ghp_{}", Fake::new(2).body(ALNUM, 36));
    let coloured = format!("\x1b[32m{token}\x1b[0m");
    assert_eq!(redact(&coloured), "\x1b[32m[REDACTED:github-token]\x1b[0m");
    let escaped = format!(r#"{{"out":"\u001b[1;33m{token}\u001b[0m"}}"#);
    assert_eq!(
        redact(&escaped),
        r#"{"out":"\u001b[1;33m[REDACTED:github-token]\u001b[0m"}"#
    );
    let json = format!(r#"{{"content":"export T={token}\nnext line"}}"#);
    assert_eq!(
        redact(&json),
        r#"{"content":"export T=[REDACTED:github-token]\nnext line"}"#
    );
}

#[test]
fn known_values_are_masked_in_every_encoding() {
    let value = format!("stet-cred-{}", Fake::new(3).body(ALNUM, 30));
    let known = KnownValue::new("scoped-credential", &value).unwrap();
    let sanitizer = Arc::new(TokenSanitizer::with_known_values(vec![known]).unwrap());
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{value}"));
    let shifted = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("ab{value}cd"));
    let with_slash = format!("{value}/+ \"q\"");
    let cases = [value.clone(), format!("Basic {basic}"), shifted];
    for text in cases {
        let out = String::from_utf8(sanitizer.redact(text.as_bytes())).unwrap();
        assert!(!out.contains(&value), "{out}");
        assert!(
            out.contains("[REDACTED:scoped-credential]"),
            "{text} -> {out}"
        );
    }
    let odd = Arc::new(
        TokenSanitizer::with_known_values(vec![KnownValue::new("model-key", &with_slash).unwrap()])
            .unwrap(),
    );
    let percent: String = with_slash
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let json = serde_json::to_string(&with_slash).unwrap();
    for text in [format!("?k={percent}&x=1"), format!("{{\"k\":{json}}}")] {
        let out = String::from_utf8(odd.redact(text.as_bytes())).unwrap();
        assert!(out.contains("[REDACTED:model-key]"), "{text} -> {out}");
        assert!(!out.contains(&value[..20]), "{out}");
    }
}

#[test]
fn a_known_value_a_shape_cuts_short_is_masked_whole_in_one_piece_and_in_chunks() {
    let password = format!("pw {}!", Fake::new(11).body(ALNUM, 24));
    let known = KnownValue::new("gitea-password", &password).unwrap();
    let sanitizer = Arc::new(TokenSanitizer::with_known_values(vec![known]).unwrap());
    let text = format!("login failed: password: {password} (try again)\n");
    let whole = String::from_utf8(sanitizer.redact(text.as_bytes())).unwrap();
    let rest = &password[3..];
    assert!(
        !whole.contains(rest),
        "the password's rest is in the clear: {whole}"
    );
    assert!(whole.ends_with(" (try again)\n"), "{whole}");
    for cut in 1..text.len() {
        let chunked = redact_chunked(&sanitizer, text.as_bytes(), &[cut]);
        assert_eq!(String::from_utf8(chunked).unwrap(), whole, "cut at {cut}");
    }
}

#[test]
fn a_private_key_block_is_withheld_whole() {
    let mut f = Fake::new(4);
    let body: Vec<String> = (0..20).map(|_| f.body(ALNUM, 64)).collect();
    let block = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----",
        body.join("\n")
    );
    let out = redact(&format!("key:\n{block}\ndone"));
    assert_eq!(out, "key:\n[REDACTED:private-key]\ndone");
    let json = format!(r#"{{"k":"{}"}}"#, block.replace('\n', "\\n"));
    assert_eq!(redact(&json), r#"{"k":"[REDACTED:private-key]"}"#);
    let openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----";
    assert_eq!(redact(openssh), "[REDACTED:private-key]");
}

#[test]
fn an_unterminated_private_key_fails_closed() {
    let mut f = Fake::new(5);
    let body = f.body(ALNUM, 4000);
    let out = redact(&format!("x\n-----BEGIN PRIVATE KEY-----\n{body}"));
    assert_eq!(out, "x\n[REDACTED:private-key-unterminated]");

    // Past the cap, what was held stays withheld and output resumes after it.
    let long: String = f.body(ALNUM, PRIVATE_KEY_CAP + 10);
    let out = redact(&format!("-----BEGIN EC PRIVATE KEY-----{long}\nvisible"));
    assert_eq!(
        out,
        format!(
            "[REDACTED:private-key-unterminated]{}\nvisible",
            &long[PRIVATE_KEY_CAP..]
        )
    );
}

#[test]
fn invalid_utf8_passes_through_and_is_still_redacted() {
    let token = format!("ghp_{}", Fake::new(6).body(ALNUM, 36));
    let mut input = vec![0xff, 0xfe, b' '];
    input.extend_from_slice(token.as_bytes());
    input.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
    let out = sanitizer().redact(&input);
    let mut expected = vec![0xff, 0xfe, b' '];
    expected.extend_from_slice(b"[REDACTED:github-token]");
    expected.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
    assert_eq!(out, expected);
}

#[test]
fn a_token_longer_than_the_window_is_swallowed_whole() {
    let long = format!("ghp_{}", Fake::new(7).body(ALNUM, WINDOW * 2));
    let text = format!("a {long} b");
    assert_eq!(redact(&text), "a [REDACTED:github-token] b");
    let chunked = redact_chunked(&sanitizer(), text.as_bytes(), &[5, 100, 9000, 9001, 17000]);
    assert_eq!(chunked, b"a [REDACTED:github-token] b");
}

fn corpus(seed: u64) -> Vec<u8> {
    let mut text = String::new();
    let filler = [
        "INFO build step 3/7 finished in 1.2s\n",
        "\x1b[32m✔\x1b[0m tests passed (https://ci.example.com/run/1)\n",
        "{\"kind\":\"ObservationEvent\",\"content\":\"ok\\n\"}\n",
        "task-runner desk-lamp sketch ghost_town\n",
        "ünïcödé text — with dashes\n",
    ];
    for (i, (_, _, secret_text)) in secrets(seed).into_iter().enumerate() {
        text.push_str(filler[i % filler.len()]);
        text.push_str(&secret_text);
        text.push('\n');
    }
    text.push_str("-----BEGIN PRIVATE KEY-----\nMIIabc\n-----END PRIVATE KEY-----\ntail");
    text.into_bytes()
}

#[test]
fn a_complete_line_is_released_at_once_and_only_the_undecided_line_waits() {
    let sanitizer = sanitizer();
    let token = format!("ghp_{}", Fake::new(4).body(ALNUM, 36));
    let mut redactor = Redactor::new(Arc::clone(&sanitizer));
    let mut out = Vec::new();
    redactor.push(
        format!("step one done\ntoken {token}\nstill gh").as_bytes(),
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        "step one done\ntoken [REDACTED:github-token]\n",
        "every finished line goes out before the next byte arrives; the unfinished one waits"
    );
    redactor.push(
        format!("p_{}\n", Fake::new(5).body(ALNUM, 36)).as_bytes(),
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "step one done\ntoken [REDACTED:github-token]\nstill [REDACTED:github-token]\n"
    );
}

#[test]
fn a_continued_command_line_waits_for_its_real_end() {
    let sanitizer = sanitizer();
    let mut redactor = Redactor::new(Arc::clone(&sanitizer));
    let mut out = Vec::new();
    redactor.push(b"ok\ncurl -s https://api.example.com \\\n", &mut out);
    assert_eq!(
        out, b"ok\n",
        "a continued line may still name its credential"
    );
    redactor.push(b"  --user deploy:s3cretpassw0rd\n", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "ok\ncurl -s https://api.example.com \\\n  --user [REDACTED:basic-auth]\n"
    );
}

#[test]
fn feeding_one_byte_at_a_time_matches_feeding_whole() {
    let sanitizer = sanitizer();
    let input = corpus(11);
    let whole = sanitizer.redact(&input);
    let cuts: Vec<usize> = (1..input.len()).collect();
    assert_eq!(redact_chunked(&sanitizer, &input, &cuts), whole);
    for (_, secret, _) in secrets(11) {
        assert!(!String::from_utf8_lossy(&whole).contains(&secret));
    }
}

#[test]
fn a_fifty_megabyte_single_line_streams_in_bounded_memory() {
    let sanitizer = sanitizer();
    let token = format!("ghp_{}", Fake::new(8).body(ALNUM, 36));
    let line = "abcdefghij-klmnopqrst/uvwxyz ".repeat(2000);
    let mut redactor = Redactor::new(Arc::clone(&sanitizer));
    let mut out = Vec::new();
    let mut fed = 0usize;
    while fed < 50 * 1024 * 1024 {
        redactor.push(line.as_bytes(), &mut out);
        fed += line.len();
        // Nothing beyond the look-ahead window is ever held back.
        assert!(
            fed - out.len() <= WINDOW + LOOKBACK,
            "held {}",
            fed - out.len()
        );
    }
    redactor.push(token.as_bytes(), &mut out);
    redactor.finish(&mut out);
    assert!(out.ends_with(b"[REDACTED:github-token]"));
    assert!(!out.contains(&b'\n'));
}

#[test]
fn sanitized_text_is_redacted_and_serialises_as_a_plain_string() {
    let token = format!("glpat-{}", Fake::new(10).body(ALNUM, 20));
    let text = sanitizer().sanitize(&format!("push failed with {token}"));
    assert_eq!(text.as_str(), "push failed with [REDACTED:gitlab-token]");
    assert_eq!(
        serde_json::to_string(&text).unwrap(),
        "\"push failed with [REDACTED:gitlab-token]\""
    );
}

#[test]
fn a_handle_learns_values_for_every_later_user() {
    let handle = SanitizerHandle::new(TokenSanitizer::new().unwrap());
    let value = Fake::new(12).body(ALNUM, 24);
    let before = handle.current();
    handle
        .register(KnownValue::new("primary-token", &value).unwrap())
        .unwrap();
    assert_eq!(
        before.sanitize(&value).as_str(),
        value,
        "an earlier snapshot is unchanged"
    );
    assert_eq!(
        handle.current().sanitize(&value).as_str(),
        "[REDACTED:primary-token]"
    );
}

#[test]
fn detect_finds_what_redact_masks_at_its_place_in_the_stream() {
    let mut fake = Fake::new(21);
    let token = format!("ghp_{}", fake.body(ALNUM, 36));
    let known = fake.body(ALNUM, 32);
    let sanitizer = Arc::new(
        TokenSanitizer::with_known_values(vec![KnownValue::new("model-key", &known).unwrap()])
            .unwrap(),
    );
    // Far enough into the input that the redactor has dropped context from its buffer.
    let mut input = "ordinary text\n".repeat(4000);
    let token_at = input.len() + "token = ".len();
    input.push_str(&format!("token = {token}\n"));
    let known_at = input.len() + "key: ".len();
    input.push_str(&format!("key: {known}\n"));
    let key_at = input.len();
    input.push_str("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n");
    let key_end = input.len() - 1;
    let found = sanitizer.detect(input.as_bytes());
    let summary: Vec<(usize, usize, &str, bool)> = found
        .iter()
        .map(|d| (d.start, d.end, &*d.kind, d.known))
        .collect();
    assert_eq!(
        summary,
        vec![
            (token_at, token_at + token.len(), "github-token", false),
            (known_at, known_at + known.len(), "model-key", true),
            (key_at, key_end, "private-key", false),
        ]
    );
    assert_eq!(&input[token_at..token_at + token.len()], token);
}

#[test]
fn detect_reports_an_unterminated_private_key_from_where_it_opened() {
    let input = "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIB";
    let found = sanitizer().detect(input.as_bytes());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].start, 2);
    assert_eq!(&*found[0].kind, "private-key-unterminated");
    assert!(
        sanitizer()
            .detect(b"nothing to see: 3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a")
            .is_empty()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn any_chunking_redacts_like_the_whole(seed in 0u64..1000, cuts in proptest::collection::vec(0usize..6000, 0..40)) {
        let sanitizer = sanitizer();
        let input = corpus(seed);
        let mut cuts = cuts;
        cuts.sort_unstable();
        let whole = sanitizer.redact(&input);
        prop_assert_eq!(redact_chunked(&sanitizer, &input, &cuts), whole);
    }

    #[test]
    fn sanitizing_sanitized_text_changes_nothing(seed in 0u64..1000) {
        let sanitizer = sanitizer();
        let once = sanitizer.redact(&corpus(seed));
        prop_assert_eq!(sanitizer.redact(&once), once);
    }

    #[test]
    fn detect_finds_one_detection_per_marker(seed in 0u64..1000) {
        let sanitizer = sanitizer();
        let input = corpus(seed);
        let markers = sanitizer.redact(&input).windows(10).filter(|w| w == b"[REDACTED:").count();
        let found = sanitizer.detect(&input);
        prop_assert_eq!(found.len(), markers);
        for pair in found.windows(2) {
            prop_assert!(pair[0].end <= pair[1].start);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_chunking_is_invisible(
        input in proptest::collection::vec(prop_oneof![
            Just(b'g'), Just(b'h'), Just(b'p'), Just(b'_'), Just(b'-'), Just(b':'), Just(b'/'), Just(b'@'),
            Just(b'\n'), Just(b' '), Just(0x1b), Just(b'['), Just(b'm'), any::<u8>(), (b'a'..=b'z'), (b'0'..=b'9'),
        ], 0..3000),
        cut in 0usize..3000,
    ) {
        let sanitizer = sanitizer();
        let whole = sanitizer.redact(&input);
        prop_assert_eq!(redact_chunked(&sanitizer, &input, &[cut]), whole);
    }
}
