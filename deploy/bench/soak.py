#!/usr/bin/env python3
"""Load side of deploy/bench/soak.sh (standard library only).

Sends well-behaved V1 requests at a steady rate over a few keep-alive
connections, and alongside them a share of misbehaving clients: slow heads
(one byte a second), slow bodies, and clients that hang up mid-request.
Every SAMPLE seconds it reads the gateway process's RSS and open file
descriptors from /proc. Loopback only; stops by itself after DURATION.

Prints one line per sample and a JSON summary last; exits 1 if a
well-behaved request failed or RSS grew by 5% or more (first sample after
warm-up to last), 0 otherwise.
"""

import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time


def proc_stats(pid):
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kb, fds


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0
        self.error_kinds = {}
        self.latencies = []
        self.misbehaving = {"slow_head": 0, "slow_body": 0, "hang_up": 0}

    def success(self, latency):
        with self.lock:
            self.ok += 1
            self.latencies.append(latency)

    def error(self, kind):
        with self.lock:
            self.errors += 1
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def bad(self, kind):
        with self.lock:
            self.misbehaving[kind] += 1


REQUESTS = [
    ("GET", "/api/store?search=maps&limit=3", None),
    ("GET", "/api/scraper?slug=coreclaw/google-maps-scraper", None),
    ("POST", "/api/v1/account/info", b"{}"),
    ("POST", "/api/v1/run/list", b'{"page_index":1,"page_size":5}'),
]


def well_behaved(host, port, key, rate, stop, counters):
    """One keep-alive connection sending at `rate` requests per second."""
    conn = None
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        method, path, body = random.choice(REQUESTS)
        headers = {"api-key": key}
        if body is not None:
            headers["content-type"] = "application/json"
        started = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or json.loads(data).get("code") != 0:
                counters.error(f"http_{resp.status}")
            else:
                counters.success(time.monotonic() - started)
            if resp.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except Exception as e:  # noqa: BLE001 - every failure is counted
            counters.error(type(e).__name__)
            if conn is not None:
                conn.close()
            conn = None
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            next_at = time.monotonic()
    if conn is not None:
        conn.close()


def misbehaving(host, port, key, every, stop, counters):
    """Every `every` seconds, one client that misbehaves in one of three ways."""
    while not stop.wait(every):
        kind = random.choice(["slow_head", "slow_body", "hang_up"])
        threading.Thread(
            target=one_bad_client, args=(host, port, key, kind, stop, counters), daemon=True
        ).start()


def one_bad_client(host, port, key, kind, stop, counters):
    counters.bad(kind)
    try:
        s = socket.create_connection((host, port), timeout=5)
    except OSError:
        return
    try:
        s.settimeout(60)
        if kind == "hang_up":
            body = b'{"page_index":1,"page_size":5}'
            s.sendall(
                b"POST /api/v1/run/list HTTP/1.1\r\nhost: soak\r\napi-key: " + key.encode()
                + b"\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body[:5]
            )
            return
        if kind == "slow_head":
            data = b"GET /api/store?search=maps HTTP/1.1\r\nhost: soak\r\nx-slow: " + b"a" * 100
        else:
            s.sendall(
                b"POST /api/v1/account/info HTTP/1.1\r\nhost: soak\r\napi-key: " + key.encode()
                + b"\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n"
            )
            data = b" " * 100
        # One byte a second until the gateway closes the connection.
        for b in data:
            if stop.is_set():
                return
            s.sendall(bytes([b]))
            time.sleep(1)
    except OSError:
        pass  # closed by the gateway's deadline: expected
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", required=True, help="host:port")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--key", default="sandbox-key")
    ap.add_argument("--duration", type=int, default=1800)
    ap.add_argument("--rate", type=float, default=40.0, help="well-behaved requests/s in total")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--bad-every", type=float, default=0.5, help="seconds between misbehaving clients")
    ap.add_argument("--sample", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=30)
    args = ap.parse_args()
    host, port = args.gateway.rsplit(":", 1)
    port = int(port)
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"

    stop = threading.Event()
    counters = Counters()
    threads = [
        threading.Thread(
            target=well_behaved,
            args=(host, port, args.key, args.rate / args.connections, stop, counters),
            daemon=True,
        )
        for _ in range(args.connections)
    ]
    threads.append(
        threading.Thread(
            target=misbehaving, args=(host, port, args.key, args.bad_every, stop, counters), daemon=True
        )
    )
    for t in threads:
        t.start()

    started = time.monotonic()
    samples = []
    print("elapsed_s  ok  errors  rss_kb  open_fds  bad_clients", flush=True)
    while True:
        remaining = args.duration - (time.monotonic() - started)
        if remaining <= 0:
            break
        time.sleep(min(args.sample, remaining))
        elapsed = int(time.monotonic() - started)
        rss, fds = proc_stats(args.pid)
        with counters.lock:
            row = (elapsed, counters.ok, counters.errors, rss, fds, sum(counters.misbehaving.values()))
        samples.append(row)
        print("%9d %4d %7d %7d %9d %12d" % row, flush=True)
    stop.set()
    for t in threads[:-1]:
        t.join(timeout=35)

    after_warmup = [s for s in samples if s[0] >= args.warmup] or samples
    first_rss, last_rss = after_warmup[0][3], after_warmup[-1][3]
    growth = (last_rss - first_rss) / first_rss * 100 if first_rss else 0.0
    lat = sorted(counters.latencies)
    pct = lambda p: round(lat[min(len(lat) - 1, int(len(lat) * p))] * 1000, 2) if lat else None
    summary = {
        "duration_s": args.duration,
        "well_behaved_ok": counters.ok,
        "well_behaved_errors": counters.errors,
        "error_kinds": counters.error_kinds,
        "misbehaving_clients": counters.misbehaving,
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
        "rss_kb": {"after_warmup": first_rss, "last": last_rss, "max": max(s[3] for s in samples)},
        "rss_growth_percent": round(growth, 2),
        "open_fds": {"min": min(s[4] for s in samples), "max": max(s[4] for s in samples), "last": samples[-1][4]},
    }
    print(json.dumps(summary), flush=True)
    failed = counters.errors > 0 or growth >= 5.0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
