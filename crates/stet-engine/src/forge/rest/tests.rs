use super::*;
use serde_json::json;

#[test]
fn backoff_doubles_up_to_the_cap() {
    let policy = RetryPolicy {
        max_attempts: 10,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(700),
    };
    let waits: Vec<u128> = (1..=5).map(|n| policy.backoff(n).as_millis()).collect();
    assert_eq!(waits, [100, 200, 400, 700, 700]);
    assert_eq!(policy.backoff(200), Duration::from_millis(700));
}

#[test]
fn retry_after_reads_seconds_and_dates() {
    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, "7".parse().unwrap());
    assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
    headers.insert(
        RETRY_AFTER,
        "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
    );
    assert_eq!(retry_after(&headers), Some(Duration::ZERO));
    headers.insert(RETRY_AFTER, "soon".parse().unwrap());
    assert_eq!(retry_after(&headers), None);
}

#[test]
fn urls_with_userinfo_are_refused() {
    assert!(web_url("github", "https://github.com", "git_url").is_ok());
    assert!(web_url("github", "https://user:pw@github.com", "git_url").is_err());
    assert!(web_url("github", "file:///tmp/x", "git_url").is_err());
    let err = web_url("github", "https://user:hunter2@github.com", "git_url").unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn error_entries_read_like_forges_write_them() {
    assert_eq!(
        error_entry(
            &json!({"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for o:b."})
        ),
        Some("A pull request already exists for o:b.".to_owned())
    );
    assert_eq!(
        error_entry(&json!({"resource": "PullRequest", "field": "head", "code": "invalid"})),
        Some("head: invalid".to_owned())
    );
    assert_eq!(error_entry(&json!("plain")), Some("plain".to_owned()));
    assert_eq!(error_entry(&json!(3)), None);
}

#[test]
fn origins_compare_scheme_host_and_port_without_case() {
    let of = |url: &str| Origin::of(&url.parse::<Uri>().unwrap()).unwrap();
    assert_eq!(
        of("https://API.github.com/x"),
        of("https://api.github.com/y")
    );
    assert_ne!(of("https://api.github.com"), of("http://api.github.com"));
    assert_ne!(
        of("https://api.github.com"),
        of("https://api.github.com:8443")
    );
    assert_ne!(
        of("https://api.github.com"),
        of("https://api.github.com.evil")
    );
}

/// A server that answers every request just within the time limit, each time with a redirect within
/// the origin, cannot stretch one attempt to a time limit per redirect: the attempt as a whole has
/// one (with one per request, four attempts of six requests could hold a call for 24 minutes).
#[tokio::test]
async fn one_time_limit_covers_an_attempt_and_all_its_redirects() {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(302)
                .insert_header("location", "/again")
                .set_delay(Duration::from_millis(400)),
        )
        .mount(&server)
        .await;
    let mut rest = Rest::new(
        "github",
        &server.uri(),
        Auth::Bearer(SecretValue::new(format!(
            "t{}",
            uuid::Uuid::new_v4().simple()
        ))),
        RetryPolicy {
            max_attempts: 1,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
        },
        SanitizerHandle::new(crate::dispatch::sanitize::TokenSanitizer::new().unwrap()),
    )
    .unwrap();
    rest.read_timeout = Duration::from_secs(1);

    let err = rest
        .send(Method::GET, "/repos/o/r", None)
        .await
        .err()
        .unwrap();

    assert!(
        matches!(&err, ForgeError::Transport { detail, .. } if detail.contains("no answer within 1 s")),
        "{err}"
    );
    let asked = server.received_requests().await.unwrap().len();
    assert!(
        asked <= 3,
        "{asked} requests in an attempt of 1 s whose answers each took 0.4 s"
    );
}
#[test]
fn refs_are_encoded_per_segment() {
    assert_eq!(ref_path("feature/x#1").unwrap(), "feature/x%231");
    assert_eq!(ref_path("a b/c?d").unwrap(), "a%20b/c%3Fd");
    assert_eq!(ref_path("release/1.x").unwrap(), "release/1.x");
    assert_eq!(ref_path("ü").unwrap(), "%C3%BC");
    for bad in ["", "a//b", "../x", "a/./b", "a/"] {
        assert!(ref_path(bad).is_none(), "{bad:?}");
    }
}

#[test]
fn gitlabs_error_bodies_are_read_in_each_of_their_shapes() {
    let parts = |body: serde_json::Value| {
        serde_json::from_value::<ErrorBody>(body)
            .unwrap()
            .parts()
            .join("; ")
    };
    assert_eq!(
        parts(
            json!({"message": ["Another open merge request already exists for this source branch: !7"]})
        ),
        "Another open merge request already exists for this source branch: !7"
    );
    assert_eq!(
        parts(
            json!({"message": {"expires_at": ["must be in the future"], "name": ["is too long"]}})
        ),
        "expires_at: must be in the future; name: is too long"
    );
    assert_eq!(
        parts(
            json!({"error": "insufficient_scope", "error_description": "The request requires higher privileges than provided by the access token."})
        ),
        "The request requires higher privileges than provided by the access token."
    );
    assert_eq!(parts(json!({"error": "invalid_token"})), "invalid_token");
    assert_eq!(
        parts(json!({"errors": null, "message": "The target couldn't be found."})),
        "The target couldn't be found."
    );
    assert_eq!(
        parts(json!({"message": "Validation Failed", "errors": [{"message": "head is invalid"}]})),
        "Validation Failed; head is invalid"
    );
}
