-- wrk script: one event per request, as webhook producers and curl send
-- (POST /events, append mode, `Prefer: return=minimal`), with ids unique
-- across wrk's threads and across runs (a resent id is a duplicate, a
-- different path: RESEND_AFTER below makes half the requests such
-- retries). Used by benches/wrk/compare.sh.
--
--   WRK_THREADS=1 wrk -t1 -c64 -d8s -s benches/wrk/single_event.lua http://127.0.0.1:8080
--
-- The pipeline needs a partition named "events" (compare.sh writes one).
local n = 0
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  nthreads = tonumber(os.getenv("WRK_THREADS") or "1")
  -- RESEND_AFTER=N: every other request resends the event first sent N
  -- requests before it (a webhook producer's retries, a duplicate each)
  resend = tonumber(os.getenv("RESEND_AFTER") or "0")
  -- 200,000 ids per second of wall time: runs a second apart never meet
  base = (os.time() - 1765000000) * 200000
end
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["prefer"] = "return=minimal"
request = function()
  n = n + 1
  local m = n
  if resend > 0 then
    m = math.floor(n / 2)
    if n % 2 == 0 and m > resend / 2 then m = m - resend / 2 end
  end
  local id = base + m * nthreads + tid
  -- event time advances 1 s per 10 events: windows close as the run goes
  local created = 1700000000 + math.floor(id / 10)
  local body = string.format(
    '{"partition":"events","event":{"id":"ev-%d","key":"cus_%d","timestamp":%d,"value":%d}}',
    id, id % 97, created * 1000, 100 + id % 900)
  return wrk.format(nil, "/events", nil, body)
end
done = function(summary, latency, requests)
  io.write(string.format("WRK rps=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
