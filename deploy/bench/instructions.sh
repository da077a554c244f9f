#!/usr/bin/env bash
# v1compat's deterministic cost per request next to a plain reverse proxy
# (nginx), with the same sandbox V2 behind both: user-space instructions
# (valgrind --tool=callgrind) and system calls (strace -c -f) per request,
# over keep-alive requests on one connection after a warm-up. Instruction
# counts do not depend on what else the machine runs. The same V2 requests
# also go through examples/bare_proxy.rs, the least a proxy on v1compat's
# own stack (tokio, hyper) spends, and the V1 run detail through
# examples/bare_translation.rs, the least its translation spends on that
# stack. See deploy/bench/README.md.
#
#   deploy/bench/instructions.sh [--requests N] [--warmup N] [--out FILE]
#                                [--profile DIR] [--log-level LEVEL]
#                                [--binary PATH] [--floor PATH]
#                                [--translation PATH] [--cargo-profile NAME]
#                                [--inventory on|off] [--no-install] [--no-build]
#
# Builds and measures the `dist` profile of Cargo.toml (what ships); with
# --cargo-profile release, the lighter profile of local builds. The
# migration inventory is on, as it ships (its redb file in the run's work
# directory); --inventory off measures without it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/bench"
REQUESTS=300
WARMUP=50
OUT=""
PROFILE=""
LOG_LEVEL=warn   # as deploy/bench/run.sh runs it
INSTALL=1
BUILD=1
BIN=""
FLOOR=""
TRANSLATION=""
CARGO_PROFILE=dist
INVENTORY=on
KEY=sandbox-key
SEED=7
COMMAND="deploy/bench/instructions.sh${*:+ $*}"

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 64
}
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --profile) PROFILE="$2"; shift 2 ;;
    --log-level) LOG_LEVEL="$2"; shift 2 ;;
    --binary) BIN="$2"; BUILD=0; shift 2 ;;
    --floor) FLOOR="$2"; shift 2 ;;
    --translation) TRANSLATION="$2"; shift 2 ;;
    --cargo-profile) CARGO_PROFILE="$2"; shift 2 ;;
    --inventory) INVENTORY="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
case "$INVENTORY" in on|off) ;; *) echo "--inventory must be on or off" >&2; exit 64 ;; esac
[[ "$REQUESTS" =~ ^[1-9][0-9]*0$ ]] || { echo "--requests must be a positive multiple of 10" >&2; exit 64; }
[[ "$WARMUP" =~ ^[1-9][0-9]*0$ ]] || { echo "--warmup must be a positive multiple of 10" >&2; exit 64; }
# A 1,000-row V1 page is ten V2 calls: a fifth of the requests keeps the
# run short and still makes hundreds of V2 calls.
REQUESTS_1000=$(( REQUESTS / 5 > 20 ? REQUESTS / 5 : 20 ))
WARMUP_1000=$(( WARMUP / 5 > 5 ? WARMUP / 5 : 5 ))

