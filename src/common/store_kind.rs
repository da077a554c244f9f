//! Where a store of the gateway lives, as its setting names it (`memory`,
//! `redb:PATH`, `postgres://…`): read and checked once, with the problems
//! said as the configuration says them, and shown with a PostgreSQL
//! password masked. The callback relay and the migration inventory both
//! keep their data in one of these.

use crate::common::redact::mask_url;

/// Where a store keeps its data.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreKind {
    Memory,
    Redb(std::path::PathBuf),
    Postgres(String),
}

/// The store as it may be logged: a PostgreSQL URL loses its password.
pub(crate) fn shown(store: &StoreKind) -> String {
    match store {
        StoreKind::Memory => "memory".into(),
        StoreKind::Redb(p) => format!("redb:{}", p.display()),
        StoreKind::Postgres(url) => mask_url(url),
    }
}

/// Reads a store setting; `example_file` names the file a redb example
/// shows.
pub(crate) fn parse(s: &str, example_file: &str) -> Result<StoreKind, String> {
    let s = s.trim();
    if s == "memory" {
        Ok(StoreKind::Memory)
    } else if let Some(path) = s.strip_prefix("redb:") {
        if path.is_empty() {
            return Err(format!(
                "redb: needs a file path, e.g. redb:/var/lib/v1compat/{example_file}"
            ));
        }
        let path = std::path::PathBuf::from(path);
        // The file and missing folders above it are made at start; what is
        // there already must be a folder all the way up.
        let blocker = path
            .ancestors()
            .skip(1)
            .find(|a| a.exists() || a.symlink_metadata().is_ok())
            .filter(|a| !a.as_os_str().is_empty() && !a.is_dir());
        match blocker {
            Some(file) => Err(format!(
                "redb:{}: {} is not a folder the file can be made in",
                path.display(),
                file.display()
            )),
            None if path.is_dir() => {
                Err(format!("redb:{}: is a folder, not a file", path.display()))
            }
            None => Ok(StoreKind::Redb(path)),
        }
    } else if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        // Read as the store will read it, so a string it cannot use is
        // refused here (and by `check-config`), not after the ports are bound.
        match s.parse::<tokio_postgres::Config>() {
            Ok(_) => Ok(StoreKind::Postgres(s.to_owned())),
            Err(e) => Err(format!(
                "{:?} is not a PostgreSQL connection URL the store can use: {e}",
                mask_url(s)
            )),
        }
    } else {
        Err(format!(
            "{:?} is not memory, redb:PATH or postgres://…",
            mask_url(s)
        ))
    }
}
