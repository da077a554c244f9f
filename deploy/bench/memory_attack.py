#!/usr/bin/env python3
"""One attack of issue 34 on a running `v1compat serve`, and what it did to
the gateway's memory: driven by deploy/bench/memory-attack.sh, which starts
the gateway and its V2 sandbox and gives this script their addresses.

Attacks (loopback only, bounded in connections and in time):

  h2-zero-window  HTTP/2 connections that set SETTINGS_INITIAL_WINDOW_SIZE to
                  0, open 100 streams each of a 1,000-row V1 result page of a
                  2,600-row run, and never give any window: the answers cannot
                  be sent, so the gateway holds them.
  h2-uploads      HTTP/2 connections of 100 streams each, no key, each a
                  `Content-Length: 1000000` body of which 999,999 bytes are
                  sent as fast as flow control allows, never the last one.
  h1-uploads      HTTP/1.1 connections, no key, each the same unfinished
                  1 MB body.

Meanwhile a well-behaved client sends a V1 run detail every 100 ms on one
keep-alive connection (a new one if it is closed). The gateway's RSS is
sampled every 100 ms from /proc/PID/status, its peak read from VmHWM, and
`v1compat_memory_held_bytes` read from the admin listener every 500 ms (a
gateway without the memory budget has no such series).

Prints one JSON object. Needs the `h2` package (memory-attack.sh installs it
in a virtual environment).
"""

import argparse
import http.client
import json
import socket
import statistics
import threading
import time
import urllib.request

import h2.config
import h2.connection
import h2.events
import h2.settings

STREAMS = 100
UPLOAD = 1_000_000


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def metric(admin, name):
    """The sum of the series of `name` on the admin listener, or None."""
    try:
        with urllib.request.urlopen(f"http://{admin}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = [float(l.split()[-1]) for l in text.splitlines()
              if l.startswith(name) and not l.startswith("#")]
    return sum(values) if values else None


class Watch:
    """RSS and the budget's gauge, sampled until stopped."""

    def __init__(self, pid, admin):
        self.pid, self.admin = pid, admin
        self.rss_max = 0
        self.gauge_max = None
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._rss, daemon=True),
                        threading.Thread(target=self._gauge, daemon=True)]
        for t in self.threads:
            t.start()

    def _rss(self):
        while not self.stop.is_set():
            self.rss_max = max(self.rss_max, status_kb(self.pid, "VmRSS") or 0)
            time.sleep(0.1)

    def _gauge(self):
        while not self.stop.is_set():
            g = metric(self.admin, "v1compat_memory_held_bytes")
            if g is not None:
                self.gauge_max = max(self.gauge_max or 0, g)
            time.sleep(0.5)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class GoodClient:
    """A V1 run detail every 100 ms, with its status and latency."""

    def __init__(self, gateway, key, run):
        self.host, self.port = gateway.rsplit(":", 1)
        self.body = json.dumps({"run_slug": run})
        self.headers = {"api-key": key, "content-type": "application/json"}
        self.latencies, self.ok, self.failed = [], 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        conn = None
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, int(self.port), timeout=10)
                conn.request("POST", "/api/v1/run/detail", self.body, self.headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status == 200 and json.loads(data).get("code") == 0:
                    self.ok += 1
                else:
                    self.failed += 1
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError):
                self.failed += 1
                conn = None
            self.latencies.append((time.monotonic() - start) * 1000)
            time.sleep(0.1)

    def end(self):
        self.stop.set()
        self.thread.join()
        lat = sorted(self.latencies)
        pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
        return {"ok": self.ok, "failed": self.failed,
                "p50_ms": round(statistics.median(lat), 1) if lat else None,
                "p99_ms": pct(0.99), "max_ms": round(lat[-1], 1) if lat else None}


class H2Attacker:
    """One HTTP/2 connection of STREAMS streams: zero-window readers of a
    large answer, or unfinished uploads."""

    def __init__(self, gateway, kind, key, run, until):
        self.gateway, self.kind, self.key, self.run, self.until = gateway, kind, key, run, until
        self.statuses = {}
        self.error = None
        self.thread = threading.Thread(target=self._go, daemon=True)
        self.thread.start()

    def _go(self):
        host, port = self.gateway.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
        except OSError as e:
            self.error = str(e)
            return
        sock.settimeout(0.2)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        conn = h2.connection.H2Connection(config=config)
        if self.kind == "h2-zero-window":
            conn.local_settings = h2.settings.Settings(
                client=True,
                initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                                h2.settings.SettingCodes.ENABLE_PUSH: 0})
        conn.initiate_connection()
        remaining = {}
        for _ in range(STREAMS):
            sid = conn.get_next_available_stream_id()
            if self.kind == "h2-zero-window":
                body = json.dumps({"run_slug": self.run, "page_index": 1, "page_size": 1000}).encode()
                headers = [(":method", "POST"), (":path", "/api/v1/run/result/list"),
                           (":scheme", "http"), (":authority", self.gateway),
                           ("content-type", "application/json"), ("api-key", self.key),
                           ("content-length", str(len(body)))]
                conn.send_headers(sid, headers)
                conn.send_data(sid, body, end_stream=True)
            else:
                headers = [(":method", "POST"), (":path", "/api/v1/run/detail"),
                           (":scheme", "http"), (":authority", self.gateway),
                           ("content-type", "application/json"),
                           ("content-length", str(UPLOAD))]
                conn.send_headers(sid, headers)
                remaining[sid] = UPLOAD - 1
        try:
            sock.sendall(conn.data_to_send())
            while time.monotonic() < self.until:
                # Uploads: as much of each body as the window allows.
                for sid, left in list(remaining.items()):
                    try:
                        n = min(left, conn.local_flow_control_window(sid),
                                conn.max_outbound_frame_size)
                    except Exception:  # the stream was closed (answered, reset)
                        remaining.pop(sid)
                        continue
                    if n > 0:
                        conn.send_data(sid, b" " * n)
                        remaining[sid] = left - n
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = dict(event.headers).get(":status")
                        self.statuses[status] = self.statuses.get(status, 0) + 1
                        remaining.pop(event.stream_id, None)
                    elif isinstance(event, (h2.events.StreamReset, h2.events.StreamEnded)):
                        remaining.pop(event.stream_id, None)
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        self.error = f"GOAWAY {event.error_code}"
                # Never a WINDOW_UPDATE: received data is not acknowledged.
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        except OSError as e:
            self.error = str(e)
        self.sock = sock

    def close(self):
        self.thread.join()
        sock = getattr(self, "sock", None)
        if sock:
            sock.close()


