//! The channels the in-sandbox relay serves, part of the engine ↔ sandbox contract: a small table
//! whose rows each map a TCP port on the container's loopback to a host endpoint, all over one
//! transport. The channels are `model`, the gateway's, and `egress`, the egress proxy's when a
//! person allowed hosts. There are two transports: the socket directory the engine bind-mounts into
//! the sandbox (bind mode: a channel's host endpoint is the unix socket named after it there), and
//! the relay's own stdin/stdout, an exec stream of the engine's (copy mode: every connection rides
//! it as frames, [`crate::channel_stream`]). The engine builds the table and writes it on the
//! relay's command line ([`ChannelTable::args`]); the relay reads it back ([`ChannelTable::parse`],
//! [`ChannelTable::parse_stdio`]) and serves exactly its rows, so a next channel is a row, not a
//! change to either side's flow.
//!
//! A channel's name is a fixed identifier (it names a socket file, so nothing else is accepted); the
//! relay refuses a table in which two rows share a name or a port, or whose socket directory is not
//! an absolute path.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The model gateway's channel: the OpenAI-style API the agent asks.
pub const MODEL: &str = "model";

/// The model channel's port on the container's loopback.
pub const MODEL_PORT: u16 = 4141;

/// The egress proxy's channel: the HTTP proxy the agent's clients reach allowed hosts through
/// (DESIGN §5 row 20).
pub const EGRESS: &str = "egress";

/// The egress channel's port on the container's loopback.
pub const EGRESS_PORT: u16 = 4142;

/// The longest channel name.
pub const MAX_NAME_BYTES: usize = 32;

/// The option of `stet sandbox-idle` that names the socket directory (the transport).
pub const SOCKET_DIR_OPTION: &str = "--socket-dir";

/// The option of `stet sandbox-relay` that selects the stdin/stdout transport
/// ([`crate::channel_stream`]'s frames).
pub const STDIO_OPTION: &str = "--stdio";

/// The option of `stet sandbox-idle` that names one channel, as `NAME=PORT`.
pub const CHANNEL_OPTION: &str = "--channel";

/// Why a channel or a table is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ChannelError {
    #[error(
        "channel {row:?}: the name {name:?} is not a channel name (a lowercase letter, then up to {} lowercase letters, digits or `_`)",
        MAX_NAME_BYTES - 1
    )]
    Name { row: String, name: String },
    #[error("channel {row:?}: the port {port:?} is not a port from 1 to 65535")]
    Port { row: String, port: String },
    #[error("channel {row:?} is not NAME=PORT")]
    Row { row: String },
    #[error("channel {name:?} is in the table twice")]
    DuplicateName { name: String },
    #[error("port {port} is in the table twice (channels {first:?} and {second:?})")]
    DuplicatePort {
        port: u16,
        first: String,
        second: String,
    },
    #[error("the socket directory {} is not an absolute path", path.display())]
    Transport { path: PathBuf },
}

/// Result alias of the channel table.
pub type Result<T> = std::result::Result<T, ChannelError>;

/// One row: a loopback port in the sandbox and the host endpoint it leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    name: String,
    port: u16,
}

impl Channel {
    /// The channel `name` on `port`, refused unless `name` is a channel name and `port` is not 0.
    pub fn new(name: &str, port: u16) -> Result<Channel> {
        let row = format!("{name}={port}");
        if !is_channel_name(name) {
            return Err(ChannelError::Name {
                row,
                name: name.to_owned(),
            });
        }
        if port == 0 {
            return Err(ChannelError::Port {
                row,
                port: port.to_string(),
            });
        }
        Ok(Channel {
            name: name.to_owned(),
            port,
        })
    }

    /// The model gateway's channel, [`MODEL`] on [`MODEL_PORT`].
    pub fn model() -> Channel {
        Channel {
            name: MODEL.to_owned(),
            port: MODEL_PORT,
        }
    }

    /// The egress proxy's channel, [`EGRESS`] on [`EGRESS_PORT`].
    pub fn egress() -> Channel {
        Channel {
            name: EGRESS.to_owned(),
            port: EGRESS_PORT,
        }
    }

    /// Reads one `NAME=PORT` row.
    pub fn parse(row: &str) -> Result<Channel> {
        let Some((name, port)) = row.split_once('=') else {
            return Err(ChannelError::Row {
                row: row.to_owned(),
            });
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| ChannelError::Port {
                row: row.to_owned(),
                port: port.to_owned(),
            })?;
        Channel::new(name, port).map_err(|error| match error {
            ChannelError::Name { name, .. } => ChannelError::Name {
                row: row.to_owned(),
                name,
            },
            other => other,
        })
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The channel's port on the container's loopback.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the relay listens for it: the port on `127.0.0.1`.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port)
    }

    /// Its host endpoint's name in the socket directory: `<name>.sock`.
    pub fn socket_name(&self) -> String {
        socket_name(&self.name)
    }

    /// The row as the command line carries it, `NAME=PORT`.
    pub fn row(&self) -> String {
        format!("{}={}", self.name, self.port)
    }
}