log() { printf '[instructions %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- tools
. "$HERE/common.sh"
. "$HERE/nginx.sh"
install_missing "$INSTALL" valgrind=valgrind strace=strace nginx=nginx-light curl=curl \
  python3=python3 taskset=util-linux
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

if [ "$BUILD" = 1 ]; then
  log "cargo build --profile $CARGO_PROFILE --bin v1compat --example bare_proxy --example bare_translation"
  (cd "$ROOT" && timeout 3600 cargo build --profile "$CARGO_PROFILE" --quiet --bin v1compat \
    --example bare_proxy --example bare_translation)
fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT_DIR="$TARGET_DIR/$CARGO_PROFILE"
[ -n "$BIN" ] || BIN="$OUT_DIR/v1compat"
[ -x "$BIN" ] || die "no $CARGO_PROFILE build at $BIN (drop --no-build)"
[ -n "$FLOOR" ] || FLOOR="$OUT_DIR/examples/bare_proxy"
[ -x "$FLOOR" ] || die "no $CARGO_PROFILE build of the bare proxy at $FLOOR (cargo build --profile $CARGO_PROFILE --example bare_proxy, or --floor PATH)"
[ -n "$TRANSLATION" ] || TRANSLATION="$OUT_DIR/examples/bare_translation"
[ -x "$TRANSLATION" ] || die "no $CARGO_PROFILE build of the bare translation at $TRANSLATION (cargo build --profile $CARGO_PROFILE --example bare_translation, or --translation PATH)"

# ---------------------------------------------------------------- processes
WORK="$(mktemp -d /tmp/v1compat-instructions.XXXXXX)"
PIDS=()
stop_all_on_exit

stop() { # pid: TERM, then wait for it to go (valgrind writes its last dump first)
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$1" 2>/dev/null || true
}

log "starting the sandbox V2 service (seed $SEED)"
start_sandbox "$BIN"
V2_PORT=${V2##*:}

# shellcheck source=deploy/bench/seed-runs.sh
. "$ROOT/deploy/bench/seed-runs.sh"

# Workloads: what nginx proxies (V2, one or several paths sent in turn) and
# what v1compat translates (one V1 request), with the V2 calls per V1 request.
WORKLOADS=(detail result-100 result-1000 runs store)
declare -A NG_PATHS V1_PATH V1_BODY V2_CALLS V1_COUNT V1_WARM
NG_PATHS[detail]="/api/v2/worker-runs/$RUN_SMALL"
V1_PATH[detail]=/api/v1/run/detail; V1_BODY[detail]="{\"run_slug\":\"$RUN_SMALL\"}"
NG_PATHS[result-100]="/api/v2/worker-runs/$RUN_BULK/result?offset=1&limit=100"
V1_PATH[result-100]=/api/v1/run/result/list
V1_BODY[result-100]="{\"run_slug\":\"$RUN_BULK\",\"page_index\":1,\"page_size\":100}"
NG_PATHS[result-1000]=$(for o in 1 2 3 4 5 6 7 8 9 10; do printf '/api/v2/worker-runs/%s/result?offset=%d&limit=100 ' "$RUN_BULK" "$o"; done)
V1_PATH[result-1000]=/api/v1/run/result/list
V1_BODY[result-1000]="{\"run_slug\":\"$RUN_BULK\",\"page_index\":1,\"page_size\":1000}"
for w in detail result-100; do V2_CALLS[$w]=1; V1_COUNT[$w]=$REQUESTS; V1_WARM[$w]=$WARMUP; done
V2_CALLS[result-1000]=10; V1_COUNT[result-1000]=$REQUESTS_1000; V1_WARM[result-1000]=$WARMUP_1000
# The first page of the run list, 20 runs (no target: shown for what it costs).
NG_PATHS[runs]="/api/v2/worker-runs?offset=1&limit=20"
V1_PATH[runs]=/api/v1/run/list; V1_BODY[runs]='{"page_index":1,"page_size":20}'
V2_CALLS[runs]=1; V1_COUNT[runs]=$REQUESTS; V1_WARM[runs]=$WARMUP
# A store search (GET, one item found; no target), as run.sh sends it.
NG_PATHS[store]="/api/v2/store?keyword=maps&offset=1&limit=10"
V1_PATH[store]="/api/store?search=maps&limit=10"; V1_BODY[store]=""
V2_CALLS[store]=1; V1_COUNT[store]=$REQUESTS; V1_WARM[store]=$WARMUP

RESULTS="$WORK/results.jsonl"   # one line per proxy, tool and workload
: >"$RESULTS"
[ -n "$PROFILE" ] && mkdir -p "$PROFILE"

# Each proxy may use one CPU, as in run.sh: nginx runs one worker, and
# v1compat (and the floor) choose their runtime by the CPUs they may use.
PROXY_CPU=$(( $(nproc) > 1 ? 1 : 0 ))
PIN=(taskset -c "$PROXY_CPU")

# Names uncompressed: each saved dump reads on its own (callgrind_annotate).
VALGRIND=(valgrind --tool=callgrind --dump-instr=no --compress-strings=no --compress-pos=no
  --callgrind-out-file="$WORK/cg.%p")

start_nginx() { # tool -> sets PROXY_PID, PROXY_PORT
  local port; port=$(free_port)
  rm -rf "$WORK/nginx"
  # One process (no master): what valgrind and strace see is the whole proxy.
  nginx_conf "$WORK/nginx" "$port" "127.0.0.1:$V2_PORT" "master_process off;"
  local pre=("${PIN[@]}"); [ "$1" = callgrind ] && pre+=("${VALGRIND[@]}")
  "${pre[@]}" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" \
    >"$WORK/nginx-$1.log" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID"); PROXY_PORT=$port
  wait_http "http://127.0.0.1:$port/__sandbox/healthz" "nginx ($1)" "$PROXY_PID"
}

start_floor() { # tool -> sets PROXY_PID, PROXY_PORT
  local port; port=$(free_port)
  local pre=("${PIN[@]}"); [ "$1" = callgrind ] && pre+=("${VALGRIND[@]}")
  "${pre[@]}" "$FLOOR" "127.0.0.1:$port" "$V2" >"$WORK/floor-$1.log" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID"); PROXY_PORT=$port
  wait_http "http://127.0.0.1:$port/__sandbox/healthz" "bare proxy ($1)" "$PROXY_PID"
}

start_translation() { # tool [headers] -> sets PROXY_PID, PROXY_PORT
  local port; port=$(free_port)
  local pre=("${PIN[@]}"); [ "$1" = callgrind ] && pre+=("${VALGRIND[@]}")
  "${pre[@]}" "$TRANSLATION" "127.0.0.1:$port" "$V2" ${2:+"$2"} >"$WORK/translation-$1.log" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID"); PROXY_PORT=$port
  wait_http "http://127.0.0.1:$port/__sandbox/healthz" "bare translation ($1)" "$PROXY_PID"
}

start_v1compat() { # tool -> sets PROXY_PID, PROXY_PORT
  local port admin; port=$(free_port); admin=$(free_port)
  local pre=("${PIN[@]}"); [ "$1" = callgrind ] && pre+=("${VALGRIND[@]}")
  V1COMPAT_UPSTREAM__BASE_URL="$V2" V1COMPAT_UPSTREAM__SERVICE_KEY="$KEY" \
  V1COMPAT_LISTEN__PUBLIC="127.0.0.1:$port" V1COMPAT_LISTEN__ADMIN="127.0.0.1:$admin" \
  V1COMPAT_LOG__LEVEL="$LOG_LEVEL" \
  V1COMPAT_INVENTORY__ENABLED="$([ "$INVENTORY" = on ] && echo true || echo false)" \
  V1COMPAT_INVENTORY__STORE="redb:$WORK/inventory-$1.redb" \
    "${pre[@]}" "$BIN" serve >"$WORK/v1compat-$1.log" 2>&1 &
  PROXY_PID=$!; PIDS+=("$PROXY_PID"); PROXY_PORT=$port
  wait_http "http://127.0.0.1:$admin/healthz" "v1compat ($1)" "$PROXY_PID"
}

measure() { # proxy tool workload
  local proxy="$1" tool="$2" w="$3" out args=()
  case "$tool" in
    callgrind) out="$WORK/cg" ;;
    strace) out="$WORK/strace-$proxy-$w.txt" ;;
  esac
  if [ "$proxy" = nginx ] || [ "$proxy" = floor ]; then
    local p
    for p in ${NG_PATHS[$w]}; do args+=(--path "$p"); done
    args+=(--header "$AUTH" --warmup "$WARMUP" --count "$REQUESTS")
  else
    args+=(--path "${V1_PATH[$w]}" --header "api-key: $KEY"
      --warmup "${V1_WARM[$w]}" --count "${V1_COUNT[$w]}")
    # A workload with a body is a V1 POST; one without, a GET.
    if [ -n "${V1_BODY[$w]}" ]; then args+=(--method POST --body "${V1_BODY[$w]}"); else args+=(--method GET); fi
  fi
  local line
  line=$(python3 "$HERE/drive.py" --port "$PROXY_PORT" "${args[@]}" --measure "$tool" \
    --pid "$PROXY_PID" --out "$out") || die "$proxy $w ($tool) failed"
  printf '{"proxy":"%s","tool":"%s","workload":"%s","result":%s}\n' "$proxy" "$tool" "$w" "$line" >>"$RESULTS"
  log "$proxy $w $tool: ${line:0:160}"
  if [ "$tool" = callgrind ] && [ -n "$PROFILE" ]; then
    local dump; dump=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dump"])' "$line")
    cp "$dump" "$PROFILE/callgrind.$proxy.$w"
  fi
}

