-- The client's request head, read once in the access phase (router/nginx/README in
-- docs/architecture.md, "The router").
--
-- One pass over the head as received (ngx.req.raw_header) finds what routing needs (the
-- target, the Host, the request id, the credentials, whether the request goes to the Python
-- relay) and which lines the worker gets. The lines passed on are kept as slices of that raw
-- head, so the worker's head is one concatenation, in the client's order and case, later.
--
-- This replaces ngx.req.get_headers and a second parse of the head in the exchange: the
-- router's nginx data path spent most of its CPU in Lua (bench/README.md, "proxy").

local M = {}

local find, sub, lower, match, byte = string.find, string.sub, string.lower, string.match, string.byte
local concat = table.concat

-- What a line is to the router, by its lower-case name. DROP: a hop-by-hop header (RFC 9110
-- 7.6.1, and those proxies add) or one the router replaces with its own; never passed on.
local KEEP, DROP, TARGET, HOST, REQUEST_ID, CONNECTION, UPGRADE, TRANSFER, ACCEPT, AUTHORIZATION, COOKIE =
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
local KIND = {
  ["connection"] = CONNECTION, ["keep-alive"] = DROP, ["proxy-authenticate"] = DROP,
  ["proxy-authorization"] = DROP, ["proxy-connection"] = DROP, ["te"] = DROP, ["trailer"] = DROP,
  ["transfer-encoding"] = TRANSFER, ["upgrade"] = UPGRADE, ["host"] = HOST, ["expect"] = DROP,
  ["ate-target-actor"] = TARGET, ["x-request-id"] = REQUEST_ID, ["x-forwarded-for"] = DROP,
  ["x-forwarded-host"] = DROP, ["x-forwarded-proto"] = DROP, ["accept"] = ACCEPT,
  ["authorization"] = AUTHORIZATION, ["cookie"] = COOKIE,
}
M.AUTHORIZATION, M.COOKIE = AUTHORIZATION, COOKIE

local LF, CR = byte("\n"), byte("\r")
local MAX_REQUEST_ID = 128

-- The value of the line whose colon is at `colon` and which ends at `stop` (its "\n"), without
-- the blanks around it.
local function value_of(raw, colon, stop)
  return match(sub(raw, colon + 1, stop), "^[ \t]*(.-)[ \t]*\r?\n?$")
end

