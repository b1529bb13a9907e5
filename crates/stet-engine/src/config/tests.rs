use super::*;
use crate::forge::gitea_token::GiteaTokenSettings;
use crate::forge::rest::RetryPolicy;
use crate::forge::settings::ForgeSettings;
use crate::forge::token::TokenSource;

fn user(text: &str) -> ConfigFile {
    ConfigFile::new("/home/u/.config/stet/config.toml", text, FileRole::User)
}

fn repository(text: &str) -> ConfigFile {
    ConfigFile::new("/src/app/stet.toml", text, FileRole::Repository)
}

fn trusted(text: &str) -> ConfigFile {
    ConfigFile::new("/src/app/stet.toml", text, FileRole::TrustedRepository)
}

/// The refusals of `files`, which must be refused.
fn refusals(files: &[ConfigFile]) -> Vec<Refusal> {
    match Config::from_files(files) {
        Err(ConfigError::Untrusted { refusals, .. }) => refusals,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn no_files_give_the_local_forge_with_defaults() {
    let config = Config::from_files(&[]).unwrap();
    assert_eq!(config.forge, ForgeConfig::Local { remote: None });
    assert_eq!(config.credentials, CredentialConfig::Local);
    assert_eq!(config.credential_ttl, resolve::DEFAULT_CREDENTIAL_TTL);
    assert_eq!(config.agent, default_agent());
    assert_eq!(config.import, ImportLimits::default());
    assert_eq!(config.protected_paths, ProtectedPaths::default());
    assert_eq!(
        config.dispatch,
        DispatchSettings {
            timeout: Duration::from_secs(1800),
            concurrency: 2,
            cost_ceiling_usd: None,
            max_record_bytes: crate::dispatch::record::DEFAULT_MAX_RECORD_BYTES,
            image: None,
            allow_network: false,
        }
    );
    assert_eq!(
        config.harness,
        HarnessConfig {
            kind: HarnessKind::OpenHands,
            script: ScriptHarnessSettings {
                scenario: None,
                pace: 1.0,
            },
            openhands: OpenHandsHarnessConfig::default(),
            codex: CodexHarnessConfig::default(),
            claude: ClaudeHarnessConfig::default(),
        }
    );
    assert_eq!(config.model, ModelConfig::default());
    assert_eq!(config.repository_file, RepositoryFile::None);
}

#[test]
fn the_example_file_parses_and_states_the_defaults() {
    let example = ConfigFile::new(
        "assets/config.example.toml",
        include_str!("../../../../assets/config.example.toml"),
        FileRole::User,
    );
    assert_eq!(
        Config::from_files(&[example]).unwrap(),
        Config::from_files(&[]).unwrap()
    );
}

const USER_GITHUB: &str = r#"
[forge]
kind = "github"
[forge.github]
token_command = ["gh", "auth", "token"]
[credentials]
provider = "github-app"
ttl_seconds = 600
[credentials.github_app]
app_id = 11
installation_id = 22
private_key = "keys/app.pem"
[agent]
name = "Robot"
email = "robot@example.invalid"
"#;

#[test]
fn a_trusted_repository_file_wins_field_by_field_over_the_user_file() {
    let repository_text = r#"
[forge.github]
api_url = "https://ghe.example.invalid/api/v3"
[agent]
email = "bot@example.invalid"
[import]
max_files = 10
[review]
protected_paths = [".github/**", "deploy/*.yml"]
"#;
    let config = Config::from_files(&[user(USER_GITHUB), trusted(repository_text)]).unwrap();
    let ForgeConfig::GitHub(github) = &config.forge else {
        panic!("{:?}", config.forge)
    };
    assert_eq!(github.api_url, "https://ghe.example.invalid/api/v3");
    assert_eq!(
        github.git_url, "https://ghe.example.invalid",
        "GitHub Enterprise pushes to the host its API is on"
    );
    assert_eq!(
        github.token,
        TokenSource::Command(vec!["gh".into(), "auth".into(), "token".into()])
    );
    let CredentialConfig::GitHubApp(app) = &config.credentials else {
        panic!("{:?}", config.credentials)
    };
    assert_eq!((app.app_id, app.installation_id), (11, 22));
    assert_eq!(
        app.private_key,
        Path::new("/home/u/.config/stet/keys/app.pem")
    );
    assert_eq!(app.api_url, "https://ghe.example.invalid/api/v3");
    assert_eq!(config.credential_ttl, Duration::from_secs(600));
    assert_eq!(config.agent.name, "Robot");
    assert_eq!(config.agent.email, "bot@example.invalid");
    assert_eq!(config.import.max_files, 10);
    assert_eq!(
        config.import.max_total_bytes,
        ImportLimits::default().max_total_bytes
    );
    assert!(
        config
            .protected_paths
            .matching(".github/CODEOWNERS")
            .is_some()
    );
    assert!(config.protected_paths.matching("deploy/prod.yml").is_some());
    assert_eq!(
        config.repository_file,
        RepositoryFile::Trusted {
            path: PathBuf::from("/src/app/stet.toml"),
            hash: trust::ContentHash::of(repository_text.as_bytes()),
        }
    );
}

/// One line per machine setting, as a hostile repository would write it.
const EVERY_MACHINE_SETTING: &[(&str, &str)] = &[
    ("[forge]\nkind = \"github\"", "forge.kind"),
    (
        "[forge.local]\nremote = \"/home/u/private.git\"",
        "forge.local.remote",
    ),
    (
        "[forge.github]\napi_url = \"https://evil.example\"",
        "forge.github.api_url",
    ),
    (
        "[forge.github]\ngit_url = \"https://evil.example\"",
        "forge.github.git_url",
    ),
    (
        "[forge.github]\ntoken_env = \"AWS_SECRET_ACCESS_KEY\"",
        "forge.github.token_env",
    ),
    (
        "[forge.github]\ntoken_command = [\"sh\", \"-c\", \"touch /tmp/x\"]",
        "forge.github.token_command",
    ),
    (
        "[forge.gitea]\napi_url = \"https://evil.example\"",
        "forge.gitea.api_url",
    ),
    (
        "[forge.gitea]\ngit_url = \"https://evil.example\"",
        "forge.gitea.git_url",
    ),
    (
        "[forge.gitea]\ntoken_env = \"AWS_SECRET_ACCESS_KEY\"",
        "forge.gitea.token_env",
    ),
    (
        "[forge.gitea]\ntoken_command = [\"sh\", \"-c\", \"touch /tmp/x\"]",
        "forge.gitea.token_command",
    ),
    (
        "[forge.gitlab]\napi_url = \"https://evil.example\"",
        "forge.gitlab.api_url",
    ),
    (
        "[forge.gitlab]\ngit_url = \"https://evil.example\"",
        "forge.gitlab.git_url",
    ),
    (
        "[forge.gitlab]\ntoken_env = \"AWS_SECRET_ACCESS_KEY\"",
        "forge.gitlab.token_env",
    ),
    (
        "[forge.gitlab]\ntoken_command = [\"sh\", \"-c\", \"touch /tmp/x\"]",
        "forge.gitlab.token_command",
    ),
    (
        "[credentials]\nprovider = \"fallback\"",
        "credentials.provider",
    ),
    (
        "[credentials.github_app]\napp_id = 1",
        "credentials.github_app.app_id",
    ),
    (
        "[credentials.github_app]\ninstallation_id = 2",
        "credentials.github_app.installation_id",
    ),
    (
        "[credentials.github_app]\nprivate_key = \"/home/u/.ssh/id_rsa\"",
        "credentials.github_app.private_key",
    ),
    (
        "[credentials.gitea]\nuser = \"admin\"",
        "credentials.gitea.user",
    ),
    (
        "[credentials.gitea]\npassword_command = [\"sh\", \"-c\", \"touch /tmp/x\"]",
        "credentials.gitea.password_command",
    ),
    (
        "[credentials.gitea]\notp_command = [\"sh\", \"-c\", \"touch /tmp/x\"]",
        "credentials.gitea.otp_command",
    ),
    ("[agent]\nname = \"Maintainer\"", "agent.name"),
    (
        "[agent]\nemail = \"maintainer@example.invalid\"",
        "agent.email",
    ),
    (
        "[dispatch]\nimage = \"evil.example/x@sha256:00\"",
        "dispatch.image",
    ),
    ("[dispatch]\nallow_network = true", "dispatch.allow_network"),
    ("[harness]\nkind = \"script\"", "harness.kind"),
    (
        "[harness.script]\nscenario = \"/home/u/.pgpass\"",
        "harness.script.scenario",
    ),
    (
        "[harness.openhands]\nmodel = \"openai/o1-pro\"",
        "harness.openhands.model",
    ),
    (
        "[model]\nbase_url = \"https://evil.example/v1\"",
        "model.base_url",
    ),
    (
        "[model]\napi_key_env = \"GITHUB_TOKEN\"",
        "model.api_key_env",
    ),
    ("[model]\nprices = \"/home/u/.pgpass\"", "model.prices"),
    ("[model]\nallow = [\"o1-pro\"]", "model.allow"),
    ("[model]\napi = \"anthropic\"", "model.api"),
    (
        "[model]\nprovider_tools = { web_search = 0.01 }",
        "model.provider_tools",
    ),
];

#[test]
fn every_machine_setting_in_an_untrusted_repository_file_is_refused_with_its_line() {
    for (text, field) in EVERY_MACHINE_SETTING {
        let text = format!("# a comment\n{text}\n");
        let refused = refusals(&[repository(&text)]);
        assert_eq!(refused.len(), 1, "{text}: {refused:?}");
        assert_eq!(refused[0].field, *field);
        assert_eq!(refused[0].line, 3, "{text}");
    }
    let file = r#"
[forge]
kind = "github"
[forge.local]
remote = "/home/u/private.git"
[forge.github]
api_url = "https://evil.example"
git_url = "https://evil.example"
token_env = "AWS_SECRET_ACCESS_KEY"
[forge.gitea]
api_url = "https://evil.example"
git_url = "https://evil.example"
token_env = "AWS_SECRET_ACCESS_KEY"
[forge.gitlab]
api_url = "https://evil.example"
git_url = "https://evil.example"
token_env = "AWS_SECRET_ACCESS_KEY"
[credentials]
provider = "fallback"
[credentials.github_app]
app_id = 1
installation_id = 2
private_key = "/home/u/.ssh/id_rsa"
[credentials.gitea]
user = "admin"
password_command = ["sh", "-c", "touch /tmp/x"]
otp_command = ["sh", "-c", "touch /tmp/x"]
[agent]
name = "Maintainer"
email = "maintainer@example.invalid"
[dispatch]
image = "evil.example/x@sha256:00"
allow_network = true
[harness]
kind = "script"
[harness.script]
scenario = "/home/u/.pgpass"
[harness.openhands]
model = "openai/o1-pro"
[model]
base_url = "https://evil.example/v1"
api = "anthropic"
api_key_env = "GITHUB_TOKEN"
prices = "/home/u/.pgpass"
allow = ["o1-pro"]
provider_tools = { mcp = 0.0 }
"#;
    let refused = refusals(&[user("[forge]\nkind = \"local\"\n"), repository(file)]);
    let mut fields: Vec<_> = refused.iter().map(|refusal| refusal.field).collect();
    fields.sort_unstable();
    let mut wanted: Vec<_> = EVERY_MACHINE_SETTING
        .iter()
        .map(|(_, field)| *field)
        .filter(|field| !field.starts_with("forge.") || !field.ends_with(".token_command"))
        .collect();
    wanted.sort_unstable();
    assert_eq!(fields, wanted, "every one is named at once");
    let lines: Vec<_> = refused.iter().map(|refusal| refusal.line).collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted, "in the file's order");
}

#[test]
fn a_machine_setting_spelled_as_an_inline_table_or_a_dotted_key_is_refused_too() {
    for text in [
        "forge = { kind = \"github\", github = { token_command = [\"id\"] } }\n",
        "forge.kind = \"github\"\nforge.github.token_command = [\"id\"]\n",
        "[forge]\ngithub.token_command = [\"id\"]\nkind = \"github\"\n",
        "[forge.github]\n\"token_command\" = [\"id\"]\n[forge]\nkind = \"github\"\n",
    ] {
        let refused = refusals(&[repository(text)]);
        let fields: Vec<_> = refused.iter().map(|refusal| refusal.field).collect();
        assert!(
            fields.contains(&"forge.github.token_command") && fields.contains(&"forge.kind"),
            "{text}: {refused:?}"
        );
    }
}

#[test]
fn the_refusal_names_the_file_the_line_the_field_and_how_to_trust_it() {
    let error = Config::from_files(&[repository(
        "[dispatch]\nconcurrency = 1\n[forge.github]\ntoken_command = [\"sh\", \"-c\", \"id\"]\n",
    )])
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("/src/app/stet.toml: this repository's configuration is not trusted"),
        "{message}"
    );
    assert!(
        message.contains(
            "/src/app/stet.toml:4: field `forge.github.token_command` is a machine setting: it names a command stet runs on your machine"
        ),
        "{message}"
    );
    assert!(message.contains("`stet trust /src/app`"), "{message}");
    assert!(message.contains(&user_file_shown()), "{message}");
    assert!(
        !message.contains("\"id\""),
        "the value is not echoed: {message}"
    );
}

