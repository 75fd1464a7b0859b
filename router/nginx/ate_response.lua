-- The worker's response head in the router's nginx data path: parsed (a head that is not
-- HTTP/1.x is nil: a 502), how its body is delimited, and the head given to the client without
-- the hop-by-hop headers. Pure functions of the head's text; split from ate_exchange.lua, which
-- reads the head from the worker and relays the body.

local M = {}

local find, lower, match = string.find, string.lower, string.match

-- Hop-by-hop headers (RFC 9110 7.6.1, and the ones proxies add): never forwarded either way.
local HOP = {
  ["connection"] = true, ["keep-alive"] = true, ["proxy-authenticate"] = true,
  ["proxy-authorization"] = true, ["proxy-connection"] = true, ["te"] = true, ["trailer"] = true,
  ["transfer-encoding"] = true, ["upgrade"] = true,
}

local LINE = "^([%w!#$%%&'*+.^_`|~-]+):[ \t]*([^\r\n]-)[ \t]*\r?\n"  -- a header line

-- Parse a response head (ending with its empty line): its status and headers as three lists
-- (names, values, lower-case names, in order), or nil for a head that is not HTTP/1.x.
function M.parse_head(text)
  local stop = find(text, "\n", 1, true)
  local status = match(text, "^HTTP/1%.[01] (%d%d%d)\r?\n") or match(text, "^HTTP/1%.[01] (%d%d%d) [^\r\n]*\r?\n")
  if not status or find(text, "%z", stop) then
    return nil
  end
  local names, values, lowers = {}, {}, {}
  local pos = stop + 1
  while true do
    -- a line "<token>: <value>" (RFC 9110 5.6.2 for the name; no CR inside the value)
    local _, ends, name, value = find(text, LINE, pos)
    if not name then
      if match(text, "^\r?\n", pos) then
        return tonumber(status), names, values, lowers
      end
      return nil
    end
    local n = #names + 1
    names[n], values[n], lowers[n] = name, value, lower(name)
    pos = ends + 1
  end
end

function M.head_end(buffer)
  local crlf = find(buffer, "\r\n\r\n", 1, true)
  local lf = find(buffer, "\n\n", 1, true)
  if crlf and (not lf or crlf < lf) then
    return crlf + 3
  end
  return lf and lf + 1 or nil
end

local function strip(value)
  return match(value, "^[ \t]*(.-)[ \t]*$")
end

-- How the answer's body is delimited: "none", "chunked", "close" (until the worker closes) or
-- its length; nil for a head no HTTP/1.1 client could read (unequal or bad Content-Length).
function M.framing(method, status, values, lowers)
  local encoding, length
  for i = 1, #lowers do
    local name = lowers[i]
    if name == "transfer-encoding" then
      encoding = values[i]
    elseif name == "content-length" then
      local value = values[i]
      if find(value, "^%d+$") then
        if length and length ~= value then
          return nil
        end
        length = value
      else
        for one in value:gmatch("[^,]+") do
          one = strip(one)
          if not find(one, "^%d+$") or (length and length ~= one) then
            return nil
          end
          length = one
        end
      end
    end
  end
  if method == "HEAD" or status == 204 or status == 304 then
    return "none", length
  end
  if encoding then
    return match(lower(encoding), "chunked[ \t]*$") and "chunked" or "close"
  end
  if length then
    return tonumber(length)
  end
  return "close"
end

-- The worker's status and headers to the client, but the hop-by-hop ones (and those its
-- Connection header names); the Content-Length only when the body is delimited by it; the
-- router's X-Request-Id.
function M.set_head(status, names, values, lowers, frame, length, request_id)
  local named
  for i = 1, #lowers do
    if lowers[i] == "connection" then
      local value = lower(values[i])
      if value ~= "close" and value ~= "keep-alive" then  -- (names nothing else)
        for token in value:gmatch("[^,%s]+") do
          named = named or {}
          named[token] = true
        end
      end
    end
  end
  ngx.status = status
  local header = ngx.header
  local count = #names
  local seen = {}
  for i = 1, count do
    local name = lowers[i]
    if not (HOP[name] or (named and named[name]) or name == "content-length") then
      local first = seen[name]
      if first == nil then
        seen[name] = i
      elseif first then  -- a repeated header: all its values, in order, on its first name
        local list = {}
        for j = first, count do
          if lowers[j] == name then
            list[#list + 1] = values[j]
          end
        end
        header[names[first]] = list
        seen[name] = false
      end
    end
  end
  for i = 1, count do
    local name = lowers[i]
    if seen[name] == i then
      header[names[i]] = values[i]
    end
  end
  if type(frame) == "number" then
    header["Content-Length"] = frame
  elseif frame == "none" and length and status ~= 204 then
    header["Content-Length"] = length
  end
  header["X-Request-Id"] = request_id
end

return M
