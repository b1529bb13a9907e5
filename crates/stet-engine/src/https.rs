//! The one HTTPS client stet's own requests go out on — the forge REST clients', the git origin
//! guard's and the model gateway's upstream — so all share one TLS configuration (the webpki roots and
//! the machine's CA bundle, `network.ca_bundle`), one proxy rule (`HTTPS_PROXY`/`NO_PROXY`, through
//! CONNECT: what stet sends travels inside TLS to the destination, never in the clear to the proxy)
//! and one bound on connecting. Ground floor: git, the forges and the gateway stand on it.

mod proxy;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

pub(crate) use proxy::{Connector, ProxyError};
use proxy::{NoProxy, Proxy};

/// How long connecting to a forge, a model endpoint or a proxy may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest CA bundle read; a bundle of every public root is about 250 KiB.
const MAX_BUNDLE_BYTES: u64 = 4 * 1024 * 1024;

/// The proxy variables, in the order they are read: the lower-case spelling wins, as with curl.
const PROXY_VARIABLES: [&str; 2] = ["https_proxy", "HTTPS_PROXY"];
/// The bypass variables, in the order they are read.
const NO_PROXY_VARIABLES: [&str; 2] = ["no_proxy", "NO_PROXY"];

/// The CA certificates of `network.ca_bundle`, trusted besides the webpki roots by every client made
/// after they were installed ([`install_machine_roots`]).
static MACHINE_ROOTS: RwLock<Option<Arc<Vec<CertificateDer<'static>>>>> = RwLock::new(None);

/// Why an HTTPS client could not be made the way the machine's settings ask.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpsError {
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("network.ca_bundle {}: {problem}", path.display())]
    CaBundle { path: PathBuf, problem: String },
    #[error("the TLS configuration could not be built: {detail}")]
    Tls { detail: String },
}

/// What the machine says about reaching an HTTPS server: through which proxy (and which hosts not),
/// and which certificate authorities besides the webpki roots.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    proxy: Option<Arc<Proxy>>,
    no_proxy: Arc<NoProxy>,
    extra_roots: Arc<Vec<CertificateDer<'static>>>,
}

impl Network {
    /// The process's environment and the installed CA bundle.
    pub(crate) fn current() -> Result<Network, HttpsError> {
        let roots = MACHINE_ROOTS
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .unwrap_or_default();
        Network::from_env(&|name| std::env::var_os(name), roots)
    }

    /// The proxy and bypass variables `env` finds (an empty one counts as unset), with
    /// `extra_roots` trusted besides the webpki roots. A proxy variable that is not an HTTP proxy's
    /// URL is an error naming the variable.
    pub(crate) fn from_env(
        env: &dyn Fn(&str) -> Option<OsString>,
        extra_roots: Arc<Vec<CertificateDer<'static>>>,
    ) -> Result<Network, HttpsError> {
        let first = |names: [&'static str; 2]| {
            names.into_iter().find_map(|name| {
                env(name)
                    .filter(|value| !value.is_empty())
                    .map(|value| (name, value))
            })
        };
        let proxy = match first(PROXY_VARIABLES) {
            None => None,
            Some((variable, value)) => Some(Arc::new(Proxy::parse(variable, &value)?)),
        };
        let no_proxy = first(NO_PROXY_VARIABLES)
            .map(|(_, value)| NoProxy::parse(&value.to_string_lossy()))
            .unwrap_or_default();
        Ok(Network {
            proxy,
            no_proxy: Arc::new(no_proxy),
            extra_roots,
        })
    }