#[test]
fn the_same_file_trusted_sets_what_it_was_refused() {
    for (text, field) in EVERY_MACHINE_SETTING {
        let text = format!("{text}\n");
        let result = Config::from_files(&[trusted(&text)]);
        assert!(
            !matches!(result, Err(ConfigError::Untrusted { .. })),
            "{field}: {result:?}"
        );
    }
    let config = Config::from_files(&[trusted(
        "[dispatch]\nallow_network = true\nimage = \"registry.example.invalid/x@sha256:00\"\n",
    )])
    .unwrap();
    assert!(config.dispatch.allow_network);
    assert_eq!(
        config.dispatch.image.as_deref(),
        Some("registry.example.invalid/x@sha256:00")
    );
}

#[test]
fn project_settings_only_tighten_from_an_untrusted_file() {
    // Each: the repository's line, whether it is accepted.
    let cases = [
        ("[dispatch]\ntimeout_secs = 600", true),
        ("[dispatch]\ntimeout_secs = 1800", true),
        ("[dispatch]\ntimeout_secs = 1801", false),
        ("[dispatch]\nconcurrency = 1", true),
        ("[dispatch]\nconcurrency = 3", false),
        ("[dispatch]\ncost_ceiling_usd = 2.5", true),
        ("[dispatch]\nallow_network = false", true),
        ("[dispatch]\nallow_network = true", false),
        ("[import]\nmax_files = 10", true),
        ("[import]\nmax_files = 200001", false),
        ("[import]\nmax_file_bytes = 1024", true),
        ("[import]\nmax_file_bytes = 104857601", false),
        ("[import]\nmax_total_bytes = 1024", true),
        ("[import]\nmax_total_bytes = 1073741825", false),
        ("[import]\nmax_path_bytes = 1024", true),
        ("[import]\nmax_path_bytes = 4194305", false),
        ("[base]\nmax_path_bytes = 1024", true),
        ("[base]\nmax_path_bytes = 16777217", false),
        ("[base]\nmax_files = 10", true),
        ("[base]\nmax_files = 200001", false),
        ("[base]\nmax_file_bytes = 1073741825", false),
        ("[base]\nmax_total_bytes = 4096", true),
        ("[base]\nmax_total_bytes = 2147483649", false),
        ("[base]\nmax_depth = 8", true),
        ("[base]\nmax_depth = 257", false),
        ("[credentials]\nttl_seconds = 300", true),
        ("[credentials]\nttl_seconds = 901", false),
        ("[model]\nrequest_timeout_secs = 60", true),
        ("[model]\nrequest_timeout_secs = 301", false),
        ("[model]\nmax_concurrent_requests = 1", true),
        ("[model]\nmax_concurrent_requests = 5", false),
        ("[review]\nprotected_paths = [\"docs/**\"]", true),
        ("[review]\nprotected_paths = []", true),
        ("[harness.script]\npace = 7", true),
    ];
    for (text, accepted) in cases {
        let result = Config::from_files(&[repository(&format!("{text}\n"))]);
        assert_eq!(result.is_ok(), accepted, "{text}: {result:?}");
        if !accepted {
            assert!(
                matches!(result, Err(ConfigError::Untrusted { .. })),
                "{text}: {result:?}"
            );
        }
    }
}

