//! Terminal UI cost (issue 6, "Performance"): how fast transcript events enter the app model, how
//! long one 200×60 frame takes with 10k/100k/1M items retained, and the RSS of 1M items.
//! `cargo bench --bench ui`; p50/p99 and RSS are printed to stdout before criterion's groups.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{BatchSize, Criterion, Throughput};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use stet_engine::brief::Brief;
use stet_engine::inbox::InboxEntry;
use stet_protocol::event::{DispatchId, Event, EventKind, ItemKind, TranscriptItem};
use stet_protocol::state::Phase;
use stet_sanitize::sanitize::TokenSanitizer;
use stet_tui::app::{App, Msg};

const BRIEF: &str = "fix-greeting";
/// Events per `Msg::EngineBatch`, as the event loop drains them.
const BATCH: usize = 1024;
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
/// Frames timed per size for the percentiles.
const FRAMES: usize = 200;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T12:00:00Z")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_timezone(&Utc)
}

fn entries() -> Vec<InboxEntry> {
    let path = PathBuf::from(format!("briefs/{BRIEF}.toml"));
    let text = "title = \"Fix the greeting\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"demo/app\"\nbase = \"main\"\n\n[[items]]\ntext = \"do it\"\n";
    vec![InboxEntry {
        brief: Brief::parse(BRIEF, &path, text),
        path,
    }]
}

/// Builds one dispatch's events, every text through a real sanitizer.
struct Script {
    sanitizer: Arc<TokenSanitizer>,
    dispatch: DispatchId,
}

impl Script {
    fn new() -> Script {
        Script {
            sanitizer: Arc::new(TokenSanitizer::new().unwrap_or_else(|e| panic!("{e}"))),
            dispatch: DispatchId::new(),
        }
    }

    fn at(&self, seconds: i64, kind: EventKind) -> Event {
        let mut event = Event::new(self.dispatch, BRIEF, kind);
        event.ts = t0() + TimeDelta::seconds(seconds);
        event
    }

    fn started(&self) -> Vec<Event> {
        let text = |s: &str| self.sanitizer.sanitize(s);
        let mut events = vec![self.at(
            0,
            EventKind::Dispatched {
                title: text("Fix the greeting"),
                repo: text("demo/app"),
                base: text("main"),
                branch: text("stet/fix-greeting"),
                harness: text("script"),
                image: text("stet-dispatch:dev"),
                cost_ceiling_usd: Some(2.0),
            },
        )];
        for (n, (from, to)) in [
            (Phase::Queued, Phase::Preflight),
            (Phase::Preflight, Phase::Provisioning),
            (Phase::Provisioning, Phase::Running),
        ]
        .into_iter()
        .enumerate()
        {
            let kind = EventKind::Phase {
                from,
                to,
                reason: None,
            };
            events.push(self.at(n as i64 + 1, kind));
        }
        events
    }

    /// Transcript item `n`: a line of roughly 80 bytes, of one of four kinds.
    fn line(&self, n: usize) -> Event {
        let (item, text) = match n % 4 {
            0 => (
                ItemKind::Output,
                format!(
                    "   Compiling dep-{n:07} v0.4.{} (registry+https://index.crates.io/)",
                    n % 97
                ),
            ),
            1 => (
                ItemKind::Command,
                format!("cargo test --package app --lib greeting::tests::case_{n:07} -- --exact"),
            ),
            2 => (
                ItemKind::Thought,
                format!(
                    "The greeting at src/lib.rs:{} should say hello; checking case {n:07}.",
                    n % 500
                ),
            ),
            _ => (
                ItemKind::Message,
                format!(
                    "Updated src/greeting.rs line {}: replaced the stale banner, item {n:07}.",
                    n % 300
                ),
            ),
        };
        let kind = EventKind::Transcript(TranscriptItem {
            item,
            text: self.sanitizer.sanitize(&text),
        });
        self.at(4 + (n / 100) as i64, kind)
    }
}

/// An app whose one brief has a running dispatch with `items` transcript items, all retained.
fn build(script: &Script, items: usize) -> App {
    let mut app = App::with_transcript_capacity(&entries(), t0(), items);
    app.update(Msg::EngineBatch(script.started()));
    let mut n = 0;
    while n < items {
        let end = (n + BATCH).min(items);
        app.update(Msg::EngineBatch((n..end).map(|i| script.line(i)).collect()));
        n = end;
    }
    let retained = app
        .selected_dispatch()
        .map(|view| view.transcript.len())
        .unwrap_or_else(|| panic!("the dispatch is not selected"));
    assert_eq!(retained, items);
    app
}

fn terminal() -> Terminal<TestBackend> {
    Terminal::new(TestBackend::new(200, 60)).unwrap_or_else(|e| panic!("{e}"))
}

fn draw(terminal: &mut Terminal<TestBackend>, app: &App) {
    terminal
        .draw(|frame| stet_tui::view::render(frame, app))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Resident set size in KiB, from `/proc/self/status`.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_else(|e| panic!("{e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/self/status"))
}

/// Times `FRAMES` frames per app and prints p50/p99.
fn percentiles(apps: &[(usize, App)]) {
    for (items, app) in apps {
        let mut terminal = terminal();
        draw(&mut terminal, app);
        let mut times: Vec<Duration> = (0..FRAMES)
            .map(|_| {
                let start = Instant::now();
                draw(&mut terminal, app);
                start.elapsed()
            })
            .collect();
        times.sort_unstable();
        let at = |q: usize| times[(FRAMES * q / 100).min(FRAMES - 1)];
        println!(
            "ui frame 200x60, {items} items retained, {FRAMES} frames: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            at(50).as_secs_f64() * 1e3,
            at(99).as_secs_f64() * 1e3,
            times[FRAMES - 1].as_secs_f64() * 1e3,
        );
    }
}

fn ingest(c: &mut Criterion, script: &Script) {
    let events: Vec<Event> = (0..BATCH).map(|n| script.line(n)).collect();
    let mut app = App::new(&entries(), t0());
    app.update(Msg::EngineBatch(script.started()));
    let mut group = c.benchmark_group("ui ingest");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("transcript batch of 1024", |b| {
        b.iter_batched(
            || events.clone(),
            |batch| black_box(app.update(Msg::EngineBatch(batch))),
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

fn render(c: &mut Criterion, apps: &[(usize, App)]) {
    let mut group = c.benchmark_group("ui frame 200x60");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (items, app) in apps {
        let mut terminal = terminal();
        group.bench_function(format!("{items} items"), |b| {
            b.iter(|| draw(&mut terminal, app));
        });
    }
    group.finish();
}

fn main() {
    let script = Script::new();
    let before = vm_rss_kib();
    let largest = build(&script, SIZES[2]);
    let after = vm_rss_kib();
    println!(
        "ui rss, {} items retained: {before} KiB before, {after} KiB after, +{:.1} MiB",
        SIZES[2],
        (after.saturating_sub(before)) as f64 / 1024.0
    );
    let apps = vec![
        (SIZES[0], build(&script, SIZES[0])),
        (SIZES[1], build(&script, SIZES[1])),
        (SIZES[2], largest),
    ];
    percentiles(&apps);

    let mut c = Criterion::default().configure_from_args();
    ingest(&mut c, &script);
    render(&mut c, &apps);
    c.final_summary();
}
