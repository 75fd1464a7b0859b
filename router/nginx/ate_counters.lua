-- The log phase of the router's nginx data path: outcome counters, the duration histogram,
-- bytes, the request's actor leaving its in-flight count (for drains) and the last 100 requests
-- (for /statusz), all in the shared dict `ate_stats`; and the request's actor marked in
-- `ate_active` for the replica's heartbeat (at most once a second per actor and nginx worker:
-- the heartbeat needs one mark per actor, not one per request). The admin server
-- (ate_admin.lua) reads both. Split from ate_router.lua.

local M = {}

local stats = ngx.shared.ate_stats
local control = ngx.shared.ate_control
-- The actors with a request ended since the control service last read them (/active): key ->
-- true. (Those in flight are read from the "f:" counts of `ate_stats`.)
local active = ngx.shared.ate_active
local find, sub = string.find, string.sub
local floor = math.floor

local cfg = { buckets = {} }
M.RECENT = 100
M.RECENT_KEYS = {}
for i = 0, M.RECENT - 1 do
  M.RECENT_KEYS[i] = "r:" .. i
end
local RECENT, RECENT_KEYS = M.RECENT, M.RECENT_KEYS

--- Share the router's configuration table (buckets: the histogram's, in seconds).
function M.configure(config)
  cfg = config
end

-- The shared-dict keys of an outcome's counters: n (requests), s (seconds), b (histogram
-- buckets, then "inf").
local outcome_keys = {}
local function keys_of_outcome(outcome)
  local keys = outcome_keys[outcome]
  if keys == nil then
    local buckets = {}
    for i = 1, #cfg.buckets do
      buckets[i] = "b:" .. outcome .. ":" .. i
    end
    buckets[#cfg.buckets + 1] = "b:" .. outcome .. ":inf"
    keys = { n = "n:" .. outcome, s = "s:" .. outcome, b = buckets }
    outcome_keys[outcome] = keys
  end
  return keys
end

local function observe(outcome, seconds)
  local keys = keys_of_outcome(outcome)
  stats:incr(keys.n, 1, 0)
  stats:incr(keys.s, seconds, 0)
  local buckets = cfg.buckets
  for i = 1, #buckets do
    if seconds <= buckets[i] then
      stats:incr(keys.b[i], 1, 0)
      return
    end
  end
  stats:incr(keys.b[#buckets + 1], 1, 0)
end

local function clean(text)
  if find(text, "\t", 1, true) or find(text, "\n", 1, true) then
    text = text:gsub("[\t\n]", " ")
  end
  if #text > 200 then
    text = sub(text, 1, 200)
  end
  return text
end

--- log_by_lua: counters, histogram, bytes, in-flight, the recent list.
function M.log()
  local ctx = ngx.ctx
  local outcome = ngx.var.ate_outcome
  local counted = ctx.counted
  if counted then
    stats:incr(counted.f, -1, 0)
    local second = floor(ngx.now())
    if counted.m ~= second then
      counted.m = second
      active:set(ctx.actor, true)
    end
    if (control:get(counted.c) or 0) > ctx.seq then
      outcome = "error"  -- cut off by a drain at --drain-timeout
      ngx.var.ate_outcome = outcome
    end
  end
  local upstream_key = ctx.upstream_key
  if upstream_key ~= nil then
    if (control:incr(upstream_key, -1, 0) or 1) <= 0 then
      control:delete(upstream_key)
    end
  end
  local status = ngx.status
  if status == 499 and outcome ~= "statusz" then
    -- The client left before any answer (parked, or waiting for the worker's head): listed
    -- with status 0, as the Python data path lists it.
    outcome = "client_gone"
    status = 0
  end
  if outcome == "statusz" or outcome == nil or outcome == "" then
    return
  end
  ngx.update_time()
  local started = ngx.req.start_time()
  local seconds = ngx.now() - started
  observe(outcome, seconds)
  local var = ngx.var
  stats:incr("in", ctx.body_length or tonumber(var.http_content_length) or 0, 0)  -- body bytes
  stats:incr("out", tonumber(var.body_bytes_sent) or 0, 0)
  local head = ctx.head
  local targets = head and head.targets
  local target = targets and targets[1] or var.http_ate_target_actor or "-"
  local line = (floor(started * 1000) / 1000) .. "\t" .. (ctx.request_id or var.ate_request_id or "") .. "\t"
    .. clean(target) .. "\t" .. (ctx.method or ngx.req.get_method()) .. "\t" .. clean(var.uri) .. "\t"
    .. status .. "\t" .. outcome .. "\t" .. (floor(seconds * 10000 + 0.5) / 10)
  -- The recent list is a ring of RECENT entries ("r:<n mod RECENT>"; "rn" counts them).
  stats:set(RECENT_KEYS[stats:incr("rn", 1, 0) % RECENT], line)
end

return M
