//! Which engine stet talks to and where (`[runtime] engine` and `host`, else `DOCKER_HOST` and the
//! docker CLI's current context, else the engine's usual socket), and how (a unix socket, plain TCP,
//! or TCP with mutual TLS as `DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH` say): the docker CLI's rules,
//! in one place, so the dispatch, the sweep and the doctor reach the same engine.

use std::path::{Path, PathBuf};

use super::MountMode;

crate::kinds::kinds! {
    /// Which engine serves the Docker Engine API stet speaks.
    pub enum Engine {
        /// The Docker Engine (`dockerd`).
        #[default]
        Docker = "docker",
        /// Podman's Docker-compatible API service (`podman system service`).
        Podman = "podman",
    }
}

impl Engine {
    /// Its name in prose.
    pub fn display_name(self) -> &'static str {
        match self {
            Engine::Docker => "Docker",
            Engine::Podman => "Podman",
        }
    }
}

/// Where the Docker client connects when nothing else says.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";
/// Rootful Podman's API socket.
pub const PODMAN_ROOTFUL_HOST: &str = "unix:///run/podman/podman.sock";

/// Why no endpoint could be made of what the configuration or the environment says.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum EndpointError {
    #[error(
        "{host:?} is not an engine address stet can use: {problem} (use unix:///path/to.sock, tcp://host:port, https://host:port or ssh://[user@]host[:port])"
    )]
    Host { host: String, problem: &'static str },
    #[error(
        "{variable}={value:?} but the TLS file {} cannot be read: {detail}",
        .path.display()
    )]
    TlsFile {
        variable: &'static str,
        value: String,
        path: PathBuf,
        detail: String,
    },
    #[error(
        "{host} is plain TCP to another machine: whoever is on the way can read the credentials stet hands a sandbox and drive the engine as root; set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (or use https://)"
    )]
    PlainTcp { host: String },
    #[error(
        "rootless Podman's socket is under $XDG_RUNTIME_DIR, which is not set: set it (or [runtime] host)"
    )]
    NoRuntimeDir,
    #[error(
        "[runtime] mounts = \"bind\" cannot work with {} at {host} (chosen by {chosen_by}): a bind mount names a path on the engine's own machine, and a remote engine does not see stet's directories; set mounts = \"copy\", or remove the setting (copy is the default for an engine that is not a local socket)",
        .engine.display_name()
    )]
    BindOnRemote {
        engine: Engine,
        host: String,
        chosen_by: String,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, EndpointError>;

/// The client certificate files of a TLS connection (`ca.pem`, `cert.pem`, `key.pem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The directory holding them (`DOCKER_CERT_PATH`, else `~/.docker`).
    pub directory: PathBuf,
}

impl TlsFiles {
    /// The certificate authority the engine's certificate must chain to.
    pub fn ca(&self) -> PathBuf {
        self.directory.join("ca.pem")
    }
    /// stet's client certificate.
    pub fn cert(&self) -> PathBuf {
        self.directory.join("cert.pem")
    }
    /// stet's client key.
    pub fn key(&self) -> PathBuf {
        self.directory.join("key.pem")
    }
}

/// Where and how to reach the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Which engine it is meant to be.
    pub engine: Engine,
    /// The address, as the docker CLI writes it (`unix://…`, `tcp://…`).
    pub host: String,
    /// Mutual TLS, when the address is TCP and TLS is asked for.
    pub tls: Option<TlsFiles>,
    /// What chose the address (`[runtime] host`, `DOCKER_HOST`, `docker context "x"`, `default`).
    pub chosen_by: String,
}

/// How long `ssh` may take to reach an engine's host and hear its banner, in seconds.
pub const SSH_CONNECT_TIMEOUT_SECS: u32 = 15;

/// An engine reached over SSH (`ssh://[user@]host[:port]`), as the docker CLI reaches one: the
/// user's own `ssh` runs `docker system dial-stdio` on the host, and the API goes over its
/// stdin and stdout. The user's SSH configuration, agent and known hosts apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// The login name, when the address gives one (else SSH's configuration decides).
    pub user: Option<String>,
    /// The host name or address, as SSH takes it (its configuration may alias it).
    pub host: String,
    /// The port, when the address gives one.
    pub port: Option<u16>,
}

