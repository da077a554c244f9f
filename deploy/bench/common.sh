# Sourced by run.sh, instructions.sh and cpu-ab.sh: what each needs to set up
# and to clean up after itself, written once. Uses the sourcing script's own
# `log` and `die`; the process functions its `WORK` (a fresh directory) and
# `PIDS` (what it started), and `start_sandbox` its `KEY` and `SEED`.

# Whether a command is there (nginx is often outside a user's PATH).
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }

# install_missing INSTALL COMMAND=PACKAGE ...: installs, with apt-get, the
# Debian package of each command that is missing (`apt-get update` first if
# the install fails); with INSTALL=0 names them and stops instead.
install_missing() {
  local install="$1" spec need=()
  shift
  for spec in "$@"; do have "${spec%%=*}" || need+=("${spec#*=}"); done
  [ ${#need[@]} -gt 0 ] || return 0
  [ "$install" = 1 ] || die "missing: ${need[*]} (run without --no-install, or install them)"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -qq "${need[@]}" >/dev/null; then
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

# On exit, also on failure or ctrl-c: every process in PIDS asked to stop,
# killed after 10 s; WORK removed, or kept (and named) after a failure.
stop_all_on_exit() {
  trap _stop_all EXIT
  trap 'exit 130' INT TERM
}
_stop_all() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null || true
  done
  if [ "$rc" != 0 ]; then log "failed (exit $rc); logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}

# A port free on loopback now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_http URL WHAT [PID]: until URL answers, at most two minutes; stops
# early if PID, the process serving it, has exited.
wait_http() {
  for _ in $(seq 1 600); do
    curl -s -o /dev/null --max-time 2 "$1" && return 0
    [ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || die "$2 exited (see $WORK/*.log)"
    sleep 0.2
  done
  die "$2 did not come up at $1 (see $WORK/*.log)"
}

# start_sandbox BIN [PREFIX...]: BIN's embedded sandbox on free loopback
# ports, its V2 service seeded with SEED and keyed KEY, run under PREFIX
# (`taskset -c 0`, say); waits for its ready file and sets V2 to the V2
# service's base URL.
start_sandbox() {
  local bin="$1" pid
  shift
  "$@" "$bin" sandbox --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --upstream-listen 127.0.0.1:0 \
    --legacy-listen 127.0.0.1:0 --api-key "$KEY" --seed "$SEED" --ready-file "$WORK/sandbox.ready" \
    >"$WORK/sandbox.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 300); do
    [ -s "$WORK/sandbox.ready" ] && break
    kill -0 "$pid" 2>/dev/null || die "the sandbox exited (see $WORK/sandbox.log)"
    sleep 0.1
  done
  V2=$(sed -n 's/.* upstream=\(http:[^ ]*\).*/\1/p' "$WORK/sandbox.ready")
  [ -n "$V2" ] || die "the sandbox wrote no upstream address (see $WORK/sandbox.log)"
}