for proxy in nginx floor v1compat; do
  for tool in callgrind strace; do
    log "$proxy under $tool"
    "start_$proxy" "$tool"
    for w in "${WORKLOADS[@]}"; do measure "$proxy" "$tool" "$w"; done
    stop "$PROXY_PID"
  done
done
# The run detail's translation alone: without and with v1compat's headers, and with
# the least its features can cost around it.
for variant in "" headers features; do
  log "bare translation${variant:+ with $variant} under callgrind"
  start_translation callgrind "$variant"
  measure "translation${variant:+-$variant}" callgrind detail
  stop "$PROXY_PID"
done

# ---------------------------------------------------------------- report
REPORT="$WORK/report.md"
python3 - "$RESULTS" >"$WORK/tables.md" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
get = lambda p, t, w: next(r["result"] for r in rows if r["proxy"] == p and r["tool"] == t and r["workload"] == w)
calls = {"detail": 1, "result-100": 1, "result-1000": 10, "runs": 1, "store": 1}
label = {"detail": "run detail", "result-100": "result list, 100 rows",
         "result-1000": "result list, 1,000 rows (nginx: the ten 100-row V2 calls)",
         "runs": "run list, 20 runs", "store": "store search, 1 item"}
# The targets of the house (issue 32): the run detail at most 2.25× nginx,
# 100 rows 4.5×, 1,000 rows 3.7×.
target = {"detail": 2.25, "result-100": 4.5, "result-1000": 3.7, "runs": None, "store": None}
def k(n):
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k"
print("| Workload | nginx instructions / request | bare hyper proxy (floor) | v1compat instructions / request | ratio (target) | floor / nginx | v1compat above the floor | syscalls / request nginx → floor → v1compat | bytes to the client nginx / v1compat |")
print("|---|---|---|---|---|---|---|---|---|")
verdicts = []
for w in calls:
    ng, gw = get("nginx", "callgrind", w), get("v1compat", "callgrind", w)
    fl, fls = get("floor", "callgrind", w), get("floor", "strace", w)
    ngs, gws = get("nginx", "strace", w), get("v1compat", "strace", w)
    ni = ng["instructions"] / ng["requests"] * calls[w]
    fi = fl["instructions"] / fl["requests"] * calls[w]
    fs = fls["syscalls"] / fls["requests"] * calls[w]
    gi = gw["instructions"] / gw["requests"]
    ns = ngs["syscalls"] / ngs["requests"] * calls[w]
    gs = gws["syscalls"] / gws["requests"]
    ratio = gi / ni
    if target[w] is not None:
        ok = "PASS" if ratio <= target[w] else "MISS"
        verdicts.append(f"| {label[w]}: instructions ≤ {target[w]:g}× nginx | {ratio:.2f}× | {ok} |")
    bound = f" (≤ {target[w]:g}×)" if target[w] is not None else ""
    if w == "detail":
        ok = "PASS" if gs <= ns + 1 else "MISS"
        verdicts.append(f"| {label[w]}: system calls ≤ nginx + 1 | {ns:.2f} → {gs:.2f} | {ok} |")
    print(f"| {label[w]} | {k(ni)} | {k(fi)} | {k(gi)} | {ratio:.2f}×{bound} | {fi / ni:.2f}× | {k(gi - fi)} | {ns:.2f} → {fs:.2f} → {gs:.2f} | {ng['bytes_per_request'] * calls[w]} / {gw['bytes_per_request']} |")