#[test]
fn a_lower_limit_wins_and_a_higher_one_names_what_it_would_raise() {
    let user_limits =
        user("[dispatch]\ntimeout_secs = 3600\ncost_ceiling_usd = 5\nconcurrency = 4\n");
    let config = Config::from_files(&[
        user_limits.clone(),
        repository("[dispatch]\ntimeout_secs = 900\ncost_ceiling_usd = 1\nconcurrency = 1\nallow_network = false\n"),
    ])
    .unwrap();
    assert_eq!(config.dispatch.timeout, Duration::from_secs(900));
    assert_eq!(config.dispatch.cost_ceiling_usd, Some(1.0));
    assert_eq!(config.dispatch.concurrency, 1);

    let refused = refusals(&[
        user_limits,
        repository("[dispatch]\ntimeout_secs = 7200\ncost_ceiling_usd = 50\n"),
    ]);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(refused[0].field, "dispatch.timeout_secs");
    assert_eq!(refused[0].line, 2);
    assert!(
        refused[0]
            .why
            .contains("above 3600 (/home/u/.config/stet/config.toml:2)"),
        "{}",
        refused[0].why
    );
    assert_eq!(refused[1].field, "dispatch.cost_ceiling_usd");
}

#[test]
fn the_path_bytes_limits_are_raised_by_the_user_and_only_lowered_by_a_repository() {
    let config = Config::from_files(&[]).unwrap();
    assert_eq!(config.import.max_path_bytes, 4 * 1024 * 1024);
    assert_eq!(config.base.max_path_bytes, 16 * 1024 * 1024);
    let raised = user("[import]\nmax_path_bytes = 67108864\n[base]\nmax_path_bytes = 134217728\n");
    let config = Config::from_files(std::slice::from_ref(&raised)).unwrap();
    assert_eq!(config.import.max_path_bytes, 64 << 20);
    assert_eq!(config.base.max_path_bytes, 128 << 20);
    let config = Config::from_files(&[
        raised.clone(),
        repository("[import]\nmax_path_bytes = 1048576\n[base]\nmax_path_bytes = 2097152\n"),
    ])
    .unwrap();
    assert_eq!(config.import.max_path_bytes, 1 << 20);
    assert_eq!(config.base.max_path_bytes, 2 << 20);
    let refused = refusals(&[
        raised,
        repository("[import]\nmax_path_bytes = 67108865\n[base]\nmax_path_bytes = 134217729\n"),
    ]);
    let fields: Vec<&str> = refused.iter().map(|refusal| refusal.field).collect();
    assert_eq!(fields, ["import.max_path_bytes", "base.max_path_bytes"]);
    assert!(
        refused[0].why.contains("above 67108864"),
        "{}",
        refused[0].why
    );
}

#[test]
fn the_users_network_is_turned_off_by_a_repository_and_never_on() {
    let config = Config::from_files(&[
        user("[dispatch]\nallow_network = true\n"),
        repository("[dispatch]\nallow_network = false\n"),
    ])
    .unwrap();
    assert!(!config.dispatch.allow_network);
    let config = Config::from_files(&[
        user("[dispatch]\nallow_network = false\n"),
        repository("# nothing\n"),
    ])
    .unwrap();
    assert!(!config.dispatch.allow_network);
}

#[test]
fn protected_paths_from_a_repository_file_add_to_the_users() {
    let config =
        Config::from_files(&[repository("[review]\nprotected_paths = [\"docs/**\"]\n")]).unwrap();
    assert!(
        config
            .protected_paths
            .matching(".github/workflows/ci.yml")
            .is_some()
    );
    assert!(config.protected_paths.matching("docs/a.md").is_some());

    let config = Config::from_files(&[repository("[review]\nprotected_paths = []\n")]).unwrap();
    assert_eq!(
        config.protected_paths,
        ProtectedPaths::default(),
        "an empty list removes nothing"
    );

    let config = Config::from_files(&[
        user("[review]\nprotected_paths = [\"ci/**\"]\n"),
        trusted("[review]\nprotected_paths = [\"deploy/*\"]\n"),
    ])
    .unwrap();
    assert!(config.protected_paths.matching("ci/x").is_some());
    assert!(config.protected_paths.matching("deploy/prod").is_some());
    assert!(
        config
            .protected_paths
            .matching(".github/workflows/ci.yml")
            .is_some(),
        "no list, not even the user's own, removes a built-in rule"
    );

    let error = Config::from_files(&[
        user("[review]\nprotected_paths = [\"ci/**\"]\n"),
        repository("\n[review]\nprotected_paths = [\"/abs\"]\n"),
    ])
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("/src/app/stet.toml:3: field `review.protected_paths`"),
        "{error}"
    );
}

#[test]
fn plain_http_beyond_loopback_is_refused_in_every_url_setting_even_the_users() {
    for (table, field) in [
        (
            "[forge]\nkind = \"github\"\n[credentials]\nprovider = \"fallback\"\n[forge.github]\napi_url",
            "forge.github.api_url",
        ),
        (
            "[forge]\nkind = \"github\"\n[credentials]\nprovider = \"fallback\"\n[forge.github]\ngit_url",
            "forge.github.git_url",
        ),
        ("[model]\nbase_url", "model.base_url"),
    ] {
        for (url, accepted) in [
            ("http://example.com/v1", false),
            ("http://192.168.1.10:4000", false),
            ("https://user:secret@example.com/v1", false),
            ("http://127.0.0.1:4000/v1", true),
            ("http://[::1]:4000/v1", true),
            ("http://localhost:4000/v1", true),
            ("https://example.com/v1", true),
        ] {
            let text = format!("{table} = \"{url}\"\n");
            let result = Config::from_files(&[user(&text)]);
            assert_eq!(result.is_ok(), accepted, "{field} = {url}: {result:?}");
            if let Err(error) = result {
                assert!(
                    matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
                    "{error}"
                );
                assert!(
                    error
                        .to_string()
                        .starts_with("/home/u/.config/stet/config.toml:"),
                    "{error}"
                );
                assert!(
                    !error.to_string().contains("secret@") || url.contains("secret"),
                    "{error}"
                );
            }
        }
    }
}

#[test]
fn an_inline_token_or_key_is_refused_and_named_with_its_line() {
    for role in [
        FileRole::User,
        FileRole::Repository,
        FileRole::TrustedRepository,
    ] {
        for (text, field) in [
            ("[forge.github]\ntoken = \"abc\"\n", "forge.github.token"),
            ("[forge.gitea]\ntoken = \"abc\"\n", "forge.gitea.token"),
            ("[forge.gitlab]\ntoken = \"abc\"\n", "forge.gitlab.token"),
            (
                "[credentials.gitea]\npassword = \"abc\"\n",
                "credentials.gitea.password",
            ),
            (
                "[credentials.gitea]\notp = \"abc\"\n",
                "credentials.gitea.otp",
            ),
            (
                "[credentials.github_app]\nprivate_key_pem = \"abc\"\n",
                "credentials.github_app.private_key_pem",
            ),
        ] {
            let error =
                Config::from_files(&[ConfigFile::new("/r/stet.toml", text, role)]).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, ConfigError::InlineSecret { .. }),
                "{message}"
            );
            assert!(message.starts_with("/r/stet.toml:2: field `"), "{message}");
            assert!(message.contains(field), "{message}");
            assert!(!message.contains("abc"), "{message}");
        }
    }
}

