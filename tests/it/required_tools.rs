//! Tests that need a program from outside the crate (promtool,
//! kubernetes-validate): whether it is there, and what to do when it is
//! not. `.ci/run` installs them and sets `V1COMPAT_REQUIRE_TOOLS=1`; then
//! a missing tool fails the test. Elsewhere the test says on stderr that it
//! was skipped, why, and how to run it, and returns.

use std::path::Path;

/// Whether `tool` is missing from PATH; when it is, says so as
/// [`skip_or_fail`] does, and the caller returns.
pub(crate) fn tool_missing(test: &str, tool: &str, why: &str) -> bool {
    if on_path(tool) {
        return false;
    }
    skip_or_fail(test, &format!("{tool} is not installed"), why);
    true
}

/// The one answer to a missing prerequisite (a program, a server): with
/// `V1COMPAT_REQUIRE_TOOLS` set the test fails; otherwise `SKIPPED <test>:
/// …` goes to the real stderr, past the harness's capture (which hides
/// `eprintln!` from a passing test), so a skip is seen, never a plain `ok`.
pub(crate) fn skip_or_fail(test: &str, missing: &str, why: &str) {
    let required = std::env::var_os("V1COMPAT_REQUIRE_TOOLS").is_some_and(|v| !v.is_empty());
    report_missing(test, missing, why, required, &mut std::io::stderr());
}

fn report_missing(
    test: &str,
    missing: &str,
    why: &str,
    required: bool,
    out: &mut impl std::io::Write,
) {
    assert!(
        !required,
        "{test}: {missing} and V1COMPAT_REQUIRE_TOOLS is set ({why})"
    );
    let _ = writeln!(out, "SKIPPED {test}: {missing} ({why})");
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

#[test]
fn a_missing_tool_fails_only_where_it_is_required() {
    let mut said = Vec::new();
    report_missing("t", "x is not installed", "install x", false, &mut said);
    assert_eq!(
        String::from_utf8(said).unwrap(),
        "SKIPPED t: x is not installed (install x)\n"
    );
    let failed = std::panic::catch_unwind(|| {
        report_missing(
            "t",
            "x is not installed",
            "install x",
            true,
            &mut Vec::new(),
        )
    });
    let message = failed.expect_err("required and missing fails");
    let message = message.downcast_ref::<String>().expect("a formatted panic");
    assert!(
        message.contains("t: x is not installed") && message.contains("V1COMPAT_REQUIRE_TOOLS"),
        "{message}"
    );
}

#[test]
fn a_tool_on_path_is_not_missing() {
    assert!(!tool_missing(
        "required_tools::a_tool_on_path_is_not_missing",
        "sh",
        "the shell"
    ));
}
