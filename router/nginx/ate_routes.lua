-- The routes cached in the shared dict `ate_routes` of the router's nginx data path, and the
-- shared-dict keys of each actor. A route is "<epoch> <generation> <upstream> <host> <strip
-- 0|1>", void once the flush epoch or the actor's generation moved on (an invalidation came).
-- Split from ate_router.lua, which asks the control service on a miss and stores its answers.

local request = require("ate_request")

local M = {}

local routes = ngx.shared.ate_routes
local KEYS_KEPT = 10000

-- The shared-dict keys of an actor, made once per worker (a concatenation a request saves):
-- f (its requests in flight), c (its last cut), d (its last drain), p (its public route), g
-- (its generation); and m, the second this nginx worker last marked it active (ate_counters.lua).
local actor_keys, actor_keys_count = {}, 0
function M.keys_of(actor)
  local keys = actor_keys[actor]
  if keys == nil then
    if actor_keys_count >= KEYS_KEPT then
      actor_keys, actor_keys_count = {}, 0
    end
    keys = { f = "f:" .. actor, c = "c:" .. actor, d = "d:" .. actor, p = "p:" .. actor, g = "g:" .. actor }
    actor_keys[actor] = keys
    actor_keys_count = actor_keys_count + 1
  end
  return keys
end
local keys_of = M.keys_of

function M.credential_hash(head)
  return ngx.md5(request.credentials(head))
end

-- A cached route: "<epoch> <generation> <upstream> <host> <strip 0|1>", parsed once per worker
-- and actor (the latest entry of each actor is kept parsed: the same text is the same route).
local parsed_routes, parsed_count = {}, 0
local function parse_route(entry, key)
  local known = parsed_routes[key]
  if known ~= nil and known.entry == entry then
    return known
  end
  local epoch, gen, upstream, host, strip_credential = entry:match("^(%d+) (%d+) (%S+) (%S+) ([01])$")
  if not epoch then
    return nil
  end
  local ip, port = upstream:match("^%[?(.-)%]?:(%d+)$")
  local route = {
    entry = entry, epoch = tonumber(epoch), gen = tonumber(gen), upstream = upstream, host = host,
    strip = strip_credential == "1", cached = true, actor = key, ip = ip, port = tonumber(port),
    upstream_key = "fu:" .. key .. "\t" .. upstream,
  }
  if known == nil then
    if parsed_count >= KEYS_KEPT then
      parsed_routes, parsed_count = {}, 0
    end
    parsed_count = parsed_count + 1
  end
  parsed_routes[key] = route
  return route
end

local function valid(entry, key, keys)
  if not entry then
    return nil
  end
  local route = parse_route(entry, key)
  if route == nil then
    return nil
  end
  if route.epoch ~= (routes:get("epoch") or 0) or route.gen ~= (routes:get(keys.g) or 0) then
    return nil
  end
  return route
end

function M.lookup(key, head)
  local keys = keys_of(key)
  local found = valid(routes:get(keys.p), key, keys)
  if found then
    return found
  end
  if head.authorization or head.cookie then
    return valid(routes:get("t:" .. key .. ":" .. M.credential_hash(head)), key, keys)
  end
  return nil
end

return M