/// The host endpoint's name in the socket directory of the channel `name`: `<name>.sock`.
pub fn socket_name(name: &str) -> String {
    format!("{name}.sock")
}

/// Whether `name` is a channel name: a lowercase ASCII letter, then lowercase letters, digits or
/// `_`, at most [`MAX_NAME_BYTES`] in all (so it names a socket file and nothing else).
pub fn is_channel_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|first| first.is_ascii_lowercase())
        && name.len() <= MAX_NAME_BYTES
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_')
}

/// How the relay reaches the host endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A directory of unix sockets bind-mounted into the sandbox, one per channel.
    SocketDir(PathBuf),
    /// The relay's own stdin and stdout, the engine's exec stream to the host
    /// ([`crate::channel_stream`]).
    Stdio,
}

/// The channels a relay serves, over one transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelTable {
    transport: Transport,
    channels: Vec<Channel>,
}

impl ChannelTable {
    /// The table of `channels` over `transport`, as the engine writes it; [`ChannelTable::parse`]
    /// checks what the relay reads back.
    pub fn new(transport: Transport, channels: Vec<Channel>) -> ChannelTable {
        ChannelTable {
            transport,
            channels,
        }
    }

    /// Reads the table back from the socket directory and the `NAME=PORT` rows the command line
    /// carried; refused when a row is not a channel, two rows share a name or a port, or the socket
    /// directory is not an absolute path.
    pub fn parse(socket_dir: &Path, rows: &[String]) -> Result<ChannelTable> {
        if !socket_dir.is_absolute() {
            return Err(ChannelError::Transport {
                path: socket_dir.to_owned(),
            });
        }
        ChannelTable::parse_rows(Transport::SocketDir(socket_dir.to_owned()), rows)
    }

    /// Reads the table of a relay over its stdin/stdout back from the `NAME=PORT` rows, refused as
    /// [`ChannelTable::parse`] refuses them.
    pub fn parse_stdio(rows: &[String]) -> Result<ChannelTable> {
        ChannelTable::parse_rows(Transport::Stdio, rows)
    }

    fn parse_rows(transport: Transport, rows: &[String]) -> Result<ChannelTable> {
        let channels = rows
            .iter()
            .map(|row| Channel::parse(row))
            .collect::<Result<Vec<_>>>()?;
        for (index, channel) in channels.iter().enumerate() {
            for earlier in &channels[..index] {
                if earlier.name == channel.name {
                    return Err(ChannelError::DuplicateName {
                        name: channel.name.clone(),
                    });
                }
                if earlier.port == channel.port {
                    return Err(ChannelError::DuplicatePort {
                        port: channel.port,
                        first: earlier.name.clone(),
                        second: channel.name.clone(),
                    });
                }
            }
        }
        Ok(ChannelTable::new(transport, channels))
    }

    /// The rows, in the order they were given.
    pub fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// The row named `name`, if the table has one.
    pub fn get(&self, name: &str) -> Option<&Channel> {
        self.channels.iter().find(|channel| channel.name == name)
    }

    /// The transport every row goes over.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The host endpoint of `channel` as the relay reaches it over a socket directory: its socket
    /// there; `None` over stdio, where the host alone knows it.
    pub fn endpoint(&self, channel: &Channel) -> Option<PathBuf> {
        match &self.transport {
            Transport::SocketDir(dir) => Some(dir.join(channel.socket_name())),
            Transport::Stdio => None,
        }
    }

    /// The channels' names, in order (what the channel stream carries).
    pub fn names(&self) -> Vec<String> {
        self.channels
            .iter()
            .map(|channel| channel.name.clone())
            .collect()
    }

    /// The table as the relay's options: `--socket-dir DIR --channel NAME=PORT …` for `stet
    /// sandbox-idle`, `--stdio --channel NAME=PORT …` for `stet sandbox-relay`.
    pub fn args(&self) -> Vec<String> {
        let mut args = match &self.transport {
            Transport::SocketDir(dir) => {
                vec![SOCKET_DIR_OPTION.to_owned(), dir.display().to_string()]
            }
            Transport::Stdio => vec![STDIO_OPTION.to_owned()],
        };
        for channel in &self.channels {
            args.push(CHANNEL_OPTION.to_owned());
            args.push(channel.row());
        }
        args
    }
}

#[cfg(test)]
mod tests;