class H1Uploader:
    """One HTTP/1.1 connection uploading an unfinished 1 MB body, no key."""

    def __init__(self, gateway, until):
        self.gateway, self.until = gateway, until
        self.status = None
        self.error = None
        self.thread = threading.Thread(target=self._go, daemon=True)
        self.thread.start()

    def _go(self):
        host, port = self.gateway.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall((f"POST /api/v1/run/detail HTTP/1.1\r\nhost: {self.gateway}\r\n"
                          f"content-type: application/json\r\ncontent-length: {UPLOAD}\r\n\r\n").encode())
            sock.settimeout(0.2)
            left = UPLOAD - 1
            chunk = b" " * 65536
            while time.monotonic() < self.until:
                if left > 0:
                    try:
                        left -= sock.send(chunk[:min(left, len(chunk))])
                    except socket.timeout:
                        pass
                try:
                    data = sock.recv(4096)
                except socket.timeout:
                    continue
                if not data:
                    break
                if self.status is None and data.startswith(b"HTTP/1.1 "):
                    self.status = data[9:12].decode()
                    break
            self.sock = sock
        except OSError as e:
            self.error = str(e)

    def close(self):
        self.thread.join()
        sock = getattr(self, "sock", None)
        if sock:
            sock.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attack", required=True, choices=["h2-zero-window", "h2-uploads", "h1-uploads"])
    p.add_argument("--gateway", required=True, help="HOST:PORT of the public listener")
    p.add_argument("--admin", required=True, help="HOST:PORT of the admin listener")
    p.add_argument("--pid", required=True, type=int, help="the gateway's process id")
    p.add_argument("--key", required=True)
    p.add_argument("--bulk-run", required=True, help="a run with at least 1,000 result rows")
    p.add_argument("--small-run", required=True, help="the run the well-behaved client reads")
    p.add_argument("--connections", type=int, help="attacking connections (12, 3, 200 by attack)")
    p.add_argument("--hold", type=float, default=20, help="seconds the attack lasts (20)")
    a = p.parse_args()
    connections = a.connections or {"h2-zero-window": 12, "h2-uploads": 3, "h1-uploads": 200}[a.attack]

    time.sleep(1)
    baseline = status_kb(a.pid, "VmRSS")
    watch = Watch(a.pid, a.admin)
    good = GoodClient(a.gateway, a.key, a.small_run)
    time.sleep(2)
    start = time.monotonic()
    until = start + a.hold
    attackers = []
    # Opened two a second (HTTP/2) or fifty a second (HTTP/1), as a client
    # ramping up would.
    per_second = 2 if a.attack.startswith("h2") else 50
    for i in range(connections):
        if a.attack == "h1-uploads":
            attackers.append(H1Uploader(a.gateway, until))
        else:
            attackers.append(H2Attacker(a.gateway, a.attack, a.key, a.bulk_run, until))
        time.sleep(1 / per_second)
    while time.monotonic() < until:
        time.sleep(0.1)
    end_rss = status_kb(a.pid, "VmRSS")
    gauge_end = metric(a.admin, "v1compat_memory_held_bytes")
    for x in attackers:
        x.close()
    time.sleep(5)
    good_result = good.end()
    watch.end()
    statuses = {}
    errors = 0
    for x in attackers:
        if isinstance(x, H1Uploader):
            key = x.status or "none"
            statuses[key] = statuses.get(key, 0) + 1
        else:
            for s, n in x.statuses.items():
                statuses[s] = statuses.get(s, 0) + n
        errors += x.error is not None
    print(json.dumps({
        "attack": a.attack,
        "connections": connections,
        "streams": connections * (STREAMS if a.attack.startswith("h2") else 1),
        "hold_s": a.hold,
        "rss_baseline_kb": baseline,
        "rss_peak_kb": status_kb(a.pid, "VmHWM"),
        "rss_sampled_max_kb": watch.rss_max,
        "rss_end_of_attack_kb": end_rss,
        "rss_5s_after_kb": status_kb(a.pid, "VmRSS"),
        "gauge_max_bytes": watch.gauge_max,
        "gauge_end_of_attack_bytes": gauge_end,
        "gauge_5s_after_bytes": metric(a.admin, "v1compat_memory_held_bytes"),
        "refusals": metric(a.admin, "v1compat_memory_refusals_total"),
        "attack_statuses": statuses,
        "attack_connection_errors": errors,
        "good_client": good_result,
    }))


if __name__ == "__main__":
    main()
