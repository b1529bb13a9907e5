use super::*;
use std::sync::Arc;

use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use crate::credential::SecretValue;

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
        SanitizerHandle::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap()),
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

fn quick_rest(uri: &str, max_attempts: u32) -> Rest {
    Rest::new(
        "github",
        uri,
        Auth::Bearer(SecretValue::new(format!(
            "t{}",
            uuid::Uuid::new_v4().simple()
        ))),
        RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
        },
        SanitizerHandle::new(stet_sanitize::sanitize::TokenSanitizer::new().unwrap()),
    )
    .unwrap()
}

/// An answer over the size bound would be as large the next time: it is asked for once, whether it
/// announces its length or streams without one.
#[tokio::test]
async fn an_answer_over_the_bound_is_final() {
    use wiremock::matchers::{any, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let oversized = "x".repeat(MAX_REPLY_BYTES + 1);
    Mock::given(any())
        .and(path("/announced"))
        .respond_with(ResponseTemplate::new(200).set_body_string(oversized.clone()))
        .mount(&server)
        .await;
    let rest = quick_rest(&server.uri(), 4);

    let err = rest
        .send(Method::GET, "/announced", None)
        .await
        .err()
        .unwrap();

    assert!(
        matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("longer than 8 MiB") && detail.contains("not asked for again")),
        "{err}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    // Streamed (chunked, no Content-Length): the bound is found while reading, and is final too.
    let (uri, connections) = serve_raw(|stream| async move {
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await?;
        let chunk = vec![b'x'; 64 * 1024];
        loop {
            stream
                .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await?;
            stream.write_all(&chunk).await?;
            stream.write_all(b"\r\n").await?;
        }
    })
    .await;
    let err = quick_rest(&uri, 4)
        .send(Method::GET, "/streamed", None)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("longer than 8 MiB")),
        "{err}"
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A forge that answers a byte at a time cannot stretch a request past its one deadline: the attempts
/// after the first get only what is left of it, and none starts once it has passed (with a time limit
/// per attempt only, four attempts would have taken four connections and four limits).
#[tokio::test]
async fn a_trickling_forge_meets_one_deadline_for_the_whole_request() {
    let (uri, connections) = serve_raw(|stream| async move {
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .await?;
        let mut interval = tokio::time::interval(Duration::from_millis(20));
        loop {
            interval.tick().await;
            stream.write_all(b"{").await?;
        }
    })
    .await;
    let mut rest = quick_rest(&uri, 4);
    rest.read_timeout = Duration::from_millis(700);
    rest.deadline = Duration::from_secs(1);

    let started = std::time::Instant::now();
    let err = rest
        .send(Method::GET, "/repos/o/r", None)
        .await
        .err()
        .unwrap();
    let took = started.elapsed();

    assert!(
        matches!(&err, ForgeError::Transport { detail, .. } if detail.contains("deadline of 1 s")),
        "{err}"
    );
    let made = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=2).contains(&made),
        "{made} connections within a deadline of 1 s"
    );
    assert!(
        took < Duration::from_millis(2500),
        "the request took {took:?} under a deadline of 1 s"
    );
}

/// A loopback listener that reads each request's head and hands the connection to `answer`; returns
/// its URL and how many connections it accepted.
async fn serve_raw<F, Fut>(answer: F) -> (String, Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send,
{
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let _ = answer(stream).await;
            });
        }
    });
    (uri, connections)
}

/// The REST clients keep the origin rule too: a redirect to another port, to another name for the same
/// address, or to another scheme is refused before any connection, so the token reaches no other
/// listener (the API's own listener sees every request under the name it was configured with).
#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_before_any_connection() {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let (elsewhere, connections) = serve_raw(|_stream| async { Ok(()) }).await;
    let elsewhere_port = elsewhere.rsplit(':').next().unwrap().to_owned();
    let server = MockServer::start().await;
    let port = server.address().port();
    for location in [
        format!("{elsewhere}/repos/o/r"),
        format!("http://localhost:{port}/repos/o/r"),
        format!("https://127.0.0.1:{elsewhere_port}/repos/o/r"),
        format!("//localhost:{port}/repos/o/r"),
    ] {
        server.reset().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(307).insert_header("location", location.as_str()))
            .mount(&server)
            .await;

        let err = quick_rest(&server.uri(), 4)
            .send(Method::GET, "/repos/o/r", None)
            .await
            .err()
            .unwrap();

        assert!(
            matches!(&err, ForgeError::Protocol { detail, .. } if detail.contains("another origin")),
            "{location}: {err}"
        );
        let requests = server.received_requests().await.unwrap();
        assert_eq!(requests.len(), 1, "{location}: asked once, never again");
        let host = requests[0].headers.get("host").unwrap().to_str().unwrap();
        assert_eq!(host, format!("127.0.0.1:{port}"), "{location}");
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the other listener was contacted"
    );
}

#[tokio::test]
async fn the_forge_client_reaches_an_api_behind_a_proxy_and_a_private_ca_with_the_token_inside_tls()
{
    use crate::https::rig::{ConnectProxy, Pki, TlsServer};
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "corp");
    let server = TlsServer::start(&pki).await;
    let proxy = ConnectProxy::start(false).await;
    let token = format!("t{}", uuid::Uuid::new_v4().simple());
    let api = format!("https://localhost:{}/api/v1", server.address.port());
    let mut rest = quick_rest(&api, 1);
    rest.auth = Auth::Token(SecretValue::new(token.clone()));
    let proxy_url = proxy.url();
    let env = move |name: &str| (name == "HTTPS_PROXY").then(|| proxy_url.clone().into());
    let network = crate::https::Network::from_env(&env, Arc::new(pki.ca())).unwrap();
    rest.client = crate::https::client_on(&network).unwrap();

    let reply = rest.send(Method::GET, "/repos/a/b", None).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        *server.authorizations.lock().unwrap(),
        [format!("token {token}")]
    );
    assert_eq!(proxy.heads.lock().unwrap().len(), 1);
    let carried = proxy.carried.lock().unwrap();
    assert!(!carried.is_empty());
    assert!(memchr::memmem::find(&carried, token.as_bytes()).is_none());
}