impl SshTarget {
    /// Reads `ssh://[user@]host[:port]`; no path, and nothing SSH could read as an option.
    pub fn parse(address: &str) -> std::result::Result<SshTarget, &'static str> {
        let rest = address
            .strip_prefix("ssh://")
            .ok_or("an SSH address starts with ssh://")?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err("an SSH address has no path (the engine's socket is the host's default)");
        }
        let (user, authority) = match rest.rsplit_once('@') {
            Some((user, authority)) => (Some(user), authority),
            None => (None, rest),
        };
        let port_of = |port: &str| {
            port.parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or("an SSH port is a number from 1 to 65535")
        };
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or("an SSH address's [ has no ]")?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port_of(port)?)),
                None if after.is_empty() => (host, None),
                None => return Err("an SSH address has nothing but a port after ]"),
            }
        } else {
            match authority.split_once(':') {
                Some((host, port)) if !port.contains(':') => (host, Some(port_of(port)?)),
                _ => (authority, None),
            }
        };
        let plain = |text: &str| {
            !text.is_empty()
                && !text.starts_with('-')
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
        };
        if !plain(host) {
            return Err(
                "an SSH host is a name or address of letters, digits, '.', '-', '_' and ':', not starting with '-'",
            );
        }
        if let Some(user) = user
            && (!plain(user) || user.contains(':'))
        {
            return Err("an SSH user is letters, digits, '.', '-' and '_', not starting with '-'");
        }
        Ok(SshTarget {
            user: user.map(str::to_owned),
            host: host.to_owned(),
            port,
        })
    }

    /// The arguments for `ssh` that run `docker system dial-stdio` on the host: no terminal, no
    /// prompt (a password asked for would write over the terminal stet draws), a bounded wait for
    /// the host (an `ssh` still connecting when stet is killed would otherwise outlive it; once
    /// connected it ends with its stdin), the destination after `--`.
    pub fn dial_stdio_args(&self) -> Vec<String> {
        let mut args = [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            &format!("ConnectTimeout={SSH_CONNECT_TIMEOUT_SECS}"),
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(user) = &self.user {
            args.extend(["-l".to_owned(), user.clone()]);
        }
        if let Some(port) = self.port {
            args.extend(["-p".to_owned(), port.to_string()]);
        }
        args.extend(["--", &self.host, "docker", "system", "dial-stdio"].map(str::to_owned));
        args
    }
}

impl Endpoint {
    /// The SSH destination, for an `ssh://` address.
    pub fn ssh(&self) -> Option<SshTarget> {
        SshTarget::parse(&self.host).ok()
    }

    /// Whether the engine is reached over the network rather than a local socket.
    pub fn is_remote(&self) -> bool {
        !self.host.starts_with("unix://")
    }

    /// How the workspace and the outputs reach a sandbox on this engine: `configured` (`[runtime]
    /// mounts`) when set, else bind mounts for a local socket and copies for anything else (a TCP
    /// engine, a docker context's remote one), whose machine does not see stet's directories.
    /// Bind mounts asked of a remote engine are refused: they would name paths it cannot see.
    pub fn mounts(&self, configured: Option<MountMode>) -> Result<MountMode> {
        match (configured, self.is_remote()) {
            (Some(MountMode::Bind), true) => Err(EndpointError::BindOnRemote {
                engine: self.engine,
                host: self.host.clone(),
                chosen_by: self.chosen_by.clone(),
            }),
            (Some(mode), _) => Ok(mode),
            (None, false) => Ok(MountMode::Bind),
            (None, true) => Ok(MountMode::Copy),
        }
    }

    /// The unix socket's path, for a local endpoint.
    pub fn socket(&self) -> Option<&Path> {
        self.host.strip_prefix("unix://").map(Path::new)
    }
}

/// Which engine a container lives on, as the journal records it, so a sweep after a crash reclaims
/// it there whatever the configuration says by then.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct EngineLocation {
    /// The engine's name in configuration (`docker`, `podman`).
    pub engine: String,
    /// Its address (`unix://…`, `tcp://…`).
    pub host: String,
}

impl std::fmt::Display for EngineLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.engine, self.host)
    }
}

impl Endpoint {
    /// Where this endpoint's containers live, for the journal.
    pub fn location(&self) -> EngineLocation {
        EngineLocation {
            engine: self.engine.as_str().to_owned(),
            host: self.host.clone(),
        }
    }
}

