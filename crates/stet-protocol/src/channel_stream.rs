//! The channel stream (issue #33): how the relay's channels ride the container engine's own
//! exec stream instead of a socket directory shared with the host, so a sandbox needs no host path.
//! The in-sandbox relay (`stet sandbox-relay --stdio`) multiplexes every connection of every
//! channel over its stdin/stdout; the host demultiplexes them to each channel's fixed host end.
//!
//! This module is the pure part both ends share, with no runtime: the frame codec ([`Frame`],
//! [`Decoder`]) and the [`Ledger`] of connections each end keeps, which is where the host reads the
//! stream as the untrusted input it is. Every frame is `u8 kind, u32 connection, u32 length` (big
//! endian) and at most [`MAX_PAYLOAD`] bytes of payload. Each connection has its own credit window
//! ([`WINDOW`]) in each direction, so one that stalls never blocks the others. On the host, a length
//! past the bound, an unknown kind, a frame for a connection never opened or already closed, an
//! `open` of a channel the dispatch lacks, data past the credit given, more than
//! [`MAX_CONNECTIONS`] connections on one channel, or a truncated frame are each a [`Violation`]
//! that ends the stream. An `open` names a channel, never an address: the host dials only the
//! channel's own host end.

use std::collections::BTreeMap;

/// The longest payload of one frame.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// The bytes of a frame's header: kind, connection, length.
pub const HEADER_BYTES: usize = 9;

/// How many bytes of one connection a side may send before the other returns credit.
pub const WINDOW: u32 = 256 * 1024;

/// How many connections of one channel may be open at once (those the host reset and the relay
/// has not acknowledged yet included), as the socket relay allows.
pub const MAX_CONNECTIONS: usize = 64;

/// The line the relay writes on its stderr once every channel's port is bound, before it reads the
/// stream: the host starts nothing of the agent's before it (a connection attempted earlier would be
/// refused).
pub const READY_LINE: &str = "stet sandbox-relay: listening";

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sandbox → host: a connection was accepted on a channel's port; payload: the channel's name.
    Open = 1,
    /// Both ways: bytes of the connection.
    Data = 2,
    /// Both ways: the receiver drained this many bytes (payload: `u32`); the sender may send them
    /// again.
    Credit = 3,
    /// Both ways: the sender will send no more data on the connection (half-close).
    Close = 4,
    /// Both ways: the connection is aborted in both directions.
    Reset = 5,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Open,
            2 => Kind::Data,
            3 => Kind::Credit,
            4 => Kind::Close,
            5 => Kind::Reset,
            _ => return None,
        })
    }

    /// The kind's name, as a violation names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Open => "open",
            Kind::Data => "data",
            Kind::Credit => "credit",
            Kind::Close => "close",
            Kind::Reset => "reset",
        }
    }
}

/// One frame of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A connection accepted on the channel `channel`.
    Open {
        /// The connection, numbered by the relay, each above the last.
        connection: u32,
        /// The channel's name.
        channel: String,
    },
    /// Bytes of the connection (1 to [`MAX_PAYLOAD`]).
    Data {
        /// The connection.
        connection: u32,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The receiver drained `bytes` more bytes of the connection.
    Credit {
        /// The connection.
        connection: u32,
        /// How many.
        bytes: u32,
    },
    /// No more data from the sender on the connection.
    Close {
        /// The connection.
        connection: u32,
    },
    /// The connection is aborted.
    Reset {
        /// The connection.
        connection: u32,
    },
}

impl Frame {
    /// The connection the frame is about.
    pub fn connection(&self) -> u32 {
        match self {
            Frame::Open { connection, .. }
            | Frame::Data { connection, .. }
            | Frame::Credit { connection, .. }
            | Frame::Close { connection }
            | Frame::Reset { connection } => *connection,
        }
    }

    /// The frame's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Open { .. } => Kind::Open,
            Frame::Data { .. } => Kind::Data,
            Frame::Credit { .. } => Kind::Credit,
            Frame::Close { .. } => Kind::Close,
            Frame::Reset { .. } => Kind::Reset,
        }
    }

    /// Appends the frame's bytes to `out`. A data frame is at most [`MAX_PAYLOAD`] bytes (the
    /// senders cut their reads to it); an open's name is a channel name.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let payload: &[u8] = match self {
            Frame::Open { channel, .. } => channel.as_bytes(),
            Frame::Data { bytes, .. } => bytes,
            Frame::Credit { bytes, .. } => &bytes.to_be_bytes(),
            Frame::Close { .. } | Frame::Reset { .. } => &[],
        };
        out.push(self.kind() as u8);
        out.extend_from_slice(&self.connection().to_be_bytes());
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(payload);
    }
}