print()
print("System calls per request, by call (strace -c -f):")
print()
print("| Workload | Proxy | Calls per request |")
print("|---|---|---|")
for w in calls:
    for p in ("nginx", "floor", "v1compat"):
        r = get(p, "strace", w)
        n = r["requests"] / (calls[w] if p != "v1compat" else 1)
        parts = sorted(r["by_syscall"].items(), key=lambda kv: -kv[1])
        print(f"| {w} | {p} | " + ", ".join(f"{name} {c / n:.2f}" for name, c in parts) + " |")
print()
print("### The translation alone (run detail)")
print()
print("| Proxy | instructions / request | × nginx |")
print("|---|---|---|")
ng = get("nginx", "callgrind", "detail")
ng = ng["instructions"] / ng["requests"]
for p, what in (("nginx", "nginx, the V2 request proxied"),
                ("floor", "bare proxy, the V2 request proxied (`examples/bare_proxy.rs`)"),
                ("translation", "bare translation, the V1 request translated (`examples/bare_translation.rs`)"),
                ("translation-headers", "bare translation with v1compat's headers (`… headers`)"),
                ("translation-features", "bare translation with the headers and the least the gateway's features cost (`… features`)"),
                ("v1compat", "v1compat")):
    r = get(p, "callgrind", "detail")
    n = r["instructions"] / r["requests"]
    print(f"| {what} | {k(n)} | {n / ng:.2f}× |")
