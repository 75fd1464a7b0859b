-- The router's data path inside nginx (router/nginx/README in docs/architecture.md, "The router").
--
-- Access phase: find the actor's key (ate-target-actor header, else Host), look it up in the
-- shared dict `ate_routes`; on a miss ask the Python control service (location /_ate/route, a
-- subrequest), which resumes, parks, checks access and answers either where the actor serves or
-- the exact status, text and Retry-After the Python router gives. Its answer is cached only
-- when the control service says so (its own cache is on: PostgreSQL LISTEN is live), and only
-- if no invalidation for that actor (or flush) came while it was asked: every entry carries the
-- flush epoch and the actor's generation read before asking, and is void when they moved on.
--
-- Content phase: the exchange with the worker over a cosocket (ate_exchange.lua), with the
-- Python data path's timeouts, texts and resets.
--
-- Log phase: outcome counters, duration histogram, bytes, the last 100 requests (for /statusz)
-- and per-actor in-flight counts (for drain) in the shared dict `ate_stats`.
--
-- The admin server (a unix socket, only the control service reaches it): invalidate, flush,
-- stats, recent, inflight.

local exchange = require("ate_exchange")

local M = {}

local routes = ngx.shared.ate_routes
local stats = ngx.shared.ate_stats
-- Drains and the lease (never flushed with the routes): "lease" (until, epoch seconds),
-- "dseq" (the control service's drain token of the latest drain), "d:<actor>" (the token of
-- its last drain), "c:<actor>" (the dseq at its last cut), "fu:<actor>\t<upstream>" (its
-- requests proxied there now).
local control = ngx.shared.ate_control
local DRAIN_RETRIES = 5
local cfg = {
  domain = "ate.local",
  buckets = {},
  token_seconds = 10,
  request_seconds = 3600,
  connect_seconds = 5,
  head_seconds = 120,
  idle_seconds = 300,
  max_head_bytes = 32768,
}

local LABEL = [[^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$]]
local REQUEST_ID = [[^[A-Za-z0-9._:+=/-]{1,128}$]]
local RECENT = 100

--- Set the configuration (from init_by_lua): domain, histogram buckets, entry lifetimes.
function M.configure(options)
  for k, v in pairs(options) do
    cfg[k] = v
  end
  cfg.suffix = ".actors." .. cfg.domain:gsub("^%.+", ""):gsub("%.+$", ""):lower()
end

local function is_label(value)
  return ngx.re.find(value, LABEL, "jo") ~= nil
end