    /// The connector every client of this network goes out on: HTTP/1.1, TLS with the webpki roots
    /// and the extra ones, plain HTTP where the caller checked the URL allows it (to loopback, never
    /// through the proxy), and a bound on connecting.
    pub(crate) fn connector(&self) -> Result<HttpsConnector<Connector>, HttpsError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.enforce_http(false);
        let connector = Connector::new(http, self.proxy.clone(), Arc::clone(&self.no_proxy));
        Ok(hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.tls_config()?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector))
    }

    /// A TCP connection to `address`, the checked address of the host `name`: straight there, or,
    /// when the machine's proxy (`HTTPS_PROXY`) covers `name` and the address (`NO_PROXY` names
    /// neither), through a tunnel the proxy opens to that very address, so the proxy resolves
    /// nothing of its own.
    pub(crate) async fn dial(
        &self,
        name: &str,
        address: std::net::SocketAddr,
    ) -> Result<tokio::net::TcpStream, String> {
        let through = self.proxy.as_ref().filter(|_| {
            !self.no_proxy.bypasses(name) && !self.no_proxy.bypasses(&address.ip().to_string())
        });
        let Some(proxy) = through else {
            return tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(address))
                .await
                .map_err(|_| {
                    format!(
                        "connecting to {address} took over {}s",
                        CONNECT_TIMEOUT.as_secs()
                    )
                })?
                .map_err(|err| format!("connecting to {address} failed: {err}"));
        };
        proxy
            .tunnel(&address.to_string())
            .await
            .map_err(|err| err.to_string())
    }

    /// TLS 1.2 and 1.3 with ring, trusting the webpki roots and the extra ones.
    fn tls_config(&self) -> Result<ClientConfig, HttpsError> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for certificate in self.extra_roots.iter() {
            roots
                .add(certificate.clone())
                .map_err(|err| HttpsError::Tls {
                    detail: format!("a CA certificate cannot be trusted: {err}"),
                })?;
        }
        Ok(
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|err| HttpsError::Tls {
                    detail: err.to_string(),
                })?
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

/// The HTTP client type every forge request goes out on.
pub(crate) type HttpsClient<B> = Client<HttpsConnector<Connector>, B>;

/// The HTTP client every forge request goes out on, the REST clients' and the git origin guard's, on
/// the machine's [`Network`].
pub(crate) fn https_client<B>() -> Result<HttpsClient<B>, HttpsError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    client_on(&Network::current()?)
}

/// [`https_client`] on a given network.
pub(crate) fn client_on<B>(network: &Network) -> Result<HttpsClient<B>, HttpsError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    Ok(Client::builder(TokioExecutor::new()).build(network.connector()?))
}

/// The CA certificates of the PEM file at `path` (`network.ca_bundle`), each one checked as a trust
/// anchor: a file that cannot be read, is larger than 4 MiB, or holds no certificate is an error
/// naming it.
pub(crate) fn read_ca_bundle(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpsError> {
    read_ca_file(path)
        .map(|(_, certificates)| certificates)
        .map_err(|problem| HttpsError::CaBundle {
            path: path.to_owned(),
            problem,
        })
}

/// The PEM file of certificate authorities at `path` as read, and its certificates, each one
/// checked as a trust anchor; otherwise what is wrong with it (unreadable, larger than 4 MiB, no
/// certificate, one that cannot be an anchor).
pub(crate) fn read_ca_file(path: &Path) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), String> {
    let file = std::fs::File::open(path).map_err(|err| format!("cannot be read: {err}"))?;
    let mut pem = Vec::new();
    file.take(MAX_BUNDLE_BYTES + 1)
        .read_to_end(&mut pem)
        .map_err(|err| format!("cannot be read: {err}"))?;
    if pem.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(format!(
            "is larger than {} MiB",
            MAX_BUNDLE_BYTES / (1024 * 1024)
        ));
    }
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| format!("is not a PEM file of certificates: {err}"))?;
    if certificates.is_empty() {
        return Err("holds no certificate (-----BEGIN CERTIFICATE----- blocks)".to_owned());
    }
    let mut check = RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        check
            .add(certificate.clone())
            .map_err(|err| format!("certificate {} cannot be a trust anchor: {err}", index + 1))?;
    }
    Ok((pem, certificates))
}

/// Makes `roots` (the machine's CA bundle, none for `None`) trusted by every HTTPS client made from
/// now on, besides the webpki roots.
pub(crate) fn install_machine_roots(roots: Option<Vec<CertificateDer<'static>>>) {
    *MACHINE_ROOTS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = roots.map(Arc::new);
}

#[cfg(test)]
pub(crate) mod rig;
#[cfg(test)]
mod tests;
