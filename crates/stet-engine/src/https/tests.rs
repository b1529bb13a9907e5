//! The network every HTTPS client shares, proved against a loopback CONNECT proxy that records what
//! it carries and a server whose certificate a CA made for the test signed.

use std::ffi::OsString;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use super::rig::{ConnectProxy, Pki, TlsServer};
use super::*;
use crate::error_chain::error_chain;

/// An environment holding only `pairs`.
fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<OsString> {
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| OsString::from(value))
    }
}

fn network(pairs: Vec<(&'static str, String)>, roots: Vec<CertificateDer<'static>>) -> Network {
    Network::from_env(&env_of(pairs), Arc::new(roots)).unwrap()
}

/// A token made for this test run.
fn token() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

/// `GET url` with `Authorization: Bearer <token>` on `network`: the body, or the error's chain.
async fn get(network: &Network, url: &str, token: &str) -> Result<String, String> {
    let client: HttpsClient<Full<Bytes>> = client_on(network).unwrap();
    let request = Request::get(url)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::default())
        .unwrap();
    let response = client
        .request(request)
        .await
        .map_err(|err| error_chain(&err))?;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_token_reaches_the_server_through_the_proxy_and_the_proxy_never_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "corp");
    let server = TlsServer::start(&pki).await;
    for variable in ["HTTPS_PROXY", "https_proxy"] {
        let proxy = ConnectProxy::start(false).await;
        let net = network(vec![(variable, proxy.url())], pki.ca());
        let token = token();
        let url = format!("https://localhost:{}/repos/a/b", server.address.port());
        assert_eq!(get(&net, &url, &token).await.unwrap(), "{\"ok\":true}");

        assert_eq!(
            server.authorizations.lock().unwrap().last(),
            Some(&format!("Bearer {token}"))
        );
        let target = format!("localhost:{}", server.address.port());
        assert_eq!(
            *proxy.heads.lock().unwrap(),
            [format!(
                "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
            )],
            "{variable}: the proxy is asked for a tunnel and told nothing else"
        );
        let carried = proxy.carried.lock().unwrap();
        assert!(
            carried.len() > 500,
            "the TLS exchange went through the proxy"
        );
        for clear in [token.as_bytes(), b"uthorization", b"/repos/a/b"] {
            assert!(
                memchr::memmem::find(&carried, clear).is_none(),
                "{variable}: the proxy saw {:?} in the clear",
                String::from_utf8_lossy(clear)
            );
        }
    }
}

#[tokio::test]
async fn no_proxy_names_the_hosts_reached_straight() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "corp");
    let server = TlsServer::start(&pki).await;
    let proxy = ConnectProxy::start(true).await;
    let url = format!("https://localhost:{}/x", server.address.port());
    for (variable, list) in [
        ("NO_PROXY", "example.com, localhost"),
        ("no_proxy", ".example.com,127.0.0.0/8,LOCALHOST:443"),
        ("NO_PROXY", "*"),
    ] {
        let net = network(
            vec![("HTTPS_PROXY", proxy.url()), (variable, list.to_owned())],
            pki.ca(),
        );
        assert_eq!(
            get(&net, &url, &token()).await.as_deref(),
            Ok("{\"ok\":true}"),
            "{variable}={list}"
        );
    }
    assert!(proxy.heads.lock().unwrap().is_empty());
    // A list that does not name the host leaves it to the proxy, which refuses here.
    let net = network(
        vec![
            ("HTTPS_PROXY", proxy.url()),
            ("NO_PROXY", "localhost.example.com,10.0.0.0/8".to_owned()),
        ],
        pki.ca(),
    );
    let error = get(&net, &url, &token()).await.unwrap_err();
    assert!(
        error.contains(&format!(
            "the proxy {} (from HTTPS_PROXY) did not open a tunnel to localhost:{}: it answered \"HTTP/1.1 403 Forbidden\"",
            proxy.address,
            server.address.port()
        )),
        "{error}"
    );
}