/// Checks an address as the configuration gives it (`[runtime] host`).
pub fn check_host(host: &str) -> Result<()> {
    let problem = |problem| EndpointError::Host {
        host: host.to_owned(),
        problem,
    };
    if let Some(path) = host.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return Err(problem("a unix socket's path must be absolute"));
        }
        return Ok(());
    }
    let rest = host
        .strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("https://"))
        .or_else(|| host.strip_prefix("http://"));
    let Some(rest) = rest else {
        if host.starts_with("ssh://") {
            return SshTarget::parse(host).map(drop).map_err(problem);
        }
        return Err(problem(
            "the scheme must be unix://, tcp://, http://, https:// or ssh://",
        ));
    };
    let authority = rest.trim_end_matches('/');
    match authority.rsplit_once(':') {
        Some((name, port))
            if !name.is_empty()
                && !name.contains(['/', '@', ' '])
                && port.parse::<u16>().is_ok_and(|port| port != 0) =>
        {
            Ok(())
        }
        _ => Err(problem(
            "a TCP address needs a host and a port, and no path",
        )),
    }
}

/// The endpoint for `engine`: `configured` (`[runtime] host`) when given, else the environment
/// (`env` looks a variable up; `home` is the user's home directory, for the docker CLI's context
/// and certificates), else the engine's usual socket for this account (`uid`).
pub fn resolve(
    engine: Engine,
    configured: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
    uid: u32,
) -> Result<Endpoint> {
    let env = |name: &str| env(name).filter(|value| !value.is_empty());
    let (host, chosen_by) = if let Some(host) = configured {
        (host.to_owned(), "[runtime] host".to_owned())
    } else if let Some(host) = env("DOCKER_HOST") {
        (host, "DOCKER_HOST".to_owned())
    } else if let Some((context, host)) = docker_context(engine, &env, home) {
        (host, format!("docker context {context:?}"))
    } else {
        (
            default_host(engine, env("XDG_RUNTIME_DIR"), uid)?,
            "default".to_owned(),
        )
    };
    check_host(&host)?;
    let tls = if host.starts_with("https://")
        || (host.starts_with("tcp://") && env("DOCKER_TLS_VERIFY").is_some_and(|v| v != "0"))
    {
        let directory = env("DOCKER_CERT_PATH")
            .map(PathBuf::from)
            .or_else(|| home.map(|home| home.join(".docker")))
            .unwrap_or_else(|| PathBuf::from(".docker"));
        let files = TlsFiles { directory };
        for path in [files.ca(), files.cert(), files.key()] {
            if let Err(error) = std::fs::metadata(&path) {
                return Err(EndpointError::TlsFile {
                    variable: "DOCKER_CERT_PATH",
                    value: files.directory.display().to_string(),
                    path,
                    detail: error.to_string(),
                });
            }
        }
        Some(files)
    } else {
        if host.starts_with("tcp://") || host.starts_with("http://") {
            refuse_plain_tcp_off_loopback(&host)?;
        }
        None
    };
    Ok(Endpoint {
        engine,
        host,
        tls,
        chosen_by,
    })
}

/// Plain TCP is accepted only to this machine's loopback (`localhost`, 127.0.0.0/8, `[::1]`).
fn refuse_plain_tcp_off_loopback(host: &str) -> Result<()> {
    let authority = host
        .split_once("://")
        .map_or(host, |(_, rest)| rest)
        .trim_end_matches('/');
    let name = authority
        .rsplit_once(':')
        .map_or(authority, |(name, _)| name);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let loopback = name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(EndpointError::PlainTcp {
            host: host.to_owned(),
        })
    }
}

/// The engine's usual socket: Docker's; Podman's rootful one for root, else the rootless one.
fn default_host(engine: Engine, runtime_dir: Option<String>, uid: u32) -> Result<String> {
    match engine {
        Engine::Docker => Ok(DEFAULT_DOCKER_HOST.to_owned()),
        Engine::Podman if uid == 0 => Ok(PODMAN_ROOTFUL_HOST.to_owned()),
        Engine::Podman => runtime_dir
            .map(|dir| format!("unix://{dir}/podman/podman.sock"))
            .ok_or(EndpointError::NoRuntimeDir),
    }
}

