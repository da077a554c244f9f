#!/usr/bin/env bash
# v1compat's cost per request, side by side with a plain reverse proxy (nginx)
# and with no proxy at all, in one run. See deploy/bench/README.md.
#
#   deploy/bench/run.sh [--runs N] [--duration S] [--rate R] [--out FILE]
#                       [--no-install] [--no-build]
#
# Loopback only. Every process it starts is stopped on exit (trap), and the
# whole run is bounded by a watchdog (BENCH_MAX_SECONDS, default from the plan).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/bench"
RUNS=3
DURATION=10
RATE=1000
OUT="$HERE/RESULTS.md"
INSTALL=1
BUILD=1
CONNS=32              # connections of the throughput workloads
FANOUT_LATENCY_MS=10  # simulated V2 service time for the second fan-out measurement
PORT_BASE="${BENCH_PORT_BASE:-18180}"
KEY=sandbox-key
COMMAND="deploy/bench/run.sh${*:+ $*}"

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 64
}
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "--runs must be a positive integer" >&2; exit 64; }
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "--duration must be whole seconds" >&2; exit 64; }
[[ "$RATE" =~ ^[1-9][0-9]*$ ]] || { echo "--rate must be a positive integer" >&2; exit 64; }

log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- tools
. "$HERE/common.sh"
. "$HERE/nginx.sh"
install_missing "$INSTALL" wrk=wrk nginx=nginx-light curl=curl taskset=util-linux
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

if [ "$BUILD" = 1 ]; then
  log "cargo build --profile dist (binary and the loadgen example)"
  (cd "$ROOT" && timeout 3600 cargo build --profile dist --quiet --bin v1compat --example loadgen)
fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET_DIR/dist/v1compat"
LOADGEN="$TARGET_DIR/dist/examples/loadgen"
[ -x "$BIN" ] && [ -x "$LOADGEN" ] || die "no dist build at $TARGET_DIR/dist (drop --no-build)"

# ---------------------------------------------------------------- plan
NCPU=$(nproc)
if [ "$NCPU" -ge 2 ]; then
  CPU_UP=0; CPU_PROXY=1
  if [ "$NCPU" -ge 3 ]; then CPU_LOAD="2-$((NCPU - 1))"; LOAD_THREADS=$((NCPU - 2)); else CPU_LOAD=1; LOAD_THREADS=1; fi
  PIN_UP=(taskset -c "$CPU_UP"); PIN_PROXY=(taskset -c "$CPU_PROXY"); PIN_LOAD=(taskset -c "$CPU_LOAD")
else
  CPU_UP=0; CPU_PROXY=0; CPU_LOAD=0; LOAD_THREADS=1
  PIN_UP=(); PIN_PROXY=(); PIN_LOAD=()
fi
[ "$LOAD_THREADS" -le 4 ] || LOAD_THREADS=4

# Heaviest last: the allocator keeps what the 1,000-row pages needed (see README).
WORKLOADS=(detail detail-c256 store result-100 result-1000)
# per run: warm-up 2 s + measurement; 3 paths (fewer for result-1000); fixed rate; fan-out
PLANNED=$(( (RUNS * 14 + 14) * (DURATION + 3) + RUNS * 3 * (DURATION + 4) + RUNS * 4 * (DURATION + 3) + 120 ))
MAX_SECONDS="${BENCH_MAX_SECONDS:-$((PLANNED * 2 + 300))}"
log "plan: ${#WORKLOADS[@]} workloads x 3 paths x $RUNS runs x ${DURATION}s, fixed rate ${RATE}/s; about $((PLANNED / 60)) min (watchdog ${MAX_SECONDS}s)"

# ---------------------------------------------------------------- processes
WORK="$(mktemp -d /tmp/v1compat-bench.XXXXXX)"
PIDS=()
stop_all_on_exit
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "$MAX_SECONDS" >/dev/null 2>&1 & s=$!
  wait "$s"
  echo "[bench] watchdog: over ${MAX_SECONDS}s, stopping" >&2
  kill -TERM $$
) &
PIDS+=($!)