local function strip(value)
  return (value:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The actor key a request names, or nil when the control service must decide (absent,
-- malformed, repeated: it answers those, with the Python router's texts). Accepts exactly what
-- router.target accepts, never more.
local function target_key(headers)
  local given = headers["ate-target-actor"]
  if given ~= nil then
    if type(given) ~= "string" then
      return nil
    end
    local atespace, name = strip(given):match("^([^/]+)/([^/]+)$")
    if atespace and is_label(atespace) and is_label(name) then
      return atespace .. "/" .. name
    end
    return nil
  end
  local host = headers["host"]
  if type(host) ~= "string" then
    return nil
  end
  host = strip(host)
  if host:sub(1, 1) == "[" then
    return nil
  end
  local head, tail = host:match("^(.*):(%d+)$")
  if head then
    host = head
  end
  host = host:lower():gsub("%.$", "")
  local suffix = cfg.suffix
  if #host <= #suffix or host:sub(-#suffix) ~= suffix then
    return nil
  end
  local name, atespace = host:sub(1, -#suffix - 1):match("^([^.]+)%.([^.]+)$")
  if name and is_label(name) and is_label(atespace) then
    return atespace .. "/" .. name
  end
  return nil
end

local function credential_hash(headers)
  local authorization = headers["authorization"]
  local cookie = headers["cookie"]
  if type(authorization) == "table" then
    authorization = table.concat(authorization, "\0")
  end
  if type(cookie) == "table" then
    cookie = table.concat(cookie, "\0")
  end
  return ngx.md5((authorization or "") .. "\1" .. (cookie or ""))
end

-- entry: "<epoch> <generation> <upstream> <host> <strip 0|1>"
local function valid(entry, key)
  if not entry then
    return nil
  end
  local epoch, gen, upstream, host, strip_credential = entry:match("^(%d+) (%d+) (%S+) (%S+) ([01])$")
  if not epoch then
    return nil
  end
  if tonumber(epoch) ~= (routes:get("epoch") or 0) or tonumber(gen) ~= (routes:get("g:" .. key) or 0) then
    return nil
  end
  return { upstream = upstream, host = host, strip = strip_credential == "1", cached = true, actor = key }
end

local function lookup(key, headers)
  local found = valid(routes:get("p:" .. key), key)
  if found then
    return found
  end
  if headers["authorization"] or headers["cookie"] then
    return valid(routes:get("t:" .. key .. ":" .. credential_hash(headers)), key)
  end
  return nil
end

local function answer(status, body, retry_after, outcome)
  ngx.var.ate_outcome = outcome
  ngx.status = status
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  ngx.header["Content-Length"] = #body
  if retry_after then
    ngx.header["Retry-After"] = retry_after
  end
  ngx.print(body)
  return ngx.exit(ngx.HTTP_OK)
end

local function control_unavailable()
  return answer(503, "the router's control service does not answer; retry shortly\n", "2", "unavailable")
end

--- content_by_lua of @control_down: a relayed request found no control service to take it.
function M.control_down()
  return control_unavailable()
end

local function header_values(headers, name)
  local value = headers[name]
  if value == nil then
    return nil
  end
  return value
end

-- Whether this replica's lease with the control plane runs (else no cached entry is used and
-- the control service answers, 503 when it has no lease either).
local function leased()
  return (control:get("lease") or 0) > ngx.now()
end

-- Count the request in its actor's in-flight requests (before its upstream is chosen: a drain
-- that starts later waits for it), remembering the latest drain token at that moment.
local function count(actor)
  stats:incr("f:" .. actor, 1, 0)
  ngx.var.ate_counted = "1"
  ngx.var.ate_actor = actor
  ngx.var.ate_seq = tostring(control:get("dseq") or 0)
end

local function uncount()
  if ngx.var.ate_counted == "1" then
    stats:incr("f:" .. ngx.var.ate_actor, -1, 0)
    ngx.var.ate_counted = "0"
  end
end

local function drained_since(actor, seq)
  return (control:get("d:" .. actor) or 0) > seq
end

-- Ask the control service where the request goes; nil after answering the client itself.
local function ask_control(key, headers, unreachable)
  local epoch = routes:get("epoch") or 0
  local gen = key and (routes:get("g:" .. key) or 0) or 0
  local args = { u = ngx.var.request_uri, h = header_values(headers, "host") }
  local target = header_values(headers, "ate-target-actor")
  if target ~= nil then
    args.t = target
    args.n = type(target) == "table" and #target or 1
  end
  if unreachable then
    args.x = unreachable
  end
  local res = ngx.location.capture("/_ate/route", { args = args })
  local status = res.status
  local reply = res.header
  if status == 200 and reply["x-ate-statusz"] then
    ngx.var.ate_outcome = "statusz"
    return ngx.exec("@statusz")
  end
  local outcome = reply["x-ate-outcome"]
  if not outcome then
    return control_unavailable()
  end
  if status ~= 200 then
    return answer(status, res.body, reply["retry-after"], outcome)
  end
  local found = {
    upstream = reply["x-ate-upstream"],
    host = reply["x-ate-host"],
    strip = reply["x-ate-strip"] == "1",
    parked = reply["x-ate-parked"] == "1",
    cached = reply["x-ate-parked"] ~= "1",
    actor = reply["x-ate-actor"],
    token = tonumber(reply["x-ate-token"]) or -1,
  }
  local lease = tonumber(reply["x-ate-lease"])
  if lease then
    ngx.update_time()
    control:set("lease", ngx.now() + lease)
  end
  local scope = reply["x-ate-cache"]
  if key and key == found.actor and (scope == "public" or scope == "token") then
    local entry = table.concat({ epoch, gen, found.upstream, found.host, found.strip and "1" or "0" }, " ")
    if scope == "public" then
      -- Until NOTIFY names the actor (templates are immutable: its access rule changes only
      -- with the actor, which is notified); nginx caches only while LISTEN is live.
      routes:set("p:" .. key, entry)
    else
      -- As long as the access gate remembers a review: a revoked token passes that long at most.
      routes:set("t:" .. key .. ":" .. credential_hash(headers), entry, cfg.token_seconds)
    end
  end
  return found
end

-- Ask the control service (the request not counted meanwhile: parked requests hold no drain),
-- then count the request for the actor named. The answer carries the drain token the control
-- service took before looking the actor up; a drain of the actor since (its token is larger)
-- makes nginx ask again (the control service holds the request while the drain runs).
local function ask_counted(key, headers, unreachable)
  uncount()
  for _ = 1, DRAIN_RETRIES do
    local found = ask_control(key, headers, unreachable)
    count(found.actor)
    if not drained_since(found.actor, found.token) then
      ngx.var.ate_seq = tostring(found.token)
      return found
    end
    uncount()
    unreachable = nil
  end
  return answer(503, "the actor was drained again and again while this request waited for it; retry shortly\n",
    "2", "unavailable")
end

local function route(found)
  ngx.var.ate_upstream = found.upstream
  ngx.var.ate_upstream_host = found.host
  ngx.var.ate_actor = found.actor
  ngx.var.ate_cached = found.cached and "1" or "0"
  ngx.var.ate_outcome = found.parked and "parked_ok" or "ok"
  ngx.ctx.ate_strip = found.strip
  local upstream_key = "fu:" .. found.actor .. "\t" .. found.upstream
  if ngx.var.ate_upstream_counted ~= upstream_key then
    if ngx.var.ate_upstream_counted ~= "" then
      control:incr(ngx.var.ate_upstream_counted, -1, 0)
    end
    control:incr(upstream_key, 1, 0)
    ngx.var.ate_upstream_counted = upstream_key
  end
end

-- Whether the request is relayed to the control service's Python router, which proxies it
-- itself: a WebSocket upgrade, or a request that asks for an event stream (Accept:
-- text/event-stream). Those never end on their own; there a drain or a stop of the router
-- ends them the clean way (a close frame with a reason, the end of the stream), which nginx
-- cannot do. Also a request with a chunked body (a streamed upload): the Python router answers
-- a stalled one with its 408 and text (nginx's own reading of a chunked body would close the
-- connection without an answer, and Lua cannot read one). nginx stays half-duplex on the way
-- there: once the answer began it sends no more of the body.
-- (Read from nginx's variables, not the header table, which stops at 200 headers.)
local function relayed(headers)
  local upgrade = ngx.var.http_upgrade
  if upgrade ~= nil and upgrade:lower() == "websocket" then
    ngx.var.ate_relay_connection = "upgrade"
    ngx.var.ate_relay_upgrade = upgrade
    return true
  end
  if ngx.var.http_transfer_encoding ~= nil then
    return true
  end
  local accept = headers["accept"]
  if type(accept) == "table" then
    accept = table.concat(accept, ",")
  end
  accept = (accept or "") .. "," .. (ngx.var.http_accept or "")
  return accept:lower():find("text/event-stream", 1, true) ~= nil
end

--- access_by_lua of the actor location.
function M.access()
  local headers = ngx.req.get_headers(200)
  local request_id = headers["x-request-id"]
  if type(request_id) ~= "string" or not ngx.re.find(request_id, REQUEST_ID, "jo") then
    request_id = ngx.var.request_id
    ngx.req.set_header("X-Request-Id", request_id)
  end
  ngx.var.ate_request_id = request_id
  if relayed(headers) then
    return ngx.exec("@relay")
  end
  local key = target_key(headers)
  local found
  if key and leased() then
    count(key)
    found = lookup(key, headers)  -- after counting: a drain since voids the entry
  end
  if not found then
    found = ask_counted(key, headers)
  end
  route(found)
end

-- The answer to a request whose exchange with the worker failed before its answer began:
-- the control service's text for `kind` (connect, broken, timeout, cut) and `what` ran out.
local function fail(kind, what, actor, upstream)
  local res = ngx.location.capture("/_ate/failed",
    { args = { kind = kind, what = what, actor = actor, upstream = upstream } })
  if not res.header["x-ate-outcome"] then
    return control_unavailable()
  end
  return answer(res.status, res.body, res.header["retry-after"], res.header["x-ate-outcome"])
end

--- content_by_lua of the actor location: the exchange with the worker (ate_exchange.lua). A
--- cached actor whose worker refuses the connection moved (or its sandbox died): it is
--- forgotten, resumed again and tried once more (nothing of the request was sent yet).
function M.proxy()
  ngx.on_abort(function()
    local ex = ngx.ctx.ate_exchange
    if ex then
      ex.gone = true
    end
  end)
  local result, what, actor, upstream
  while true do
    actor, upstream = ngx.var.ate_actor, ngx.var.ate_upstream
    local counted = ngx.var.ate_counted == "1"
    local seq = tonumber(ngx.var.ate_seq) or 0
    local function cut()
      return counted and (control:get("c:" .. actor) or 0) > seq
    end
    result, what = exchange.run({
      upstream = upstream,
      host = ngx.var.ate_upstream_host,
      strip_credential = ngx.ctx.ate_strip,
      request_id = ngx.var.ate_request_id,
      forwarded_for = ngx.var.ate_forwarded_for,
      connect_seconds = cfg.connect_seconds,
      head_seconds = cfg.head_seconds,
      idle_seconds = cfg.idle_seconds,
      request_seconds = cfg.request_seconds,
      cut = cut,
    })
    if result == "done" then
      return
    end
    if result == "done_close" then
      ngx.eof()
      return ngx.exit(ngx.ERROR)
    end
    if result == "truncated" then
      return ngx.exit(ngx.ERROR)
    end
    if result == "broken" and cut() then
      result = "cut"  -- a drain cut its actor's requests before this one was answered
    end
    if result ~= "connect" or ngx.var.ate_cached ~= "1" or ngx.var.ate_retried == "1" then
      break
    end
    ngx.var.ate_retried = "1"
    routes:delete("p:" .. actor)
    routes:incr("g:" .. actor, 1, 0)
    local found = ask_counted(actor, ngx.req.get_headers(200), upstream)
    found.parked = true
    found.cached = false
    route(found)
  end
  if result == "stalled" then
    ngx.status = 408
    M.body_stalled()
    ngx.flush(true)
    return ngx.exit(ngx.ERROR)  -- the rest of its body must not be read as a next request
  end
  if result == "client_gone" then
    ngx.var.ate_outcome = "client_gone"
    return ngx.exit(499)
  end
  return fail(result, what, actor, upstream)
end

--- content_by_lua of /_ate/head_too_large (nginx's 414 and 494 become the Python path's 431).
function M.head_too_large()
  local text = string.format("request head larger than %d bytes (request line and headers)\n", cfg.max_head_bytes)
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  ngx.header["Content-Length"] = #text
  ngx.print(text)
end

--- The 408 of a client silent in its Content-Length body (called by proxy).
function M.body_stalled()
  ngx.var.ate_outcome = "timeout"
  local text = string.format("the request body stalled: no byte for %gs (idle timeout); send the body without "
    .. "pauses, or raise the router's --idle-timeout\n", cfg.idle_seconds)
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  ngx.header["Content-Length"] = #text
  ngx.print(text)
end

--- header_filter_by_lua: the request id on every answer.
function M.header_filter()
  local request_id = ngx.var.ate_request_id
  if request_id ~= nil and request_id ~= "" then
    ngx.header["X-Request-Id"] = request_id
  end
end

local function observe(outcome, seconds)
  stats:incr("n:" .. outcome, 1, 0)
  stats:incr("s:" .. outcome, seconds, 0)
  local buckets = cfg.buckets
  for i = 1, #buckets do
    if seconds <= buckets[i] then
      stats:incr("b:" .. outcome .. ":" .. i, 1, 0)
      return
    end
  end
  stats:incr("b:" .. outcome .. ":inf", 1, 0)
end

--- log_by_lua: counters, histogram, bytes, in-flight, the recent list.
function M.log()
  local outcome = ngx.var.ate_outcome
  if ngx.var.ate_counted == "1" then
    stats:incr("f:" .. ngx.var.ate_actor, -1, 0)
    if (control:get("c:" .. ngx.var.ate_actor) or 0) > (tonumber(ngx.var.ate_seq) or 0) then
      outcome = "error"  -- cut off by a drain at --drain-timeout
      ngx.var.ate_outcome = outcome
    end
  end
  local upstream_counted = ngx.var.ate_upstream_counted
  if upstream_counted ~= nil and upstream_counted ~= "" then
    if (control:incr(upstream_counted, -1, 0) or 1) <= 0 then
      control:delete(upstream_counted)
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
  local seconds = ngx.now() - ngx.req.start_time()
  observe(outcome, seconds)
  stats:incr("in", tonumber(ngx.var.http_content_length) or tonumber(ngx.var.request_length) or 0, 0)
  stats:incr("out", tonumber(ngx.var.body_bytes_sent) or 0, 0)
  local target = ngx.var.http_ate_target_actor or "-"
  local line = table.concat({
    string.format("%.3f", ngx.req.start_time()),
    ngx.var.ate_request_id or "",
    (target:gsub("[\t\n]", " ")):sub(1, 200),
    ngx.req.get_method(),
    (ngx.var.uri:gsub("[\t\n]", " ")):sub(1, 200),
    tostring(status),
    outcome,
    string.format("%.1f", seconds * 1000),
  }, "\t")
  local length = stats:lpush("recent", line)
  if length and length > RECENT then
    stats:rpop("recent")
  end
end

-- ------------------------------------------------------------------ the admin server

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
    if key ~= "recent" then
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
  local lines = {}
  local length = stats:llen("recent") or 0
  for _ = 1, math.min(length, RECENT) do
    local line = stats:rpop("recent")
    if line == nil then
      break
    end
    lines[#lines + 1] = line
  end
  for i = #lines, 1, -1 do  -- put them back in their order
    stats:rpush("recent", lines[i])
  end
  -- rpop took the oldest first: newest first is the reverse
  local out = {}
  for i = #lines, 1, -1 do
    out[#out + 1] = lines[i]
  end
  ngx.print(table.concat(out, "\n"))
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
