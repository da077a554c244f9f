# Sourced by run.sh and instructions.sh once the sandbox V2 is up: starts the
# two runs the workloads read (2600 rows and 8 rows) and eighteen more for the
# run list, moves the sandbox clock until they have finished, and sets AUTH,
# RUN_BULK and RUN_SMALL.
# Needs V2, KEY, and the scripts' own die and log.
AUTH="Authorization: Bearer $KEY"
BULK=01KD4N6P8R0T2V4W6Y8Z0B2D4F   # coreclaw~tiktok-comments-bulk: 2600 rows
SMALL=01KC2X8Q3R5T7V9W1Y3Z5B7D9F  # coreclaw~amazon-product-by-asin: 8 rows
start_run() {
  curl -sf -X POST "$V2/api/v2/workers/$1/runs" -H "$AUTH" -H 'content-type: application/json' \
    -d '{"is_async":true}' | sed -n 's/.*"run_slug":"\([^"]*\)".*/\1/p'
}
RUN_BULK=$(start_run "$BULK"); RUN_SMALL=$(start_run "$SMALL")
[ -n "$RUN_BULK" ] && [ -n "$RUN_SMALL" ] || die "could not start the runs to read"
# Eighteen more, so a run list's first page of 20 is full.
for _ in $(seq 18); do
  [ -n "$(start_run "$SMALL")" ] || die "could not start the runs to list"
done
curl -sf -X POST "$V2/__sandbox/advance" -H 'content-type: application/json' -d '{"seconds":600}' >/dev/null
for r in "$RUN_BULK" "$RUN_SMALL"; do
  curl -sf "$V2/api/v2/worker-runs/$r" -H "$AUTH" | grep -q '"status":"succeeded"' \
    || die "run $r did not finish after advancing the clock"
done
log "runs to read: bulk $RUN_BULK (2600 rows), small $RUN_SMALL"