#[test]
fn unknown_fields_and_bad_values_name_the_file_the_line_and_the_column() {
    let error = Config::from_files(&[user("[forge]\nkind = \"gitbucket\"\n")]).unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with("/home/u/.config/stet/config.toml:2:8: "),
        "{message}"
    );
    assert!(message.contains("gitlab"), "{message}");
    let error = Config::from_files(&[repository("[agent]\nnmae = \"x\"\n")]).unwrap_err();
    assert!(error.to_string().contains("nmae"), "{error}");
    assert!(
        error.to_string().starts_with("/src/app/stet.toml:2:"),
        "{error}"
    );
}

#[test]
fn inconsistent_settings_are_refused_with_the_field() {
    let cases = [
        (
            "[forge]\nkind = \"github\"\n",
            "credentials.github_app.app_id",
        ),
        (
            "[credentials]\nprovider = \"fallback\"\n",
            "credentials.provider",
        ),
        (
            "[forge]\nkind = \"github\"\n[credentials]\nprovider = \"local\"\n",
            "credentials.provider",
        ),
        (
            "[credentials]\nttl_seconds = 86400\n",
            "credentials.ttl_seconds",
        ),
        ("[agent]\nemail = \"nobody\"\n", "agent.email"),
        (
            "[review]\nprotected_paths = [\"/abs\"]\n",
            "review.protected_paths",
        ),
        (
            "[forge.github]\ntoken_env = \"A\"\ntoken_command = [\"b\"]\n",
            "forge.github.token_command",
        ),
        (
            "[forge.github]\ntoken_command = []\n",
            "forge.github.token_command",
        ),
        (
            "[forge.github]\ntoken_env = \" \"\n",
            "forge.github.token_env",
        ),
        ("[forge]\nkind = \"gitea\"\n", "forge.gitea.api_url"),
        (
            "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/gitea\"\n",
            "forge.gitea.git_url",
        ),
        (
            "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/api/v1\"\n[credentials]\nprovider = \"gitea-token\"\n",
            "credentials.gitea.password_command",
        ),
        (
            "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/api/v1\"\n[credentials.gitea]\npassword_command = []\n",
            "credentials.gitea.password_command",
        ),
        (
            "[forge]\nkind = \"gitlab\"\n[credentials]\nprovider = \"github-app\"\n",
            "credentials.provider",
        ),
        (
            "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/api/v1\"\n[credentials]\nprovider = \"gitlab-project-token\"\n",
            "credentials.provider",
        ),
        (
            "[forge.gitlab]\ntoken_env = \"A\"\ntoken_command = [\"b\"]\n",
            "forge.gitlab.token_command",
        ),
    ];
    for (text, field) in cases {
        let error = Config::from_files(&[user(text)]).unwrap_err();
        assert!(
            matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
            "{text}: {error}"
        );
    }
}

#[test]
fn the_higher_files_token_reference_wins_whichever_kind_it_is() {
    let config = Config::from_files(&[
        user(USER_GITHUB),
        trusted("[forge.github]\ntoken_env = \"MY_TOKEN\"\n"),
    ])
    .unwrap();
    let ForgeConfig::GitHub(github) = config.forge else {
        panic!()
    };
    assert_eq!(github.token, TokenSource::Env("MY_TOKEN".into()));
}

#[test]
fn the_fallback_provider_needs_no_app_settings() {
    let config = Config::from_files(&[user(
        "[forge]\nkind = \"github\"\n[forge.github]\ntoken_env = \"MY_TOKEN\"\n[credentials]\nprovider = \"fallback\"\n",
    )])
    .unwrap();
    assert_eq!(
        config.credentials,
        CredentialConfig::Fallback {
            reason: "credentials.provider = \"fallback\" in the configuration".to_owned()
        }
    );
    let ForgeConfig::GitHub(github) = config.forge else {
        panic!()
    };
    assert_eq!(github.token, TokenSource::Env("MY_TOKEN".into()));
}

#[test]
fn gitea_needs_its_address_and_mints_only_with_a_password_command() {
    let fallback = Config::from_files(&[user(
        "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/api/v1\"\n",
    )])
    .unwrap();
    assert_eq!(
        fallback.forge,
        ForgeConfig::Gitea(ForgeSettings {
            api_url: "https://git.example/api/v1".into(),
            git_url: "https://git.example".into(),
            token: TokenSource::Env("GITEA_TOKEN".into()),
            retry: RetryPolicy::default(),
        })
    );
    let CredentialConfig::Fallback { reason } = &fallback.credentials else {
        panic!("{:?}", fallback.credentials)
    };
    assert!(reason.contains("password_command"), "{reason}");

    let minting = Config::from_files(&[user(
        "[forge]\nkind = \"gitea\"\n[forge.gitea]\napi_url = \"https://git.example/forgejo/api/v1/\"\ntoken_command = [\"pass\", \"gitea\"]\n[credentials.gitea]\nuser = \"robot\"\npassword_command = [\"pass\", \"robot\"]\notp_command = [\"oathtool\", \"--totp\"]\n",
    )])
    .unwrap();
    let ForgeConfig::Gitea(forge) = &minting.forge else {
        panic!("{:?}", minting.forge)
    };
    assert_eq!(forge.git_url, "https://git.example/forgejo");
    assert_eq!(
        minting.credentials,
        CredentialConfig::GiteaToken(GiteaTokenSettings {
            api_url: "https://git.example/forgejo/api/v1/".into(),
            user: Some("robot".into()),
            password: TokenSource::Command(vec!["pass".into(), "robot".into()]),
            otp: Some(TokenSource::Command(vec![
                "oathtool".into(),
                "--totp".into()
            ])),
        })
    );
}

#[test]
fn gitlab_defaults_to_gitlab_com_and_a_project_access_token() {
    let config = Config::from_files(&[user("[forge]\nkind = \"gitlab\"\n")]).unwrap();
    assert_eq!(
        config.forge,
        ForgeConfig::GitLab(ForgeSettings {
            api_url: "https://gitlab.com/api/v4".into(),
            git_url: "https://gitlab.com".into(),
            token: TokenSource::Env("GITLAB_TOKEN".into()),
            retry: RetryPolicy::default(),
        })
    );
    assert_eq!(config.credentials, CredentialConfig::GitLabProjectToken);
    let own = Config::from_files(&[user(
        "[forge]\nkind = \"gitlab\"\n[forge.gitlab]\napi_url = \"https://code.example/api/v4\"\n[credentials]\nprovider = \"fallback\"\n",
    )])
    .unwrap();
    let ForgeConfig::GitLab(forge) = &own.forge else {
        panic!("{:?}", own.forge)
    };
    assert_eq!(forge.git_url, "https://code.example");
    assert!(matches!(own.credentials, CredentialConfig::Fallback { .. }));
}

#[test]
fn a_relative_path_is_relative_to_its_file() {
    let config =
        Config::from_files(&[trusted("[forge.local]\nremote = \"../upstream\"\n")]).unwrap();
    assert_eq!(
        config.forge,
        ForgeConfig::Local {
            remote: Some(PathBuf::from("/src/app/../upstream"))
        }
    );
}

/// An environment holding only `variables`.
fn env_of(variables: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let variables: Vec<(String, String)> = variables
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    move |name: &str| {
        variables
            .iter()
            .find(|(known, _)| known == name)
            .map(|(_, value)| value.clone())
    }
}

const USER_DISPATCH: &str = r#"
[dispatch]
timeout_secs = 600
concurrency = 4
cost_ceiling_usd = 2.5
image = "registry.example.invalid/user@sha256:aaaa"
allow_network = true
[harness]
kind = "script"
[harness.script]
scenario = "scenarios/slow.toml"
pace = 0.5
[harness.openhands]
model = "openai/gpt-4.1-mini"
[model]
base_url = "http://127.0.0.1:4000/v1"
api = "responses"
api_key_env = "USER_MODEL_KEY"
prices = "prices.toml"
request_timeout_secs = 90
max_concurrent_requests = 2
allow = ["gpt-4.1-nano"]
provider_tools = { web_search_preview = 0.025 }
"#;

