//! Unit and red-team tests of `crate::channel_stream`: the codec round trip, every malformed
//! header and payload, and the host ledger's rules against a hostile relay.

use super::*;

fn bytes_of(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in frames {
        frame.encode(&mut out);
    }
    out
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, Violation> {
    let mut decoder = Decoder::new();
    decoder.push(bytes);
    let mut frames = Vec::new();
    while let Some(frame) = decoder.next_frame()? {
        frames.push(frame);
    }
    decoder.finish()?;
    Ok(frames)
}

fn host() -> Ledger {
    Ledger::new(Side::Host, vec!["model".to_owned(), "egress".to_owned()])
}

fn open(connection: u32, channel: &str) -> Frame {
    Frame::Open {
        connection,
        channel: channel.to_owned(),
    }
}

fn data(connection: u32, length: usize) -> Frame {
    Frame::Data {
        connection,
        bytes: vec![b'x'; length],
    }
}

#[test]
fn every_kind_goes_through_the_codec_and_back_one_byte_at_a_time() {
    let frames = vec![
        open(0, "model"),
        data(0, 1),
        data(0, MAX_PAYLOAD),
        Frame::Credit {
            connection: 0,
            bytes: 70_000,
        },
        Frame::Close { connection: 0 },
        Frame::Reset {
            connection: u32::MAX,
        },
    ];
    let bytes = bytes_of(&frames);
    assert_eq!(&bytes[..HEADER_BYTES], &[1, 0, 0, 0, 0, 0, 0, 0, 5]);
    assert_eq!(decode_all(&bytes).unwrap(), frames);
    let mut decoder = Decoder::new();
    let mut decoded = Vec::new();
    for byte in &bytes {
        decoder.push(std::slice::from_ref(byte));
        while let Some(frame) = decoder.next_frame().unwrap() {
            decoded.push(frame);
        }
    }
    assert_eq!(decoded, frames);
    decoder.finish().unwrap();
}

#[test]
fn an_oversized_length_is_refused_from_its_header_alone() {
    let mut decoder = Decoder::new();
    // Only the header: the claimed gigabyte is never waited for.
    decoder.push(&[2, 0, 0, 0, 7, 0x40, 0, 0, 0]);
    assert_eq!(
        decoder.next_frame(),
        Err(Violation::Oversize {
            kind: Kind::Data,
            connection: 7,
            length: 0x4000_0000
        })
    );
    let mut just_past = Vec::new();
    data(1, MAX_PAYLOAD + 1).encode(&mut just_past);
    assert!(matches!(
        decode_all(&just_past),
        Err(Violation::Oversize { length, .. }) if length as usize == MAX_PAYLOAD + 1
    ));
}

#[test]
fn an_unknown_kind_or_a_payload_not_its_kinds_is_refused() {
    for kind in [0u8, 6, 0x7f, 0xff] {
        assert_eq!(
            decode_all(&[kind, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(Violation::UnknownKind { kind })
        );
    }
    for (kind, length) in [(3u8, 3u32), (3, 5), (4, 1), (5, 2), (2, 0), (1, 0), (1, 33)] {
        let mut bytes = vec![kind, 0, 0, 0, 1];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend(std::iter::repeat_n(b'a', length as usize));
        assert!(
            matches!(decode_all(&bytes), Err(Violation::Payload { .. })),
            "{kind} {length}: {:?}",
            decode_all(&bytes)
        );
    }
    for name in ["../x", "Model", "mo del", "\u{0}"] {
        let mut bytes = vec![1, 0, 0, 0, 0];
        bytes.extend_from_slice(&(name.len() as u32).to_be_bytes());
        bytes.extend_from_slice(name.as_bytes());
        assert!(
            matches!(decode_all(&bytes), Err(Violation::ChannelName { .. })),
            "{name:?}"
        );
    }
}

#[test]
fn a_truncated_frame_is_refused_at_the_end_of_the_stream() {
    let bytes = bytes_of(&[data(0, 100)]);
    for cut in [1, HEADER_BYTES - 1, HEADER_BYTES, bytes.len() - 1] {
        assert_eq!(
            decode_all(&bytes[..cut]),
            Err(Violation::Truncated { held: cut }),
            "{cut}"
        );
    }
}

#[test]
fn garbage_after_good_frames_ends_the_stream_at_the_garbage() {
    let mut bytes = bytes_of(&[open(0, "model"), data(0, 10)]);
    bytes.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    let mut decoder = Decoder::new();
    decoder.push(&bytes);
    assert_eq!(decoder.next_frame().unwrap(), Some(open(0, "model")));
    assert_eq!(decoder.next_frame().unwrap(), Some(data(0, 10)));
    assert_eq!(
        decoder.next_frame(),
        Err(Violation::UnknownKind { kind: b'G' })
    );
}

#[test]
fn the_decoder_holds_at_most_a_frame_and_a_chunk() {
    let mut decoder = Decoder::new();
    let frame = bytes_of(&[data(3, MAX_PAYLOAD)]);
    for _ in 0..1000 {
        for piece in frame.chunks(4096) {
            decoder.push(piece);
            while decoder.next_frame().unwrap().is_some() {}
        }
    }
    assert!(decoder.buffer.capacity() <= 4 * (MAX_PAYLOAD + HEADER_BYTES));
}

#[test]
fn a_billion_opens_end_at_the_connection_bound() {
    let mut ledger = host();
    let mut decoder = Decoder::new();
    let mut accepted = 0usize;
    let refused = (0..1_000_000_000u32).find_map(|connection| {
        let mut bytes = Vec::new();
        open(connection, "model").encode(&mut bytes);
        decoder.push(&bytes);
        let frame = decoder.next_frame().unwrap().unwrap();
        match ledger.receive(&frame) {
            Ok(_) => {
                accepted += 1;
                None
            }
            Err(violation) => Some(violation),
        }
    });
    assert_eq!(accepted, MAX_CONNECTIONS);
    assert_eq!(
        refused,
        Some(Violation::TooMany {
            connection: MAX_CONNECTIONS as u32,
            channel: "model".to_owned()
        })
    );
    // The bound is per channel: the other channel still opens.
    assert!(matches!(
        ledger.receive(&open(1_000, "egress")),
        Ok(Inbound::Open { channel: 1, .. })
    ));
}

#[test]
fn an_open_of_a_channel_the_dispatch_lacks_or_a_reused_number_is_refused() {
    let mut ledger = Ledger::new(Side::Host, vec!["model".to_owned()]);
    assert_eq!(
        ledger.receive(&open(0, "egress")),
        Err(Violation::UnknownChannel {
            connection: 0,
            channel: "egress".to_owned()
        })
    );
    assert!(ledger.receive(&open(5, "model")).is_ok());
    for again in [5, 4, 0] {
        assert_eq!(
            ledger.clone().receive(&open(again, "model")),
            Err(Violation::Reused {
                connection: again,
                last: 5
            })
        );
    }
    // The relay never receives an open.
    let mut relay = Ledger::new(Side::Relay, vec!["model".to_owned()]);
    assert!(matches!(
        relay.receive(&open(0, "model")),
        Err(Violation::Unexpected { .. })
    ));
}

#[test]
fn data_past_the_credit_is_refused_and_credit_returned_makes_room() {
    let mut ledger = host();
    ledger.receive(&open(0, "model")).unwrap();
    assert_eq!(
        ledger.receive(&data(0, MAX_PAYLOAD)).unwrap(),
        Inbound::Data { connection: 0 }
    );
    for _ in 1..(WINDOW as usize / MAX_PAYLOAD) {
        ledger.receive(&data(0, MAX_PAYLOAD)).unwrap();
    }
    assert_eq!(
        ledger.clone().receive(&data(0, 1)),
        Err(Violation::PastCredit {
            connection: 0,
            length: 1,
            window: 0
        })
    );
    assert!(ledger.send(&Frame::Credit {
        connection: 0,
        bytes: 10
    }));
    ledger.receive(&data(0, 10)).unwrap();
    assert!(matches!(
        ledger.receive(&data(0, 1)),
        Err(Violation::PastCredit { .. })
    ));
}

#[test]
fn data_without_an_open_or_after_close_is_refused() {
    let mut ledger = host();
    assert_eq!(
        ledger.receive(&data(0, 1)),
        Err(Violation::NotOpen {
            kind: Kind::Data,
            connection: 0
        })
    );
    ledger.receive(&open(0, "model")).unwrap();
    ledger.receive(&Frame::Close { connection: 0 }).unwrap();
    assert_eq!(
        ledger.clone().receive(&data(0, 1)),
        Err(Violation::AfterClose { connection: 0 })
    );
    assert!(matches!(
        ledger.clone().receive(&Frame::Close { connection: 0 }),
        Err(Violation::NotOpen { .. })
    ));
    // The host closes too: the connection is gone, and its number is not to be used again.
    assert!(ledger.send(&Frame::Close { connection: 0 }));
    assert_eq!(ledger.open(), 0);
    assert!(matches!(
        ledger.receive(&data(0, 1)),
        Err(Violation::NotOpen { .. })
    ));
    // A credit or reset of a connection gone crosses its end and is ignored; of one never
    // opened, refused.
    let credit = Frame::Credit {
        connection: 0,
        bytes: 1,
    };
    assert_eq!(ledger.receive(&credit), Ok(Inbound::Ignored));
    assert_eq!(
        ledger.receive(&Frame::Reset { connection: 0 }),
        Ok(Inbound::Ignored)
    );
    assert!(matches!(
        ledger.receive(&Frame::Reset { connection: 9 }),
        Err(Violation::NotOpen { .. })
    ));
}

#[test]
fn credit_past_the_window_is_refused() {
    let mut ledger = host();
    ledger.receive(&open(0, "model")).unwrap();
    assert!(matches!(
        ledger.receive(&Frame::Credit {
            connection: 0,
            bytes: 1
        }),
        Err(Violation::CreditOverflow { connection: 0 })
    ));
    let mut ledger = host();
    ledger.receive(&open(0, "model")).unwrap();
    assert!(ledger.send(&data(0, 1000)));
    assert_eq!(ledger.credit(0), WINDOW - 1000);
    ledger
        .receive(&Frame::Credit {
            connection: 0,
            bytes: 1000,
        })
        .unwrap();
    assert_eq!(ledger.credit(0), WINDOW);
    // The ledger refuses to send past the credit itself.
    assert!(!ledger.send(&data(0, WINDOW as usize + 1)));
}

#[test]
fn a_reset_by_the_host_ignores_what_was_in_flight_until_the_relay_acknowledges_it() {
    let mut ledger = host();
    ledger.receive(&open(0, "model")).unwrap();
    assert!(ledger.send(&Frame::Reset { connection: 0 }));
    assert!(!ledger.is_open(0));
    // Still counted against the bound, and what the relay sent before it knew is ignored.
    assert_eq!(ledger.open(), 1);
    assert_eq!(ledger.receive(&data(0, 10)), Ok(Inbound::Ignored));
    assert_eq!(
        ledger.receive(&Frame::Close { connection: 0 }),
        Ok(Inbound::Ignored)
    );
    assert_eq!(
        ledger.receive(&Frame::Reset { connection: 0 }),
        Ok(Inbound::Ignored)
    );
    assert_eq!(ledger.open(), 0);
    // A reset of the relay's own ends the connection at once.
    ledger.receive(&open(1, "egress")).unwrap();
    assert_eq!(
        ledger.receive(&Frame::Reset { connection: 1 }),
        Ok(Inbound::Reset { connection: 1 })
    );
    assert_eq!(ledger.open(), 0);
    assert!(!ledger.send(&data(1, 1)));
}

#[test]
fn the_relay_numbers_its_connections_and_acknowledges_every_reset() {
    let mut relay = Ledger::new(Side::Relay, vec!["model".to_owned()]);
    assert_eq!(relay.opened(0), Some(0));
    assert_eq!(relay.opened(0), Some(1));
    assert_eq!(
        relay.receive(&Frame::Reset { connection: 1 }),
        Ok(Inbound::Reset { connection: 1 })
    );
    // One it never knew (the host's crossed its own): still answered.
    assert_eq!(
        relay.receive(&Frame::Reset { connection: 77 }),
        Ok(Inbound::Reset { connection: 77 })
    );
    // Data of a connection the relay reset is the host's in flight: ignored.
    assert!(relay.send(&Frame::Reset { connection: 0 }));
    assert_eq!(relay.receive(&data(0, 5)), Ok(Inbound::Ignored));
    let mut last = Ledger::new(Side::Relay, vec!["model".to_owned()]);
    last.last = Some(u32::MAX);
    assert_eq!(last.opened(0), None);
}

/// Whatever bytes arrive, the decoder and the host ledger answer (a frame, a wait or a violation)
/// without panicking, and hold no more than a frame.
#[test]
fn arbitrary_bytes_never_panic_the_host() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2_000 {
        let mut decoder = Decoder::new();
        let mut ledger = host();
        let length = (next() % 256) as usize;
        let mut bytes: Vec<u8> = (0..length).map(|_| next() as u8).collect();
        // Often start well-formed, so the ledger is reached.
        if next() % 2 == 0 {
            let mut good = bytes_of(&[open(0, "model"), data(0, 3)]);
            good.append(&mut bytes);
            bytes = good;
        }
        decoder.push(&bytes);
        while let Ok(Some(frame)) = decoder.next_frame() {
            if ledger.receive(&frame).is_err() {
                break;
            }
        }
        assert!(decoder.buffer.len() <= bytes.len());
    }
}
