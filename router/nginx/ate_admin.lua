-- The admin server of the router's nginx data path (a unix socket only the control service
-- reaches; router/nginx/admin.py is its client): invalidate, drain, cut, lease, flush, stats,
-- recent, inflight, active. Split from ate_router.lua.

local counters = require("ate_counters")

local M = {}

local routes = ngx.shared.ate_routes
local stats = ngx.shared.ate_stats
-- Drains and the lease (see ate_router.lua).
local control = ngx.shared.ate_control
-- The actors marked by the log phase (ate_counters.lua).
local active = ngx.shared.ate_active
local sub = string.sub
local concat = table.concat
local RECENT, RECENT_KEYS = counters.RECENT, counters.RECENT_KEYS

--- POST /invalidate?key=<atespace>/<name>: forget one actor (every entry, every credential).
function M.invalidate()
  local key = ngx.var.arg_key
  if not key then
    return ngx.exit(400)
  end
  key = ngx.unescape_uri(key)
  routes:delete("p:" .. key)
  routes:incr("g:" .. key, 1, 0)
  ngx.say("ok")
end

--- POST /drain?key=<atespace>/<name>&seq=<drain token>: a drain of that actor begins: every
--- entry of it is void, and a control service answer about it with a smaller token is never
--- used (its requests ask again).
function M.drain()
  local key = ngx.var.arg_key
  if not key then
    return ngx.exit(400)
  end
  key = ngx.unescape_uri(key)
  local seq = tonumber(ngx.var.arg_seq)
  if not seq then
    return ngx.exit(400)
  end
  control:set("d:" .. key, seq)
  if seq > (control:get("dseq") or 0) then
    control:set("dseq", seq)
  end
  routes:delete("p:" .. key)
  routes:incr("g:" .. key, 1, 0)
  ngx.say(seq)
end

--- POST /cut?key=<atespace>/<name>: the requests of that actor in flight now are being cut
--- (their outcome is "error"); answers the upstreams they use, "<upstream>\t<count>" a line.
function M.cut()
  local key = ngx.var.arg_key
  if not key then
    return ngx.exit(400)
  end
  key = ngx.unescape_uri(key)
  control:set("c:" .. key, control:get("dseq") or 0)
  local prefix = "fu:" .. key .. "\t"
  local lines = {}
  for _, name in ipairs(control:get_keys(0)) do
    if name:sub(1, #prefix) == prefix then
      local value = control:get(name)
      if value and value > 0 then
        lines[#lines + 1] = name:sub(#prefix + 1) .. "\t" .. tostring(value)
      end
    end
  end
  ngx.print(table.concat(lines, "\n"))
end

--- POST /lease?seconds=<s>: this replica's lease runs that much longer (0: it is over).
function M.lease()
  local seconds = tonumber(ngx.var.arg_seconds)
  if not seconds then
    return ngx.exit(400)
  end
  ngx.update_time()
  control:set("lease", ngx.now() + seconds)
  ngx.say("ok")
end

--- POST /flush: forget every actor (the control service lost its LISTEN, or reconnected).
function M.flush()
  local epoch = (routes:get("epoch") or 0) + 1
  routes:flush_all()
  routes:set("epoch", epoch)
  ngx.say("ok")
end

--- GET /stats: every counter, one "<name>\t<value>" a line.
function M.stats()
  local lines = {}
  for _, key in ipairs(stats:get_keys(0)) do
    if key ~= "rn" and sub(key, 1, 2) ~= "r:" then
      local value = stats:get(key)
      if value ~= nil then
        lines[#lines + 1] = key .. "\t" .. tostring(value)
      end
    end
  end
  ngx.print(table.concat(lines, "\n"))
end

--- GET /recent: the last 100 requests, newest first, tab-separated fields a line.
function M.recent()
  local count = stats:get("rn") or 0
  local lines = {}
  for n = count, math.max(count - RECENT + 1, 1), -1 do
    local line = stats:get(RECENT_KEYS[n % RECENT])
    if line ~= nil then
      lines[#lines + 1] = line
    end
  end
  ngx.print(concat(lines, "\n"))
end

--- GET /active: the actors with traffic since the last call, one key a line: a request of it
--- ended (marked by the log phase; the marks are taken) or is in flight now ("f:" counts).
function M.active()
  local lines, seen, n = {}, {}, 0
  for _, key in ipairs(active:get_keys(0)) do
    active:delete(key)
    n = n + 1
    lines[n] = key
    seen[key] = true
  end
  for _, name in ipairs(stats:get_keys(0)) do
    if sub(name, 1, 2) == "f:" and (stats:get(name) or 0) > 0 then
      local key = sub(name, 3)
      if not seen[key] then
        n = n + 1
        lines[n] = key
      end
    end
  end
  ngx.print(concat(lines, "\n"))
end

--- GET /inflight?key=<atespace>/<name>: requests of that actor being proxied now (for drain).
function M.inflight()
  local key = ngx.var.arg_key
  if not key then
    return ngx.exit(400)
  end
  ngx.print(tostring(stats:get("f:" .. ngx.unescape_uri(key)) or 0))
end

return M
