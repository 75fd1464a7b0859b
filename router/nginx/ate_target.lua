-- The target of a request in the router's nginx data path: the actor key its ate-target-actor
-- header (else its Host) names, checked against the project's one DNS-label rule (given by
-- router/nginx/config.py through ate_router.configure). Split from ate_router.lua.

local M = {}

local cfg = { label = nil, suffix = nil }
local KEYS_KEPT = 10000

--- Share the router's configuration table (label: the DNS-label pattern; suffix: ".actors.<domain>").
function M.configure(config)
  cfg = config
end

local function is_label(value)
  return ngx.re.find(value, cfg.label, "jo") ~= nil
end

local function strip(value)
  return (value:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The actor key a request names, or nil when the control service must decide (absent,
-- malformed, repeated: it answers those, with the Python router's texts). Accepts exactly what
-- router.core.target accepts, never more. (Worker-local cache of the answers for a given header.)
local target_keys, target_keys_count = {}, 0
function M.key(head)
  local targets = head.targets
  local given, by_host
  if targets ~= nil then
    if #targets ~= 1 then
      return nil
    end
    given = targets[1]
  else
    given = head.host
    if given == nil then
      return nil
    end
    by_host = true
  end
  local cache_key = by_host and ("h" .. given) or given
  local known = target_keys[cache_key]
  if known ~= nil then
    return known or nil
  end
  local key = false
  if not by_host then
    local atespace, name = strip(given):match("^([^/]+)/([^/]+)$")
    if atespace and is_label(atespace) and is_label(name) then
      key = atespace .. "/" .. name
    end
  else
    local host = strip(given)
    if host:sub(1, 1) ~= "[" then
      local front = host:match("^(.*):%d+$")
      if front then
        host = front
      end
      host = host:lower():gsub("%.$", "")
      local suffix = cfg.suffix
      if #host > #suffix and host:sub(-#suffix) == suffix then
        local name, atespace = host:sub(1, -#suffix - 1):match("^([^.]+)%.([^.]+)$")
        if name and is_label(name) and is_label(atespace) then
          key = atespace .. "/" .. name
        end
      end
    end
  end
  if target_keys_count >= KEYS_KEPT then
    target_keys, target_keys_count = {}, 0
  end
  target_keys[cache_key] = key
  target_keys_count = target_keys_count + 1
  return key or nil
end

return M
