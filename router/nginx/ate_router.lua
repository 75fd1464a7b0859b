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
-- Its parts: the target check (ate_target.lua), the route cache and each actor's shared-dict
-- keys (ate_routes.lua), the client's head (ate_request.lua), the exchange (ate_exchange.lua),
-- the log phase's counters (ate_counters.lua) and the admin server (ate_admin.lua).

local exchange = require("ate_exchange")
local request = require("ate_request")
local routes_mod = require("ate_routes")
local target = require("ate_target")
local counters = require("ate_counters")

local keys_of, lookup, credential_hash = routes_mod.keys_of, routes_mod.lookup, routes_mod.credential_hash
local target_key = target.key

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
  label = nil,  -- domain.labels.DNS_LABEL's pattern, given by router/nginx/config.py (one rule)
}

local find, sub, lower, match, format = string.find, string.sub, string.lower, string.match, string.format
local floor = math.floor
local concat = table.concat

-- Per request, in ngx.ctx (one table; nginx variables are slower to reach from Lua and are
-- set only where nginx reads them: $ate_request_id and $ate_outcome for the access log,
-- $ate_relay_* for @relay): head (ate_request.scan), request_id, actor, seq (the drain token
-- when counted), counted, route (a route, below), upstream_key ("fu:..." counted), retried,
-- exchange (ate_exchange's state, for on_abort).

--- Set the configuration (from init_by_lua): domain, histogram buckets, entry lifetimes.
function M.configure(options)
  for k, v in pairs(options) do
    cfg[k] = v
  end
  cfg.suffix = ".actors." .. cfg.domain:gsub("^%.+", ""):gsub("%.+$", ""):lower()
  target.configure(cfg)
  counters.configure(cfg)
end

--- log_by_lua (ate_counters.lua).
M.log = counters.log

-- Request ids: this worker's random prefix (from nginx's $request_id, once) and a counter, 32
-- hex digits in all, as nginx's own and the Python path's.
local id_prefix, id_count = nil, 0
local function new_request_id()
  if id_prefix == nil then
    id_prefix = sub(ngx.var.request_id, 1, 16)
    id_count = math.random(0, 2 ^ 30)
  end
  id_count = id_count + 1
  return id_prefix .. format("%016x", id_count)
end

local function request_id()
  local ctx = ngx.ctx
  return ctx.request_id or ngx.var.ate_request_id
end

local function answer(status, body, retry_after, outcome)
  ngx.var.ate_outcome = outcome
  ngx.status = status
  local id = request_id()
  if id ~= nil and id ~= "" then
    ngx.header["X-Request-Id"] = id
  end
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

-- Whether this replica's lease with the control plane runs (else no cached entry is used and
-- the control service answers, 503 when it has no lease either).
local function leased()
  return (control:get("lease") or 0) > ngx.now()
end

-- Count the request in its actor's in-flight requests (before its upstream is chosen: a drain
-- that starts later waits for it), remembering the latest drain token at that moment.
local function count(ctx, actor)
  local keys = keys_of(actor)
  stats:incr(keys.f, 1, 0)
  ctx.counted = keys
  ctx.actor = actor
  ctx.seq = control:get("dseq") or 0
end

local function uncount(ctx)
  local keys = ctx.counted
  if keys then
    stats:incr(keys.f, -1, 0)
    ctx.counted = nil
  end
end

local function drained_since(actor, seq)
  return (control:get(keys_of(actor).d) or 0) > seq
end

-- Ask the control service where the request goes; nil after answering the client itself.
local function ask_control(key, head, unreachable)
  local epoch = routes:get("epoch") or 0
  local gen = key and (routes:get(keys_of(key).g) or 0) or 0
  local args = { u = ngx.var.request_uri, h = head.host }
  local targets = head.targets
  if targets ~= nil then
    args.t = #targets == 1 and targets[1] or targets
    args.n = #targets
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
  local upstream, actor = reply["x-ate-upstream"], reply["x-ate-actor"]
  local ip, port = upstream:match("^%[?(.-)%]?:(%d+)$")
  local found = {
    upstream = upstream,
    host = reply["x-ate-host"],
    strip = reply["x-ate-strip"] == "1",
    parked = reply["x-ate-parked"] == "1",
    cached = reply["x-ate-parked"] ~= "1",
    actor = actor,
    token = tonumber(reply["x-ate-token"]) or -1,
    ip = ip,
    port = tonumber(port),
    upstream_key = "fu:" .. actor .. "\t" .. upstream,
  }
  local lease = tonumber(reply["x-ate-lease"])
  if lease then
    ngx.update_time()
    control:set("lease", ngx.now() + lease)
  end
  local scope = reply["x-ate-cache"]
  if key and key == found.actor and (scope == "public" or scope == "token") then
    local entry = concat({ epoch, gen, found.upstream, found.host, found.strip and "1" or "0" }, " ")
    if scope == "public" then
      -- Until NOTIFY names the actor (templates are immutable: its access rule changes only
      -- with the actor, which is notified); nginx caches only while LISTEN is live.
      routes:set(keys_of(key).p, entry)
    else
      -- As long as the access gate remembers a review: a revoked token passes that long at most.
      routes:set("t:" .. key .. ":" .. credential_hash(head), entry, cfg.token_seconds)
    end
  end
  return found
