//! Client conformance: the published V1 Python SDK (`coreclaw-client` from PyPI,
//! unchanged) and the V1 documentation's plain-HTTP flow, driven through the
//! gateway by the pytest suite in `conformance/python/`.
//!
//! This test provisions a virtual environment in `target/conformance-venv`
//! (`python3 -m venv`, then `pip install -r conformance/python/requirements.txt`;
//! reused while the requirements file is unchanged), then runs
//! `pytest -q conformance/python` with `V1COMPAT_BIN` set to the freshly built
//! binary. It fails, never skips, when Python, venv or the packages are missing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest the package installation may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest the suite may take (it needs seconds; this only bounds a hang).
const SUITE_TIMEOUT: Duration = Duration::from_secs(300);

const INSTALL_HINT: &str = "the client conformance suite needs Python 3.10+ with venv and pip \
     (Debian/Ubuntu: apt-get install python3 python3-venv python3-pip)";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/conformance-venv` (next to `target/tmp`, whatever the target dir is).
fn venv_dir() -> PathBuf {
    target_dir().join("conformance-venv")
}

/// The target directory (the parent of `target/tmp`).
pub(crate) fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

pub(crate) fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// What a finished command printed.
pub(crate) struct Output {
    pub(crate) success: bool,
    pub(crate) status: String,
    pub(crate) text: String,
}

/// Run `cmd` to completion within `timeout`, collecting stdout and stderr (in
/// threads, so a full pipe never stalls it); kill it when the time is up.
pub(crate) fn run(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for {shown}: {e}")),
        }
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    Ok(match status {
        Some(s) => Output {
            success: s.success(),
            status: s.to_string(),
            text,
        },
        None => Output {
            success: false,
            status: format!("killed after {}s", timeout.as_secs()),
            text,
        },
    })
}

/// FNV-1a over the bytes: a stable fingerprint for the stamp file.
fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The conformance venv with the packages of `conformance/python`.
fn provision() -> Result<PathBuf, String> {
    provision_venv(
        &manifest_dir().join("conformance/python/requirements.txt"),
        &venv_dir(),
    )
}

/// Create the venv `venv` if missing and install the pinned packages of
/// `requirements` unless the stamp says this exact file is already installed.
/// Returns its python.
pub(crate) fn provision_venv(requirements: &Path, venv: &Path) -> Result<PathBuf, String> {
    let wanted = std::fs::read(requirements)
        .map(|b| fingerprint(&b))
        .map_err(|e| format!("{}: {e}", requirements.display()))?;
    let python = venv_python(venv);
    let stamp = venv.join("requirements.stamp");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok(python);
    }

    if !python.exists() {
        let python3 = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let mut version = Command::new(&python3);
        version.arg("--version");
        match run(version, Duration::from_secs(30)) {
            Ok(o) if o.success => {}
            Ok(o) => {
                return Err(format!(
                    "`{python3} --version` failed ({}): {}\n{INSTALL_HINT}",
                    o.status, o.text
                ))
            }
            Err(e) => return Err(format!("{e}\n`{python3}` was not found: {INSTALL_HINT}")),
        }
        let _ = std::fs::remove_dir_all(venv);
        let mut create = Command::new(&python3);
        create.args(["-m", "venv"]).arg(venv);
        let o = run(create, Duration::from_secs(120))?;
        if !o.success || !python.exists() {
            let _ = std::fs::remove_dir_all(venv);
            let mut probe = Command::new(&python3);
            probe.args(["-c", "import ensurepip"]);
            let no_ensurepip = run(probe, Duration::from_secs(30)).map_or(true, |p| !p.success);
            let why = if no_ensurepip {
                "this Python lacks ensurepip, so venv cannot install pip: install the venv \
                 package (Debian/Ubuntu: apt-get install python3-venv)"
            } else {
                INSTALL_HINT
            };
            return Err(format!(
                "`{python3} -m venv {}` failed ({}): {}\n{why}",
                venv.display(),
                o.status,
                o.text
            ));
        }
    }

    let mut install = Command::new(&python);
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(requirements);
    let o = run(install, INSTALL_TIMEOUT)?;
    if !o.success {
        let _ = std::fs::remove_file(&stamp);
        return Err(format!(
            "pip could not install {} ({}); it needs access to PyPI (or a mirror set with \
             PIP_INDEX_URL) and {INSTALL_HINT}:\n{}",
            requirements.display(),
            o.status,
            o.text
        ));
    }
    std::fs::write(&stamp, &wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(python)
}

#[test]
fn python_sdk_conformance() {
    let python = provision().unwrap_or_else(|e| panic!("client conformance: {e}"));
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "conformance/python"])
        .current_dir(manifest_dir())
        .env("V1COMPAT_BIN", env!("CARGO_BIN_EXE_v1compat"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTEST_ADDOPTS");
    let started = Instant::now();
    let o = run(pytest, SUITE_TIMEOUT).unwrap_or_else(|e| panic!("client conformance: {e}"));
    assert!(
        o.success,
        "client conformance suite failed ({}) after {:.1}s:\n{}",
        o.status,
        started.elapsed().as_secs_f64(),
        o.text
    );
    eprintln!(
        "client conformance: passed in {:.1}s\n{}",
        started.elapsed().as_secs_f64(),
        o.text.trim_end().lines().last().unwrap_or_default()
    );
}

#[test]
fn fingerprint_is_stable() {
    assert_eq!(fingerprint(b""), "cbf29ce484222325");
    assert_eq!(fingerprint(b"a"), "af63dc4c8601ec8c");
}
