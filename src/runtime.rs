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

/// The most `runtime.threads` may ask for: more is a mistake, not a machine.
pub const MAX_THREADS: usize = 1024;

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
/// one CPU, tokio's choice of workers on more).
pub fn kind(threads: usize, cpus: NonZeroUsize) -> Kind {
    match threads {
        0 if cpus.get() == 1 => Kind::SingleThreaded,
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
    let mut builder = match kind(threads, cpus()) {
        Kind::SingleThreaded => tokio::runtime::Builder::new_current_thread(),
        Kind::MultiThreaded(workers) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if let Some(workers) = workers {
                builder.worker_threads(workers);
            }
            builder
        }
    };
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn one_cpu_or_one_thread_is_single_threaded() {
        assert_eq!(kind(0, cpus(1)), Kind::SingleThreaded);
        assert_eq!(kind(1, cpus(8)), Kind::SingleThreaded);
        assert_eq!(kind(0, cpus(4)), Kind::MultiThreaded(None));
        assert_eq!(kind(3, cpus(1)), Kind::MultiThreaded(Some(3)));
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