end

-- Ask the control service (the request not counted meanwhile: parked requests hold no drain),
-- then count the request for the actor named. The answer carries the drain token the control
-- service took before looking the actor up; a drain of the actor since (its token is larger)
-- makes nginx ask again (the control service holds the request while the drain runs).
local function ask_counted(ctx, key, unreachable)
  uncount(ctx)
  for _ = 1, DRAIN_RETRIES do
    local found = ask_control(key, ctx.head, unreachable)
    count(ctx, found.actor)
    if not drained_since(found.actor, found.token) then
      ctx.seq = found.token
      return found
    end
    uncount(ctx)
    unreachable = nil
  end
  return answer(503, "the actor was drained again and again while this request waited for it; retry shortly\n",
    "2", "unavailable")
end

local function route(ctx, found)
  ctx.route = found
  ctx.actor = found.actor
  ngx.var.ate_outcome = found.parked and "parked_ok" or "ok"
  local upstream_key = found.upstream_key
  if ctx.upstream_key ~= upstream_key then
    if ctx.upstream_key ~= nil then
      control:incr(ctx.upstream_key, -1, 0)
    end
    control:incr(upstream_key, 1, 0)
    ctx.upstream_key = upstream_key
  end
end

-- Whether the request is relayed to the control service's Python router, which proxies it
-- itself: a WebSocket upgrade, or a request that asks for an event stream (Accept:
-- text/event-stream). Those never end on their own; there a drain or a stop of the router
-- ends them the clean way (a close frame with a reason, the end of the stream), which nginx
-- cannot do. Also a request with a chunked body (a streamed upload): the Python router answers
-- a stalled one with its 408 and text (nginx's own reading of a chunked body would close the
-- connection without an answer, and Lua cannot read one). nginx stays half-duplex on the way
-- there: once the answer began it sends no more of the body. (ate_request.scan finds them.)
local function relay(head, id)
  if head.relay == "websocket" then
    ngx.var.ate_relay_connection = "upgrade"
    ngx.var.ate_relay_upgrade = head.upgrade
  end
  if head.request_id == nil then
    ngx.req.set_header("X-Request-Id", id)  -- the Python router keeps it: one id in both logs
  end
  return ngx.exec("@relay")
end

--- access_by_lua of the actor location.
function M.access()
  local ctx = ngx.ctx
  local head = request.scan()
  ctx.head = head
  local id = head.request_id or new_request_id()
  ctx.request_id = id
  ngx.var.ate_request_id = id
  if head.relay then
    return relay(head, id)
  end
  local key = target_key(head)
  local found
  if key and leased() then
    count(ctx, key)
    found = lookup(key, head)  -- after counting: a drain since voids the entry
  end
  if not found then
    found = ask_counted(ctx, key)
  end
  route(ctx, found)
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


local function on_abort()
  local ex = ngx.ctx.exchange
  if ex then
    ex.gone = true
  end
end

--- content_by_lua of the actor location: the exchange with the worker (ate_exchange.lua). A
--- cached actor whose worker refuses the connection moved (or its sandbox died): it is
--- forgotten, resumed again and tried once more (nothing of the request was sent yet).
function M.proxy()
  ngx.on_abort(on_abort)
  local ctx = ngx.ctx
  local result, what, found
  while true do
    found = ctx.route
    result, what = exchange.run(ctx, found, cfg)
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
    if result == "broken" and exchange.cut(ctx) then
      result = "cut"  -- a drain cut its actor's requests before this one was answered
    end
    if result ~= "connect" or not found.cached or ctx.retried then
      break
    end
    ctx.retried = true
    local keys = keys_of(found.actor)
    routes:delete(keys.p)
    routes:incr(keys.g, 1, 0)
    local again = ask_counted(ctx, found.actor, found.upstream)  -- (a table of its own)
    again.parked, again.cached = true, false
    route(ctx, again)
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
  return fail(result, what, found.actor, found.upstream)
end

--- content_by_lua of /_ate/head_too_large (nginx's 414 and 494 become the Python path's 431).
function M.head_too_large()
  local text = format("request head larger than %d bytes (request line and headers)\n", cfg.max_head_bytes)
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  ngx.header["Content-Length"] = #text
  ngx.print(text)
end

--- The 408 of a client silent in its Content-Length body (called by proxy).
function M.body_stalled()
  ngx.var.ate_outcome = "timeout"
  local text = format("the request body stalled: no byte for %gs (idle timeout); send the body without "
    .. "pauses, or raise the router's --idle-timeout\n", cfg.idle_seconds)
  ngx.header["X-Request-Id"] = request_id()
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  ngx.header["Content-Length"] = #text
  ngx.print(text)
end

--- header_filter_by_lua of the locations whose answers nginx makes (@statusz): the request
--- id on them. (The actor location sets it itself, with the worker's head or its own answer.)
function M.header_filter()
  local id = ngx.var.ate_request_id
  if id ~= nil and id ~= "" then
    ngx.header["X-Request-Id"] = id
  end
end

return M
