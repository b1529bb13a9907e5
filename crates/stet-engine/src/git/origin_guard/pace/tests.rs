//! Unit tests of `crate::git::origin_guard::pace`: which bound a slow exchange meets first.

use super::*;

fn meter(bounds: TransferBounds) -> Arc<Meter> {
    Meter::new(bounds, "GET /info/refs".to_owned(), Arc::default())
}

#[tokio::test]
async fn the_floor_or_the_idle_bound_whichever_comes_first() {
    let bounds = TransferBounds {
        idle: Duration::from_secs(10),
        grace: Duration::from_secs(5),
        floor_bytes_per_second: 100,
    };
    let meter = meter(bounds);
    let (deadline, kind) = meter.deadline();
    assert_eq!(kind, StallKind::UnderFloor);
    assert_eq!(deadline, meter.start + Duration::from_secs(5));
    // 1,000 bytes earn 10 s past the grace: now the idle bound (10 s after the last byte) is nearer.
    meter.record(1000);
    let (deadline, kind) = meter.deadline();
    assert_eq!(kind, StallKind::Idle);
    assert!(
        deadline <= meter.start + Duration::from_secs(11),
        "{deadline:?}"
    );
    // A default-bounded gigabyte earns its time: the floor is 73 hours away.
    let meter = self::meter(TransferBounds::default());
    meter.record(1 << 30);
    assert_eq!(
        meter.deadline().1,
        StallKind::Idle,
        "a fast transfer meets only the idle bound"
    );
}

#[tokio::test]
async fn an_exchange_that_never_moves_is_cut_at_the_idle_bound_and_recorded() {
    let stalled: Arc<Mutex<Option<Stall>>> = Arc::default();
    let bounds = TransferBounds {
        idle: Duration::from_millis(50),
        grace: Duration::from_secs(30),
        floor_bytes_per_second: 1,
    };
    let meter = Meter::new(
        bounds,
        "POST /git-upload-pack".to_owned(),
        Arc::clone(&stalled),
    );
    let started = std::time::Instant::now();
    let cut = meter
        .within(std::future::pending::<()>())
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(cut.kind, StallKind::Idle);
    assert!(!cut.answering);
    assert_eq!(stalled.lock().unwrap().as_ref(), Some(&cut));
    let shown = cut.to_string();
    assert!(
        shown.starts_with("POST /git-upload-pack: nothing moved"),
        "{shown}"
    );
}
