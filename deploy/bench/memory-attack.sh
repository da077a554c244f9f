#!/usr/bin/env bash
# The memory attacks of issue 34 on `v1compat serve`, one fresh gateway each,
# with a well-behaved client beside them: HTTP/2 clients that give no
# flow-control window to 100 streams of large answers each, and unfinished
# 1 MB uploads without a key over HTTP/2 (100 streams a connection) and
# HTTP/1.1 (one a connection). Reports the gateway's RSS (before, peak from
# VmHWM, at the end of the attack, 5 s after), the memory budget's gauge
# where the binary has one, what the attackers were answered and whether the
# other client was served (deploy/bench/memory_attack.py does the attacking).
#
#   deploy/bench/memory-attack.sh [--binary PATH] [--cargo-profile NAME]
#                                 [--hold SECONDS] [--label TEXT] [--out FILE]
#                                 [--no-install] [--no-build]
#
# Builds the `dist` profile (--cargo-profile to change it) unless --binary
# names one, e.g. a build of an older commit to compare with. Loopback only,
# bounded: 12, 3 and 200 attacking connections, each attack --hold seconds
# (20). Installs the `h2` package from PyPI into a virtual environment under
# the target directory. See deploy/bench/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/bench"
CARGO_PROFILE=dist
BIN=""
HOLD=20
LABEL=""
OUT=""
INSTALL=1
BUILD=1
KEY=sandbox-key
SEED=7
ATTACKS=(h2-zero-window h2-uploads h1-uploads)

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 64; }
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN="$2"; BUILD=0; shift 2 ;;
    --cargo-profile) CARGO_PROFILE="$2"; shift 2 ;;
    --hold) HOLD="$2"; shift 2 ;;
    --label) LABEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$HOLD" =~ ^[1-9][0-9]*$ ]] && [ "$HOLD" -le 120 ] || { echo "--hold must be 1 to 120 seconds" >&2; exit 64; }

log() { printf '[memory-attack %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

. "$HERE/common.sh"
install_missing "$INSTALL" curl=curl python3=python3

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ "$BUILD" = 1 ]; then
  log "cargo build --profile $CARGO_PROFILE --bin v1compat"
  (cd "$ROOT" && cargo build --locked --profile "$CARGO_PROFILE" --quiet --bin v1compat)
fi
[ -n "$BIN" ] || BIN="$TARGET_DIR/$CARGO_PROFILE/v1compat"
[ -x "$BIN" ] || die "no binary at $BIN (drop --no-build, or give --binary)"
# Absolute: the gateways run in the work directory.
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

# The HTTP/2 client library, in a virtual environment of its own.
VENV="$TARGET_DIR/memory-attack-venv"
if ! "$VENV/bin/python" -c 'import h2' 2>/dev/null; then
  [ "$INSTALL" = 1 ] || die "the h2 package is missing from $VENV (run without --no-install)"
  log "installing h2 into $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet 'h2>=4.1,<5'
fi

WORK="$(mktemp -d /tmp/v1compat-memory-attack.XXXXXX)"
PIDS=()
stop_all_on_exit

log "starting the sandbox V2 service (seed $SEED)"
start_sandbox "$BIN"
# shellcheck source=deploy/bench/seed-runs.sh
. "$HERE/seed-runs.sh"

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
for attack in "${ATTACKS[@]}"; do
  port=$(free_port); admin=$(free_port)
  # Defaults for everything but where it listens and what it calls: the
  # budget (64 MiB), 32 held streams a connection, 30 s write and body
  # timeouts (longer than an attack lasts). Started in the work directory,
  # so files a build keeps beside it by default (the migration inventory's
  # redb file) go with it, whatever the build knows of them.
  (cd "$WORK" && V1COMPAT_UPSTREAM__BASE_URL="$V2" V1COMPAT_UPSTREAM__SERVICE_KEY="$KEY" \
    V1COMPAT_LISTEN__PUBLIC="127.0.0.1:$port" V1COMPAT_LISTEN__ADMIN="127.0.0.1:$admin" \
    V1COMPAT_LOG__LEVEL=warn exec "$BIN" serve >"$WORK/gateway-$attack.log" 2>&1) &
  pid=$!; PIDS+=("$pid")
  wait_http "http://127.0.0.1:$admin/healthz" "v1compat ($attack)" "$pid"
  log "$attack against pid $pid for ${HOLD}s"
  "$VENV/bin/python" "$HERE/memory_attack.py" --attack "$attack" --gateway "127.0.0.1:$port" \
    --admin "127.0.0.1:$admin" --pid "$pid" --key "$KEY" --bulk-run "$RUN_BULK" \
    --small-run "$RUN_SMALL" --hold "$HOLD" >>"$RESULTS" || die "$attack failed"
  tail -1 "$RESULTS" >&2
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done

REPORT="$WORK/report.md"
{
  echo "| | |"
  echo "|---|---|"
  echo "| Date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| Binary | ${LABEL:+$LABEL: }\`$("$BIN" --version)\` |"
  echo "| Command | \`deploy/bench/memory-attack.sh${LABEL:+ …}\` (hold ${HOLD} s) |"
  echo "| Machine | $(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg) |"
  echo
  python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mib_kb = lambda kb: f"{kb / 1024:.0f} MiB" if kb is not None else "–"
mib = lambda b: f"{b / 1048576:.1f} MiB" if b is not None else "no gauge"
print("| Attack | RSS before | peak (VmHWM) | end of attack | 5 s after | gauge max / after | attackers answered | other client: ok / failed, p99 |")
print("|---|---|---|---|---|---|---|---|")
what = {"h2-zero-window": "HTTP/2 zero window, {c} conn. × 100 streams of 1,000 rows",
        "h2-uploads": "HTTP/2 uploads, no key, {c} conn. × 100 streams × 1 MB",
        "h1-uploads": "HTTP/1.1 uploads, no key, {c} conn. × 1 MB"}
for r in rows:
    s = ", ".join(f"{k}: {v}" for k, v in sorted(r["attack_statuses"].items()))
    g = r["good_client"]
    print(f"| {what[r['attack']].format(c=r['connections'])} | {mib_kb(r['rss_baseline_kb'])} | {mib_kb(r['rss_peak_kb'])} "
          f"| {mib_kb(r['rss_end_of_attack_kb'])} | {mib_kb(r['rss_5s_after_kb'])} "
          f"| {mib(r['gauge_max_bytes'])} / {mib(r['gauge_5s_after_bytes'])} | {s or 'none'} "
          f"| {g['ok']} / {g['failed']}, {g['p99_ms']} ms |")
EOF
} >"$REPORT"
[ -n "$OUT" ] && { mkdir -p "$(dirname "$OUT")"; cp "$REPORT" "$OUT"; cp "$RESULTS" "$OUT.jsonl"; log "written to $OUT"; }
cat "$REPORT"
