//! Red-team tests of the host's `Ledger`: credit that wraps a `u32` or sums past the window, a
//! flood of opens each reset at once (the ledger never grows with it), and the end of the
//! connection numbers.

use super::*;

fn host() -> Ledger {
    Ledger::new(Side::Host, vec!["model".to_owned()])
}

fn open(connection: u32) -> Frame {
    Frame::Open {
        connection,
        channel: "model".to_owned(),
    }
}

#[test]
fn credit_that_wraps_a_u32_or_sums_past_the_window_is_refused() {
    let mut ledger = host();
    ledger.receive(&open(0)).unwrap();
    assert!(ledger.send(&Frame::Data {
        connection: 0,
        bytes: vec![1; 1000],
    }));
    // u32::MAX + what is left would wrap a u32; the ledger counts in u64 and refuses it.
    assert_eq!(
        ledger.receive(&Frame::Credit {
            connection: 0,
            bytes: u32::MAX,
        }),
        Err(Violation::CreditOverflow { connection: 0 })
    );
    let mut ledger = host();
    ledger.receive(&open(0)).unwrap();
    assert!(ledger.send(&Frame::Data {
        connection: 0,
        bytes: vec![1; 1000],
    }));
    // Each credit below what was sent, both together past it.
    assert!(
        ledger
            .receive(&Frame::Credit {
                connection: 0,
                bytes: 600,
            })
            .is_ok()
    );
    assert_eq!(
        ledger.receive(&Frame::Credit {
            connection: 0,
            bytes: 600,
        }),
        Err(Violation::CreditOverflow { connection: 0 })
    );
    // (After a violation the stream is over: the ledger is not used again.)
}

#[test]
fn a_million_opens_each_reset_at_once_never_grow_the_ledger() {
    let mut ledger = host();
    for connection in 0..1_000_000u32 {
        assert!(matches!(
            ledger.receive(&open(connection)),
            Ok(Inbound::Open { .. })
        ));
        assert_eq!(
            ledger.receive(&Frame::Reset { connection }),
            Ok(Inbound::Reset { connection })
        );
        assert_eq!(ledger.open(), 0);
    }
    // A reset of one long gone is ignored; data for it ends the stream.
    assert_eq!(
        ledger.receive(&Frame::Reset { connection: 5 }),
        Ok(Inbound::Ignored)
    );
    assert!(matches!(
        ledger.receive(&Frame::Data {
            connection: 5,
            bytes: vec![1],
        }),
        Err(Violation::NotOpen { .. })
    ));
}

#[test]
fn the_last_connection_number_ends_the_numbering_and_a_second_close_is_refused() {
    let mut ledger = host();
    ledger.receive(&open(u32::MAX)).unwrap();
    assert!(matches!(
        ledger.receive(&open(0)),
        Err(Violation::Reused { .. })
    ));
    let mut ledger = host();
    ledger.receive(&open(7)).unwrap();
    ledger.receive(&Frame::Close { connection: 7 }).unwrap();
    assert!(matches!(
        ledger.receive(&Frame::Data {
            connection: 7,
            bytes: vec![1],
        }),
        Err(Violation::AfterClose { connection: 7 })
    ));
    assert!(matches!(
        ledger.receive(&Frame::Close { connection: 7 }),
        Err(Violation::NotOpen { .. })
    ));
}