/// Why the stream ends: what of it broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum Violation {
    #[error("a frame of kind {kind} is not a kind of the channel stream")]
    UnknownKind { kind: u8 },
    #[error(
        "a {} frame of connection {connection} claims {length} bytes; at most {MAX_PAYLOAD} are allowed",
        kind.name()
    )]
    Oversize {
        kind: Kind,
        connection: u32,
        length: u32,
    },
    #[error(
        "a {} frame of connection {connection} has a payload of {length} bytes, not its kind's",
        kind.name()
    )]
    Payload {
        kind: Kind,
        connection: u32,
        length: u32,
    },
    #[error("connection {connection} was opened on {channel:?}, which is not a channel name")]
    ChannelName { connection: u32, channel: String },
    #[error("the stream ended inside a frame ({held} bytes of it held)")]
    Truncated { held: usize },
    #[error("a {} frame came for connection {connection}, which is not open", kind.name())]
    NotOpen { kind: Kind, connection: u32 },
    #[error(
        "connection {connection} was opened again, or out of order (the last opened was {last})"
    )]
    Reused { connection: u32, last: u32 },
    #[error(
        "connection {connection} was opened on the channel {channel:?}, which this dispatch does not have"
    )]
    UnknownChannel { connection: u32, channel: String },
    #[error("the {} side may not send a frame of kind {}", side.name(), kind.name())]
    Unexpected { side: Side, kind: Kind },
    #[error("connection {connection} sent {length} bytes with {window} bytes of credit left")]
    PastCredit {
        connection: u32,
        length: u32,
        window: u32,
    },
    #[error("connection {connection} sent data after closing")]
    AfterClose { connection: u32 },
    #[error(
        "connection {connection} would be the channel {channel:?}'s {}th open connection; at most {MAX_CONNECTIONS} are allowed",
        MAX_CONNECTIONS + 1
    )]
    TooMany { connection: u32, channel: String },
    #[error("connection {connection} returned more credit than it was ever sent")]
    CreditOverflow { connection: u32 },
}

/// Which end of the stream a ledger keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The host: reads the sandbox's frames as untrusted input.
    Host,
    /// The in-sandbox relay: opens the connections.
    Relay,
}

impl Side {
    /// The side's name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Host => "host",
            Side::Relay => "sandbox",
        }
    }
}

/// Reads frames out of the bytes of a stream as they arrive. What it holds is at most one frame
/// and the last chunk given: a header whose length is past the bound is refused as soon as its
/// nine bytes are there, before any of its payload is held.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
    start: usize,
}

impl Decoder {
    /// A decoder holding nothing.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Adds the next bytes of the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, `None` until one is complete; a header or payload outside the format
    /// is a [`Violation`] (after which the stream is over: the decoder is not to be used again).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Violation> {
        let held = &self.buffer[self.start..];
        let Some(header) = held.get(..HEADER_BYTES) else {
            return Ok(None);
        };
        let kind = Kind::from_byte(header[0]).ok_or(Violation::UnknownKind { kind: header[0] })?;
        let connection = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let length = u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
        if length as usize > MAX_PAYLOAD {
            return Err(Violation::Oversize {
                kind,
                connection,
                length,
            });
        }
        let payload_ok = match kind {
            Kind::Open => (1..=crate::channel::MAX_NAME_BYTES as u32).contains(&length),
            Kind::Data => length > 0,
            Kind::Credit => length == 4,
            Kind::Close | Kind::Reset => length == 0,
        };
        if !payload_ok {
            return Err(Violation::Payload {
                kind,
                connection,
                length,
            });
        }
        let end = HEADER_BYTES + length as usize;
        let Some(payload) = held.get(HEADER_BYTES..end) else {
            return Ok(None);
        };
        let frame = match kind {
            Kind::Open => {
                let channel = String::from_utf8_lossy(payload).into_owned();
                if !crate::channel::is_channel_name(&channel) {
                    return Err(Violation::ChannelName {
                        connection,
                        channel,
                    });
                }
                Frame::Open {
                    connection,
                    channel,
                }
            }
            Kind::Data => Frame::Data {
                connection,
                bytes: payload.to_vec(),
            },
            Kind::Credit => Frame::Credit {
                connection,
                bytes: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
            },
            Kind::Close => Frame::Close { connection },
            Kind::Reset => Frame::Reset { connection },
        };
        self.start += end;
        Ok(Some(frame))
    }

    /// At the end of the stream: a frame cut short is a [`Violation::Truncated`].
    pub fn finish(&self) -> Result<(), Violation> {
        match self.buffer.len() - self.start {
            0 => Ok(()),
            held => Err(Violation::Truncated { held }),
        }
    }
}

