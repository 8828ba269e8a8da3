-- wrk reporter for benches/load/run: prints one machine-readable line at the end.
-- Only done() is defined, so wrk keeps its static request path (no per-request Lua).
-- Latencies are in microseconds; "status" counts responses with status >= 400.
done = function(summary, latency, requests)
  local e = summary.errors
  local n = summary.requests
  local lmin, lmax, lmean, lp50, lp99 = 0, 0, 0, 0, 0
  if n > 0 then
    lmin, lmax, lmean = latency.min, latency.max, latency.mean
    lp50, lp99 = latency:percentile(50), latency:percentile(99)
  end
  io.write(string.format(
    'WRKJSON {"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"lat_min_us":%.1f,"lat_max_us":%.1f,"lat_mean_us":%.1f,"lat_p50_us":%.1f,"lat_p99_us":%.1f}\n',
    summary.duration, n, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    lmin, lmax, lmean, lp50, lp99))
end