/// The docker CLI's current context (`DOCKER_CONTEXT`, else `currentContext` in
/// `~/.docker/config.json`) and its Docker endpoint, when it names one other than `default`.
/// Only for the Docker engine; anything unreadable is no context.
fn docker_context(
    engine: Engine,
    env: &dyn Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Option<(String, String)> {
    use sha2::Digest as _;
    if engine != Engine::Docker {
        return None;
    }
    let config_dir = env("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| home.map(|home| home.join(".docker")))?;
    let name = env("DOCKER_CONTEXT").or_else(|| {
        let text = std::fs::read_to_string(config_dir.join("config.json")).ok()?;
        let config: serde_json::Value = serde_json::from_str(&text).ok()?;
        config.get("currentContext")?.as_str().map(str::to_owned)
    })?;
    if name == "default" {
        return None;
    }
    let digest: String = sha2::Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let meta = config_dir
        .join("contexts/meta")
        .join(digest)
        .join("meta.json");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(meta).ok()?).ok()?;
    let host = meta.pointer("/Endpoints/docker/Host")?.as_str()?.to_owned();
    Some((name, host))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn addresses_are_checked_as_the_docker_cli_takes_them() {
        for good in [
            "unix:///var/run/docker.sock",
            "tcp://127.0.0.1:2376",
            "tcp://build.example:2376/",
            "https://[::1]:2376",
            "http://localhost:2375",
            "ssh://build",
            "ssh://me@build.example:2222",
            "ssh://[::1]:22",
        ] {
            check_host(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, says) in [
            ("unix://run/docker.sock", "absolute"),
            ("tcp://127.0.0.1", "port"),
            ("tcp://127.0.0.1:0", "port"),
            ("tcp://u@h:22", "port"),
            ("tcp://h:2376/v1", "path"),
            ("ssh://me@build/var/run/docker.sock", "no path"),
            ("ssh://-oProxyCommand=x", "not starting with '-'"),
            ("ssh://-l@build", "SSH user"),
            ("ssh://build:0", "port"),
            ("ssh://bu ild", "SSH host"),
            ("/var/run/docker.sock", "scheme"),
            ("", "scheme"),
        ] {
            let error = check_host(bad).unwrap_err().to_string();
            assert!(
                error.contains(says) && error.contains(bad),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn an_ssh_address_becomes_ssh_arguments_with_the_destination_after_the_options() {
        let target = SshTarget::parse("ssh://me@build.example:2222").unwrap();
        assert_eq!(
            target.dial_stdio_args(),
            [
                "-T",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=15",
                "-l",
                "me",
                "-p",
                "2222",
                "--",
                "build.example",
                "docker",
                "system",
                "dial-stdio"
            ]
        );
        let bare = SshTarget::parse("ssh://[::1]").unwrap();
        assert_eq!(
            (bare.host.as_str(), bare.user, bare.port),
            ("::1", None, None)
        );
        let v6 = SshTarget::parse("ssh://[::1]:22").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", Some(22)));
        let endpoint =
            resolve(Engine::Docker, Some("ssh://build"), &with(&[]), None, 1000).unwrap();
        assert!(endpoint.is_remote() && endpoint.tls.is_none());
        assert_eq!(endpoint.ssh().unwrap().host, "build");
    }

    #[test]
    fn the_configured_host_wins_then_docker_host_then_the_engines_own_socket() {
        let env = with(&[("DOCKER_HOST", "tcp://127.0.0.1:2375")]);
        let configured = resolve(Engine::Docker, Some("unix:///s.sock"), &env, None, 1000).unwrap();
        assert_eq!(configured.host, "unix:///s.sock");
        assert_eq!(configured.chosen_by, "[runtime] host");
        let from_env = resolve(Engine::Docker, None, &env, None, 1000).unwrap();
        assert_eq!(from_env.host, "tcp://127.0.0.1:2375");
        assert!(from_env.is_remote() && from_env.tls.is_none());
        let none = with(&[("XDG_RUNTIME_DIR", "/run/user/1000")]);
        assert_eq!(
            resolve(Engine::Docker, None, &none, None, 1000)
                .unwrap()
                .host,
            DEFAULT_DOCKER_HOST
        );
        assert_eq!(
            resolve(Engine::Podman, None, &none, None, 0).unwrap().host,
            PODMAN_ROOTFUL_HOST
        );
        assert_eq!(
            resolve(Engine::Podman, None, &none, None, 1000)
                .unwrap()
                .host,
            "unix:///run/user/1000/podman/podman.sock"
        );
        assert!(matches!(
            resolve(Engine::Podman, None, &with(&[]), None, 1000),
            Err(EndpointError::NoRuntimeDir)
        ));
    }

    #[test]
    fn plain_tcp_is_refused_off_loopback() {
        for host in ["tcp://10.0.0.1:2375", "http://build.example:2375"] {
            let env = with(&[("DOCKER_HOST", host)]);
            let error = resolve(Engine::Docker, None, &env, None, 0)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(host) && error.contains("DOCKER_TLS_VERIFY"),
                "{error}"
            );
        }
        for host in [
            "tcp://localhost:2375",
            "tcp://[::1]:2375",
            "tcp://127.0.0.2:1",
        ] {
            resolve(Engine::Docker, Some(host), &with(&[]), None, 0).unwrap();
        }
    }

    #[test]
    fn tls_takes_its_files_from_docker_cert_path_and_says_which_one_is_missing() {
        let certs = tempfile::tempdir().unwrap();
        let path = certs.path().to_str().unwrap();
        let env = with(&[
            ("DOCKER_HOST", "tcp://127.0.0.1:2376"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CERT_PATH", path),
        ]);
        let error = resolve(Engine::Docker, None, &env, None, 0)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("DOCKER_CERT_PATH") && error.contains("ca.pem"),
            "{error}"
        );
        for name in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(certs.path().join(name), "").unwrap();
        }
        let endpoint = resolve(Engine::Docker, None, &env, None, 0).unwrap();
        assert_eq!(endpoint.tls.unwrap().key(), certs.path().join("key.pem"));
        let off = with(&[
            ("DOCKER_HOST", "tcp://127.0.0.1:2376"),
            ("DOCKER_TLS_VERIFY", "0"),
        ]);
        assert!(
            resolve(Engine::Docker, None, &off, None, 0)
                .unwrap()
                .tls
                .is_none()
        );
    }

    #[test]
    fn the_current_docker_context_is_honoured_for_docker_only() {
        use sha2::Digest as _;
        let home = tempfile::tempdir().unwrap();
        let docker = home.path().join(".docker");
        let digest: String = sha2::Sha256::digest(b"remote")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let meta = docker.join("contexts/meta").join(digest);
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(docker.join("config.json"), r#"{"currentContext":"remote"}"#).unwrap();
        std::fs::write(
            meta.join("meta.json"),
            r#"{"Name":"remote","Metadata":{},"Endpoints":{"docker":{"Host":"tcp://127.0.0.9:2375","SkipTLSVerify":false}}}"#,
        )
        .unwrap();
        let env = with(&[("XDG_RUNTIME_DIR", "/run/user/7")]);
        let endpoint = resolve(Engine::Docker, None, &env, Some(home.path()), 7).unwrap();
        assert_eq!(endpoint.host, "tcp://127.0.0.9:2375");
        assert_eq!(endpoint.chosen_by, "docker context \"remote\"");
        // A remote context's engine gets copies, and refuses bind mounts naming the context.
        assert_eq!(endpoint.mounts(None).unwrap(), MountMode::Copy);
        let refused = endpoint.mounts(Some(MountMode::Bind)).unwrap_err();
        assert!(
            refused.to_string().contains("docker context \"remote\""),
            "{refused}"
        );
        let podman = resolve(Engine::Podman, None, &env, Some(home.path()), 7).unwrap();
        assert_eq!(podman.host, "unix:///run/user/7/podman/podman.sock");
    }

    #[test]
    fn mounts_default_to_bind_on_a_local_socket_and_copy_elsewhere_and_bind_is_refused_remotely() {
        let local = resolve(Engine::Docker, None, &with(&[]), None, 0).unwrap();
        assert_eq!(local.mounts(None).unwrap(), MountMode::Bind);
        assert_eq!(
            local.mounts(Some(MountMode::Copy)).unwrap(),
            MountMode::Copy
        );
        assert_eq!(
            local.mounts(Some(MountMode::Bind)).unwrap(),
            MountMode::Bind
        );
        let podman = resolve(Engine::Podman, None, &with(&[]), None, 0).unwrap();
        assert_eq!(podman.mounts(None).unwrap(), MountMode::Bind);
        for host in ["tcp://127.0.0.1:2375", "http://localhost:2375"] {
            let env = with(&[("DOCKER_HOST", host)]);
            let remote = resolve(Engine::Docker, None, &env, None, 0).unwrap();
            assert_eq!(remote.mounts(None).unwrap(), MountMode::Copy, "{host}");
            assert_eq!(
                remote.mounts(Some(MountMode::Copy)).unwrap(),
                MountMode::Copy
            );
            let error = remote
                .mounts(Some(MountMode::Bind))
                .unwrap_err()
                .to_string();
            for says in [
                "[runtime] mounts = \"bind\"",
                host,
                "chosen by DOCKER_HOST",
                "mounts = \"copy\"",
            ] {
                assert!(error.contains(says), "{says:?} missing from: {error}");
            }
        }
    }
}
