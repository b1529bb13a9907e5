//! What a dispatch needs, checked in the order it needs it and changing nothing: the configuration
//! resolves (and where each part came from), the harness has what it runs with, its image is there
//! and pinned, the model endpoint answers with the key a dispatch would send, and the price table
//! covers the model under a ceiling. Only a free request is ever made of the endpoint (`GET
//! /models`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};

use crate::check::{Check, Status};
use crate::config::{self, Config, HarnessKind};
use crate::gateway::policy::WireApi;
use crate::gateway::prices::PriceTable;
use crate::runtime::{ImageRef, RuntimeSetup};

/// How long the endpoint has to answer `GET /models`.
const MODELS_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of the endpoint's model list that is read.
const MODELS_BODY_LIMIT: usize = 1024 * 1024;

/// The environment variables that set a setting over every file.
const SETTING_VARIABLES: [&str; 5] = [
    config::ENV_TIMEOUT_SECS,
    config::ENV_CONCURRENCY,
    config::ENV_COST_CEILING_USD,
    config::ENV_IMAGE,
    config::ENV_HARNESS,
];

/// The configuration as a dispatch from here would read it: where each part came from, or why it
/// does not resolve. `repository` is the checkout (`Err`: not in one, and why), `config` the
/// configuration loaded for it (or for no repository, outside one).
pub fn configuration_check(
    repository: &Result<PathBuf, String>,
    config: &Result<Config, String>,
) -> Check {
    let config = match config {
        Ok(config) => config,
        Err(why) => {
            return Check::problem(
                "configuration",
                Status::Fail,
                why.clone(),
                "correct the file and field the message names",
            );
        }
    };
    let user = match config::user_file() {
        Ok(file) if file.exists() => format!("{} (read)", file.display()),
        Ok(file) => format!("{} (absent: every setting at its default)", file.display()),
        Err(error) => error.to_string(),
    };
    let repository_file = match (repository, &config.repository_file) {
        (Err(_), _) => "not in a repository".to_owned(),
        (Ok(_), file) => file.to_string(),
    };
    let variables: Vec<&str> = SETTING_VARIABLES
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
        .collect();
    let environment = if variables.is_empty() {
        "none".to_owned()
    } else {
        variables.join(", ")
    };
    Check::ok(
        "configuration",
        format!("user file {user}; repository file: {repository_file}; environment: {environment}"),
    )
}

/// The harness, its image, the model endpoint and the prices, as `config` sets them, each with the
/// fix naming where the setting goes. `runtime` is asked whether the configured image is there
/// (`Err`: there is no engine to ask, and why).
pub async fn dispatch_checks(
    config: &Config,
    runtime: &Result<Arc<dyn RuntimeSetup>, String>,
) -> Vec<Check> {
    let user_file = config::user_file_shown();
    let mut checks = Vec::new();
    let harness = match config.harness.settings() {
        Ok(settings) => crate::harness::from_settings(settings),
        Err(error) => {
            checks.push(Check::problem(
                "harness",
                Status::Fail,
                error.to_string(),
                &format!("set what the message names in {user_file}"),
            ));
            return checks;
        }
    };
    // The model each harness that asks one is configured with, and the field that names it.
    let (model, field) = match config.harness.kind {
        HarnessKind::OpenHands => (
            config.harness.openhands.model.clone(),
            "harness.openhands.model",
        ),
        HarnessKind::Codex => (config.harness.codex.model.clone(), "harness.codex.model"),
        HarnessKind::Claude => (config.harness.claude.model.clone(), "harness.claude.model"),
        HarnessKind::Script => (None, ""),
    };
    let kind = config.harness.kind.as_str();
    checks.push(Check::ok(
        "harness",
        match &model {
            Some(model) => format!("{kind}, model {model}"),
            None => kind.to_owned(),
        },
    ));
    if let Ok(runtime) = runtime {
        checks.push(mounts_check(config, runtime.as_ref(), &user_file));
    }
    checks.push(image_check(config, harness.runs_in_offline_image(), runtime, &user_file).await);
    checks.extend(super::egress::egress_checks(config, &user_file).await);
    let Some(model) = model else {
        return checks;
    };
    checks.push(endpoint_check(config, &model, field, &user_file).await);
    checks.push(prices_check(config, &model, &user_file));
    checks
}