P_GW_IDLE=$PORT_BASE; P_GW_IDLE_ADMIN=$((PORT_BASE + 1)); P_V2=$((PORT_BASE + 2)); P_LEGACY=$((PORT_BASE + 3))
P_V1=$((PORT_BASE + 4)); P_V1_ADMIN=$((PORT_BASE + 5)); P_NGINX=$((PORT_BASE + 6))
V2="http://127.0.0.1:$P_V2"; NG="http://127.0.0.1:$P_NGINX"; V1="http://127.0.0.1:$P_V1"


log "starting the sandbox V2 service on 127.0.0.1:$P_V2 (cpu $CPU_UP)"
"${PIN_UP[@]}" "$BIN" sandbox --listen "127.0.0.1:$P_GW_IDLE" --admin-listen "127.0.0.1:$P_GW_IDLE_ADMIN" \
  --upstream-listen "127.0.0.1:$P_V2" --legacy-listen "127.0.0.1:$P_LEGACY" --api-key "$KEY" \
  >"$WORK/sandbox.log" 2>&1 &
UP_PID=$!; PIDS+=("$UP_PID")
wait_http "$V2/__sandbox/healthz" "the sandbox"

log "starting v1compat serve on 127.0.0.1:$P_V1 (cpu $CPU_PROXY)"
V1COMPAT_INVENTORY__STORE="redb:$WORK/inventory.redb" V1COMPAT_UPSTREAM__BASE_URL="$V2" V1COMPAT_UPSTREAM__SERVICE_KEY="$KEY" \
V1COMPAT_LISTEN__PUBLIC="127.0.0.1:$P_V1" V1COMPAT_LISTEN__ADMIN="127.0.0.1:$P_V1_ADMIN" \
V1COMPAT_LOG__LEVEL=warn \
  "${PIN_PROXY[@]}" "$BIN" serve >"$WORK/v1compat.log" 2>&1 &
GW_PID=$!; PIDS+=("$GW_PID")
wait_http "http://127.0.0.1:$P_V1_ADMIN/healthz" "v1compat"

log "starting nginx on 127.0.0.1:$P_NGINX (cpu $CPU_PROXY, one worker)"
nginx_conf "$WORK/nginx" "$P_NGINX" "127.0.0.1:$P_V2"
"${PIN_PROXY[@]}" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" \
  >"$WORK/nginx.log" 2>&1 &
NGINX_PID=$!; PIDS+=("$NGINX_PID")
wait_http "$NG/__sandbox/healthz" "nginx"

# ---------------------------------------------------------------- data
# shellcheck source=deploy/bench/seed-runs.sh
. "$ROOT/deploy/bench/seed-runs.sh"

# Workload table: name | connections | V2 path (direct and nginx) | V1 method | V1 path | V1 body
declare -A WL_CONNS WL_V2 WL_V1M WL_V1 WL_BODY
WL_CONNS[detail]=$CONNS;      WL_V2[detail]="/api/v2/worker-runs/$RUN_SMALL"
WL_V1M[detail]=POST;          WL_V1[detail]="/api/v1/run/detail"; WL_BODY[detail]="{\"run_slug\":\"$RUN_SMALL\"}"
WL_CONNS[result-100]=$CONNS;  WL_V2[result-100]="/api/v2/worker-runs/$RUN_BULK/result?offset=1&limit=100"
WL_V1M[result-100]=POST;      WL_V1[result-100]="/api/v1/run/result/list"
WL_BODY[result-100]="{\"run_slug\":\"$RUN_BULK\",\"page_index\":1,\"page_size\":100}"
WL_CONNS[result-1000]=$CONNS; WL_V2[result-1000]=""   # V2 pages hold at most 100 rows
WL_V1M[result-1000]=POST;     WL_V1[result-1000]="/api/v1/run/result/list"
WL_BODY[result-1000]="{\"run_slug\":\"$RUN_BULK\",\"page_index\":1,\"page_size\":1000}"
WL_CONNS[store]=$CONNS;       WL_V2[store]="/api/v2/store?keyword=maps&offset=1&limit=10"
WL_V1M[store]=GET;            WL_V1[store]="/api/store?search=maps&limit=10"; WL_BODY[store]=""
WL_CONNS[detail-c256]=256;    WL_V2[detail-c256]="${WL_V2[detail]}"
WL_V1M[detail-c256]=POST;     WL_V1[detail-c256]="${WL_V1[detail]}"; WL_BODY[detail-c256]="${WL_BODY[detail]}"

