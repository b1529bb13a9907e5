//! The channels a dispatch's relay serves, chosen in one place: the rows of the engine ↔ sandbox
//! channel table ([`stet_protocol::channel`]), each a port on the sandbox's loopback led to a unix
//! socket in the dispatch's socket directory. In bind mode the sandbox sees that directory at
//! [`GATEWAY_MOUNT`] and the container's main process relays to it ([`DispatchChannels::keepalive`]);
//! in copy mode nothing is mounted and the relay is an exec whose stdin/stdout carry the channels
//! ([`DispatchChannels::relay_command`], [`crate::dispatch::channel_stream`]). The rows are the
//! model gateway's, when a gateway serves the dispatch, and the egress proxy's, when hosts are
//! allowed; a next channel is a row here and its server on the host, not a change to the dispatch
//! flow.

use std::path::{Path, PathBuf};

use stet_protocol::channel::{self, Channel, ChannelTable, Transport};

use crate::runtime::GATEWAY_MOUNT;

/// Every channel a dispatch may open; the socket directory must hold the longest of their sockets.
pub fn known() -> Vec<Channel> {
    vec![Channel::model(), Channel::egress()]
}

/// The proxy variables every client in the sandbox reads (curl, pip, git, cargo, npm, apt's https
/// method, the agents' own CLIs), in both cases since clients differ in which they read.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// What never goes through the proxy: the sandbox's own loopback, where the relay serves the model
/// channel and the agent's own test servers listen.
const NO_PROXY: &str = "127.0.0.1,localhost,::1";

/// The file, in the dispatch's socket directory, holding the certificate authorities the sandbox's
/// clients trust (`network.sandbox_ca_bundle`), when the user gave some.
pub const SANDBOX_CA_FILE: &str = "ca.pem";

/// The variables naming the file of certificate authorities for the sandbox's TLS clients: OpenSSL
/// and what is built on it (Python's `ssl`, pip's system store), curl, git, cargo, pip's own and
/// requests' bundles, and Node (which adds it to its own).
const CA_VARIABLES: [&str; 7] = [
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

/// The channels one dispatch opens, over the socket directory mounted at [`GATEWAY_MOUNT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchChannels {
    table: ChannelTable,
}

impl DispatchChannels {
    /// The channels of a dispatch: the model's when a gateway serves it (`gateway`), the egress
    /// proxy's when hosts are allowed (`egress`).
    pub fn for_dispatch(gateway: bool, egress: bool) -> DispatchChannels {
        let rows = [(gateway, Channel::model()), (egress, Channel::egress())]
            .into_iter()
            .filter_map(|(open, channel)| open.then_some(channel))
            .collect();
        DispatchChannels::with(rows)
    }

    /// The channels `rows` (which the relay refuses when two share a name or a port).
    pub fn with(rows: Vec<Channel>) -> DispatchChannels {
        DispatchChannels {
            table: ChannelTable::new(Transport::SocketDir(GATEWAY_MOUNT.into()), rows),
        }
    }

    /// Whether the dispatch opens no channel (then it needs no socket directory and no relay).
    pub fn is_empty(&self) -> bool {
        self.table.channels().is_empty()
    }

    /// The sandbox's keepalive command, with the relay's table added when there is a channel
    /// (`stet sandbox-idle --socket-dir /run/stet --channel model=4141`).
    pub fn keepalive(&self, keepalive: &[String]) -> Vec<String> {
        let mut command = keepalive.to_vec();
        if !self.is_empty() {
            command.extend(self.table.args());
        }
        command
    }

    /// The command of the relay over its stdin/stdout, for copy mode (`PROGRAM sandbox-relay --stdio
    /// --channel model=4141 …`), `program` being the stet executable in the sandbox.
    pub fn relay_command(&self, program: &str) -> Vec<String> {
        let stdio = ChannelTable::new(Transport::Stdio, self.table.channels().to_vec());
        let mut command = vec![program.to_owned(), "sandbox-relay".to_owned()];
        command.extend(stdio.args());
        command
    }

    /// The channels' names, in the table's order.
    pub fn names(&self) -> Vec<String> {
        self.table.names()
    }

    /// The OpenAI-style base URL an agent in the sandbox asks the model at, when the model's
    /// channel is open: `http://127.0.0.1:4141/v1`.
    pub fn model_url(&self) -> Option<String> {
        self.table
            .get(channel::MODEL)
            .map(|model| format!("http://{}/v1", model.address()))
    }

    /// The environment every process of the agent gets for the open channels: the proxy variables
    /// at the egress channel, and `NO_PROXY` for the sandbox's loopback, when it is open; nothing
    /// otherwise (a client with no proxy variable reaches nothing, the container having no network).
    pub fn sandbox_env(&self) -> Vec<(String, String)> {
        let Some(egress) = self.table.get(channel::EGRESS) else {
            return Vec::new();
        };
        let proxy = format!("http://{}", egress.address());
        let mut env: Vec<(String, String)> = PROXY_VARIABLES
            .iter()
            .map(|name| ((*name).to_owned(), proxy.clone()))
            .collect();
        env.push(("NO_PROXY".to_owned(), NO_PROXY.to_owned()));
        env.push(("no_proxy".to_owned(), NO_PROXY.to_owned()));
        env
    }

    /// The variables that name [`SANDBOX_CA_FILE`] (as the sandbox sees it, in the socket
    /// directory at [`GATEWAY_MOUNT`]) to every TLS client of the agent, when the egress channel is
    /// open; nothing otherwise.
    pub fn sandbox_ca_env(&self) -> Vec<(String, String)> {
        self.sandbox_ca_env_at(&format!("{GATEWAY_MOUNT}/{SANDBOX_CA_FILE}"))
    }

