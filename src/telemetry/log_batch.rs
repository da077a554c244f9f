//! Where the log lines go, the last step of each one: stderr, a batch at a
//! time. At the default `info` level every V1 request writes its access line
//! (`pipeline::access`), and written one by one each was a `write` system
//! call on the thread that serves requests, a sixth more CPU a run detail
//! (deploy/bench/RESULTS.md). Here a line is appended to a buffer, and the
//! buffer is written whole:
//!
//! - at once after a `warn` or `error` line (a failure is never held back,
//!   and the lines before it go out first, in order);
//! - when it holds [`FLUSH_AT`] bytes;
//! - when the runtime's thread has nothing left to do ([`flush`] is its
//!   park hook, see `runtime::build`), so an idle gateway holds nothing;
//! - every [`FLUSH_EVERY`] from a thread of its own, so a gateway that is
//!   never idle holds a line at most that long (the thread sleeps while
//!   nothing is held, and the next line wakes it: an idle gateway, or one
//!   logging at `warn`, is not woken ten times a second for nothing);
//! - when the process ends or panics ([`flush_and_wait`], from `main` and
//!   the panic hook [`install`] sets).
//!
//! Nothing is dropped: a line that fills the buffer is written with it,
//! after any write in progress, as it waited for its own write before. A
//! process killed outright loses at most the lines of the last
//! [`FLUSH_EVERY`].

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

use super::sleeper::Sleeper;

/// The buffer is written once it holds this much (about a hundred access
/// lines).
pub const FLUSH_AT: usize = 32 << 10;

/// The longest a line waits while the gateway is busy.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The lines not yet written, and whether there are any.
struct Batch {
    lines: Mutex<Vec<u8>>,
    /// Set after a line is appended, cleared by the flush that takes it:
    /// a flush with nothing to write takes no buffer.
    pending: AtomicBool,
    /// The buffer being written, held while it is: batches reach stderr in
    /// the order they were taken. Kept (cleared) for the next batch.
    writing: Mutex<Vec<u8>>,
    /// The thread that writes the batch every [`FLUSH_EVERY`], asleep
    /// while nothing is held: the next line appended wakes it.
    flusher: Sleeper,
}

static BATCH: Batch = Batch::new();

/// A lock whose holder panicked is still good: the buffer holds bytes only.
fn lock(m: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Batch {
    const fn new() -> Batch {
        Batch {
            lines: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            writing: Mutex::new(Vec::new()),
            flusher: Sleeper::new(),
        }
    }

    /// Appends `line`: whether the batch is due to be written now.
    fn append(&self, line: &[u8], urgent: bool) -> bool {
        let full = {
            let mut lines = lock(&self.lines);
            lines.extend_from_slice(line);
            lines.len() >= FLUSH_AT
        };
        // Sequentially consistent, as the flush thread reads it (see
        // `Sleeper::sleep_while`). A line due now is written by the
        // caller: nothing to wake the thread for.
        self.pending.store(true, Ordering::SeqCst);
        let due = urgent || full;
        if !due {
            self.flusher.wake();
        }
        due
    }

    /// The flush thread's wait: [`FLUSH_EVERY`], or, while nothing is held,
    /// until a line is appended (and then [`FLUSH_EVERY`]). Woken
    /// spuriously, a flush with nothing to write is one load.
    fn rest(&self) {
        self.flusher
            .sleep_while(|| !self.pending.load(Ordering::SeqCst), None);
        std::thread::park_timeout(FLUSH_EVERY);
    }

    /// Writes what the buffer holds to `out`, if anything. A write in
    /// progress elsewhere is waited for first: when this returns, every line
    /// appended before it was called is out.
    fn write_out(&self, out: &mut impl Write) {
        let mut writing = lock(&self.writing);
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        std::mem::swap(&mut *writing, &mut *lock(&self.lines));
        // Nowhere to report a failed write to: the lines are gone, as they
        // were when each was written on its own.
        let _ = out.write_all(&writing);
        writing.clear();
    }
}

/// Writes the lines held, if any: one load when there are none (the
/// runtime calls it each time its thread parks). Lines another thread is
/// writing are left to it; see [`flush_and_wait`].
pub fn flush() {
    if BATCH.pending.load(Ordering::Acquire) {
        BATCH.write_out(&mut std::io::stderr());
    }
}

/// Writes the lines held, after any write in progress: when it returns,
/// every line logged before is out. For the process's end and its panics.
pub fn flush_and_wait() {
    BATCH.write_out(&mut std::io::stderr());
}

/// Starts the thread that writes held lines every [`FLUSH_EVERY`], and
/// has a panic write them before its message; once per process.
pub fn install() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(|| {
                // Known before it first rests: no line can miss waking it.
                BATCH.flusher.adopt_current();
                loop {
                    BATCH.rest();
                    flush();
                }
            });
        if let Err(e) = spawned {
            // Lines still go out when full, on warnings and when idle.
            eprintln!("v1compat: cannot start the log flush thread: {e}");
        }
        let next = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            flush_and_wait();
            next(info);
        }));
    });
}

