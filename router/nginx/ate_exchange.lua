-- One exchange with a worker, in the content phase of the router's nginx data path.
--
-- nginx's own proxy module has one read timeout for a worker's silence (its head included),
-- takes an answer without a status line for HTTP/0.9, stops sending the request body once the
-- answer began, and closes a connection it gives up on with a FIN. Cosockets let the router do
-- what its Python data path does (router/upstream_client.py):
--
-- - connect, response-head, idle and whole-request timeouts, each its own;
-- - an answer without a valid HTTP/1.x head is a 502;
-- - a Content-Length request body streams to the worker while its answer streams back (a
--   light thread sends it), and a client that stalls in it gets the 408;
-- - a drain's cut or a deadline ends even an answer that stays silent (checked every
--   POLL_SECONDS), so a drain needs no CAP_NET_ADMIN to cut nginx's connections;
-- - an exchange that does not end normally is reset (SO_LINGER 0, then close): no connection
--   is left half-open in the sandbox (a gVisor checkpoint of a half-open connection restores to
--   a listener that answers nothing).

local ffi = require("ffi")

local M = {}

local POLL_SECONDS = 0.25
local PIECE = 65536
local MAX_RESPONSE_HEAD = 65536

-- Hop-by-hop headers (RFC 9110 7.6.1, and the ones proxies add): never forwarded either way.
local HOP = {
  ["connection"] = true, ["keep-alive"] = true, ["proxy-authenticate"] = true,
  ["proxy-authorization"] = true, ["proxy-connection"] = true, ["te"] = true, ["trailer"] = true,
  ["transfer-encoding"] = true, ["upgrade"] = true,
}
-- Request headers the router replaces with its own (or drops: the worker gets none).
local REPLACED = {
  ["host"] = true, ["expect"] = true, ["ate-target-actor"] = true, ["x-request-id"] = true,
  ["x-forwarded-for"] = true, ["x-forwarded-host"] = true, ["x-forwarded-proto"] = true,
}

-- ------------------------------------------------------------------ resets

-- Where a cosocket keeps its file descriptor: ngx_http_lua_socket_tcp_upstream_t.peer.connection
-- (lua-nginx-module 0.10.23: nine pointers before `peer`, whose first field is the connection),
-- then ngx_connection_t.fd (nginx: three pointers before it). Used only on those versions, and
-- only after getpeername() of that descriptor names the worker.
local POINTER = ffi.sizeof("void *")
local PEER_OFFSET = 9 * POINTER
local FD_OFFSET = 3 * POINTER
local KNOWN_LAYOUT = ngx.config.ngx_lua_version == 10023
  and ngx.config.nginx_version >= 1022000 and ngx.config.nginx_version < 1023000

pcall(ffi.cdef, [[
struct ate_linger { int l_onoff; int l_linger; };
int setsockopt(int sockfd, int level, int optname, const void *optval, unsigned int optlen);
int getpeername(int sockfd, void *addr, unsigned int *addrlen);
]])
local SOL_SOCKET, SO_LINGER, AF_INET = 1, 13, 2
local RESET = ffi.new("struct ate_linger", 1, 0)
local warned = false

-- The descriptor of `sock`'s connection to ip:port, or nil when it cannot be known for sure.
local function descriptor(sock, ip, port)
  if not KNOWN_LAYOUT then
    return nil
  end
  local upstream = sock[1]
  if type(upstream) ~= "userdata" then
    return nil
  end
  local connection = ffi.cast("char **", ffi.cast("char *", upstream) + PEER_OFFSET)[0]
  if connection == nil then
    return nil
  end
  local fd = ffi.cast("int *", connection + FD_OFFSET)[0]
  if fd < 0 then
    return nil
  end
  local address = ffi.new("uint8_t[128]")
  local length = ffi.new("unsigned int[1]", 128)
  if ffi.C.getpeername(fd, address, length) ~= 0 or address[0] + 256 * address[1] ~= AF_INET then
    return nil
  end
  if address[2] * 256 + address[3] ~= port
      or string.format("%d.%d.%d.%d", address[4], address[5], address[6], address[7]) ~= ip then
    return nil
  end
  return fd