#[test]
fn dispatch_and_harness_settings_come_from_the_files_field_by_field() {
    let config = Config::from_files(&[
        user(USER_DISPATCH),
        repository(
            "[dispatch]\nconcurrency = 1\ncost_ceiling_usd = 2\n[harness.script]\npace = 0\n",
        ),
    ])
    .unwrap();
    assert_eq!(
        config.dispatch,
        DispatchSettings {
            timeout: Duration::from_secs(600),
            concurrency: 1,
            cost_ceiling_usd: Some(2.0),
            max_record_bytes: crate::dispatch::record::DEFAULT_MAX_RECORD_BYTES,
            image: Some("registry.example.invalid/user@sha256:aaaa".to_owned()),
            allow_network: true,
        }
    );
    assert_eq!(config.harness.kind, HarnessKind::Script);
    assert_eq!(
        config.harness.script,
        ScriptHarnessSettings {
            scenario: Some(PathBuf::from("/home/u/.config/stet/scenarios/slow.toml")),
            pace: 0.0,
        }
    );
    assert_eq!(
        config.harness.openhands,
        OpenHandsHarnessConfig {
            model: Some("openai/gpt-4.1-mini".to_owned()),
        }
    );
    assert_eq!(
        config.model,
        ModelConfig {
            base_url: Some("http://127.0.0.1:4000/v1".to_owned()),
            api: Some(crate::gateway::policy::WireApi::Responses),
            api_key_env: Some("USER_MODEL_KEY".to_owned()),
            prices: Some(PathBuf::from("/home/u/.config/stet/prices.toml")),
            request_timeout: Duration::from_secs(90),
            max_concurrent_requests: 2,
            allow: Some(vec!["gpt-4.1-nano".to_owned()]),
            provider_tools: [("web_search_preview".to_owned(), 0.025)].into(),
        }
    );
    assert_eq!(
        config.repository_file,
        RepositoryFile::Untrusted(PathBuf::from("/src/app/stet.toml"))
    );
    let settings = config.harness.openhands_settings().unwrap();
    assert_eq!(settings.model, "openai/gpt-4.1-mini");
    assert_eq!(
        settings.version,
        crate::harness::openhands::OPENHANDS_VERSION
    );
}

#[test]
fn the_environment_wins_over_every_file() {
    let files = [
        user(USER_DISPATCH),
        trusted(
            "[dispatch]\ntimeout_secs = 900\nimage = \"registry.example.invalid/repo@sha256:bbbb\"\n",
        ),
    ];
    let env = env_of(&[
        (ENV_TIMEOUT_SECS, "120"),
        (ENV_CONCURRENCY, " 8 "),
        (ENV_COST_CEILING_USD, "0.75"),
        (ENV_IMAGE, "registry.example.invalid/env@sha256:cccc"),
        (ENV_HARNESS, "openhands"),
    ]);
    let config = Config::from_files_and_env(&files, &env).unwrap();
    assert_eq!(
        config.dispatch,
        DispatchSettings {
            timeout: Duration::from_secs(120),
            concurrency: 8,
            cost_ceiling_usd: Some(0.75),
            max_record_bytes: crate::dispatch::record::DEFAULT_MAX_RECORD_BYTES,
            image: Some("registry.example.invalid/env@sha256:cccc".to_owned()),
            allow_network: true,
        }
    );
    assert_eq!(config.harness.kind, HarnessKind::OpenHands);

    let blank = env_of(&[(ENV_TIMEOUT_SECS, ""), (ENV_HARNESS, "  ")]);
    let config = Config::from_files_and_env(&files, &blank).unwrap();
    assert_eq!(config.dispatch.timeout, Duration::from_secs(900));
    assert_eq!(config.harness.kind, HarnessKind::Script);

    let script = Config::from_files_and_env(&[], &env_of(&[(ENV_HARNESS, "script")])).unwrap();
    assert_eq!(script.harness.kind, HarnessKind::Script);

    let raised = Config::from_files_and_env(
        &[repository("[dispatch]\ntimeout_secs = 600\n")],
        &env_of(&[(ENV_TIMEOUT_SECS, "7200")]),
    )
    .unwrap();
    assert_eq!(
        raised.dispatch.timeout,
        Duration::from_secs(7200),
        "the environment is the user's: it may raise what a repository lowered"
    );
}

#[test]
fn bad_environment_values_name_the_variable_and_the_field() {
    let cases = [
        (ENV_TIMEOUT_SECS, "30m", "dispatch.timeout_secs"),
        (ENV_TIMEOUT_SECS, "59", "dispatch.timeout_secs"),
        (ENV_TIMEOUT_SECS, "86401", "dispatch.timeout_secs"),
        (ENV_CONCURRENCY, "-1", "dispatch.concurrency"),
        (ENV_CONCURRENCY, "0", "dispatch.concurrency"),
        (ENV_CONCURRENCY, "65", "dispatch.concurrency"),
        (ENV_COST_CEILING_USD, "five", "dispatch.cost_ceiling_usd"),
        (ENV_COST_CEILING_USD, "0", "dispatch.cost_ceiling_usd"),
        (ENV_COST_CEILING_USD, "NaN", "dispatch.cost_ceiling_usd"),
        (ENV_COST_CEILING_USD, "inf", "dispatch.cost_ceiling_usd"),
        (ENV_HARNESS, "aider", "harness.kind"),
    ];
    for (variable, value, field) in cases {
        let error = Config::from_files_and_env(&[], &env_of(&[(variable, value)])).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
            "{variable}={value}: {message}"
        );
        assert!(
            message.starts_with(&format!("environment variable {variable}: field `{field}`")),
            "{message}"
        );
    }
}

#[test]
fn bad_dispatch_and_harness_values_name_the_file_the_line_and_the_field() {
    let cases = [
        ("[dispatch]\ntimeout_secs = 59\n", "dispatch.timeout_secs"),
        (
            "[dispatch]\ntimeout_secs = 86401\n",
            "dispatch.timeout_secs",
        ),
        ("[dispatch]\nconcurrency = 0\n", "dispatch.concurrency"),
        ("[dispatch]\nconcurrency = 65\n", "dispatch.concurrency"),
        (
            "[dispatch]\ncost_ceiling_usd = 0.0\n",
            "dispatch.cost_ceiling_usd",
        ),
        (
            "[dispatch]\ncost_ceiling_usd = -1.5\n",
            "dispatch.cost_ceiling_usd",
        ),
        (
            "[dispatch]\ncost_ceiling_usd = inf\n",
            "dispatch.cost_ceiling_usd",
        ),
        (
            "[dispatch]\ncost_ceiling_usd = nan\n",
            "dispatch.cost_ceiling_usd",
        ),
        ("[dispatch]\nimage = \" \"\n", "dispatch.image"),
        ("[harness.script]\npace = -0.1\n", "harness.script.pace"),
        ("[harness.script]\npace = 100.5\n", "harness.script.pace"),
        (
            "[harness.openhands]\nmodel = \"\"\n",
            "harness.openhands.model",
        ),
        ("[model]\nbase_url = \"127.0.0.1:4000\"\n", "model.base_url"),
        ("[model]\napi_key_env = \"MY KEY\"\n", "model.api_key_env"),
        ("[model]\napi_key_env = \"\"\n", "model.api_key_env"),
        (
            "[model]\nrequest_timeout_secs = 0\n",
            "model.request_timeout_secs",
        ),
        (
            "[model]\nmax_concurrent_requests = 0\n",
            "model.max_concurrent_requests",
        ),
        (
            "[harness.openhands]\nbase_url = \"http://127.0.0.1:4000/v1\"\n",
            "harness.openhands.base_url",
        ),
        (
            "[harness.openhands]\napi_key_env = \"KEY\"\n",
            "harness.openhands.api_key_env",
        ),
    ];
    for (text, field) in cases {
        let error = Config::from_files(&[ConfigFile::new("/r/stet.toml", text, FileRole::User)])
            .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(&error, ConfigError::Invalid { field: f, .. } if *f == field),
            "{text}: {message}"
        );
        assert!(
            message.starts_with(&format!("/r/stet.toml:2: field `{field}`")),
            "{message}"
        );
    }
    for (text, wanted) in [
        ("[harness]\nkind = \"aider\"\n", "aider"),
        ("[dispatch]\ntimeout_secs = -5\n", "timeout_secs"),
        ("[dispatch]\nallow_network = \"yes\"\n", "allow_network"),
        ("[harness.openhands]\nmodle = \"x\"\n", "modle"),
    ] {
        let error = Config::from_files(&[ConfigFile::new("/r/stet.toml", text, FileRole::User)])
            .unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ConfigError::Parse { .. }), "{message}");
        assert!(message.starts_with("/r/stet.toml:2:"), "{message}");
        assert!(
            message.contains(wanted) || text.contains(wanted),
            "{text}: {message}"
        );
    }
}