# Check every request once through every path before loading anything.
check() { # label url [body] [header]
  local code
  if [ -n "${3:-}" ]; then
    code=$(curl -s -o "$WORK/check.json" -w '%{http_code}' -X POST "$2" -H "${4:-api-key: $KEY}" \
      -H 'content-type: application/json' -d "$3")
  else
    code=$(curl -s -o "$WORK/check.json" -w '%{http_code}' "$2" -H "${4:-$AUTH}")
  fi
  [ "$code" = 200 ] || die "$1: HTTP $code: $(head -c 300 "$WORK/check.json")"
  grep -q '"code":0' "$WORK/check.json" || die "$1: not a success envelope: $(head -c 300 "$WORK/check.json")"
}
for w in "${WORKLOADS[@]}"; do
  if [ -n "${WL_V2[$w]}" ]; then check "$w direct" "$V2${WL_V2[$w]}"; check "$w nginx" "$NG${WL_V2[$w]}"; fi
  check "$w v1compat" "$V1${WL_V1[$w]}" "${WL_BODY[$w]}" "api-key: $KEY"
done

# ---------------------------------------------------------------- measuring
TICK=$(getconf CLK_TCK)
pids_of() { # the process and its children (nginx: master and worker)
  echo "$1"; pgrep -P "$1" || true
}
cpu_ticks() { # sum of utime+stime of the process tree
  local t=0 p f
  for p in $(pids_of "$1"); do
    f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    set -- $f
    t=$((t + ${12} + ${13}))
  done
  echo "$t"
}
mem_kb() { # field (VmRSS, VmHWM) summed over the process tree
  local t=0 p v
  for p in $(pids_of "$2"); do
    v=$(awk -v f="$1:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null) || true
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
HWM_RESET=1
reset_peak() { # clear VmHWM (Linux >= 4.0, needs the right to write clear_refs)
  local p
  for p in $(pids_of "$1"); do { echo 5 >"/proc/$p/clear_refs"; } 2>/dev/null || HWM_RESET=0; done
}

RESULTS_TSV="$WORK/runs.tsv"   # workload path run rps p50 p90 p99 max cpu_proxy cpu_up requests
: >"$RESULTS_TSV"
PEAK_TSV="$WORK/peak.tsv"      # workload path peak_kb
: >"$PEAK_TSV"

wrk_once() { # conns duration url body header -> BENCH line
  local conns="$1" dur="$2" url="$3" body="$4" header="$5" threads="$LOAD_THREADS"
  [ "$threads" -le "$conns" ] || threads="$conns"
  BENCH_BODY="$body" timeout $((dur + 30)) \
    "${PIN_LOAD[@]}" wrk -t"$threads" -c"$conns" -d"${dur}s" --timeout 5s -s "$HERE/wrk.lua" \
    -H "$header" "$url" 2>&1 | grep '^BENCH ' || die "wrk gave no result for $url"
}
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }

measure() { # workload path
  local w="$1" path="$2" url body header proxy_pid="" conns="${WL_CONNS[$1]}"
  case "$path" in
    direct) url="$V2${WL_V2[$w]}"; body=""; header="$AUTH" ;;
    nginx) url="$NG${WL_V2[$w]}"; body=""; header="$AUTH"; proxy_pid=$NGINX_PID ;;
    v1compat) url="$V1${WL_V1[$w]}"; body="${WL_BODY[$w]}"; header="api-key: $KEY"; proxy_pid=$GW_PID ;;
  esac
  wrk_once "$conns" 2 "$url" "$body" "$header" >/dev/null   # warm-up: connections, pools
  [ -n "$proxy_pid" ] && reset_peak "$proxy_pid"
  local i line p0 p1 u0 u1 req dur non2xx errs
  for i in $(seq 1 "$RUNS"); do
    p0=0; [ -n "$proxy_pid" ] && p0=$(cpu_ticks "$proxy_pid")
    u0=$(cpu_ticks "$UP_PID")
    line=$(wrk_once "$conns" "$DURATION" "$url" "$body" "$header")
    u1=$(cpu_ticks "$UP_PID")
    p1=0; [ -n "$proxy_pid" ] && p1=$(cpu_ticks "$proxy_pid")
    req=$(field requests <<<"$line"); dur=$(field duration_us <<<"$line")
    non2xx=$(field non2xx <<<"$line"); errs=$(field errors <<<"$line")
    [ "$non2xx" = 0 ] && [ "$errs" = 0 ] || die "$w $path: $non2xx non-2xx answers, $errs socket errors"
    [ "$req" -gt 0 ] || die "$w $path: no request completed"
    awk -v w="$w" -v p="$path" -v i="$i" -v req="$req" -v dur="$dur" -v l="$line" \
        -v dp="$((p1 - p0))" -v du="$((u1 - u0))" -v tick="$TICK" -v hasp="$proxy_pid" 'BEGIN {
      n = split(l, kv, " "); for (k = 2; k <= n; k++) { split(kv[k], a, "="); m[a[1]] = a[2] }
      cp = hasp == "" ? "-" : sprintf("%.1f", dp * 1e6 / tick / req)
      printf "%s\t%s\t%d\t%.0f\t%d\t%d\t%d\t%d\t%s\t%.1f\t%d\n", w, p, i, req * 1e6 / dur,
        m["p50"], m["p90"], m["p99"], m["max"], cp, du * 1e6 / tick / req, req }' >>"$RESULTS_TSV"
    log "$(tail -1 "$RESULTS_TSV" | awk -F'\t' '{printf "%-12s %-8s run %s: %s req/s, p50 %s us, p99 %s us, proxy cpu %s us/req", $1, $2, $3, $4, $5, $7, $9}')"
  done
  [ -n "$proxy_pid" ] && printf '%s\t%s\t%s\n' "$w" "$path" "$(mem_kb VmHWM "$proxy_pid")" >>"$PEAK_TSV"
  return 0
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
IDLE_GW_KB=$(mem_kb VmRSS "$GW_PID"); IDLE_NGINX_KB=$(mem_kb VmRSS "$NGINX_PID")
log "idle RSS: v1compat $IDLE_GW_KB kB, nginx $IDLE_NGINX_KB kB; load average $LOAD_START"

