//! Git over HTTPS through the egress proxy (issue 30), against the real Docker engine: the sandbox
//! image's own git clones and fetches from a smart-HTTP server (the real `git http-backend`) on the
//! test's loopback whose certificate a private CA, made at test time with openssl, signed. The
//! sandbox trusts that CA only because `[network] sandbox_ca_bundle` gave it to it: the same git
//! without the variables stet sets refuses the server. The image is the real dispatch image
//! (`build-offline`, this build's stet inside), whose git is Debian's; the loopback override is on,
//! as for every egress suite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::egress::{egress_events, output_of};
use super::git_http::GitHttpServer;
use super::headless::{Project, docker_ready, run, scenario};

/// A private certificate authority and a server certificate for `localhost` it signed, as files.
struct Pki {
    ca: PathBuf,
    server: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let file = |name: &str| dir.join(name);
        let (ca_key, ca, key, csr, server, ext) = (
            file("ca.key"),
            file("ca.pem"),
            file("server.key"),
            file("server.csr"),
            file("server.pem"),
            file("ext.cnf"),
        );
        std::fs::write(
            &ext,
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let at = |path: &PathBuf| path.to_str().unwrap().to_owned();
        let new_key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        openssl(&[
            &["req", "-x509"][..],
            &new_key,
            &["-keyout", &at(&ca_key), "-out", &at(&ca), "-days", "2"],
            &["-subj", "/CN=stet egress test CA"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]);
        openssl(&[
            &["req"][..],
            &new_key,
            &[
                "-keyout",
                &at(&key),
                "-out",
                &at(&csr),
                "-subj",
                "/CN=localhost",
            ],
        ]);
        openssl(&[
            &["x509", "-req", "-days", "2", "-CAcreateserial"][..],
            &["-in", &at(&csr), "-CA", &at(&ca), "-CAkey", &at(&ca_key)],
            &["-extfile", &at(&ext), "-out", &at(&server)],
        ]);
        Pki { ca, server, key }
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let chain = CertificateDer::pem_file_iter(&self.server)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&self.key).unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// `openssl` with its arguments in groups; fails the test with its stderr.
fn openssl(groups: &[&[&str]]) {
    let output = Command::new("openssl")
        .args(groups.concat())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openssl {groups:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// git on the host, failing the test with its stderr.
fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_sandboxs_git_clones_and_fetches_over_https_trusting_only_the_ca_it_was_given() {
    git_trusts_only_the_ca_it_was_given(None);
}

/// In copy mode no socket directory is mounted: the certificate authorities go in with the outputs
/// and the egress channel rides the relay's exec stream.
#[test]
fn in_copy_mode_the_sandboxs_git_trusts_the_ca_it_was_given_over_the_stream() {
    git_trusts_only_the_ca_it_was_given(Some("\n[runtime]\nmounts = \"copy\"\n"));
}

/// The sandbox's git clones, fetches, and is refused without the CA variables, with `config` added
/// to the user's configuration.
fn git_trusts_only_the_ca_it_was_given(config: Option<&str>) {
    docker_ready();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let server = GitHttpServer::start_tls(
        &dir.path().join("repos"),
        Arc::new(|_, _, _| true),
        pki.acceptor(),
    );
    let bare = server.create_bare("octo/lib");
    let value = format!("library-{}", uuid::Uuid::new_v4().simple());
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("value.txt"), &value).unwrap();
    git(&work, &["add", "value.txt"]);
    git(&work, &["commit", "-q", "-m", "value"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);

    let port = server.address().port();
    // The server asks every request for a credential; git sends the URL's.
    let url = format!("https://stet:any@localhost:{port}/octo/lib.git");
    // NO_PROXY keeps `localhost` direct in the sandbox, where nothing listens: lifted for git.
    let git_in = "env -u NO_PROXY -u no_proxy git";
    let project = Project::new(&scenario(&[
        &format!(
            "run = [\"/bin/sh\", \"-c\", \"{git_in} clone -q {url} /tmp/lib && echo cloned: $(cat /tmp/lib/value.txt)\"]"
        ),
        &format!(
            "run = [\"/bin/sh\", \"-c\", \"{git_in} -C /tmp/lib fetch -q origin && echo fetched: $(git -C /tmp/lib rev-parse origin/main)\"]"
        ),
        // Without the variables stet sets, git trusts only the image's roots: refused.
        &format!(
            "run = [\"/bin/sh\", \"-c\", \"env -u GIT_SSL_CAINFO -u SSL_CERT_FILE -u CURL_CA_BUNDLE {git_in} ls-remote {url} || echo untrusted: refused\"]"
        ),
        "finish = \"Cloned the library.\"",
    ]));
    project.allow_egress(
        &[format!("localhost:{port}")],
        &format!("sandbox_ca_bundle = {:?}\n", pki.ca.display().to_string()),
    );
    // The real dispatch image, whose git is Debian's.
    project.home.add_user_config(&format!(
        "\n[dispatch]\nimage = \"{}\"\n",
        super::live::live_image("openhands")
    ));
    if let Some(config) = config {
        project.home.add_user_config(config);
    }
    let finished = run(project.headless(&[]));
    assert_eq!(finished.code(), Some(0), "{finished:#?}");
    let output = output_of(&finished);
    assert!(
        output.contains(&format!("cloned: {value}")),
        "{output}{finished:#?}"
    );
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&bare)
            .args(["rev-parse", "main"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        output.contains(&format!("fetched: {}", head.trim())),
        "{output}"
    );
    assert!(
        output.contains("server certificate verification failed")
            || output.contains("certificate verify failed")
            || output.contains("SSL certificate problem"),
        "{output}"
    );
    assert!(output.contains("untrusted: refused"), "{output}");
    // Every request went through the proxy's tunnels, by name, to the server.
    let egress = egress_events(&finished.events);
    assert!(egress.len() >= 3, "{egress:#?}");
    assert!(
        egress
            .iter()
            .all(|(host, at, allowed, _)| host == "localhost" && *at == port && *allowed),
        "{egress:#?}"
    );
    let services: Vec<String> = server
        .presented()
        .iter()
        .map(|presented| presented.request.clone())
        .collect();
    assert!(
        services
            .iter()
            .any(|request| request.starts_with("POST /octo/lib.git/git-upload-pack")),
        "{services:#?}"
    );
    finished.torn_down_cleanly();
}