/// How the workspace reaches a sandbox on the configured engine (`[runtime] mounts`, else as the
/// engine's address says), and the refusal of bind mounts asked of a remote engine.
fn mounts_check(config: &Config, runtime: &dyn RuntimeSetup, user_file: &str) -> Check {
    let endpoint = runtime.endpoint();
    match endpoint.mounts(config.runtime.mounts) {
        Ok(mode) => Check::ok(
            "mounts",
            format!(
                "{} ({} at {}{})",
                mode.as_str(),
                endpoint.engine.display_name(),
                endpoint.host,
                if config.runtime.mounts.is_some() {
                    ", as [runtime] mounts says"
                } else if endpoint.is_remote() {
                    ", not a local socket: copies through the archive API"
                } else {
                    ", a local socket: bind mounts"
                },
            ),
        ),
        Err(error) => Check::problem(
            "mounts",
            Status::Fail,
            error.to_string(),
            &format!("set [runtime] mounts = \"copy\" (or remove it) in {user_file}"),
        ),
    }
}

/// The dispatch image: configured, pinned, and present in the engine (or pullable by digest).
async fn image_check(
    config: &Config,
    offline: bool,
    runtime: &Result<Arc<dyn RuntimeSetup>, String>,
    user_file: &str,
) -> Check {
    let text = match &config.dispatch.image {
        Some(text) => text,
        None if offline => {
            return Check::ok(
                "harness image",
                "the offline sandbox image (see `sandbox image`)".to_owned(),
            );
        }
        None => {
            return Check::problem(
                "harness image",
                Status::Fail,
                "no dispatch image is configured for this harness".to_owned(),
                &format!(
                    "set [dispatch] image = \"<name>@sha256:<digest>\" (or a local image ID) in {user_file} (docs/agents.md)"
                ),
            );
        }
    };
    let image = match ImageRef::parse(text, false) {
        Ok(image) => image,
        Err(error) => {
            return Check::problem(
                "harness image",
                Status::Fail,
                error.to_string(),
                &format!("pin dispatch.image by digest in {user_file}"),
            );
        }
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(why) => {
            return Check::problem(
                "harness image",
                Status::Warn,
                format!("{text} is pinned; whether it is present was not checked: {why}"),
                "start the Docker daemon",
            );
        }
    };
    match (runtime.image_present(&image).await, &image) {
        (Ok(true), _) => Check::ok("harness image", format!("{text}: present, pinned")),
        (Ok(false), ImageRef::Digest { .. }) => Check::problem(
            "harness image",
            Status::Warn,
            format!("{text} is pinned but not pulled yet: the first dispatch pulls it"),
            &format!("`docker pull {text}` now, to find out whether the registry lets you"),
        ),
        (Ok(false), _) => Check::problem(
            "harness image",
            Status::Fail,
            format!("{text} is not in the engine, and an image ID cannot be pulled"),
            &format!(
                "build it again (docker/dispatch/build-offline --harness {}), or set dispatch.image to a published image by digest",
                config.harness.kind.as_str()
            ),
        ),
        (Err(why), _) => Check::problem(
            "harness image",
            Status::Warn,
            format!("{text} is pinned; the engine could not say whether it is present: {why}"),
            "check the engine's logs",
        ),
    }
}

/// The model endpoint answers `GET <base_url>/models` with the key a dispatch would send.
async fn endpoint_check(config: &Config, model: &str, field: &str, user_file: &str) -> Check {
    let Some(base_url) = &config.model.base_url else {
        return Check::problem(
            "model endpoint",
            Status::Fail,
            format!(
                "no model endpoint is configured: the {} harness reaches its model only through stet's gateway",
                config.harness.kind.as_str()
            ),
            &format!("set [model] base_url (and api_key_env) in {user_file}"),
        );
    };
    let key = match config.model.api_key(&|name| std::env::var_os(name)) {
        Ok(key) => key,
        Err(error) => {
            return Check::problem(
                "model endpoint",
                Status::Fail,
                error.to_string(),
                "export the variable in the environment stet runs in, or name another in model.api_key_env",
            );
        }
    };
    let with_key = match &config.model.api_key_env {
        Some(variable) => format!("with the key in {variable}"),
        None => "with no key".to_owned(),
    };
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let answer = tokio::time::timeout(
        MODELS_TIMEOUT,
        list_models(
            &url,
            key.as_ref().map(|key| key.expose_secret()),
            config.model.api_for(config.harness.kind) == Some(WireApi::Messages),
        ),
    )
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {}s", MODELS_TIMEOUT.as_secs())));
    let asked = model.rsplit_once('/').map_or(model, |(_, name)| name);
    match answer {
        Ok((status, _)) if status == 401 || status == 403 => Check::problem(
            "model endpoint",
            Status::Fail,
            format!("GET {url} {with_key}: refused ({status})"),
            "check the key, or name the variable that holds the right one in model.api_key_env",
        ),
        Ok((status, _)) if !(200..300).contains(&status) => Check::problem(
            "model endpoint",
            Status::Fail,
            format!("GET {url} {with_key}: answered {status}"),
            &format!(
                "check [model] base_url in {user_file}: it is the endpoint's OpenAI-compatible base URL"
            ),
        ),
        Ok((_, models))
            if models
                .iter()
                .any(|listed| listed == asked || listed == model) =>
        {
            Check::ok(
                "model endpoint",
                format!("GET {url} {with_key}: answered, and lists {asked}"),
            )
        }
        Ok((_, models)) => Check::problem(
            "model endpoint",
            Status::Warn,
            format!(
                "GET {url} {with_key}: answered, but lists {} models and not {asked}",
                models.len()
            ),
            &format!("check {field} in {user_file} against the endpoint's names"),
        ),
        Err(why) => Check::problem(
            "model endpoint",
            Status::Fail,
            format!("GET {url}: {why}"),
            &format!("start the endpoint, or correct [model] base_url in {user_file}"),
        ),
    }
}