for w in "${WORKLOADS[@]}"; do
  paths=(v1compat); [ -n "${WL_V2[$w]}" ] && paths=(direct nginx v1compat)
  for p in "${paths[@]}"; do measure "$w" "$p"; done
done

# Fixed rate: open-loop latency at $RATE requests per second (run detail).
RATE_TSV="$WORK/rate.tsv"   # path run p50 p90 p99 p999 max lag cpu_proxy cpu_up
: >"$RATE_TSV"
for path in direct nginx v1compat; do
  proxy_pid=""
  case "$path" in
    direct) args=(--url "$V2${WL_V2[detail]}" --header "$AUTH") ;;
    nginx) args=(--url "$NG${WL_V2[detail]}" --header "$AUTH"); proxy_pid=$NGINX_PID ;;
    v1compat) args=(--url "$V1${WL_V1[detail]}" --method POST --header "api-key: $KEY" --body "${WL_BODY[detail]}")
      proxy_pid=$GW_PID ;;
  esac
  for i in $(seq 1 "$RUNS"); do
    p0=0; [ -n "$proxy_pid" ] && p0=$(cpu_ticks "$proxy_pid")
    u0=$(cpu_ticks "$UP_PID")
    # 2 s of warm-up at the same rate, counted in the CPU figure (same for every path).
    j=$(timeout $((DURATION + 60)) "${PIN_LOAD[@]}" "$LOADGEN" "${args[@]}" --rate "$RATE" \
      --duration "$DURATION" --warmup 2 --json) || die "loadgen failed on $path: $j"
    u1=$(cpu_ticks "$UP_PID")
    p1=0; [ -n "$proxy_pid" ] && p1=$(cpu_ticks "$proxy_pid")
    printf '%s\t%s\t%s\n' "$path" "$i" "$(sed 's/[{}"]//g; s/,/ /g; s/:/=/g' <<<"$j")" | awk -F'\t' \
      -v dp="$((p1 - p0))" -v du="$((u1 - u0))" -v tick="$TICK" -v n="$((RATE * (DURATION + 2)))" -v hasp="$proxy_pid" '{
      k = split($3, kv, " "); for (q = 1; q <= k; q++) { split(kv[q], a, "="); m[a[1]] = a[2] }
      cp = hasp == "" ? "-" : sprintf("%.1f", dp * 1e6 / tick / n)
      printf "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\n", $1, $2, m["p50_us"], m["p90_us"], m["p99_us"],
        m["p999_us"], m["max_us"], m["max_lag_us"], cp, du * 1e6 / tick / n }' >>"$RATE_TSV"
    log "$(tail -1 "$RATE_TSV" | awk -F'\t' '{printf "fixed %s/s %-8s run %s: p50 %s us, p99 %s us, max %s us", "'"$RATE"'", $1, $2, $3, $5, $7}')"
  done
