use std::time::Duration;

use stet_sanitize::sanitize::{SanitizerHandle, TokenSanitizer};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::credential::SecretValue;
use crate::forge::rest::{Auth, RetryPolicy};

fn client(api_url: &str) -> OctocrabClient {
    let rest = Rest::new(
        "github",
        api_url,
        Auth::Bearer(SecretValue::new(format!(
            "t{}",
            uuid::Uuid::new_v4().simple()
        ))),
        RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
        },
        SanitizerHandle::new(TokenSanitizer::new().unwrap()),
    )
    .unwrap();
    OctocrabClient::new(Arc::new(rest))
}

/// A URL octocrab is asked for outside the configured API — another origin, or the API's host
/// under another path — never leaves: the stack refuses it with stet's own error.
#[tokio::test]
async fn a_url_outside_the_api_is_refused_by_the_stack_before_anything_is_sent() {
    let api = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .mount(&elsewhere)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .mount(&api)
        .await;
    let client = client(&format!("{}/api/v3", api.uri()));
    for url in [
        format!("{}/user", elsewhere.uri()),
        format!("{}/user", api.uri()),
        format!("{}/api/v3evil/user", api.uri()),
    ] {
        let error = client.octocrab._get(url.as_str()).await.unwrap_err();
        let forge = client.unwrapped(error);
        assert!(
            matches!(&forge, ForgeError::Protocol { detail, .. } if detail.contains("not under the configured API")),
            "{url}: {forge}"
        );
    }
    assert!(elsewhere.received_requests().await.unwrap().is_empty());
    assert!(api.received_requests().await.unwrap().is_empty());
    // Under the API, the same client sends.
    let reply = client.send(Method::GET, "/user", None).await.unwrap();
    assert_eq!(reply.status, http::StatusCode::OK);
    let received = api.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].url.path(), "/api/v3/user");
}

/// An error of stet's stack comes out of octocrab as the `ForgeError` it was, not as octocrab's
/// wrapper around it.
#[tokio::test]
async fn the_stacks_errors_come_back_as_forge_errors() {
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(ResponseTemplate::new(503).set_body_string(r#"{"message":"down"}"#))
        .mount(&api)
        .await;
    let Err(error) = client(&api.uri()).send(Method::GET, "/user", None).await else {
        panic!("a 503 that persists is an error");
    };
    assert!(
        matches!(
            &error,
            ForgeError::Server {
                status: 503,
                attempts: 2,
                ..
            }
        ),
        "{error}"
    );
}