print()
print("### Targets")
print()
print("| Target | Figure | Result |")
print("|---|---|---|")
print("\n".join(verdicts))
EOF

MODEL=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "Produced by \`deploy/bench/instructions.sh\` (see [README.md](README.md))."
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| Date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| Command | \`$COMMAND\` |"
  echo "| Commit | $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)') |"
  echo "| Machine | $(nproc) CPUs, ${MODEL:-unknown CPU}, Linux $(uname -r) |"
  echo "| Versions | $("$BIN" --version), $("$NGINX" -v 2>&1 | sed 's/.*: //'), $(valgrind --version), $(strace -V | head -1 | sed 's/ -- version / /'), $(rustc --version 2>/dev/null | awk '{print "rustc " $2}') |"
  echo "| Requests | one keep-alive connection per workload and tool; $WARMUP warm-up then $REQUESTS counted requests through nginx; through v1compat the same for run detail, 100 rows, the run list and the store search, $WARMUP_1000 then $REQUESTS_1000 for 1,000 rows |"
  echo "| Pinning | each proxy on cpu $PROXY_CPU (\`taskset\`), the V2 sandbox unpinned |"
  echo "| v1compat | \`serve\`, \`$CARGO_PROFILE\` build, log level \`$LOG_LEVEL\`, metrics recorder on, no shadow mirror; on one CPU, tokio's single-threaded runtime (\`runtime.threads = 0\`) |"
  echo "| nginx | one process (\`master_process off\`), keep-alive upstream, access log off |"
  echo "| floor | \`examples/bare_proxy.rs\`, \`$CARGO_PROFILE\` build: the runtime v1compat would choose, hyper's HTTP/1.1 server and one kept-alive client connection, the V2 request forwarded unchanged; nothing else |"
  echo "| bare translation | \`examples/bare_translation.rs\`, \`$CARGO_PROFILE\` build: the floor's stack and v1compat's allocator; the V1 run detail read with serde, the V2 run read and the V1 record written by v1compat's own code; no checks, limits, deadlines, pool, ids, logs or metrics; with \`headers\`, v1compat's headers to V2 and to the client too; with \`features\`, the headers and the cheapest form of each of the gateway's features on that path (\`examples/bare_translation/features.rs\`) |"
  echo
  echo "Instructions: callgrind's count of user-space instructions of the proxy process (every"
  echo "thread) between zeroing (\`callgrind_control -z\`) after the warm-up and the dump"
  echo "(\`callgrind_control -d\`) after the counted requests. System calls: \`strace -c -f\`"
  echo "attached to every thread of a second, uninstrumented process for the same requests."
  echo "The V2 service (the embedded sandbox, seed $SEED) runs uninstrumented in its own process."
  echo
  cat "$WORK/tables.md"
} >"$REPORT"

[ -n "$OUT" ] && { mkdir -p "$(dirname "$OUT")"; cp "$REPORT" "$OUT"; log "written to $OUT"; }
cat "$REPORT"