/// What an accepted frame asks of the side that received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// Open a connection to the host end of the channel at this index of the ledger's channels.
    Open {
        /// The connection.
        connection: u32,
        /// The channel's index.
        channel: usize,
    },
    /// Write these bytes to the connection.
    Data {
        /// The connection.
        connection: u32,
    },
    /// The connection may send this many more bytes.
    Credit {
        /// The connection.
        connection: u32,
        /// How many.
        bytes: u32,
    },
    /// The peer sends no more on the connection: shut its writing half once the data is written.
    Close {
        /// The connection.
        connection: u32,
    },
    /// Abort the connection.
    Reset {
        /// The connection.
        connection: u32,
    },
    /// Nothing to do (a frame still in flight for a connection this side reset, or a credit or
    /// reset of one already gone: they cross).
    Ignored,
}

/// One connection as a side's ledger knows it.
#[derive(Debug, Clone)]
struct Entry {
    channel: usize,
    /// How many bytes the peer may still send.
    window: u32,
    /// How many bytes this side may still send.
    credit: u64,
    peer_closed: bool,
    closed: bool,
    /// This side reset it and waits for the peer's acknowledgement (frames still in flight are
    /// ignored meanwhile).
    reset: bool,
}

/// The connections one side of the stream knows of, and the rules every received frame is
/// checked against. Pure: the host's demultiplexer and the relay feed it what they receive and
/// what they send.
#[derive(Debug, Clone)]
pub struct Ledger {
    side: Side,
    channels: Vec<String>,
    connections: BTreeMap<u32, Entry>,
    /// The highest connection opened so far.
    last: Option<u32>,
}

impl Ledger {
    /// The ledger of `side`, for a stream carrying `channels` (names).
    pub fn new(side: Side, channels: Vec<String>) -> Ledger {
        Ledger {
            side,
            channels,
            connections: BTreeMap::new(),
            last: None,
        }
    }

    /// The channels' names, in the order given.
    pub fn channels(&self) -> &[String] {
        &self.channels
    }

    /// How many connections are open (or reset and not yet acknowledged).
    pub fn open(&self) -> usize {
        self.connections.len()
    }

    /// Checks a frame received from the peer and records it: what to do, or why the stream ends.
    pub fn receive(&mut self, frame: &Frame) -> Result<Inbound, Violation> {
        let connection = frame.connection();
        if let Frame::Open { channel, .. } = frame {
            return self.peer_opened(connection, channel);
        }
        let Some(entry) = self.connections.get_mut(&connection) else {
            let past = self.last.is_some_and(|last| connection <= last);
            return match frame.kind() {
                // The relay acknowledges every reset of the host's, whether it knew it or not.
                Kind::Reset if self.side == Side::Relay => Ok(Inbound::Reset { connection }),
                // A credit or a reset may cross the connection's end.
                Kind::Credit | Kind::Reset if past => Ok(Inbound::Ignored),
                // The relay takes the host's word for what is gone.
                _ if self.side == Side::Relay => Ok(Inbound::Ignored),
                kind => Err(Violation::NotOpen { kind, connection }),
            };
        };
        if entry.reset {
            // In flight before our reset reached the peer; its reset acknowledges ours.
            if matches!(frame, Frame::Reset { .. }) {
                self.connections.remove(&connection);
            }
            return Ok(Inbound::Ignored);
        }
        match frame {
            Frame::Open { .. } => unreachable!("handled above"),
            Frame::Data { bytes, .. } => {
                let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                if entry.peer_closed {
                    return Err(Violation::AfterClose { connection });
                }
                if length > entry.window {
                    return Err(Violation::PastCredit {
                        connection,
                        length,
                        window: entry.window,
                    });
                }
                entry.window -= length;
                Ok(Inbound::Data { connection })
            }
            Frame::Credit { bytes, .. } => {
                entry.credit += u64::from(*bytes);
                if entry.credit > u64::from(WINDOW) {
                    return Err(Violation::CreditOverflow { connection });
                }
                Ok(Inbound::Credit {
                    connection,
                    bytes: *bytes,
                })
            }
            Frame::Close { .. } => {
                if entry.peer_closed {
                    return Err(Violation::NotOpen {
                        kind: Kind::Close,
                        connection,
                    });
                }
                entry.peer_closed = true;
                if entry.closed {
                    self.connections.remove(&connection);
                }
                Ok(Inbound::Close { connection })
            }
            Frame::Reset { .. } => {
                self.connections.remove(&connection);
                Ok(Inbound::Reset { connection })
            }
        }
    }

