//! The async runtime every command runs on, built before anything else
//! (`main`): its kind and threads, from `runtime.threads`.
//!
//! A process that may use one CPU (a sidecar with a one-CPU quota, a
//! gateway pinned to a core) gets tokio's single-threaded runtime: its
//! multi-threaded one, with one worker, does the same work with more
//! synchronisation around it. On a 2-core machine, with the gateway pinned
//! to one CPU, a translated run detail cost 14.9 µs of CPU with the
//! single-threaded runtime against 17.0 µs with the multi-threaded one
//! (`deploy/bench/RESULTS.md`, "One front in place of four layers, a
//! single-threaded runtime on one CPU").

use std::num::NonZeroUsize;

pub use crate::config::MAX_THREADS;

/// Which runtime to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Everything on the thread that starts it.
    SingleThreaded,
    /// This many worker threads; `None` for tokio's own choice, one per
    /// CPU the process may use unless `TOKIO_WORKER_THREADS` says otherwise.
    MultiThreaded(Option<usize>),
}

/// The runtime `threads` asks for on `cpus` CPUs (0: single-threaded on
/// one CPU, tokio's choice of workers on more). `tokio_workers` says
/// whether `TOKIO_WORKER_THREADS` is set: with `threads = 0` it is the
/// operator's choice of workers, on one CPU too.
pub fn kind(threads: usize, cpus: NonZeroUsize, tokio_workers: bool) -> Kind {
    match threads {
        0 if cpus.get() == 1 && !tokio_workers => Kind::SingleThreaded,
        0 => Kind::MultiThreaded(None),
        1 => Kind::SingleThreaded,
        n => Kind::MultiThreaded(Some(n)),
    }
}

/// The CPUs this process may use: its affinity and cgroup quota counted
/// (as the standard library counts them), one when they cannot be read.
pub fn cpus() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// Builds the runtime `threads` asks for, with its I/O and timers.
pub fn build(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let tokio_workers = std::env::var_os("TOKIO_WORKER_THREADS").is_some();
    let mut builder = match kind(threads, cpus(), tokio_workers) {
        Kind::SingleThreaded => tokio::runtime::Builder::new_current_thread(),
        Kind::MultiThreaded(workers) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if let Some(workers) = workers {
                builder.worker_threads(workers);
            }
            builder
        }
    };
    // Log lines held for a batch are written when the thread has nothing
    // else to do (`telemetry::log_batch`).
    builder
        .enable_all()
        .on_thread_park(crate::telemetry::log_batch::flush)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn one_cpu_or_one_thread_is_single_threaded() {
        assert_eq!(kind(0, cpus(1), false), Kind::SingleThreaded);
        assert_eq!(kind(1, cpus(8), false), Kind::SingleThreaded);
        assert_eq!(kind(0, cpus(4), false), Kind::MultiThreaded(None));
        assert_eq!(kind(3, cpus(1), false), Kind::MultiThreaded(Some(3)));
    }

    #[test]
    fn tokio_worker_threads_is_the_choice_when_threads_is_zero() {
        assert_eq!(kind(0, cpus(1), true), Kind::MultiThreaded(None));
        assert_eq!(kind(0, cpus(4), true), Kind::MultiThreaded(None));
        // An explicit `runtime.threads` wins.
        assert_eq!(kind(1, cpus(4), true), Kind::SingleThreaded);
        assert_eq!(kind(2, cpus(1), true), Kind::MultiThreaded(Some(2)));
    }

    #[test]
    fn each_kind_builds_and_runs() {
        for threads in [0, 1, 2] {
            let runtime = build(threads).unwrap();
            let answer = runtime.block_on(async {
                tokio::spawn(async {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    42
                })
                .await
                .unwrap()
            });
            assert_eq!(answer, 42);
        }
    }
}