done

# Fan-out: one request at a time, a 1,000-row V1 page vs one 100-row V2 call,
# on bare loopback and with a simulated V2 service time on every result page.
FAN_TSV="$WORK/fan.tsv"   # setting what run p50 p99
: >"$FAN_TSV"
fanout() { # setting
  local i line
  for i in $(seq 1 "$RUNS"); do
    line=$(wrk_once 1 "$DURATION" "$V2${WL_V2[result-100]}" "" "$AUTH")
    printf '%s\tv2-100\t%s\t%s\t%s\n' "$1" "$i" "$(field p50 <<<"$line")" "$(field p99 <<<"$line")" >>"$FAN_TSV"
    line=$(wrk_once 1 "$DURATION" "$V1${WL_V1[result-1000]}" "${WL_BODY[result-1000]}" "api-key: $KEY")
    printf '%s\tv1-1000\t%s\t%s\t%s\n' "$1" "$i" "$(field p50 <<<"$line")" "$(field p99 <<<"$line")" >>"$FAN_TSV"
    log "fan-out ($1) run $i: $(awk -F'\t' -v s="$1" -v i="$i" '$1 == s && $3 == i {printf "%s p50 %s us  ", $2, $4}' "$FAN_TSV")"
  done
}
fanout loopback
curl -sf -X POST "$V2/__sandbox/faults" -H 'content-type: application/json' \
  -d "[{\"route\":\"listWorkerRunResults\",\"kind\":\"latency\",\"latency_ms\":$FANOUT_LATENCY_MS}]" >/dev/null
fanout "v2+${FANOUT_LATENCY_MS}ms"
curl -sf -X DELETE "$V2/__sandbox/faults" >/dev/null