#[test]
fn the_model_key_is_read_from_the_named_variable_and_its_absence_named() {
    let key = format!("fake-{}", uuid::Uuid::new_v4().simple());
    let model = ModelConfig {
        api_key_env: Some("STET_TEST_MODEL_KEY".to_owned()),
        ..ModelConfig::default()
    };
    let found = model
        .api_key(&|name| (name == "STET_TEST_MODEL_KEY").then(|| key.clone().into()))
        .unwrap()
        .unwrap();
    assert_eq!(found.expose_secret(), key);
    for present in [None, Some(" ")] {
        let error = model
            .api_key(&|_| present.map(std::ffi::OsString::from))
            .unwrap_err()
            .to_string();
        assert!(error.contains("STET_TEST_MODEL_KEY"), "{error}");
        assert!(error.contains("model.api_key_env"), "{error}");
    }
    assert!(ModelConfig::default().api_key(&|_| None).unwrap().is_none());
}

#[test]
fn an_inline_model_api_key_is_refused_and_not_echoed() {
    let key = format!("fake-{}", uuid::Uuid::new_v4().simple());
    for (table, field) in [
        (
            "[harness.openhands]\nmodel = \"m\"",
            "harness.openhands.api_key",
        ),
        ("[model]", "model.api_key"),
    ] {
        let text = format!("{table}\napi_key = \"{key}\"\n");
        let error = Config::from_files(&[repository(&text)]).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ConfigError::InlineSecret { field: f, .. } if f == field),
            "{message}"
        );
        assert!(message.contains("api_key_env"), "{message}");
        assert!(!message.contains(&key), "{message}");
    }
}

#[test]
fn the_openhands_harness_without_a_model_is_an_error_when_a_dispatch_needs_it() {
    let config = Config::from_files(&[]).unwrap();
    assert_eq!(config.harness.kind, HarnessKind::OpenHands);
    let error = config.harness.openhands_settings().unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ConfigError::MissingModel { .. }),
        "{message}"
    );
    assert!(message.contains(&user_file_shown()), "{message}");
    assert!(message.contains("harness.openhands.model"), "{message}");
    assert!(message.contains(ENV_HARNESS), "{message}");
}

#[test]
fn whole_numbers_are_accepted_for_dollars_and_pace() {
    let config = Config::from_files(&[repository(
        "[dispatch]\ncost_ceiling_usd = 5\n[harness.script]\npace = 0\n",
    )])
    .unwrap();
    assert_eq!(config.dispatch.cost_ceiling_usd, Some(5.0));
    assert_eq!(config.harness.script.pace, 0.0);
    assert_eq!(HarnessKind::OpenHands.as_str(), "openhands");
    assert_eq!(HarnessKind::Script.as_str(), "script");
}

#[test]
fn the_repository_file_in_effect_is_said_in_a_line() {
    assert_eq!(RepositoryFile::None.to_string(), "no repository stet.toml");
    assert_eq!(RepositoryFile::None.status(), None);
    let untrusted = RepositoryFile::Untrusted(PathBuf::from("/src/app/stet.toml"));
    assert!(
        untrusted
            .to_string()
            .starts_with("/src/app/stet.toml (not trusted")
    );
    assert!(untrusted.to_string().contains("stet trust"));
    assert_eq!(
        untrusted.status().as_deref(),
        Some("stet.toml: not trusted (project settings only)")
    );
    let trusted = RepositoryFile::Trusted {
        path: PathBuf::from("/src/app/stet.toml"),
        hash: trust::ContentHash::of(b"abc"),
    };
    assert_eq!(
        trusted.to_string(),
        "/src/app/stet.toml (trusted: sha256 ba7816bf8f01; machine settings allowed)"
    );
}

/// The settings table of docs/security.md: `| `field` | machine |` or `| `field` | project: rule |`.
fn documented_classes() -> Vec<(String, String)> {
    let docs = include_str!("../../../../docs/security.md");
    let start = docs
        .find("<!-- settings table -->")
        .expect("docs/security.md marks its settings table");
    docs[start..]
        .lines()
        .skip_while(|line| !line.starts_with("| `"))
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
        })
        .collect()
}

#[test]
fn the_settings_table_in_the_docs_is_the_codes() {
    let code: Vec<(String, String)> = settings_catalog()
        .into_iter()
        .map(|(field, class)| {
            let class = match class {
                Class::Machine(_) => "machine".to_owned(),
                Class::Project(Rule::Free) => "project".to_owned(),
                Class::Project(Rule::AtMost) => "project: only lower".to_owned(),
                Class::Project(Rule::Adds) => "project: only add".to_owned(),
                Class::Project(Rule::StaysOff) => "project: only off".to_owned(),
            };
            (field.to_owned(), class)
        })
        .collect();
    assert_eq!(documented_classes(), code);
}

#[test]
fn a_repository_file_past_the_protected_path_limits_is_named_with_its_figure_and_the_limit() {
    let list = |prefix: &str, count: usize| {
        let patterns: Vec<String> = (0..count).map(|n| format!("\"{prefix}/{n}/**\"")).collect();
        format!("[review]\nprotected_paths = [{}]\n", patterns.join(", "))
    };
    // The user's patterns and the repository's count together.
    let error = Config::from_files(&[
        user(&list("mine", 100)),
        repository(&format!("\n{}", list("theirs", 29))),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with("/src/app/stet.toml:3: field `review.protected_paths`"),
        "{error}"
    );
    assert!(
        error.contains(
            "129 patterns are added to the built-in rules with this list, and at most 128 may be"
        ),
        "{error}"
    );
    assert!(Config::from_files(&[repository(&list("theirs", 128))]).is_ok());
    let long: Vec<String> = (0..33)
        .map(|n| format!("\"{n:02}{}\"", "x".repeat(254)))
        .collect();
    let error = Config::from_files(&[repository(&format!(
        "[review]\nprotected_paths = [{}]\n",
        long.join(", ")
    ))])
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with("/src/app/stet.toml:2: field `review.protected_paths`")
            && error.contains("come to 8448 characters, and at most 8192 may be"),
        "{error}"
    );
}

#[test]
fn the_runtime_is_the_local_docker_engine_unless_the_users_file_names_another() {
    assert_eq!(
        Config::from_files(&[]).unwrap().runtime.kind,
        RuntimeKind::Docker
    );
    for kind in RuntimeKind::ALL {
        let config =
            Config::from_files(&[user(&format!("[runtime]\nkind = \"{}\"\n", kind.as_str()))])
                .unwrap();
        assert_eq!(config.runtime.kind, *kind);
    }
    let error = Config::from_files(&[user("\n[runtime]\nkind = \"vmware\"\n")])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("/home/u/.config/stet/config.toml:3:") && error.contains("vmware"),
        "{error}"
    );
}

#[test]
fn an_untrusted_repository_may_not_choose_the_runtime() {
    let refused = refusals(&[repository("[runtime]\nkind = \"docker\"\n")]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].field, "runtime.kind");
    assert_eq!(refused[0].line, 2);
    assert!(
        refused[0].why.contains("container engine"),
        "{}",
        refused[0].why
    );
    let trusted = Config::from_files(&[trusted("[runtime]\nkind = \"docker\"\n")]).unwrap();
    assert_eq!(trusted.runtime.kind, RuntimeKind::Docker);
}

