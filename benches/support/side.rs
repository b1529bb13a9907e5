//! One side of a benchmark's production path: a runtime on a thread of its own, as each process
//! (the client, the relay, the gateway or the proxy, the upstream) runs on its own, shared by the
//! gateway's and the egress proxy's benches.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A runtime on a thread of its own, standing for one process of the production path.
pub(crate) struct Side {
    /// Where its tasks are spawned.
    pub(crate) handle: Handle,
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Side {
    /// A current-thread runtime, or a multi-thread one with `workers` workers.
    pub(crate) fn new(name: &str, workers: Option<usize>) -> Side {
        let mut builder = match workers {
            Some(workers) => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(workers);
                builder
            }
            None => tokio::runtime::Builder::new_current_thread(),
        };
        let runtime = builder
            .enable_all()
            .thread_name(name)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .unwrap_or_else(|e| panic!("{e}"));
        Side {
            handle,
            stop,
            thread,
        }
    }

    /// Runs `future` on this side; the caller awaits it from its own runtime.
    pub(crate) async fn run<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(future)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Stops the runtime and joins its thread.
    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        self.thread
            .join()
            .unwrap_or_else(|_| panic!("a side panicked"));
    }
}
