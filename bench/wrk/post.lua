-- POST JSON bodies in rotation, one body per line of a file; report percentiles as one JSON line.
--   wrk -t2 -c64 -d5s -s bench/wrk/post.lua http://127.0.0.1:8000/sentiment -- /tmp/bodies.jsonl

local bodies = {}
local counter = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local path = args[1] or error("usage: -- BODIES_FILE")
  for line in io.lines(path) do
    if #line > 0 then
      table.insert(bodies, line)
    end
  end
  if #bodies == 0 then
    error("no bodies in " .. path)
  end
  counter = math.random(#bodies)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  local key = os.getenv("BENCH_API_KEY")
  if key and #key > 0 then
    wrk.headers["X-API-Key"] = key
  end
end

function request()
  counter = counter % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[counter])
end

function done(summary, latency, requests)
  local errors = summary.errors
  local bad = errors.status + errors.connect + errors.read + errors.write + errors.timeout
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "errors": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration / 1e6, bad,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)
  ))
end
