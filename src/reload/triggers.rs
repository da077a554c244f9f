//! What starts a reload: SIGHUP (always reloads, and reports even when
//! nothing changed) and a watch on the directories of the configuration file
//! and the files it names. Directories, not files: Kubernetes updates a
//! mounted ConfigMap or Secret by pointing a `..data` symlink at a new
//! directory, and editors replace files by renaming; a watch on the file
//! itself would lose track after the first swap. Bursts of events (one swap
//! is several) are coalesced before one reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Reloader;

/// Quiet time after the last file event before reloading.
const SETTLE: Duration = Duration::from_millis(200);

/// The installed triggers; [`Triggers::run`] drives them.
pub(crate) struct Triggers {
    reloader: Arc<Reloader>,
    events: mpsc::UnboundedReceiver<()>,
    /// Kept alive for as long as the triggers run.
    _watcher: Option<notify::RecommendedWatcher>,
    hangup: Option<Hangup>,
}

#[cfg(unix)]
type Hangup = tokio::signal::unix::Signal;
/// No SIGHUP off Unix: the directory watch only.
#[cfg(not(unix))]
struct Hangup;

impl Triggers {
    /// Installs the SIGHUP handler and the directory watch now, so a signal
    /// or change from here on is not missed. Needs a Tokio runtime. A watch
    /// that cannot be set up is logged; SIGHUP still works.
    pub(crate) fn install(reloader: Arc<Reloader>) -> Triggers {
        let (tx, events) = mpsc::unbounded_channel();
        let dirs = reloader.watched_dirs();
        let watcher = match watch_dirs(&dirs, tx) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the configuration's directories; reload with SIGHUP");
                None
            }
        };
        #[cfg(unix)]
        let hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot handle SIGHUP");
                None
            }
        };
        #[cfg(not(unix))]
        let hangup = None;
        Triggers {
            reloader,
            events,
            _watcher: watcher,
            hangup,
        }
    }

    /// Reloads on every trigger, until dropped.
    pub(crate) async fn run(mut self) {
        loop {
            tokio::select! {
                event = self.events.recv() => {
                    if event.is_none() {
                        // The watcher is gone; SIGHUP still works.
                        self.events = mpsc::unbounded_channel().1;
                        continue;
                    }
                    // Let a burst (a symlink swap, an editor's save) settle.
                    while let Ok(Some(())) = tokio::time::timeout(SETTLE, self.events.recv()).await {}
                    self.reload(false).await;
                }
                () = hangup(&mut self.hangup) => self.reload(true).await,
            }
        }
    }

    /// Reloading reads files: off the async workers.
    async fn reload(&self, forced: bool) {
        let reloader = self.reloader.clone();
        let _ = tokio::task::spawn_blocking(move || reloader.reload(forced)).await;
    }
}

#[cfg(unix)]
async fn hangup(signal: &mut Option<Hangup>) {
    match signal {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn hangup(_: &mut Option<Hangup>) {
    std::future::pending().await
}

/// Watches `dirs` (not recursively) and sends a tick on every event that
/// can change a file's content: creations, writes, renames, removals.
/// Reads (the reload's own included) are ignored, or a reload would
/// trigger the next one.
fn watch_dirs(
    dirs: &[PathBuf],
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let relevant = match event {
            Ok(e) => match e.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                EventKind::Access(_) => false,
                _ => true,
            },
            // Overflowed queues and the like: reload to be safe.
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(());
        }
    })?;
    for dir in dirs {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}