/// `GET url` with `key` as the bearer: the status, and the model ids a 2xx answer lists.
async fn list_models(
    url: &str,
    key: Option<&str>,
    anthropic: bool,
) -> Result<(u16, Vec<String>), String> {
    let mut request = hyper::Request::get(url);
    // Anthropic's API (the Messages endpoint Claude Code is given) takes its key as `x-api-key`,
    // with the API version; an OpenAI-compatible one as a bearer token.
    match key {
        Some(key) if anthropic => {
            request = request
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01");
        }
        Some(key) => {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        None => {}
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|error| format!("not a URL stet can ask: {error}"))?;
    let response = crate::https::https_client::<Empty<Bytes>>()
        .map_err(|error| error.to_string())?
        .request(request)
        .await
        .map_err(|error| crate::error_chain::error_chain(&error))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MODELS_BODY_LIMIT)
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let models = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|list| {
            list.get("data")?.as_array().map(|data| {
                data.iter()
                    .filter_map(|entry| entry.get("id")?.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default();
    Ok((status, models))
}

/// The price table prices `model`, and a ceiling bounds what a dispatch may spend.
fn prices_check(config: &Config, model: &str, user_file: &str) -> Check {
    let table = match &config.model.prices {
        None => Ok(PriceTable::builtin()),
        Some(path) => std::fs::read_to_string(path)
            .map_err(|error| format!("{}: {error}", path.display()))
            .and_then(|text| {
                PriceTable::from_toml(&text, &path.display().to_string())
                    .map_err(|error| error.to_string())
            })
            .map(|table| table.merged_over(&PriceTable::builtin())),
    };
    let table = match table {
        Ok(table) => table,
        Err(why) => {
            return Check::problem(
                "prices",
                Status::Fail,
                why,
                &format!("correct the table, or model.prices in {user_file}"),
            );
        }
    };
    let ceiling = config.dispatch.cost_ceiling_usd;
    match (table.price(model), ceiling) {
        (Some(_), Some(ceiling)) => Check::ok(
            "prices",
            format!("{model} is priced; a dispatch stops at ${ceiling:.2}"),
        ),
        (Some(_), None) => Check::problem(
            "prices",
            Status::Warn,
            format!("{model} is priced, but no cost ceiling bounds a dispatch"),
            &format!(
                "set [dispatch] cost_ceiling_usd in {user_file} (a repository's stet.toml may lower it)"
            ),
        ),
        (None, _) => Check::problem(
            "prices",
            Status::Warn,
            format!(
                "{model} is not in the price table: only a cost the endpoint reports itself (x-litellm-response-cost) counts toward the ceiling"
            ),
            &format!("add it to a price table named by [model] prices in {user_file}"),
        ),
    }
}

/// What the report could not check from here, for its last line: everything of a repository when
/// `repository` is not one (it says why).
pub fn unchecked(repository: &Result<PathBuf, String>) -> Vec<String> {
    match repository {
        Ok(_) => Vec::new(),
        Err(_) => vec![
            "a repository's stet.toml, its forge and its briefs (run stet doctor inside the repository)"
                .to_owned(),
        ],
    }
}
