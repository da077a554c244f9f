#!/usr/bin/env bash
# CPU a run-detail request costs under load, for one or more v1compat
# binaries measured in turn, with nginx proxying the same V2 request as the
# reference: the short check behind a change that `run.sh` cannot resolve.
# The sandbox V2 runs on cpu 0; the proxy and wrk (one thread) share cpu 1,
# as in run.sh. Each binary is measured ROUNDS times, the binaries
# alternating (each round starting one further on), so that a machine that
# drifts moves them all alike; the table gives every run and the mean. See
# deploy/bench/README.md.
#
#   deploy/bench/cpu-ab.sh --binary PATH [--binary PATH ...] [--rounds N]
#                          [--seconds N] [--connections N] [--no-install]
#
# A binary may be given as NAME=VALUE,...@PATH: its gateway then runs with
# those variables set (for switches a build reads from its environment).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/bench"
ROUNDS=2
SECONDS_EACH=10
CONNECTIONS=32
INSTALL=1
BINARIES=()
KEY=sandbox-key
SEED=7

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 64
}
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARIES+=("$2"); shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --connections) CONNECTIONS="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[ "${#BINARIES[@]}" -gt 0 ] || { echo "at least one --binary is needed" >&2; usage; }
for n in "$ROUNDS" "$SECONDS_EACH" "$CONNECTIONS"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds, --seconds and --connections take positive integers" >&2; exit 64; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs two CPUs: the V2 sandbox on one, the proxy and wrk on the other" >&2; exit 1; }

