//! `v1compat inventory`: the migration inventory's report, read from the
//! configured store by a process of its own (a gateway serving on a redb
//! store holds its file; ask that one with `GET /inventory` on its admin
//! listener instead, or share a PostgreSQL store).

use std::path::PathBuf;

use crate::config::Config;
use crate::inventory::report::Format;
use crate::inventory::Inventory;

#[derive(Debug, Clone, clap::Args)]
pub struct InventoryArgs {
    /// Configuration file (TOML): `[inventory]` names the store, the
    /// secret, the client names and when a client counts as gone.
    #[arg(long, short, env = "V1COMPAT_CONFIG")]
    pub config: Option<PathBuf>,
    /// text (a terminal), json, or html (a page with a chart per client).
    #[arg(long, default_value = "text", value_parser = ["text", "json", "html"])]
    pub format: String,
    /// Write the report here instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the fingerprint of the API key read from standard input (one
    /// line), to name that client in [inventory.names] or a brownout.
    /// Read from stdin so the key stays out of the shell's history.
    #[arg(long)]
    pub fingerprint: bool,
}

/// The report, written where `args` says.
pub async fn inventory(args: &InventoryArgs, cfg: &Config) -> Result<(), String> {
    if !cfg.inventory.enabled {
        return Err("the migration inventory is off (inventory.enabled = false)".into());
    }
    let format = Format::parse(&args.format).unwrap_or(Format::Text);
    let inventory = Inventory::open(&cfg.inventory)
        .await?
        .ok_or("the migration inventory is off")?;
    if args.fingerprint {
        let mut key = String::new();
        std::io::stdin()
            .read_line(&mut key)
            .map_err(|e| format!("standard input: {e}"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err("--fingerprint reads an API key from standard input; none came".into());
        }
        println!("{}", inventory.fingerprint_of_key(key));
        return Ok(());
    }
    let report = inventory.report(&cfg.inventory).await?.render(format);
    match &args.out {
        Some(path) => std::fs::write(path, report).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            print!("{report}");
            Ok(())
        }
    }
}