local function append(list, value)
  if list == nil then
    return { value }
  end
  list[#list + 1] = value
  return list
end

-- One pass over the lines of `raw`. `named`: lower-case names the Connection header lists
-- (not passed on: hop-by-hop), known only after a first pass.
local function scan_lines(raw, named)
  local head = { raw = raw }
  local keep = {}  -- start, stop, kind: runs of lines passed on as they are (kind KEEP) and
                   -- the credential lines (AUTHORIZATION, COOKIE: passed on unless stripped)
  local run = nil  -- start of the run of kept lines being collected
  local pos, size = 1, #raw
  while pos <= size do
    local stop = find(raw, "\n", pos, true) or size
    if stop == pos or (stop == pos + 1 and byte(raw, pos) == CR) then
      break  -- the empty line that ends the head
    end
    if byte(raw, stop) ~= LF or byte(raw, stop - 1) ~= CR then
      head.bare_lf = true  -- a line not ended by CRLF: the worker's head is rebuilt line by line
    end
    local colon = find(raw, ":", pos, true)
    local kind, value, blocked = DROP, nil, false  -- (a line without a name is not passed on)
    if colon and colon < stop then
      local name = lower(sub(raw, pos, colon - 1))
      kind = KIND[name] or KEEP
      blocked = named ~= nil and named[name] == true
      if kind ~= KEEP and kind ~= DROP then
        value = value_of(raw, colon, stop)
      end
    end
    if kind == TARGET then
      head.targets = append(head.targets, value)
    elseif kind == HOST then
      head.host = head.host or value
    elseif kind == REQUEST_ID then
      head.request_ids = append(head.request_ids, value)
    elseif kind == ACCEPT then
      if find(lower(value), "text/event-stream", 1, true) then
        head.relay = head.relay or "stream"
      end
    elseif kind == CONNECTION then
      for token in value:gmatch("[^,%s]+") do
        token = lower(token)
        if token ~= "close" and token ~= "keep-alive" and token ~= "upgrade" then
          head.named = head.named or {}
          head.named[token] = true
        end
      end
    elseif kind == UPGRADE then
      if lower(value) == "websocket" then
        head.relay = "websocket"
        head.upgrade = value
      end
    elseif kind == TRANSFER then
      head.relay = head.relay or "chunked"
    elseif kind == AUTHORIZATION then
      head.authorization = append(head.authorization, value)
    elseif kind == COOKIE then
      head.cookie = append(head.cookie, value)
    end
    if (kind == KEEP or kind == ACCEPT) and not blocked then
      run = run or pos
    else
      if run then
        keep[#keep + 1], keep[#keep + 2], keep[#keep + 3] = run, pos - 1, KEEP
        run = nil
      end
      if (kind == AUTHORIZATION or kind == COOKIE) and not blocked then
        keep[#keep + 1], keep[#keep + 2], keep[#keep + 3] = pos, stop, kind
      end
    end
    pos = stop + 1
  end
  if run then
    keep[#keep + 1], keep[#keep + 2], keep[#keep + 3] = run, pos - 1, KEEP
  end
  head.keep = keep
  return head
end

--- Read the client's request head. Returns a table: `raw` (the head without its request
--- line), `targets` (the ate-target-actor values, or nil), `host` (the first Host value),
--- `request_id` (the client's X-Request-Id when it sent exactly one of 1-128 letters, digits and
--- `._:+=/-`, else nil), `relay` ("websocket", "stream" for an Accept of text/event-stream,
--- "chunked" for a Transfer-Encoding, else nil), `upgrade` (the Upgrade value of a WebSocket),
--- `authorization` and `cookie` (lists of values, or nil), and what `forwarded` needs.
function M.scan()
  local raw = ngx.req.raw_header(true)
  local head = scan_lines(raw, nil)
  if head.named then
    head = scan_lines(raw, head.named)
  end
  local ids = head.request_ids
  if ids and #ids == 1 and #ids[1] <= MAX_REQUEST_ID and find(ids[1], "^[%w._:+=/-]+$") then
    head.request_id = ids[1]
  end
  return head
end

-- A Cookie value without the router's own `ate-token` cookie; nil when nothing is left.
local function without_token_cookie(value)
  local kept = {}
  for part in (value .. ";"):gmatch("([^;]*);") do
    local name = match(match(part, "^[ \t]*(.-)[ \t]*$"), "^([^=]*)")  -- as router.core.access does
    if name ~= "ate-token" then
      kept[#kept + 1] = part
    end
  end
  if #kept == 0 then
    return nil
  end
  return (match(concat(kept, ";"), "^[ \t]*(.-)[ \t]*$"))
end

-- A Cookie line (`text`) without the `ate-token` cookie, ended by CRLF; nil when no cookie is left.
local function cookie_line(text)
  local name, value = match(text, "^([^:]*):[ \t]*(.-)[ \t]*\r?\n?$")
  value = without_token_cookie(value)
  return value and (name .. ": " .. value .. "\r\n") or nil
end

-- The lines of `head` passed on, one by one, each ended by CRLF (a head with bare LF endings).
local function by_line(head, strip)
  local raw, keep, out = head.raw, head.keep, {}
  for i = 1, #keep, 3 do
    local kind = keep[i + 2]
    local text = sub(raw, keep[i], keep[i + 1])
    if kind == KEEP then
      for line in text:gmatch("([^\n]*)\n?") do
        line = match(line, "^(.-)\r?$")
        if line ~= "" then
          out[#out + 1] = line .. "\r\n"
        end
      end
    elseif not strip then
      out[#out + 1] = match(text, "^(.-)\r?\n?$") .. "\r\n"
    elseif kind == COOKIE then
      out[#out + 1] = cookie_line(text)  -- (nil adds nothing)
    end
  end
  return concat(out)
end

--- The header lines of `head` (from `scan`) the worker gets, each ended by CRLF, in the
--- client's order and case: all but the hop-by-hop ones, those the Connection header names and
--- those the router sets itself; with `strip` the client's Authorization and its `ate-token`
--- cookie are not passed on.
function M.forwarded(head, strip)
  local raw, keep = head.raw, head.keep
  if head.bare_lf then
    return by_line(head, strip)
  end
  local count = #keep
  if count == 0 then
    return ""
  end
  if count == 3 and keep[3] == KEEP then
    return sub(raw, keep[1], keep[2])
  end
  local out = {}
  for i = 1, count, 3 do
    local kind = keep[i + 2]
    if kind == KEEP or not strip then
      out[#out + 1] = sub(raw, keep[i], keep[i + 1])
    elseif kind == COOKIE then
      out[#out + 1] = cookie_line(sub(raw, keep[i], keep[i + 1]))  -- (nil adds nothing)
    end
  end
  return concat(out)
end

--- The client's credentials as one string (for the key of a token-scoped cache entry): its
--- Authorization and Cookie values, each list joined by NUL, the two by \1.
function M.credentials(head)
  local authorization, cookie = head.authorization, head.cookie
  return (authorization and concat(authorization, "\0") or "") .. "\1" .. (cookie and concat(cookie, "\0") or "")
end

return M