#[test]
fn the_engine_and_its_host_are_the_users_to_choose_and_are_checked_where_they_are_written() {
    use crate::runtime::endpoint::Engine;
    let default = Config::from_files(&[]).unwrap().runtime;
    assert_eq!((default.engine, default.host), (Engine::Docker, None));
    let config = Config::from_files(&[user(
        "[runtime]\nengine = \"podman\"\nhost = \"unix:///run/podman/podman.sock\"\n",
    )])
    .unwrap();
    assert_eq!(config.runtime.engine, Engine::Podman);
    assert_eq!(
        config.runtime.choice().host,
        Some("unix:///run/podman/podman.sock")
    );
    let ssh = Config::from_files(&[user("[runtime]\nhost = \"ssh://me@build:2222\"\n")]).unwrap();
    assert_eq!(ssh.runtime.choice().host, Some("ssh://me@build:2222"));
    let error = Config::from_files(&[user("[runtime]\n\nhost = \"ssh://-oProxyCommand=x\"\n")])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("/home/u/.config/stet/config.toml:3: field `runtime.host`")
            && error.contains("\"ssh://-oProxyCommand=x\"")
            && error.contains("not starting with '-'"),
        "{error}"
    );
    let error = Config::from_files(&[user("[runtime]\nengine = \"lxc\"\n")])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("/home/u/.config/stet/config.toml:2:") && error.contains("lxc"),
        "{error}"
    );
}

#[test]
fn an_untrusted_repository_may_not_choose_the_engine_or_where_it_listens() {
    let refused = refusals(&[repository(
        "[runtime]\nengine = \"podman\"\nhost = \"tcp://127.0.0.1:2375\"\n",
    )]);
    let fields: Vec<_> = refused.iter().map(|r| (r.field, r.line)).collect();
    assert_eq!(fields, [("runtime.engine", 2), ("runtime.host", 3)]);
    assert!(refused.iter().all(|r| r.why.contains("container engine")));
}

#[test]
fn every_harness_kind_is_configured_by_its_name_and_reaches_the_registry() {
    for kind in HarnessKind::ALL {
        let text = format!(
            "[harness]\nkind = \"{}\"\n[harness.openhands]\nmodel = \"openai/gpt-4.1\"\n[harness.codex]\nmodel = \"gpt-5.1-codex\"\n[harness.claude]\nmodel = \"claude-sonnet-4-5\"\n",
            kind.as_str()
        );
        let config = Config::from_files(&[user(&text)]).unwrap();
        let settings = config.harness.settings().unwrap();
        assert_eq!(settings.kind(), *kind);
        assert_eq!(
            crate::harness::from_settings(settings).name(),
            kind.as_str()
        );
        let from_env = Config::from_files_and_env(&[], &|name| {
            (name == ENV_HARNESS).then(|| kind.as_str().to_owned())
        })
        .unwrap();
        assert_eq!(from_env.harness.kind, *kind);
    }
    let error = Config::from_files_and_env(&[], &|name| {
        (name == ENV_HARNESS).then(|| "claude-code".to_owned())
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        error,
        "environment variable STET_HARNESS: field `harness.kind`: \"claude-code\" is not a harness: use \"openhands\" or \"script\" or \"codex\" or \"claude\""
    );
}

#[test]
fn the_ca_bundle_comes_from_the_users_file_relative_to_it() {
    let config =
        Config::from_files(&[user("[network]\nca_bundle = \"certs/corp.pem\"\n")]).unwrap();
    assert_eq!(
        config.network.ca_bundle.as_deref(),
        Some(Path::new("/home/u/.config/stet/certs/corp.pem"))
    );
    assert_eq!(Config::from_files(&[]).unwrap().network.ca_bundle, None);
}

#[test]
fn a_repository_file_cannot_set_the_ca_bundle_even_when_trusted() {
    let text = "\n[network]\nca_bundle = \"/etc/evil.pem\"\n";
    let refused = refusals(&[user(""), repository(text)]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].field, "network.ca_bundle");
    let error = Config::from_files(&[
        user("[network]\nca_bundle = \"/etc/corp.pem\"\n"),
        trusted(text),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with("/src/app/stet.toml:3: field `network.ca_bundle`: is read only from your own configuration"),
        "{error}"
    );
}

#[test]
fn egress_is_off_unless_hosts_are_allowed_and_reads_each_rule_with_its_origin() {
    let none = Config::from_files(&[user("[network]\nallow_http = true\n")]).unwrap();
    assert_eq!(none.network.egress, None);
    let config = Config::from_files(&[user(
        "[network]\nallow = [\"git.example.org:8443\", \"*.pkg.example.org\"]\npresets = [\"python\"]\n",
    )])
    .unwrap();
    let egress = config.network.egress.unwrap();
    let rules: Vec<(String, String)> = egress
        .policy
        .rules
        .iter()
        .map(|(rule, origin)| (rule.to_string(), origin.clone()))
        .collect();
    let file = "/home/u/.config/stet/config.toml";
    assert_eq!(
        rules,
        [
            (
                "git.example.org:8443".into(),
                format!("network.allow at {file}:2")
            ),
            (
                "*.pkg.example.org".into(),
                format!("network.allow at {file}:2")
            ),
            ("pypi.org".into(), format!("preset python at {file}:3")),
            (
                "files.pythonhosted.org".into(),
                format!("preset python at {file}:3")
            ),
        ]
    );
    assert!(!egress.policy.allow_http);
    assert!(!egress.policy.loopback_for_tests);
    assert_eq!(egress.bounds.max_upload_bytes, 16 << 20);
    assert_eq!(egress.review_upload_bytes, 1 << 20);
}

#[test]
fn a_repository_may_only_narrow_egress() {
    let base =
        "[network]\nallow = [\"*.example.org\"]\nallow_http = true\nmax_upload_bytes = 1000000\n";
    // Removing hosts, turning plain HTTP or egress off and lowering the bounds are its to do.
    let narrowed = Config::from_files(&[
        user(base),
        repository(
            "[network]\ndeny = [\"paste.example.org\"]\nallow_http = false\nmax_upload_bytes = 1000\nreview_upload_bytes = 10\n",
        ),
    ])
    .unwrap();
    let egress = narrowed.network.egress.unwrap();
    assert_eq!(egress.policy.deny.len(), 1);
    assert_eq!(egress.policy.deny[0].0.to_string(), "paste.example.org");
    assert!(!egress.policy.allow_http);
    assert_eq!(egress.bounds.max_upload_bytes, 1000);
    assert_eq!(egress.review_upload_bytes, 10);
    let off = Config::from_files(&[user(base), repository("[network]\negress = false\n")]).unwrap();
    assert_eq!(off.network.egress, None);
    // Widening is refused, each setting named.
    let refused = refusals(&[
        user(base),
        repository(
            "[network]\nallow = [\"evil.example.net\"]\npresets = [\"node\"]\nloopback_for_tests = true\nmax_upload_bytes = 2000000\n",
        ),
    ]);
    let fields: Vec<&str> = refused.iter().map(|refusal| refusal.field).collect();
    assert_eq!(
        fields,
        [
            "network.allow",
            "network.presets",
            "network.loopback_for_tests",
            "network.max_upload_bytes"
        ]
    );
    // A trusted repository may allow hosts.
    let trusted =
        Config::from_files(&[user(""), trusted("[network]\nallow = [\"pypi.org\"]\n")]).unwrap();
    assert_eq!(trusted.network.egress.unwrap().policy.rules.len(), 1);
}

#[test]
fn egress_errors_name_the_setting_and_the_value() {
    let error = |text: &str| Config::from_files(&[user(text)]).unwrap_err().to_string();
    let preset = error("[network]\npresets = [\"cobol\"]\n");
    assert!(
        preset.contains("network.presets")
            && preset.contains(
                "\"cobol\" is not a preset; the presets are python, rust, node, go, debian"
            ),
        "{preset}"
    );
    let rule = error("[network]\nallow = [\"*.org\"]\n");
    assert!(
        rule.contains("network.allow") && rule.contains("\"*.org\""),
        "{rule}"
    );
    let both = error("[dispatch]\nallow_network = true\n[network]\nallow = [\"pypi.org\"]\n");
    assert!(
        both.contains("dispatch.allow_network") && both.contains("use one or the other"),
        "{both}"
    );
}

/// A hostile repository's own `stet.toml`, untrusted, can only narrow the agent's egress: each line
/// that would add a host, plain HTTP or the loopback override, turn egress back on, or raise the
/// upload bound or the review threshold is refused with its field; removing a host and lowering a
/// bound take effect.
#[test]
fn an_untrusted_repository_file_cannot_widen_egress() {
    let allowed =
        "[network]\nallow = [\"pypi.org\"]\nmax_upload_bytes = 4096\nreview_upload_bytes = 2048\n";
    let defaults = "[network]\nallow = [\"pypi.org\"]\n";
    for (base, line, field) in [
        (allowed, "allow = [\"paste.example.org\"]", "network.allow"),
        (allowed, "presets = [\"node\"]", "network.presets"),
        (allowed, "allow_http = true", "network.allow_http"),
        (
            allowed,
            "loopback_for_tests = true",
            "network.loopback_for_tests",
        ),
        (
            allowed,
            "max_upload_bytes = 4097",
            "network.max_upload_bytes",
        ),
        (
            allowed,
            "review_upload_bytes = 2049",
            "network.review_upload_bytes",
        ),
        (
            defaults,
            "max_upload_bytes = 1099511627776",
            "network.max_upload_bytes",
        ),
        (
            defaults,
            "review_upload_bytes = 1099511627776",
            "network.review_upload_bytes",
        ),
        (
            "[network]\nallow = [\"pypi.org\"]\negress = false\n",
            "egress = true",
            "network.egress",
        ),
    ] {
        let refused = refusals(&[user(base), repository(&format!("[network]\n{line}\n"))]);
        assert!(
            refused.iter().any(|refusal| refusal.field == field),
            "{line}: {refused:?}"
        );
    }
    assert!(
        Config::from_files(&[repository("[network]\nallow = [\"paste.example.org\"]\n")]).is_err(),
        "a repository alone turned egress on"
    );
    let narrowed = Config::from_files(&[
        user(allowed),
        repository("[network]\ndeny = [\"pypi.org\"]\nmax_upload_bytes = 10\n"),
    ])
    .unwrap();
    let egress = narrowed.network.egress.unwrap();
    assert_eq!(egress.bounds.max_upload_bytes, 10);
    let pypi = crate::egress::hosts::Target::parse("pypi.org").unwrap();
    assert!(matches!(
        egress.policy.decide(&pypi, 443),
        crate::egress::Verdict::Refused { .. }
    ));
    let off =
        Config::from_files(&[user(allowed), repository("[network]\negress = false\n")]).unwrap();
    assert_eq!(off.network.egress, None);
}

#[test]
fn the_model_api_defaults_per_harness_and_is_named_in_model_api() {
    use crate::gateway::policy::WireApi;
    let config = Config::from_files(&[]).unwrap();
    assert_eq!(config.model.api, None);
    assert_eq!(
        config.model.api_for(HarnessKind::OpenHands),
        Some(WireApi::ChatCompletions)
    );
    assert_eq!(config.model.api_for(HarnessKind::Script), None);
    for (name, api) in [
        ("chat", WireApi::ChatCompletions),
        ("responses", WireApi::Responses),
        ("anthropic", WireApi::Messages),
    ] {
        let config = Config::from_files(&[user(&format!("[model]\napi = \"{name}\"\n"))]).unwrap();
        assert_eq!(config.model.api, Some(api));
        assert_eq!(config.model.api_for(HarnessKind::OpenHands), Some(api));
        assert_eq!(config.model.api_for(HarnessKind::Script), Some(api));
    }
    let err = Config::from_files(&[user("[model]\napi = \"gemini\"\n")]).unwrap_err();
    assert!(err.to_string().contains("gemini"), "{err}");
}

/// `network.sandbox_ca_bundle` is read and checked with the configuration: its certificates go with
/// the egress settings, and a file that is missing, holds no certificate or holds something else
/// is an error naming the file, the setting and the problem.
#[test]
fn the_sandbox_ca_bundle_is_read_checked_and_named_in_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::https::rig::Pki::new(dir.path(), "sandbox");
    let allowed = |path: &Path| {
        format!(
            "[network]\nallow = [\"git.example.org\"]\nsandbox_ca_bundle = {:?}\n",
            path.display().to_string()
        )
    };
    let config = Config::from_files(&[user(&allowed(&pki.ca_pem))]).unwrap();
    let ca = config.network.egress.unwrap().sandbox_ca.unwrap();
    assert_eq!(ca.path, pki.ca_pem);
    assert_eq!(ca.pem, std::fs::read(&pki.ca_pem).unwrap());
    assert_eq!(ca.certificates, 1);

    let key = dir.path().join("sandbox-ca.key");
    let missing = dir.path().join("nowhere.pem");
    let text = dir.path().join("notes.pem");
    std::fs::write(&text, "not a certificate\n").unwrap();
    for (path, problem) in [
        (&missing, "cannot be read"),
        (&key, "holds no certificate"),
        (&text, "holds no certificate"),
    ] {
        let error = Config::from_files(&[user(&allowed(path))])
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(
                "/home/u/.config/stet/config.toml:3: field `network.sandbox_ca_bundle`: "
            ) && error.contains(&format!("{}: {problem}", path.display())),
            "{error}"
        );
    }
}

