#!/usr/bin/env python3
"""Keep-alive request driver for deploy/bench/instructions.sh.

Sends a warm-up of requests on ONE HTTP/1.1 connection, starts the counter
(callgrind: zero the process's counts; strace: attach `strace -c -f`), sends
the measured requests on the same connection, stops the counter, and prints
one JSON line with the requests sent and what was counted. Every answer must
be HTTP 200 (and a success envelope, `"code":0`); the connection must stay
open throughout, so connection set-up never enters the figures.

  drive.py --port P --path /p [--path /q ...] [--method POST --body JSON]
           [--header 'k: v' ...] --warmup N --count N
           --measure callgrind|strace|none --pid PID --out FILE
"""

import argparse
import glob
import http.client
import json
import os
import signal
import subprocess
import sys
import time


def fail(msg):
    print(f"drive.py: {msg}", file=sys.stderr)
    sys.exit(1)


def tasks_traced(pid, tracer):
    """True when every thread of `pid` is traced by `tracer`."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                line = next(l for l in f if l.startswith("TracerPid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) != tracer:
            return False
    return True


class Callgrind:
    """Counts since `callgrind_control -z`, read from the dump `-d` writes."""

    def __init__(self, pid, prefix):
        self.pid, self.prefix = pid, prefix

    def _dumps(self):
        return set(glob.glob(f"{self.prefix}.{self.pid}.*"))

    def _control(self, flag):
        done = subprocess.run(["callgrind_control", flag, str(self.pid)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"callgrind_control {flag}: {done.stdout}{done.stderr}")

    def start(self):
        self.before = self._dumps()
        self._control("-z")

    def stop(self):
        self._control("-d")
        new = sorted(self._dumps() - self.before,
                     key=lambda p: int(p.rsplit(".", 1)[1]))
        if not new:
            fail("callgrind wrote no dump")
        total = None
        with open(new[-1]) as f:
            for line in f:
                if line.startswith(("totals:", "summary:")):
                    total = int(line.split()[1])
        if total is None:
            fail(f"no totals in {new[-1]}")
        return {"instructions": total, "dump": new[-1]}


class Strace:
    """System calls of every thread between attach and detach (`strace -c -f`)."""

    def __init__(self, pid, out):
        self.pid, self.out = pid, out

    def start(self):
        self.proc = subprocess.Popen(
            ["strace", "-c", "-f", "-qq", "-o", self.out, "-p", str(self.pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not tasks_traced(self.pid, self.proc.pid):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                fail("strace did not attach to every thread")
            time.sleep(0.01)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        by_call, total = {}, None
        with open(self.out) as f:
            for line in f:
                fields = line.split()
                if len(fields) < 5 or not fields[3].isdigit():
                    continue
                if fields[-1] == "total":
                    total = int(fields[3])
                else:
                    by_call[fields[-1]] = int(fields[3])
        if total is None:
            fail(f"no total in {self.out}")
        return {"syscalls": total, "by_syscall": by_call}


class Nothing:
    def start(self):
        pass

    def stop(self):
        return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--method", default="GET")
    ap.add_argument("--path", action="append", required=True,
                    help="sent in turn, cycling (several: the pages nginx proxies one by one)")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--body")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--measure", choices=["callgrind", "strace", "none"], default="none")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--out", help="strace: its output file; callgrind: the dump prefix")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()

    headers = {}
    for h in a.header:
        k, _, v = h.partition(":")
        headers[k.strip()] = v.strip()
    body = a.body.encode() if a.body is not None else None
    if body is not None:
        headers["Content-Type"] = "application/json"
    counter = {"callgrind": lambda: Callgrind(a.pid, a.out),
               "strace": lambda: Strace(a.pid, a.out),
               "none": Nothing}[a.measure]()

    conn = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
    conn.connect()
    sock = conn.sock
    sent = 0
    received = 0

    def one():
        nonlocal sent, received
        path = a.path[sent % len(a.path)]
        conn.request(a.method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        sent += 1
        received += len(data)
        if resp.status != 200 or b'"code":0' not in data[:200]:
            fail(f"{a.method} {path}: HTTP {resp.status}: {data[:300]!r}")
        if resp.will_close or conn.sock is not sock:
            fail(f"{a.method} {path}: the server closed the keep-alive connection")

    for _ in range(a.warmup):
        one()
    counter.start()
    first = sent
    received_before = received
    for _ in range(a.count):
        one()
    counted = counter.stop()
    conn.close()
    counted.update({"requests": sent - first,
                    "bytes_per_request": (received - received_before) // max(1, sent - first)})
    print(json.dumps(counted))


if __name__ == "__main__":
    main()