    fn peer_opened(&mut self, connection: u32, channel: &str) -> Result<Inbound, Violation> {
        if self.side == Side::Relay {
            return Err(Violation::Unexpected {
                side: Side::Host,
                kind: Kind::Open,
            });
        }
        if let Some(last) = self.last
            && connection <= last
        {
            return Err(Violation::Reused { connection, last });
        }
        let Some(index) = self.channels.iter().position(|name| name == channel) else {
            return Err(Violation::UnknownChannel {
                connection,
                channel: channel.to_owned(),
            });
        };
        let on_channel = self
            .connections
            .values()
            .filter(|entry| entry.channel == index)
            .count();
        if on_channel >= MAX_CONNECTIONS {
            return Err(Violation::TooMany {
                connection,
                channel: channel.to_owned(),
            });
        }
        self.insert(connection, index);
        Ok(Inbound::Open {
            connection,
            channel: index,
        })
    }

    fn insert(&mut self, connection: u32, channel: usize) {
        self.last = Some(connection);
        self.connections.insert(
            connection,
            Entry {
                channel,
                window: WINDOW,
                credit: u64::from(WINDOW),
                peer_closed: false,
                closed: false,
                reset: false,
            },
        );
    }

    /// The relay opens a connection on the channel at `channel`: its number, or `None` when the
    /// numbers are used up.
    pub fn opened(&mut self, channel: usize) -> Option<u32> {
        let connection = match self.last {
            None => 0,
            Some(last) => last.checked_add(1)?,
        };
        self.insert(connection, channel);
        Some(connection)
    }

    /// How many bytes this side may send on `connection` now (0 for one that is gone).
    pub fn credit(&self, connection: u32) -> u32 {
        self.connections
            .get(&connection)
            .map_or(0, |entry| u32::try_from(entry.credit).unwrap_or(WINDOW))
    }

    /// Records a frame this side sends; `false` when it must not go (its connection is gone, or a
    /// data frame is past the credit left), so the caller drops it.
    pub fn send(&mut self, frame: &Frame) -> bool {
        let connection = frame.connection();
        let Some(entry) = self.connections.get_mut(&connection) else {
            return false;
        };
        if entry.reset {
            return false;
        }
        match frame {
            Frame::Open { .. } => true,
            Frame::Data { bytes, .. } => {
                let length = bytes.len() as u64;
                if entry.closed || length > entry.credit {
                    return false;
                }
                entry.credit -= length;
                true
            }
            Frame::Credit { bytes, .. } => {
                if entry.peer_closed {
                    return false;
                }
                entry.window = entry.window.saturating_add(*bytes).min(WINDOW);
                true
            }
            Frame::Close { .. } => {
                if entry.closed {
                    return false;
                }
                entry.closed = true;
                if entry.peer_closed {
                    self.connections.remove(&connection);
                }
                true
            }
            Frame::Reset { .. } => {
                match self.side {
                    // Kept until the relay acknowledges it, so what it sent meanwhile is ignored.
                    Side::Host => entry.reset = true,
                    Side::Relay => {
                        self.connections.remove(&connection);
                    }
                }
                true
            }
        }
    }

    /// Whether `connection` is still open on this side (not gone, not reset).
    pub fn is_open(&self, connection: u32) -> bool {
        self.connections
            .get(&connection)
            .is_some_and(|entry| !entry.reset)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod redteam;
