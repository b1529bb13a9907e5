//! The one HTTPS client stet's own requests to a forge go out on — the REST clients' and the git
//! origin guard's — so both share one TLS configuration and one bound on connecting. Ground floor:
//! git and the forges stand on it.

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How long connecting to a forge may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP client every forge request goes out on, the REST clients' and the git origin guard's:
/// HTTP/1.1, TLS with the webpki roots, plain HTTP where the caller checked the URL allows it (to
/// loopback), and a bound on connecting.
pub(crate) fn https_client<B>() -> Client<HttpsConnector<HttpConnector>, B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).build(connector)
}