sleep 2
AFTER_GW_KB=$(mem_kb VmRSS "$GW_PID")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report
# stats: values on stdin -> "median min max"
stats() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) { print "- - -"; exit }
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR] }'; }
col() { # file filter-awk column
  awk -F'\t' "$2 { print \$$3 }" "$1" | stats
}
fmt() { # "median min max" [decimals] -> "median (min–max)"
  awk -v d="${2:-0}" '{ if ($1 == "-") { print "–"; exit }
    f = "%." d "f"; printf f " (" f "–" f ")\n", $1, $2, $3 }' <<<"$1"
}
med() { cut -d' ' -f1 <<<"$1"; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

MODEL=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
MEM=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
{
  echo "# v1compat benchmark results"
  echo
  echo "Produced by \`deploy/bench/run.sh\` (see [README.md](README.md) for what is measured and how)."
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| Date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
  echo "| Command | \`$COMMAND\` |"
  echo "| Machine | ${NCPU} CPUs ($(nproc --all) online), ${MODEL:-unknown CPU}, $MEM RAM, Linux $(uname -r) |"
  echo "| Load average (1/5/15 min) | $LOAD_START at the start, $LOAD_END at the end |"
  echo "| Pinning | V2 sandbox on cpu $CPU_UP; nginx and v1compat on cpu $CPU_PROXY; wrk / loadgen on cpu $CPU_LOAD ($LOAD_THREADS thread(s)) |"
  echo "| Versions | $("$BIN" --version), $("$NGINX" -v 2>&1 | sed 's/.*: //'), $(wrk -v 2>&1 | head -1 | awk '{print "wrk " $2}'), $(rustc --version 2>/dev/null | awk '{print "rustc " $2}') |"
  echo "| Runs | $RUNS per workload and path, ${DURATION} s each after a 2 s warm-up; $CONNS connections (256 for detail-c256) |"
  echo
  echo "Figures are medians with the (min–max) spread of the runs. Latency in µs."
  echo "CPU is the process's own utime+stime (/proc/<pid>/stat) over the run divided by the requests completed;"
  echo "\"V2 CPU\" is the same for the sandbox upstream. Peak RSS is VmHWM over the runs of that workload"
  [ "$HWM_RESET" = 1 ] && echo "(reset before each workload)." || echo "(not resettable here: peak since start)."
  echo
  echo "## Throughput and latency (wrk, closed loop)"
  echo
  echo "| Workload | Path | Requests/s | p50 | p90 | p99 | max | Proxy CPU µs/req | V2 CPU µs/req | Peak RSS MB |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for w in "${WORKLOADS[@]}"; do
    for p in direct nginx v1compat; do
      grep -q "^$w	$p	" "$RESULTS_TSV" || continue
      f="\$1 == \"$w\" && \$2 == \"$p\""
      peak=$(awk -F'\t' -v w="$w" -v p="$p" '$1 == w && $2 == p {print $3}' "$PEAK_TSV")
      cpu="–"; [ "$p" != direct ] && cpu=$(fmt "$(col "$RESULTS_TSV" "$f" 9)" 1)
      echo "| $w | $p | $(fmt "$(col "$RESULTS_TSV" "$f" 4)") | $(fmt "$(col "$RESULTS_TSV" "$f" 5)") | $(fmt "$(col "$RESULTS_TSV" "$f" 6)") | $(fmt "$(col "$RESULTS_TSV" "$f" 7)") | $(fmt "$(col "$RESULTS_TSV" "$f" 8)") | $cpu | $(fmt "$(col "$RESULTS_TSV" "$f" 10)" 1) | $([ -n "$peak" ] && mb "$peak" || echo –) |"
    done
  done
  echo
  echo "result-1000 has no direct or nginx row: V2 pages hold at most 100 rows, so its V2 side is ten"
  echo "result-100 calls (made concurrently by v1compat)."
  echo
  echo "## Fixed rate: run detail at $RATE requests/s (loadgen, open loop)"
  echo
  echo "| Path | p50 | p90 | p99 | p99.9 | max | sender lag max | Proxy CPU µs/req | V2 CPU µs/req |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for p in direct nginx v1compat; do
    f="\$1 == \"$p\""
    cpu="–"; [ "$p" != direct ] && cpu=$(fmt "$(col "$RATE_TSV" "$f" 9)" 1)
    echo "| $p | $(fmt "$(col "$RATE_TSV" "$f" 3)") | $(fmt "$(col "$RATE_TSV" "$f" 4)") | $(fmt "$(col "$RATE_TSV" "$f" 5)") | $(fmt "$(col "$RATE_TSV" "$f" 6)") | $(fmt "$(col "$RATE_TSV" "$f" 7)") | $(fmt "$(col "$RATE_TSV" "$f" 8)") | $cpu | $(fmt "$(col "$RATE_TSV" "$f" 10)" 1) |"
  done
  echo
  echo "CPU at a fixed rate includes the 2 s warm-up at the same rate; a mostly idle process pays its"
  echo "wake-ups per request here, so these figures are higher than under saturation."
  echo
  echo "## Fan-out: one request at a time (wrk, 1 connection)"
  echo
  echo "| V2 | Request | p50 | p99 |"
  echo "|---|---|---|---|"
  for s in loopback "v2+${FANOUT_LATENCY_MS}ms"; do
    for q in v2-100 v1-1000; do
      f="\$1 == \"$s\" && \$2 == \"$q\""
      label="one 100-row V2 call (direct)"; [ "$q" = v1-1000 ] && label="1,000-row V1 page (v1compat)"
      echo "| $s | $label | $(fmt "$(col "$FAN_TSV" "$f" 4)") | $(fmt "$(col "$FAN_TSV" "$f" 5)") |"
    done
  done
  echo
  echo "\`v2+${FANOUT_LATENCY_MS}ms\`: the sandbox waits ${FANOUT_LATENCY_MS} ms before answering every result page"
  echo "(a latency fault), standing for a V2 that is not on the same machine. On bare loopback the"
  echo "sandbox computes the ten pages of a 1,000-row V1 page one after another on its one core (see"
  echo "\"V2 CPU\" of result-1000 above), which bounds that ratio from below whatever the gateway does."
  echo
  # Targets
  cpu_gw=$(med "$(col "$RESULTS_TSV" '$1 == "detail" && $2 == "v1compat"' 9)")
  cpu_ng=$(med "$(col "$RESULTS_TSV" '$1 == "detail" && $2 == "nginx"' 9)")
  rcpu_gw=$(med "$(col "$RATE_TSV" '$1 == "v1compat"' 9)"); rcpu_ng=$(med "$(col "$RATE_TSV" '$1 == "nginx"' 9)")
  r_d50=$(med "$(col "$RATE_TSV" '$1 == "direct"' 3)"); r_g50=$(med "$(col "$RATE_TSV" '$1 == "v1compat"' 3)")
  r_d99=$(med "$(col "$RATE_TSV" '$1 == "direct"' 5)"); r_g99=$(med "$(col "$RATE_TSV" '$1 == "v1compat"' 5)")
  r_n50=$(med "$(col "$RATE_TSV" '$1 == "nginx"' 3)"); r_n99=$(med "$(col "$RATE_TSV" '$1 == "nginx"' 5)")
  peak256=$(awk -F'\t' '$1 == "detail-c256" && $2 == "v1compat" {print $3}' "$PEAK_TSV")
  f_l100=$(med "$(col "$FAN_TSV" '$1 == "loopback" && $2 == "v2-100"' 4)")
  f_l1000=$(med "$(col "$FAN_TSV" '$1 == "loopback" && $2 == "v1-1000"' 4)")
  f_s100=$(med "$(col "$FAN_TSV" "\$1 == \"v2+${FANOUT_LATENCY_MS}ms\" && \$2 == \"v2-100\"" 4)")
  f_s1000=$(med "$(col "$FAN_TSV" "\$1 == \"v2+${FANOUT_LATENCY_MS}ms\" && \$2 == \"v1-1000\"" 4)")
  rps_gw=$(med "$(col "$RESULTS_TSV" '$1 == "detail" && $2 == "v1compat"' 4)")
  rps_ng=$(med "$(col "$RESULTS_TSV" '$1 == "detail" && $2 == "nginx"' 4)")
  p99_256_gw=$(med "$(col "$RESULTS_TSV" '$1 == "detail-c256" && $2 == "v1compat"' 7)")
  p99_256_ng=$(med "$(col "$RESULTS_TSV" '$1 == "detail-c256" && $2 == "nginx"' 7)")
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
  verdict() { awk -v a="$1" -v b="$2" 'BEGIN { print (a <= b) ? "PASS" : "MISS" }'; }
  echo "## Targets"
  echo
  echo "| Target | Figure (medians of this run) | Result |"
  echo "|---|---|---|"
  echo "| CPU per translated run-detail request ≤ nginx's per proxied request, $CONNS connections flat out | v1compat $cpu_gw µs vs nginx $cpu_ng µs (ratio $(awk -v a="$cpu_gw" -v b="$cpu_ng" 'BEGIN { printf "%.2f", a / b }')) | $(verdict "$cpu_gw" "$cpu_ng") |"
  echo "| same, at $RATE req/s | v1compat $rcpu_gw µs vs nginx $rcpu_ng µs (ratio $(awk -v a="$rcpu_gw" -v b="$rcpu_ng" 'BEGIN { printf "%.2f", a / b }')) | $(verdict "$rcpu_gw" "$rcpu_ng") |"
  echo "| CPU per run-detail request ≤ 1.5 × nginx's (issue 10), $CONNS connections | ratio $(ratio "$cpu_gw" "$cpu_ng") | $(verdict "$(ratio "$cpu_gw" "$cpu_ng")" 1.5) |"
  echo "| Run-detail throughput ≥ 70% of nginx's (issue 10), $CONNS connections | $rps_gw vs $rps_ng req/s ($(awk -v a="$rps_gw" -v b="$rps_ng" 'BEGIN { printf "%.0f", 100 * a / b }')%) | $(verdict 0.70 "$(ratio "$rps_gw" "$rps_ng")") |"
  echo "| Run-detail p99 at 256 connections ≤ 1.5 × nginx's (issue 10) | $p99_256_gw µs vs $p99_256_ng µs (ratio $(ratio "$p99_256_gw" "$p99_256_ng")) | $(verdict "$(ratio "$p99_256_gw" "$p99_256_ng")" 1.5) |"
  echo "| Added latency at p50 ≤ 0.3 ms at $RATE req/s | $((r_g50 - r_d50)) µs (v1compat $r_g50 − direct $r_d50; nginx adds $((r_n50 - r_d50))) | $(verdict $((r_g50 - r_d50)) 300) |"
  echo "| Added latency at p99 ≤ 1 ms at $RATE req/s | $((r_g99 - r_d99)) µs (v1compat $r_g99 − direct $r_d99; nginx adds $((r_n99 - r_d99))) | $(verdict $((r_g99 - r_d99)) 1000) |"
  echo "| RSS ≤ 15 MB idle | $(mb "$IDLE_GW_KB") MB after start and one check request per workload ($(mb "$AFTER_GW_KB") MB idle after the load; nginx $(mb "$IDLE_NGINX_KB") MB idle) | $(verdict "$IDLE_GW_KB" 15360) |"
  echo "| RSS ≤ 40 MB under 256 connections | $(mb "${peak256:-0}") MB peak (detail-c256) | $(verdict "${peak256:-0}" 40960) |"
  echo "| 1,000-row V1 page ≤ 2 × one 100-row V2 call (loopback) | $f_l1000 µs vs $f_l100 µs (ratio $(awk -v a="$f_l1000" -v b="$f_l100" 'BEGIN { printf "%.2f", a / b }')) | $(verdict "$f_l1000" $((2 * f_l100))) |"
  echo "| same, V2 answering in ${FANOUT_LATENCY_MS} ms | $f_s1000 µs vs $f_s100 µs (ratio $(awk -v a="$f_s1000" -v b="$f_s100" 'BEGIN { printf "%.2f", a / b }')) | $(verdict "$f_s1000" $((2 * f_s100))) |"
} >"$WORK/RESULTS.md"

# The deterministic figures of deploy/bench/instructions.sh live below this
# marker in the same file: keep them.
MARKER='<!-- instructions.sh figures: kept by run.sh -->'
if [ -f "$OUT" ] && grep -qxF "$MARKER" "$OUT"; then
  { echo; sed -n "\|^$MARKER\$|,\$p" "$OUT"; } >>"$WORK/RESULTS.md"
fi
mkdir -p "$(dirname "$OUT")"
cp "$WORK/RESULTS.md" "$OUT"
cat "$WORK/RESULTS.md"
log "written to $OUT"
