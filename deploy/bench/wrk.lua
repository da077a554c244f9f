-- wrk script for deploy/bench/run.sh.
-- BENCH_BODY (optional): send POST with this JSON body instead of GET.
-- At the end, prints one machine-readable line:
--   BENCH requests=N duration_us=N non2xx=N errors=N p50=us p90=us p99=us max=us
local body = os.getenv("BENCH_BODY")
if body ~= nil and body ~= "" then
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d non2xx=%d errors=%d p50=%d p90=%d p99=%d max=%d\n",
    summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