log() { printf '[cpu-ab %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

. "$HERE/common.sh"
. "$HERE/nginx.sh"
install_missing "$INSTALL" wrk=wrk nginx=nginx-light curl=curl python3=python3 taskset=util-linux
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

WORK="$(mktemp -d /tmp/v1compat-cpu-ab.XXXXXX)"
PIDS=()
stop_all_on_exit

# The first binary also serves as the sandbox V2.
SANDBOX_BIN="${BINARIES[0]##*@}"
[ -x "$SANDBOX_BIN" ] || die "$SANDBOX_BIN is not an executable"
start_sandbox "$SANDBOX_BIN" taskset -c 0
. "$HERE/seed-runs.sh"

cat >"$WORK/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $KEY"
LUA
cat >"$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"run_slug":"$RUN_SMALL"}'
wrk.headers["api-key"] = "$KEY"
wrk.headers["content-type"] = "application/json"
LUA

TICK=$(getconf CLK_TCK)
# utime+stime (ticks) and involuntary context switches of a process, its
# threads and its children (nginx's workers).
usage_of() {
  local ticks=0 nvcs=0 p t f
  for p in $1 $(pgrep -P "$1" || true); do
    f="$(sed 's/.*) //' "/proc/$p/stat")"
    set -- $f
    ticks=$((ticks + ${12} + ${13}))
    for t in /proc/"$p"/task/*; do
      nvcs=$((nvcs + $(awk '/^nonvoluntary_ctxt/ {print $2}' "$t/status")))
    done
  done
  echo "$ticks $nvcs"
}
# label pid url script: warm-up 2 s, then SECONDS_EACH; one result line.
measure() {
  local label="$1" pid="$2" url="$3" script="$4" before after requests
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d2s -s "$script" "$url" >/dev/null
  before=($(usage_of "$pid"))
  requests=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" -s "$script" "$url" |
    awk '/^ *[0-9]+ requests in/ {print $1}')
  after=($(usage_of "$pid"))
  [ -n "$requests" ] && [ "$requests" -gt 0 ] || die "$label: wrk completed no request"
  python3 - "$label" "$requests" "$TICK" "${before[@]}" "${after[@]}" <<'PY' | tee -a "$WORK/results"
import sys
label, requests, tick = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, n0, t1, n1 = map(int, sys.argv[4:8])
cpu = (t1 - t0) / tick * 1e6 / requests
print(f"{label}\t{requests}\t{cpu:.2f}\t{(n1 - n0) / requests:.3f}")
PY
}

# nginx as run.sh and instructions.sh set it (deploy/bench/nginx.sh).
P_NG=$(free_port)
nginx_conf "$WORK/nginx" "$P_NG" "${V2#http://}"
taskset -c 1 "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" \
  >"$WORK/nginx.log" 2>&1 &
NG_PID=$!; PIDS+=("$NG_PID")
wait_http "http://127.0.0.1:$P_NG/api/v2/worker-runs/$RUN_SMALL" "nginx"
log "nginx: $SECONDS_EACH s at $CONNECTIONS connections"
measure nginx "$NG_PID" "http://127.0.0.1:$P_NG/api/v2/worker-runs/$RUN_SMALL" "$WORK/get.lua" >/dev/null

# Each binary's gateway, started before the rounds and kept up between them.
GW_PIDS=(); GW_PORTS=()
for i in "${!BINARIES[@]}"; do
  spec="${BINARIES[$i]}"; bin="${spec##*@}"; vars=""
  [ "$spec" != "$bin" ] && vars="${spec%@*}"
  [ -x "$bin" ] || die "$bin is not an executable"
  port=$(free_port); admin=$(free_port)
  # The inventory's file in the run's own directory, for the builds that
  # have an inventory (`inventory` among their commands): an earlier build
  # refuses the key it does not know.
  inventory=()
  if "$bin" inventory --help >/dev/null 2>&1; then
    inventory=(V1COMPAT_INVENTORY__STORE="redb:$WORK/inventory-$i.redb")
  fi
  # shellcheck disable=SC2086
  env ${vars//,/ } "${inventory[@]}" V1COMPAT_UPSTREAM__BASE_URL="$V2" V1COMPAT_UPSTREAM__SERVICE_KEY="$KEY" \
    V1COMPAT_LISTEN__PUBLIC="127.0.0.1:$port" V1COMPAT_LISTEN__ADMIN="127.0.0.1:$admin" \
    V1COMPAT_LOG__LEVEL=warn taskset -c 1 "$bin" serve >"$WORK/gateway-$i.log" 2>&1 &
  GW_PIDS+=($!); PIDS+=($!); GW_PORTS+=("$port")
  wait_http "http://127.0.0.1:$admin/healthz" "gateway $i ($spec)"
done

# Each round starts one build further on: the machine's speed drifts within
# a round too, and a build always measured first (or last) would carry it.
for round in $(seq 1 "$ROUNDS"); do
  for j in "${!BINARIES[@]}"; do
    i=$(( (j + round - 1) % ${#BINARIES[@]} ))
    log "round $round, ${BINARIES[$i]}"
    measure "$i" "${GW_PIDS[$i]}" "http://127.0.0.1:${GW_PORTS[$i]}/api/v1/run/detail" "$WORK/post.lua" >/dev/null
  done
done
log "nginx again, for the drift"
measure nginx "$NG_PID" "http://127.0.0.1:$P_NG/api/v2/worker-runs/$RUN_SMALL" "$WORK/get.lua" >/dev/null

python3 - "$WORK/results" "${BINARIES[@]}" <<'PY'
import sys, statistics
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
names = sys.argv[2:]
ng = [float(r[2]) for r in rows if r[0] == "nginx"]
print("| Proxy | CPU µs a request, each run | mean | / nginx | involuntary switches a request |")
print("|---|---|---|---|---|")
print(f"| nginx | {', '.join(f'{c:.2f}' for c in ng)} | {statistics.mean(ng):.2f} | | "
      f"{statistics.mean(float(r[3]) for r in rows if r[0] == 'nginx'):.3f} |")
for i, name in enumerate(names):
    mine = [r for r in rows if r[0] == str(i)]
    cpu = [float(r[2]) for r in mine]
    print(f"| {name} | {', '.join(f'{c:.2f}' for c in cpu)} | {statistics.mean(cpu):.2f} | "
          f"{statistics.mean(cpu) / statistics.mean(ng):.2f}× | "
          f"{statistics.mean(float(r[3]) for r in mine):.3f} |")
PY