/// The writer tracing-subscriber writes each formatted line to.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchedStderr;

/// One line on its way into the batch; `urgent` for `warn` and `error`.
pub struct Line {
    urgent: bool,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if BATCH.append(buf, self.urgent) {
            BATCH.write_out(&mut std::io::stderr());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = Line;

    /// A line of no known level is written at once.
    fn make_writer(&'a self) -> Line {
        Line { urgent: true }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line {
        Line {
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of its own, written to a vector.
    fn batch() -> Batch {
        Batch::new()
    }

    fn written(b: &Batch) -> String {
        let mut out = Vec::new();
        b.write_out(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_are_held_then_written_together_in_order() {
        let b = batch();
        assert!(!b.append(b"one\n", false));
        assert!(!b.append(b"two\n", false));
        // A warning is due at once, with the lines before it.
        assert!(b.append(b"three\n", true));
        assert_eq!(written(&b), "one\ntwo\nthree\n");
        // Taken: the next write has nothing.
        assert_eq!(written(&b), "");
        assert!(!b.append(b"four\n", false));
        assert_eq!(written(&b), "four\n");
    }

    #[test]
    fn a_line_wakes_the_flush_thread_resting_with_nothing_held() {
        let b: &'static Batch = Box::leak(Box::new(batch()));
        let (done, rested) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            b.flusher.adopt_current();
            b.rest();
            let _ = done.send(());
        });
        // Resting with nothing held: parked until a line comes.
        while !b.flusher.is_asleep() {
            std::thread::yield_now();
        }
        assert!(!b.append(b"one\n", false));
        // Woken, it waits FLUSH_EVERY more; never woken, it would not
        // return at all.
        rested
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the line woke the resting flush thread");
        assert_eq!(written(b), "one\n");
    }

    #[test]
    fn a_full_batch_is_due() {
        let b = batch();
        let line = [b'x'; 100];
        let lines = FLUSH_AT.div_ceil(line.len());
        for _ in 1..lines {
            assert!(!b.append(&line, false));
        }
        assert!(b.append(&line, false));
        assert_eq!(written(&b).len(), lines * line.len());
    }

    #[test]
    fn warnings_and_errors_are_urgent_info_is_not() {
        use tracing::callsite::Identifier;
        use tracing::metadata::Kind;
        use tracing::{field::FieldSet, Callsite};
        struct Site;
        impl Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!()
            }
        }
        static SITE: Site = Site;
        let meta = |level| {
            Metadata::new(
                "line",
                "test",
                level,
                None,
                None,
                None,
                FieldSet::new(&[], Identifier(&SITE)),
                Kind::EVENT,
            )
        };
        let urgent = |level| BatchedStderr.make_writer_for(&meta(level)).urgent;
        assert!(urgent(Level::ERROR));
        assert!(urgent(Level::WARN));
        assert!(!urgent(Level::INFO));
        assert!(!urgent(Level::DEBUG));
        assert!(BatchedStderr.make_writer().urgent);
    }
}
