//! `log.level`, checked when the configuration is read and made into the
//! subscriber's filter at start-up (`telemetry::init_logging`).
//!
//! tracing's filter syntax takes a bare word that is not a level as a
//! target to log at every level, and turns every other target off: a typo
//! (`verbose`, `inf`) would pass as a valid filter and silence the gateway,
//! its start-up line included. A bare word must therefore be a level;
//! targets are written `target=level`. tracing also keeps the blanks around
//! a level as part of a target's name (`"info "` is a target), so each
//! directive is trimmed here, for the check and the filter alike.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// The levels a bare directive may name, as the error lists them.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// The directives of `level`, each trimmed, the empty ones left out.
fn directives(level: &str) -> impl Iterator<Item = &str> {
    level.split(',').map(str::trim).filter(|d| !d.is_empty())
}

/// `level` as tracing should read it: its directives trimmed.
fn normalised(level: &str) -> String {
    directives(level).collect::<Vec<_>>().join(",")
}

/// The target a directive names (`notify::inotify=trace` → `notify::inotify`),
/// or `None` for a bare level.
fn target(directive: &str) -> Option<&str> {
    let end = directive.find(['=', '[']).unwrap_or(directive.len());
    let name = directive[..end].trim();
    (!name.is_empty() && name.parse::<LevelFilter>().is_err()).then_some(name)
}

/// What is wrong with `level` as `log.level`, if anything.
pub fn problem(level: &str) -> Option<String> {
    let filter = normalised(level);
    if filter.is_empty() {
        return Some(format!(
            "log.level: is empty, which would turn every line off; use one of {} (\"off\" to mean it)",
            LEVELS.join(", ")
        ));
    }
    if let Err(e) = EnvFilter::try_new(&filter) {
        return Some(format!("log.level: {level:?} is not a valid filter ({e})"));
    }
    let bare = directives(level)
        .filter(|d| !d.contains(['=', '[']))
        .find(|d| d.parse::<LevelFilter>().is_err())?;
    let close = crate::common::checks::suggestion(&bare.to_ascii_lowercase(), LEVELS.into_iter());
    Some(format!(
        "log.level: {bare:?} is not a level{close}; a bare word must be one of {} (a target is written target=level, e.g. v1compat=debug)",
        LEVELS.join(", ")
    ))
}

/// The subscriber's filter for a checked `level`. The configuration
/// watcher's own library (`notify`) traces every file event in the watched
/// directories, a log written there included, which would feed itself at
/// `trace`: unless the filter names it, it is held at `warn`, or at the
/// filter's own level where that is quieter.
pub fn filter(level: &str) -> EnvFilter {
    let mut filter = normalised(level);
    let names_notify = directives(level)
        .filter_map(target)
        .any(|t| t == "notify" || t.starts_with("notify::"));
    if !names_notify {
        // The level of targets no directive names: the last bare level, or
        // nothing at all when there is none.
        let default = directives(level)
            .filter_map(|d| d.parse::<LevelFilter>().ok())
            .last()
            .unwrap_or(LevelFilter::OFF);
        filter = format!("{filter},notify={}", default.min(LevelFilter::WARN));
    }
    EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info,notify=warn"))
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
            "3",
            "info,hyper=debug",
            "v1compat=trace",
            "debug,v1compat::upstream=trace",
            "info ",
            "warn, debug",
            "v1compat[request]",
            "[request]",
            "v1compat[request{operation=run_detail}]=debug",
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
        let p = problem("info, degub").unwrap();
        assert!(p.contains("\"degub\"") && p.contains("`debug`"), "{p}");
    }

    #[test]
    fn an_empty_filter_is_refused() {
        for empty in ["", " ", ",", " , "] {
            let p = problem(empty).unwrap();
            assert!(p.contains("is empty"), "{empty:?}: {p}");
        }
    }

    #[test]
    fn a_filter_tracing_cannot_read_is_refused() {
        let p = problem("hyper=loud").unwrap();
        assert!(p.contains("not a valid filter"), "{p}");
    }

    /// Whether `target` at `level` passes the filter made of `filter`.
    fn enabled(filter: &str, target_trace: fn() -> bool) -> bool {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(super::filter(filter));
        tracing::subscriber::with_default(subscriber, target_trace)
    }

    #[test]
    fn blanks_around_a_level_keep_it_a_level() {
        let info = || tracing::enabled!(target: "v1compat::access", tracing::Level::INFO);
        assert!(enabled("info ", info));
        assert!(enabled(" warn, info ", info));
    }

    #[test]
    fn the_watchers_library_is_held_at_warn_or_quieter_unless_named() {
        use tracing::Level;
        let notify_trace = || tracing::enabled!(target: "notify::inotify", Level::TRACE);
        let notify_warn = || tracing::enabled!(target: "notify::inotify", Level::WARN);
        let other_trace = || tracing::enabled!(target: "v1compat::reload", Level::TRACE);
        assert!(!enabled("trace", notify_trace));
        assert!(enabled("trace", notify_warn));
        assert!(enabled("trace", other_trace));
        assert!(enabled("trace,notify=trace", notify_trace));
        assert!(enabled("trace,notify::inotify=trace", notify_trace));
        // A target that only contains the word does not lift the hold.
        assert!(!enabled("trace,my_notify_app=info", notify_trace));
        // Quieter filters stay quieter for it too.
        assert!(!enabled("off", notify_warn));
        assert!(!enabled("error", notify_warn));
        assert!(!enabled("v1compat=debug", notify_warn));
    }
}
