//! What each side of a benchmark's production path has run on a CPU, read per thread from
//! `/proc/self/task/*/schedstat` and grouped by the side's thread name (see `side.rs`), so that a
//! path's cost can be told from the machine's load.

/// Nanoseconds on a CPU, per side of the path (the threads are named after their side).
#[derive(Default, Clone, Copy)]
pub(crate) struct Cpu {
    pub(crate) client: u64,
    pub(crate) relay: u64,
    pub(crate) proxy: u64,
    pub(crate) server: u64,
}

impl Cpu {
    /// What each side of this process has run so far (`/proc/self/task/*/schedstat`).
    pub(crate) fn now() -> Cpu {
        let mut cpu = Cpu::default();
        let tasks = std::fs::read_dir("/proc/self/task").unwrap_or_else(|e| panic!("{e}"));
        for task in tasks.flatten() {
            let path = task.path();
            // A thread may end between the listing and the read.
            let (Ok(comm), Ok(stat)) = (
                std::fs::read_to_string(path.join("comm")),
                std::fs::read_to_string(path.join("schedstat")),
            ) else {
                continue;
            };
            let nanos: u64 = stat
                .split_whitespace()
                .next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{}: {stat:?}", path.display()));
            let side = match comm.trim() {
                name if name.starts_with("bench-servers") => &mut cpu.server,
                name if name.starts_with("bench-proxies") => &mut cpu.proxy,
                name if name.starts_with("bench-relay") => &mut cpu.relay,
                _ => &mut cpu.client,
            };
            *side += nanos;
        }
        cpu
    }

    pub(crate) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(before.client),
            relay: self.relay.saturating_sub(before.relay),
            proxy: self.proxy.saturating_sub(before.proxy),
            server: self.server.saturating_sub(before.server),
        }
    }

    pub(crate) fn add(&mut self, other: Cpu) {
        self.client += other.client;
        self.relay += other.relay;
        self.proxy += other.proxy;
        self.server += other.server;
    }

    pub(crate) fn total(self) -> u64 {
        self.client + self.relay + self.proxy + self.server
    }
}
