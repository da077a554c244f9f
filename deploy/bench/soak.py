#!/usr/bin/env python3
"""Load side of deploy/bench/soak.sh (standard library only).

Sends well-behaved V1 requests at a steady rate, and alongside them a share
of misbehaving clients: slow heads (one byte a second), slow bodies, and
clients that hang up mid-request. Every SAMPLE seconds it reads the gateway
process's RSS and open file descriptors from /proc. Loopback only; stops by
itself after DURATION.

The rate is kept open-loop: a pacer thread hands out one slot per 1/RATE
seconds, and a pool of CONNECTIONS keep-alive connections takes the slots.
A slow answer, or a worker thread the scheduler left waiting on a busy
machine, delays one connection, not the rate: the other connections take
the next slots, and slots that fell behind are sent as soon as a connection
is free (none is skipped unless a backlog of 10 s builds up).

Prints one line per sample and a JSON summary last; exits 1 if a
well-behaved request failed, RSS grew by 5% or more (first sample after
warm-up to last), or the rate was not held (after warm-up, fewer answers per
second than 95% of RATE), 0 otherwise.
"""

import argparse
import http.client
import json
import os
import queue
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


def cpu_seconds(pid):
    """User plus system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        # Fields after the command name (which may hold spaces), from field 3.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0
        self.error_kinds = {}
        self.latencies = []
        # Seconds between a request's slot and its sending: the client's own delay.
        self.lags = []
        self.skipped = 0
        self.misbehaving = {"slow_head": 0, "slow_body": 0, "hang_up": 0}

    def success(self, latency):
        with self.lock:
            self.ok += 1
            self.latencies.append(latency)

    def sent(self, lag):
        with self.lock:
            self.lags.append(lag)

    def skip(self):
        with self.lock:
            self.skipped += 1

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


def pacer(rate, slots, stop, counters):
    """Puts one slot (its due time) on `slots` every 1/`rate` seconds. Slots
    that fell due while this thread was not running are put at once, so a
    stall of the client does not lower the rate; a slot that finds 10 s of
    backlog already queued is skipped and counted."""
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        while next_at <= now:
            try:
                slots.put_nowait(next_at)
            except queue.Full:
                counters.skip()
            next_at += interval
        stop.wait(next_at - time.monotonic())


def well_behaved(host, port, key, slots, stop, counters):
    """One keep-alive connection sending a request for each slot it takes."""
    conn = None
    while not stop.is_set():
        try:
            due = slots.get(timeout=0.5)
        except queue.Empty:
            continue
        method, path, body = random.choice(REQUESTS)
        headers = {"api-key": key}
        if body is not None:
            headers["content-type"] = "application/json"
        started = time.monotonic()
        counters.sent(started - due)
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
    ap.add_argument(
        "--connections", type=int, default=16, help="keep-alive connections sharing the rate"
    )
    ap.add_argument("--bad-every", type=float, default=0.5, help="seconds between misbehaving clients")
    ap.add_argument("--sample", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=30)
    args = ap.parse_args()
    host, port = args.gateway.rsplit(":", 1)
    port = int(port)
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"

    stop = threading.Event()
    counters = Counters()
    slots = queue.Queue(maxsize=max(1, int(args.rate * 10)))
    threads = [
        threading.Thread(
            target=well_behaved,
            args=(host, port, args.key, slots, stop, counters),
            daemon=True,
        )
        for _ in range(args.connections)
    ]
    threads.append(threading.Thread(target=pacer, args=(args.rate, slots, stop, counters), daemon=True))
    threads.append(
        threading.Thread(
            target=misbehaving, args=(host, port, args.key, args.bad_every, stop, counters), daemon=True
        )
    )
    for t in threads:
        t.start()

    started = time.monotonic()
    gateway_cpu_start = cpu_seconds(args.pid)
    samples = []
    # `rate`: well-behaved answers per second in the sample's window.
    print("elapsed_s     ok  errors   rate  rss_kb  open_fds  bad_clients", flush=True)
    last_t, last_done = started, 0
    while True:
        remaining = args.duration - (time.monotonic() - started)
        if remaining <= 0:
            break
        time.sleep(min(args.sample, remaining))
        now = time.monotonic()
        elapsed = int(now - started)
        rss, fds = proc_stats(args.pid)
        with counters.lock:
            done = counters.ok + counters.errors
            window_rate = (done - last_done) / (now - last_t) if now > last_t else 0.0
            row = (elapsed, counters.ok, counters.errors, window_rate, rss, fds,
                   sum(counters.misbehaving.values()))
        last_t, last_done = now, done
        samples.append(row)
        print("%9d %6d %7d %6.1f %7d %9d %12d" % row, flush=True)
    stop.set()
    gateway_cpu = cpu_seconds(args.pid) - gateway_cpu_start
    for t in threads[:-2]:
        t.join(timeout=35)

    after_warmup = [s for s in samples if s[0] >= args.warmup] or samples
    first_rss, last_rss = after_warmup[0][4], after_warmup[-1][4]
    growth = (last_rss - first_rss) / first_rss * 100 if first_rss else 0.0
    # A leak keeps growing: the second half of the run on its own.
    half_rss = next((s[4] for s in samples if s[0] >= args.duration // 2), last_rss)
    late_growth = (last_rss - half_rss) / half_rss * 100 if half_rss else 0.0
    # The rate after warm-up: answers between the first sample after warm-up
    # and the last, against what the pacer scheduled in that time.
    first, last = after_warmup[0], after_warmup[-1]
    span = last[0] - first[0]
    if span > 0:
        answered = (last[1] + last[2]) - (first[1] + first[2])
        achieved = answered / span
    else:
        achieved = (counters.ok + counters.errors) / args.duration
    rate_held = achieved >= 0.95 * args.rate
    window_rates = [s[3] for s in after_warmup]

    def pct(values, p):
        v = sorted(values)
        return round(v[min(len(v) - 1, int(len(v) * p))] * 1000, 2) if v else None

    summary = {
        "duration_s": args.duration,
        "connections": args.connections,
        "target_rate": args.rate,
        "achieved_rate": round(achieved, 2),
        "window_rate": {"min": round(min(window_rates), 1), "max": round(max(window_rates), 1)},
        "rate_held": rate_held,
        "skipped_slots": counters.skipped,
        "well_behaved_ok": counters.ok,
        "well_behaved_errors": counters.errors,
        "error_kinds": counters.error_kinds,
        "misbehaving_clients": counters.misbehaving,
        "latency_ms": {
            "p50": pct(counters.latencies, 0.5),
            "p99": pct(counters.latencies, 0.99),
            "max": pct(counters.latencies, 1.0),
        },
        "client_lag_ms": {"p50": pct(counters.lags, 0.5), "p99": pct(counters.lags, 0.99),
                          "max": pct(counters.lags, 1.0)},
        # CPU used over the run: a rate not held with a slow client or gateway
        # and little CPU used means the machine did not give them any (load, nice).
        "cpu_s": {"gateway": round(gateway_cpu, 1), "client": round(time.process_time(), 1)},
        "client_niceness": os.nice(0),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "rss_kb": {"after_warmup": first_rss, "half_way": half_rss, "last": last_rss, "max": max(s[4] for s in samples)},
        "rss_growth_percent": round(growth, 2),
        "rss_growth_second_half_percent": round(late_growth, 2),
        "open_fds": {"min": min(s[5] for s in samples), "max": max(s[5] for s in samples), "last": samples[-1][5]},
    }
    print(json.dumps(summary), flush=True)
    reasons = []
    if counters.errors > 0:
        reasons.append(f"{counters.errors} well-behaved requests failed")
    if growth >= 5.0:
        reasons.append(f"RSS grew {growth:.1f}%")
    if not rate_held:
        reasons.append(f"rate not held: {achieved:.1f} of {args.rate:g} req/s")
    for r in reasons:
        print(f"FAIL: {r}", file=sys.stderr, flush=True)
    sys.exit(1 if reasons else 0)


if __name__ == "__main__":
    main()
