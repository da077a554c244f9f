//! `log.level`, checked when the configuration is read and made into the
//! subscriber's filter at start-up (`telemetry::init_logging`).
//!
//! tracing's filter syntax takes a bare word that is not a level as a
//! target to log at every level, and turns every other target off: a typo
//! (`verbose`, `inf`) would pass as a valid filter and silence the gateway,
//! its start-up line included. A bare word must therefore be a level;
//! targets are written `target=level`.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// The levels a bare directive may name, as the error lists them.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// What is wrong with `level` as `log.level`, if anything.
pub fn problem(level: &str) -> Option<String> {
    if let Err(e) = EnvFilter::try_new(level) {
        return Some(format!("log.level: {level:?} is not a valid filter ({e})"));
    }
    let bare = level
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty() && !d.contains('=') && !d.starts_with('['))
        .find(|d| d.parse::<LevelFilter>().is_err())?;
    let close = crate::config::suggestion(&bare.to_ascii_lowercase(), LEVELS.into_iter());
    Some(format!(
        "log.level: {bare:?} is not a level{close}; a bare word must be one of {} (a target is written target=level, e.g. v1compat=debug)",
        LEVELS.join(", ")
    ))
}

/// The subscriber's filter for a checked `level`. The configuration
/// watcher's own library (`notify`) traces every file event in the watched
/// directories, a log written there included, which would feed itself at
/// `trace`: it is held at `warn` unless the filter names it.
pub fn filter(level: &str) -> EnvFilter {
    let level = if level.contains("notify") {
        level.to_owned()
    } else {
        format!("{level},notify=warn")
    };
    EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info,notify=warn"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_target_directives_pass() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,hyper=debug",
            "v1compat=trace",
            "debug,v1compat::upstream=trace",
        ] {
            assert_eq!(problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn a_bare_word_that_is_not_a_level_is_refused() {
        let p = problem("verbose").unwrap();
        assert!(p.contains("\"verbose\" is not a level"), "{p}");
        assert!(p.contains("target=level"), "{p}");
        let p = problem("inf").unwrap();
        assert!(p.contains("did you mean `info`?"), "{p}");
        let p = problem("info,degub").unwrap();
        assert!(p.contains("\"degub\"") && p.contains("`debug`"), "{p}");
    }

    #[test]
    fn a_filter_tracing_cannot_read_is_refused() {
        let p = problem("hyper=loud").unwrap();
        assert!(p.contains("not a valid filter"), "{p}");
    }

    #[test]
    fn the_watchers_library_is_held_at_warn_unless_named() {
        use tracing::Level;
        use tracing_subscriber::layer::SubscriberExt;
        let seen = |level: &str, target_enabled: fn() -> bool| {
            let subscriber = tracing_subscriber::registry().with(filter(level));
            tracing::subscriber::with_default(subscriber, target_enabled)
        };
        let notify_trace = || tracing::enabled!(target: "notify::inotify", Level::TRACE);
        let other_trace = || tracing::enabled!(target: "v1compat::reload", Level::TRACE);
        assert!(!seen("trace", notify_trace));
        assert!(seen("trace", other_trace));
        assert!(seen("trace,notify=trace", notify_trace));
    }
}
