//! The gateway reaches its upstream on the machine's network: through `HTTPS_PROXY` by a CONNECT
//! tunnel that carries the model key only inside TLS, to an endpoint a private CA vouches for.

use super::*;
use crate::https::Network;
use crate::https::rig::{ConnectProxy, Pki, TlsServer};

#[tokio::test]
async fn the_model_key_reaches_an_upstream_behind_a_proxy_and_a_private_ca_inside_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "corp");
    let upstream = TlsServer::start(&pki).await;
    let proxy = ConnectProxy::start(false).await;
    let proxy_url = proxy.url();
    let env = move |name: &str| (name == "https_proxy").then(|| proxy_url.clone().into());
    let network = Network::from_env(&env, Arc::new(pki.ca())).unwrap();
    let key = random_key();
    let socket = dir.path().join("model.sock");
    let base = format!("https://localhost:{}/v1", upstream.address.port());
    let (_gateway, _events) = Gateway::start_on(
        &socket,
        config(&base, &key, None, Duration::from_secs(20)),
        sanitizer(),
        &network,
    )
    .await
    .unwrap();

    let response = send(
        &socket,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_request("m"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        *upstream.authorizations.lock().unwrap(),
        [format!("Bearer {key}")]
    );
    let target = format!("localhost:{}", upstream.address.port());
    assert_eq!(
        *proxy.heads.lock().unwrap(),
        [format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
        )]
    );
    let carried = proxy.carried.lock().unwrap();
    assert!(!carried.is_empty());
    assert!(memchr::memmem::find(&carried, key.as_bytes()).is_none());
}
