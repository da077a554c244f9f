"""Session fixtures: one `v1compat sandbox` process for the whole suite, and a
second one in the n8n V1 node's configuration for the tests that need it.

The binary comes from the environment variable V1COMPAT_BIN (the Rust test
`tests/it/python_sdk.rs` sets it to the freshly built `v1compat`). All four
listeners use port 0; the chosen addresses are read from the file written by
`--ready-file`. The simulated clock runs at 0.001 s per real second, so runs
only move when a test advances the clock (`POST /__sandbox/advance`): what a test
sees does not depend on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

pytest.register_assert_rewrite("v1flow")

from coreclaw import CoreClawClient  # noqa: E402

import v1flow  # noqa: E402

STARTUP_SECONDS = 30.0
STOP_SECONDS = 10.0
# Simulated seconds per real second: nearly still unless advanced.
SPEED = "0.001"
API_KEY = "conformance-key"
# Log files of the sandboxes of this session, shown when a test failed.
_LOGS: list[Path] = []


class Sandbox:
    """Addresses of a running `v1compat sandbox` and the clock control."""

    def __init__(self, fields: dict[str, str], log_path: Path) -> None:
        self.gateway = fields["gateway"]
        self.admin = fields["admin"]
        self.upstream = fields["upstream"]
        self.legacy = fields["legacy"]
        self.key = fields["key"]
        self.log_path = log_path
        self._http = httpx.Client(timeout=10.0)

    def advance(self, seconds: float) -> None:
        """Move the simulated clock forward by `seconds`."""
        r = self._http.post(f"{self.upstream}/__sandbox/advance", json={"seconds": seconds})
        assert r.status_code == 200, f"advance failed: {r.status_code} {r.text}"

    def v2(self, method: str, path: str, **kw) -> dict:
        """A V2 call with the demo key (to prepare state the V1 API cannot create)."""
        r = self._http.request(
            method,
            f"{self.upstream}{path}",
            headers={"Authorization": f"Bearer {self.key}"},
            **kw,
        )
        assert r.status_code == 200, f"V2 {method} {path}: {r.status_code} {r.text}"
        body = r.json()
        assert body["code"] == 0, body
        return body

    def close(self) -> None:
        self._http.close()


def _die_with_parent() -> None:
    """Linux: have the kernel stop the sandbox if this pytest process is killed
    (say by the Rust test's timeout) before the fixture's teardown runs."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass


def _parse_ready(text: str) -> dict[str, str] | None:
    line = text.strip()
    if not line.startswith("READY ") or not text.endswith("\n"):
        return None
    return dict(part.split("=", 1) for part in line.split()[1:])


@contextlib.contextmanager
def _running_sandbox(request, settings: dict[str, str]):
    """A `v1compat sandbox` process for as long as the block runs. `settings`
    are gateway configuration overrides (`V1COMPAT_<SECTION>__<KEY>`); the
    sandbox's native V1 service takes the gateway's `[compat]` dialect."""
    binary = os.environ.get("V1COMPAT_BIN")
    if not binary:
        pytest.exit(
            "V1COMPAT_BIN is not set: point it at a built v1compat binary "
            "(cargo test sets it; by hand: V1COMPAT_BIN=target/debug/v1compat)",
            returncode=2,
        )
    workdir = Path(tempfile.mkdtemp(prefix="v1compat-conformance-"))
    ready = workdir / "ready"
    log_path = workdir / "sandbox.log"
    log = open(log_path, "wb")
    _LOGS.append(log_path)
    cmd = [binary, "sandbox", "--speed", SPEED, "--api-key", API_KEY, "--ready-file", str(ready)]
    for flag in ("--listen", "--admin-listen", "--upstream-listen", "--legacy-listen"):
        cmd += [flag, "127.0.0.1:0"]
    # The gateway reads V1COMPAT_<SECTION>__<KEY> variables as configuration, and
    # would reject V1COMPAT_BIN itself: start it with none but `settings`.
    env = {k: v for k, v in os.environ.items() if not k.startswith("V1COMPAT_")}
    env.update(settings)
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        preexec_fn=_die_with_parent if os.name == "posix" else None,
    )
    try:
        fields = None
        deadline = time.monotonic() + STARTUP_SECONDS
        while fields is None:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"v1compat sandbox exited with {proc.returncode} before it was ready:\n"
                    + log_path.read_text(errors="replace")
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"v1compat sandbox not ready after {STARTUP_SECONDS}s")
            if ready.exists():
                fields = _parse_ready(ready.read_text())
            if fields is None:
                time.sleep(0.05)
        sb = Sandbox(fields, log_path)
        try:
            yield sb
        finally:
            sb.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_SECONDS)
        log.close()
        if request.session.testsfailed == 0:
            _LOGS.remove(log_path)
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox(request):
    """The sandbox in the default V1 dialect."""
    with _running_sandbox(request, {}) as sb:
        yield sb


# The configuration the README documents for the n8n V1 node (n8n-nodes-coreclaw
# 0.1.x): business errors as HTTP 200, `search=` lists every worker, a missing
# key is 400 / 4000.
N8N_SETTINGS = {
    "V1COMPAT_COMPAT__BUSINESS_ERROR_STATUS": "200",
    "V1COMPAT_COMPAT__EMPTY_STORE_SEARCH": "all",
    "V1COMPAT_COMPAT__MISSING_KEY_STATUS": "400",
}


@pytest.fixture(scope="session")
def n8n_sandbox(request):
    """A second sandbox, gateway and native V1 service in the n8n configuration."""
    with _running_sandbox(request, N8N_SETTINGS) as sb:
        yield sb


@pytest.fixture(scope="session")
def sdk(sandbox):
    """The published V1 SDK, unchanged, pointed at the gateway."""
    with CoreClawClient(api_key=sandbox.key, base_url=sandbox.gateway, timeout=30.0) as c:
        yield c


@pytest.fixture(scope="session")
def legacy_sdk(sandbox):
    """The same SDK pointed at the sandbox's native V1 service (the reference)."""
    with CoreClawClient(api_key=sandbox.key, base_url=sandbox.legacy, timeout=30.0) as c:
        yield c


@pytest.fixture(scope="session")
def poller(sandbox, sdk):
    return v1flow.Poller(sandbox, sdk)


class _CallbackHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        with self.server.lock:
            self.server.received.append((self.path, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def callback_url():
    """A local receiver for the `callback_url` that V1 rerun and task run require."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CallbackHandler)
    server.lock = threading.Lock()
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/callback"
    finally:
        server.shutdown()
        server.server_close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """On failure, show the end of the sandbox log (gateway and sandbox output)."""
    if exitstatus == 0:
        return
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    for path in _LOGS:
        lines = ansi.sub("", path.read_text(errors="replace")).splitlines()
        terminalreporter.section(f"last lines of {path}")
        for line in lines[-40:]:
            terminalreporter.line(line)