#[test]
fn a_repository_file_cannot_name_the_sandboxs_ca_bundle_even_when_trusted() {
    let text = "\n[network]\nsandbox_ca_bundle = \"/etc/ssl/private/host.pem\"\n";
    let base = "[network]\nallow = [\"git.example.org\"]\n";
    let refused = refusals(&[user(base), repository(text)]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].field, "network.sandbox_ca_bundle");
    let error = Config::from_files(&[user(base), trusted(text)])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("/src/app/stet.toml:3: field `network.sandbox_ca_bundle`: is read only from your own configuration"),
        "{error}"
    );
}

#[test]
fn the_warm_pool_is_a_machine_setting_of_copy_mode_and_bounded() {
    assert_eq!(Config::from_files(&[]).unwrap().runtime.warm, 0);
    let config = Config::from_files(&[user("[runtime]\nmounts = \"copy\"\nwarm = 2\n")]).unwrap();
    assert_eq!(config.runtime.warm, 2);
    // Unset mounts follow the engine (copy for one that is not a local socket), so only the
    // engine's launch can refuse that case (`EngineError::WarmNeedsCopy`); bind said outright is
    // refused where it is written.
    let unset = Config::from_files(&[user("[runtime]\nwarm = 1\n")]).unwrap();
    assert_eq!((unset.runtime.warm, unset.runtime.mounts), (1, None));
    let bind = Config::from_files(&[user("[runtime]\nmounts = \"bind\"\nwarm = 1\n")])
        .unwrap_err()
        .to_string();
    assert!(
        bind.starts_with("/home/u/.config/stet/config.toml:3: field `runtime.warm`: 1 needs runtime.mounts = \"copy\""),
        "{bind}"
    );
    let many = Config::from_files(&[user("[runtime]\nmounts = \"copy\"\nwarm = 17\n")])
        .unwrap_err()
        .to_string();
    assert!(
        many.starts_with(
            "/home/u/.config/stet/config.toml:3: field `runtime.warm`: 17 is outside 0..=16"
        ),
        "{many}"
    );
    let refused = refusals(&[repository("[runtime]\nwarm = 4\n")]);
    let fields: Vec<_> = refused.iter().map(|r| (r.field, r.line)).collect();
    assert_eq!(fields, [("runtime.warm", 2)]);
    assert!(
        refused[0].why.contains("container engine"),
        "{}",
        refused[0].why
    );
}