#[tokio::test]
async fn plain_http_to_loopback_never_goes_through_the_proxy() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_string("plain"))
        .mount(&server)
        .await;
    let proxy = ConnectProxy::start(false).await;
    let net = network(vec![("HTTPS_PROXY", proxy.url())], Vec::new());
    assert_eq!(
        get(&net, &server.uri(), &token()).await.as_deref(),
        Ok("plain")
    );
    assert!(proxy.heads.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_server_whose_certificate_is_not_under_a_trusted_ca_is_refused_before_the_token_is_sent()
{
    let dir = tempfile::tempdir().unwrap();
    let corp = Pki::new(dir.path(), "corp");
    let other = Pki::new(dir.path(), "other");
    let stranger = TlsServer::start(&other).await;
    let proxy = ConnectProxy::start(false).await;
    for net in [
        network(vec![], corp.ca()),
        network(vec![("HTTPS_PROXY", proxy.url())], corp.ca()),
    ] {
        let url = format!("https://localhost:{}/x", stranger.address.port());
        let error = get(&net, &url, &token()).await.unwrap_err();
        assert!(
            error.contains("invalid peer certificate: UnknownIssuer"),
            "{error}"
        );
    }
    assert!(stranger.authorizations.lock().unwrap().is_empty());
    // Without the bundle, a server under the private CA is refused too: the bundle is what trusts it.
    let server = TlsServer::start(&corp).await;
    let url = format!("https://localhost:{}/x", server.address.port());
    let error = get(&network(vec![], Vec::new()), &url, &token())
        .await
        .unwrap_err();
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(server.authorizations.lock().unwrap().is_empty());
}

#[test]
fn a_hostile_proxy_variable_is_an_error_naming_it_that_never_shows_its_value() {
    let secret = format!("s{}", uuid::Uuid::new_v4().simple());
    for (variable, value, problem) in [
        (
            "HTTPS_PROXY",
            format!("http://proxy:3128\r\nX-Injected: {secret}"),
            "holds a space, a control character",
        ),
        ("https_proxy", format!("socks5://{secret}:1080"), "SOCKS"),
        (
            "HTTPS_PROXY",
            format!("https://u:{secret}@proxy:3128"),
            "https:// proxy",
        ),
        (
            "HTTPS_PROXY",
            format!("ftp://{secret}"),
            "a scheme other than http://",
        ),
        (
            "HTTPS_PROXY",
            format!("http://u:{secret}@proxy:3128/x"),
            "a path",
        ),
        (
            "HTTPS_PROXY",
            format!("http://proxy:3128?{secret}"),
            "a query",
        ),
        (
            "HTTPS_PROXY",
            format!("http://u:{secret}@"),
            "does not name a host",
        ),
        (
            "HTTPS_PROXY",
            format!("http://{secret}_x:3128"),
            "does not name a host",
        ),
        ("HTTPS_PROXY", "http://proxy:0".to_owned(), "port 0"),
        (
            "HTTPS_PROXY",
            "http://proxy:99999".to_owned(),
            "a port past 65535",
        ),
        (
            "HTTPS_PROXY",
            format!("http://{secret}@proxy:3128"),
            "no password",
        ),
        (
            "HTTPS_PROXY",
            format!("http://proxy:3128/\u{202e}{secret}"),
            "outside ASCII",
        ),
    ] {
        let error =
            match Network::from_env(&env_of(vec![(variable, value.clone())]), Arc::default()) {
                Ok(network) => panic!("{value:?} was taken: {network:?}"),
                Err(error) => error.to_string(),
            };
        assert!(
            error.starts_with(&format!(
                "the environment variable {variable} is not an HTTP proxy's URL: it "
            )) && error.contains(problem)
                && error.ends_with(
                    "set it to http://host:port (a proxy that tunnels with CONNECT) or unset it"
                ),
            "{value:?}: {error}"
        );
        assert!(!error.contains(&secret), "{value:?}: {error}");
    }
}

#[tokio::test]
async fn a_proxy_url_with_a_user_and_password_authenticates_to_the_proxy_only() {
    let proxy = ConnectProxy::start(true).await;
    let url = format!("http://ops:p%40ss@{}/", proxy.address);
    let net = network(vec![("HTTPS_PROXY", url)], Vec::new());
    let error = get(&net, "https://forge.test:8443/x", &token())
        .await
        .unwrap_err();
    assert!(
        !error.contains("p@ss") && !error.contains("b3BzOnBAc3M"),
        "{error}"
    );
    assert_eq!(
        *proxy.heads.lock().unwrap(),
        [
            "CONNECT forge.test:8443 HTTP/1.1\r\nHost: forge.test:8443\r\nProxy-Authorization: Basic b3BzOnBAc3M=\r\n\r\n"
        ]
    );
    assert!(!format!("{net:?}").contains("b3BzOnBAc3M"));
}

#[test]
fn no_proxy_matches_names_under_a_domain_addresses_and_networks() {
    let list = NoProxy::parse(".corp.example, git.test:8443 , 10.0.0.0/8, ::1, [fd00::]/8");
    for host in [
        "corp.example",
        "forge.corp.example",
        "GIT.test",
        "git.test.",
        "10.1.2.3",
        "[::1]",
        "[fd12::1]",
    ] {
        assert!(list.bypasses(host), "{host}");
    }
    for host in [
        "xcorp.example",
        "corp.example.org",
        "test",
        "11.0.0.1",
        "[::2]",
        "127.0.0.1",
    ] {
        assert!(!list.bypasses(host), "{host}");
    }
    assert!(NoProxy::parse("*").bypasses("anything.example"));
    assert!(!NoProxy::parse("").bypasses("anything.example"));
}

#[test]
fn a_ca_bundle_that_cannot_serve_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "# nothing here\n").unwrap();
    let broken = dir.path().join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::write(&huge, vec![b'#'; 5 * 1024 * 1024]).unwrap();
    for (path, problem) in [
        (&missing, "cannot be read"),
        (&empty, "holds no certificate"),
        (&broken, "is not a PEM file of certificates"),
        (&huge, "is larger than 4 MiB"),
    ] {
        let error = read_ca_bundle(path).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("network.ca_bundle {}: {problem}", path.display())),
            "{error}"
        );
    }
    let pki = Pki::new(dir.path(), "corp");
    assert_eq!(read_ca_bundle(&pki.ca_pem).unwrap(), pki.ca());
}

#[tokio::test]
async fn a_proxy_that_cannot_be_reached_is_named_with_its_variable() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let net = network(vec![("https_proxy", format!("{address}"))], Vec::new());
    let error = get(&net, "https://forge.test/x", &token())
        .await
        .unwrap_err();
    assert!(
        error.contains(&format!(
            "the proxy {address} (from https_proxy) could not be reached: "
        )),
        "{error}"
    );
}