    /// [`DispatchChannels::sandbox_ca_env`] naming the file at `file` in the sandbox instead (copy
    /// mode, where no socket directory is mounted).
    pub fn sandbox_ca_env_at(&self, file: &str) -> Vec<(String, String)> {
        if self.table.get(channel::EGRESS).is_none() {
            return Vec::new();
        }
        CA_VARIABLES
            .iter()
            .map(|name| ((*name).to_owned(), file.to_owned()))
            .collect()
    }

    /// Where the host serves the channel `name` in the dispatch's socket directory `dir`, when the
    /// dispatch opens it.
    pub fn host_socket(&self, dir: &Path, name: &str) -> Option<PathBuf> {
        self.table
            .get(name)
            .map(|channel| dir.join(channel.socket_name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_with_a_gateway_opens_the_model_channel_and_one_without_none() {
        let keepalive = ["/usr/local/bin/stet".to_owned(), "sandbox-idle".to_owned()];
        let model = DispatchChannels::for_dispatch(true, false);
        assert!(!model.is_empty());
        assert_eq!(
            model.keepalive(&keepalive),
            [
                "/usr/local/bin/stet",
                "sandbox-idle",
                "--socket-dir",
                "/run/stet",
                "--channel",
                "model=4141"
            ]
        );
        assert_eq!(
            model.model_url().as_deref(),
            Some("http://127.0.0.1:4141/v1")
        );
        assert_eq!(
            model.host_socket(Path::new("/tmp/d"), channel::MODEL),
            Some(PathBuf::from("/tmp/d/model.sock"))
        );
        assert_eq!(model.host_socket(Path::new("/tmp/d"), "egress"), None);

        assert!(model.sandbox_env().is_empty());

        let none = DispatchChannels::for_dispatch(false, false);
        assert!(none.is_empty());
        assert!(none.sandbox_env().is_empty());
        assert_eq!(none.keepalive(&keepalive), keepalive);
        assert_eq!(none.model_url(), None);
        assert_eq!(none.host_socket(Path::new("/tmp/d"), channel::MODEL), None);
    }

    #[test]
    fn the_egress_channel_gives_every_client_the_proxy_and_keeps_loopback_direct() {
        let both = DispatchChannels::for_dispatch(true, true);
        assert_eq!(
            both.keepalive(&[])[2..],
            ["--channel", "model=4141", "--channel", "egress=4142"]
        );
        assert_eq!(
            both.host_socket(Path::new("/tmp/d"), channel::EGRESS),
            Some(PathBuf::from("/tmp/d/egress.sock"))
        );
        let env: std::collections::BTreeMap<String, String> =
            both.sandbox_env().into_iter().collect();
        for name in PROXY_VARIABLES {
            assert_eq!(env[name], "http://127.0.0.1:4142", "{name}");
        }
        assert_eq!(env["NO_PROXY"], "127.0.0.1,localhost,::1");
        assert_eq!(env["no_proxy"], env["NO_PROXY"]);
        let egress_only = DispatchChannels::for_dispatch(false, true);
        assert_eq!(egress_only.model_url(), None);
        assert_eq!(egress_only.sandbox_env().len(), 8);
        let ca: std::collections::BTreeMap<String, String> =
            egress_only.sandbox_ca_env().into_iter().collect();
        assert_eq!(ca.len(), 7);
        assert_eq!(ca["GIT_SSL_CAINFO"], "/run/stet/ca.pem");
        assert_eq!(ca["SSL_CERT_FILE"], ca["GIT_SSL_CAINFO"]);
        assert!(
            DispatchChannels::for_dispatch(true, false)
                .sandbox_ca_env()
                .is_empty()
        );
    }

    #[test]
    fn a_second_channel_is_a_row() {
        let channels = DispatchChannels::with(vec![
            Channel::model(),
            Channel::new("second", 4242).unwrap(),
        ]);
        let command = channels.keepalive(&[]);
        assert_eq!(
            command[2..],
            ["--channel", "model=4141", "--channel", "second=4242"]
        );
        assert_eq!(
            channels.host_socket(Path::new("/tmp/d"), "second"),
            Some(PathBuf::from("/tmp/d/second.sock"))
        );
    }

    #[test]
    fn in_copy_mode_the_relay_is_a_command_over_stdio_with_the_same_rows() {
        let both = DispatchChannels::for_dispatch(true, true);
        assert_eq!(
            both.relay_command("/usr/local/bin/stet"),
            [
                "/usr/local/bin/stet",
                "sandbox-relay",
                "--stdio",
                "--channel",
                "model=4141",
                "--channel",
                "egress=4142"
            ]
        );
        assert_eq!(both.names(), ["model", "egress"]);
        let ca: std::collections::BTreeMap<String, String> = both
            .sandbox_ca_env_at("/outputs/stet-ca.pem")
            .into_iter()
            .collect();
        assert_eq!(ca["SSL_CERT_FILE"], "/outputs/stet-ca.pem");
        assert!(
            DispatchChannels::for_dispatch(true, false)
                .sandbox_ca_env_at("/x")
                .is_empty()
        );
    }

    /// What the engine may write, the relay reads back as the same table (no two rows share a
    /// name or a port).
    #[test]
    fn the_known_channels_are_a_table_the_relay_accepts() {
        let all = DispatchChannels::with(known());
        let args = all.keepalive(&[]);
        let rows: Vec<String> = args.iter().skip(3).step_by(2).cloned().collect();
        assert_eq!(rows.len(), known().len());
        assert_eq!(
            ChannelTable::parse(Path::new(&args[1]), &rows).unwrap(),
            all.table
        );
        assert!(known().contains(&Channel::model()));
    }
}
