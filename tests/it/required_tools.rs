//! Tests that need a program from outside the crate (promtool,
//! kubernetes-validate): whether it is there, and what to do when it is
//! not. `.ci/run` installs them and sets `V1COMPAT_REQUIRE_TOOLS=1`; then
//! a missing tool fails the test. Elsewhere the test says on stderr that it
//! was skipped, why, and how to run it, and returns.

use std::path::Path;

/// Whether `tool` is missing from PATH. When it is and
/// `V1COMPAT_REQUIRE_TOOLS` is set, panics (the test fails); when it is and
/// the variable is not set, prints `SKIPPED <test>: <why>` to stderr.
pub(crate) fn tool_missing(test: &str, tool: &str, why: &str) -> bool {
    if on_path(tool) {
        return false;
    }
    let required = std::env::var_os("V1COMPAT_REQUIRE_TOOLS").is_some_and(|v| !v.is_empty());
    assert!(
        !required,
        "{test}: {tool} is not installed and V1COMPAT_REQUIRE_TOOLS is set ({why})"
    );
    eprintln!("SKIPPED {test}: {tool} is not installed ({why})");
    true
}

/// Whether an executable file named `tool` is in a directory of PATH.
fn on_path(tool: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| executable(&dir.join(tool)))
}

fn executable(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    file.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