end

-- Close the worker connection with a reset (RST), not a FIN.
local function reset(ex)
  local fd = descriptor(ex.sock, ex.ip, ex.port)
  if fd then
    ffi.C.setsockopt(fd, SOL_SOCKET, SO_LINGER, RESET, ffi.sizeof(RESET))
  elseif not warned then
    warned = true
    ngx.log(ngx.WARN, "ate: cannot reset worker connections on this nginx/lua-nginx-module build; ",
      "an exchange cut off is closed with a FIN instead")
  end
  if ex.sender then
    ngx.thread.kill(ex.sender)
    ex.sender = nil
  end
  ex.sock:close()  -- (at the request's end nginx closes it anyway, the linger set)
end

-- ------------------------------------------------------------------ the request head

local function strip(value)
  return (value:gsub("^[ \t]+", ""):gsub("[ \t]+$", ""))
end

-- A Cookie value without the router's own `ate-token` cookie; nil when nothing is left.
local function without_token_cookie(value)
  local kept = {}
  for part in (value .. ";"):gmatch("([^;]*);") do
    local name = strip(part):match("^([^=]*)")
    if name ~= "ate-token" then
      kept[#kept + 1] = part
    end
  end
  if #kept == 0 then
    return nil
  end
  return strip(table.concat(kept, ";"))
end

--- The request head for the worker, from the client's head as received (its order and case
--- kept): the hop-by-hop headers and those the client's Connection header names dropped, the
--- router's Host, X-Request-Id, X-Forwarded-For/-Host/-Proto and `Connection: close` set; with
--- `strip_credential` the client's Authorization and `ate-token` cookie are not passed on.
function M.request_head(options)
  local raw = ngx.req.raw_header(true)
  local lines = {}
  local named = {}
  for line in raw:gmatch("[^\r\n]+") do
    local name, value = line:match("^([^:]+):[ \t]*(.-)[ \t]*$")
    if name then
      local lower = name:lower()
      lines[#lines + 1] = { name, value, lower }
      if lower == "connection" then
        for token in value:gmatch("[^,%s]+") do
          named[token:lower()] = true
        end
      end
    end
  end
  local out = {
    ngx.req.get_method() .. " " .. ngx.var.request_uri .. " HTTP/1.1",
    "Host: " .. options.host,
  }
  for _, header in ipairs(lines) do
    local name, value, lower = header[1], header[2], header[3]
    if not (HOP[lower] or REPLACED[lower] or named[lower]) then
      if options.strip_credential and lower == "authorization" then
        value = nil
      elseif options.strip_credential and lower == "cookie" then
        value = without_token_cookie(value)
      end
      if value then
        out[#out + 1] = name .. ": " .. value
      end
    end
  end
  out[#out + 1] = "X-Request-Id: " .. options.request_id
  out[#out + 1] = "X-Forwarded-For: " .. options.forwarded_for
  local host = ngx.var.http_host
  if host and host ~= "" then
    out[#out + 1] = "X-Forwarded-Host: " .. host
  end
  out[#out + 1] = "X-Forwarded-Proto: " .. ngx.var.scheme
  out[#out + 1] = "Connection: close"
  out[#out + 1] = "\r\n"
  return table.concat(out, "\r\n")
end

-- ------------------------------------------------------------------ waiting on the worker

-- The next piece from the worker, or nil and why not: "timeout" with what ran out ("head",
-- "idle" or "request"), "cut" (a drain), "stalled" (the client's body), "client_gone", or
-- "closed" (the worker ended or broke the connection). `phase` is "head" or "idle".
local function next_piece(ex, phase)
  local sock = ex.sock
  while true do
    if ex.body == "client_gone" or (ex.body == "stalled" and not ex.head_sent) then
      return nil, ex.body
    end
    if ex.gone then
      return nil, "client_gone"
    end
    if ex.cut() then
      return nil, "cut"
    end
    local now = ngx.now()
    local until_phase
    if phase == "head" then
      until_phase = ex.head_deadline or math.huge
    else
      until_phase = ex.last_piece + ex.idle_seconds
    end
    local left, what = until_phase - now, phase
    if ex.deadline - now < left then
      left, what = ex.deadline - now, "request"
    end
    if left <= 0 then
      return nil, "timeout", what
    end
    sock:settimeout(math.max(1, math.floor(math.min(left, POLL_SECONDS) * 1000)))
    local piece, err = sock:receiveany(PIECE)
    if piece then
      ex.last_piece = ngx.now()
      return piece
    end
    if err ~= "timeout" then
      return nil, "closed"
    end
    ngx.update_time()
  end
end

-- The light thread that sends the client's Content-Length body to the worker; ex.body tells
-- how it ended: "done" (read whole), "stalled" (the client went silent for the idle timeout) or
-- "client_gone". Once the worker stops reading (it answered early, or broke) the rest is read
-- and dropped: a body left unread would be taken for the client's next request.
local function send_body(ex, length)
  local client, err = ngx.req.socket()
  if not client then
    ngx.log(ngx.ERR, "ate: cannot read the request body: ", err)
    ex.body = "client_gone"
    return
  end
  client:settimeout(math.max(1, math.floor(ex.idle_seconds * 1000)))
  local left = length
  while left > 0 do
    local piece, reason = client:receiveany(math.min(left, PIECE))
    if not piece then
      ex.body = reason == "timeout" and "stalled" or "client_gone"
      return
    end
    left = left - #piece
    if not ex.worker_gone and not ex.sock:send(piece) then
      ex.worker_gone = true
    end
  end
  ex.body = "done"
  ngx.update_time()
  ex.head_deadline = ngx.now() + ex.head_seconds
end

-- ------------------------------------------------------------------ the response head

local TOKEN = "^[%w!#$%%&'*+.^_`|~-]+$"  -- a header name (RFC 9110 5.6.2)

-- Parse a response head: status, headers ({name, value, lower} in order), or nil.
local function parse_head(text)
  local status
  local headers = {}
  for line in text:gmatch("([^\n]*)\n") do
    if line:sub(-1) == "\r" then
      line = line:sub(1, -2)
    end
    if line == "" then
      break
    end
    if not status then
      local code = line:match("^HTTP/1%.[01] (%d%d%d)$") or line:match("^HTTP/1%.[01] (%d%d%d) [^\r]*$")
      if not code then
        return nil
      end
      status = tonumber(code)
    else
      local name, value = line:match("^([^:]+):[ \t]*(.-)[ \t]*$")
      if not name or not name:find(TOKEN) or value:find("[%z\r]") then
        return nil
      end
      headers[#headers + 1] = { name, value, name:lower() }
    end
  end
  if not status then
    return nil
  end
  return status, headers
end

local function head_end(buffer)
  local crlf = buffer:find("\r\n\r\n", 1, true)
  local lf = buffer:find("\n\n", 1, true)
  if crlf and (not lf or crlf < lf) then
    return crlf + 3
  end
  return lf and lf + 1 or nil
end

-- Read the final response head (1xx answers but 101 skipped): its status, headers and the bytes
-- after it; or nil, why not ("broken" for no valid head, else as next_piece), what ran out.
local function read_head(ex)
  local buffer = ""
  while true do
    local ends = head_end(buffer)
    if ends then
      local status, headers = parse_head(buffer:sub(1, ends))
      if not status or status == 101 then
        return nil, "broken"
      end
      buffer = buffer:sub(ends + 1)
      if status >= 200 then
        return status, headers, buffer
      end
    elseif #buffer > MAX_RESPONSE_HEAD then
      return nil, "broken"
    else
      local piece, why, what = next_piece(ex, "head")
      if not piece then
        return nil, why == "closed" and "broken" or why, what
      end
      buffer = buffer .. piece
    end
  end
end

-- How the answer's body is delimited: "none", "chunked", "close" (until the worker closes) or
-- its length; nil for a head no HTTP/1.1 client could read (unequal or bad Content-Length).
local function framing(method, status, headers)
  local encoding, length
  for _, header in ipairs(headers) do
    if header[3] == "transfer-encoding" then
      encoding = header[2]
    elseif header[3] == "content-length" then
      for value in header[2]:gmatch("[^,]+") do
        value = strip(value)
        if not value:match("^%d+$") or (length and length ~= value) then
          return nil
        end
        length = value
      end
    end
  end
  if method == "HEAD" or status == 204 or status == 304 then
    return "none", length
  end
  if encoding then
    return encoding:lower():match("chunked[ \t]*$") and "chunked" or "close"
  end
  if length then
    return tonumber(length)
  end
  return "close"
end

-- The worker's status and headers to the client, but the hop-by-hop ones (and those its
-- Connection header names); the Content-Length only when the body is delimited by it.
local function set_head(status, headers, frame, length)
  local named = {}
  for _, header in ipairs(headers) do
    if header[3] == "connection" then
      for token in header[2]:gmatch("[^,%s]+") do
        named[token:lower()] = true
      end
    end
  end
  ngx.status = status
  local order, values = {}, {}
  for _, header in ipairs(headers) do
    local lower = header[3]
    if not (HOP[lower] or named[lower] or lower == "content-length") then
      local list = values[lower]
      if list == nil then
        list = {}
        values[lower] = list
        order[#order + 1] = header[1]
      end
      list[#list + 1] = header[2]
    end
  end
  for _, name in ipairs(order) do
    local list = values[name:lower()]
    ngx.header[name] = #list == 1 and list[1] or list
  end
  if type(frame) == "number" then
    ngx.header["Content-Length"] = frame
  elseif frame == "none" and length and status ~= 204 then
    ngx.header["Content-Length"] = length
  end
end

-- Send `data` to the client now (nil when the client is gone).
local function write(ex, data)
  if data == "" then
    return true
  end
  if not ngx.print(data) or not ngx.flush(true) then
    ex.gone = true
    return nil
  end
  return true
end

-- Send the head to the client now (nil when the client is gone).
local function flush_head(ex)
  if not ngx.send_headers() or not ngx.flush(true) then
    ex.gone = true
    return nil
  end
  return true
end

-- The body's relay, by its framing: true when it ended, else nil, why, what.
local function relay_length(ex, buffer, length)
  if #buffer >= length then
    -- all of it came with the head: no flush of its own (nginx sends it as the request ends)
    if not ngx.print(#buffer > length and buffer:sub(1, length) or buffer) then
      ex.gone = true
      return nil, "client_gone"
    end
    return true
  end
  local left = length - #buffer
  if not write(ex, buffer) then
    return nil, "client_gone"
  end
  while left > 0 do
    local piece, why, what = next_piece(ex, "idle")
    if not piece then
      return nil, why, what
    end
    if #piece > left then
      piece = piece:sub(1, left)
    end
    left = left - #piece
    if not write(ex, piece) then
      return nil, "client_gone"
    end
  end
  return true
end

local function relay_until_close(ex, buffer)
  if not write(ex, buffer) then
    return nil, "client_gone"
  end
  while true do
    local piece, why, what = next_piece(ex, "idle")
    if not piece then
      if why == "closed" then
        return true
      end
      return nil, why, what
    end
    if not write(ex, piece) then
      return nil, "client_gone"
    end
  end
end

local function relay_chunked(ex, buffer)
  local function more()
    local piece, why, what = next_piece(ex, "idle")
    if not piece then
      return nil, why, what
    end
    buffer = buffer .. piece
    return true
  end
  local function line()
    while true do
      local stop = buffer:find("\n", 1, true)
      if stop then
        local text = buffer:sub(1, stop)
        buffer = buffer:sub(stop + 1)
        return text
      end
      if #buffer > 4096 then
        return nil, "closed"
      end
      local ok, why, what = more()
      if not ok then
        return nil, why, what
      end
    end
  end
  while true do
    local size_line, why, what = line()
    if not size_line then
      return nil, why, what
    end
    local size = tonumber(size_line:match("^[ \t]*(%x+)") or "", 16)
    if not size then
      return nil, "closed"
    end
    if size == 0 then
      repeat  -- trailers (dropped) up to the empty line
        local trailer
        trailer, why, what = line()
        if not trailer then
          return nil, why, what
        end
      until trailer == "\n" or trailer == "\r\n"
      return true
    end
    while size > 0 do
      if buffer == "" then
        local ok
        ok, why, what = more()
        if not ok then
          return nil, why, what
        end
      end
      local data = buffer:sub(1, size)
      buffer = buffer:sub(#data + 1)
      size = size - #data
      if not write(ex, data) then
        return nil, "client_gone"
      end
    end
    local ending
    ending, why, what = line()
    if not ending then
      return nil, why, what
    end
    if ending ~= "\n" and ending ~= "\r\n" then
      return nil, "closed"
    end
  end
end

-- ------------------------------------------------------------------ the exchange

--- Proxy the request to the worker at `options.upstream` ("ip:port") and relay its answer.
---
--- options: host (the worker's Host header), strip_credential, request_id, forwarded_for,
--- connect_seconds, head_seconds, idle_seconds, request_seconds (from the request's arrival),
--- cut (a function: whether a drain cut the actor's requests).
---
--- Returns "done" when the answer was relayed whole ("done_close": the client's body did not
--- come whole, so its connection must not be kept); "truncated" when it began and was cut off
--- (ngx.var.ate_outcome says why: timeout, error, client_gone); before any answer, what the
--- caller answers: "connect" (no connection, nothing sent: it may try another worker),
--- "broken" (no valid answer), "timeout" and what ran out ("head" or "request"), "cut",
--- "stalled" (the client's body: 408), "client_gone".
function M.run(options)
  local ip, port = options.upstream:match("^%[?(.-)%]?:(%d+)$")
  port = tonumber(port)
  local sock = ngx.socket.tcp()
  local ex = {
    sock = sock, ip = ip, port = port, cut = options.cut,
    idle_seconds = options.idle_seconds, head_seconds = options.head_seconds,
    deadline = ngx.req.start_time() + options.request_seconds,
  }
  ngx.ctx.ate_exchange = ex
  local idle = math.max(1, math.floor(options.idle_seconds * 1000))
  sock:settimeouts(math.max(1, math.floor(options.connect_seconds * 1000)), idle, idle)
  if not sock:connect(ip, port) then
    return "connect"
  end
  local length = tonumber(ngx.var.http_content_length) or 0
  if not sock:send(M.request_head(options)) then
    reset(ex)
    return "broken"
  end
  ngx.update_time()
  if length > 0 then
    ex.sender = ngx.thread.spawn(send_body, ex, length)
  else
    ex.body = "done"
    ex.head_deadline = ngx.now() + ex.head_seconds
  end
  local status, headers, rest = read_head(ex)
  if not status then
    reset(ex)
    return headers, rest  -- why, what
  end
  local frame, length_given = framing(ngx.req.get_method(), status, headers)
  if frame == nil then
    reset(ex)
    return "broken"
  end
  set_head(status, headers, frame, length_given)
  ex.head_sent = true
  ex.last_piece = ngx.now()
  local ok, why
  if (frame == "none" or rest == "") and not flush_head(ex) then
    ok, why = nil, "client_gone"  -- (the head goes at once: the client sees it while the worker thinks)
  elseif frame == "none" then
    ok = true
  elseif frame == "chunked" then
    ok, why = relay_chunked(ex, rest)
  elseif frame == "close" then
    ok, why = relay_until_close(ex, rest)
  else
    ok, why = relay_length(ex, rest, frame)
  end
  if ok then
    if ex.sender and ex.body == nil then
      ngx.thread.wait(ex.sender)  -- the rest of the body (sent on while the worker reads it)
      ex.sender = nil
    end
    if ex.body ~= "done" then
      reset(ex)  -- the client stalled in (or left) a body the answer did not wait for
      return "done_close"
    end
    sock:close()
    return "done"
  end
  ngx.var.ate_outcome = (why == "timeout" and "timeout") or (why == "client_gone" and "client_gone") or "error"
  reset(ex)
  return "truncated"
end

return M
