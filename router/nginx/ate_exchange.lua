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

local request = require("ate_request")
local response = require("ate_response")
local reset = require("ate_reset").reset
local parse_head, head_end, framing, set_head = response.parse_head, response.head_end, response.framing, response.set_head

local M = {}

local control = ngx.shared.ate_control
local find, sub, lower, match = string.find, string.sub, string.lower, string.match

local POLL_SECONDS = 0.25
local PIECE = 65536
local MAX_RESPONSE_HEAD = 65536

-- ------------------------------------------------------------------ the request head

-- The worker's request head: the client's request line (HTTP/1.1), the router's Host, the
-- client's header lines passed on (ate_request.forwarded), X-Request-Id, X-Forwarded-For/-Host/
-- -Proto and `Connection: close`.
local function request_head(ctx, route)
  local head = ctx.head
  local forwarded_host = head.host
  return ctx.method .. " " .. ngx.var.request_uri .. " HTTP/1.1\r\nHost: " .. route.host .. "\r\n"
    .. request.forwarded(head, route.strip)
    .. "X-Request-Id: " .. ctx.request_id
    .. "\r\nX-Forwarded-For: " .. ngx.var.ate_forwarded_for
    .. (forwarded_host and forwarded_host ~= "" and ("\r\nX-Forwarded-Host: " .. forwarded_host) or "")
    .. "\r\nX-Forwarded-Proto: " .. ngx.var.scheme
    .. "\r\nConnection: close\r\n\r\n"
end

--- Whether a drain cut the request's actor's requests since it was counted (ngx.ctx of the
--- router: counted holds the actor's shared-dict keys, seq the drain token then).
function M.cut(ctx)
  local keys = ctx.counted
  return keys ~= nil and (control:get(keys.c) or 0) > ctx.seq
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
    if M.cut(ex.ctx) then
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
-- (parsed, framed and set by ate_response.lua)
-- Read the final response head (1xx answers but 101 skipped): its status, headers (three
-- lists, as parse_head) and the bytes after it; or nil, why not ("broken" for no valid head,
-- else as next_piece), what ran out.
local function read_head(ex)
  local buffer = ""
  while true do
    local ends = head_end(buffer)
    if ends then
      local status, names, values, lowers = parse_head(sub(buffer, 1, ends))
      if not status or status == 101 then
        return nil, "broken"
      end
      buffer = sub(buffer, ends + 1)
      if status >= 200 then
        return status, names, values, lowers, buffer
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

--- Proxy the request to the worker of `route` and relay its answer.
---
--- ctx: the router's ngx.ctx (head, request_id, counted and seq for the drain's cut; the
--- exchange's state is put in ctx.exchange for on_abort). route: ip, port, host (the worker's
--- Host header), strip (the client's credential not passed on). settings: connect_seconds,
--- head_seconds, idle_seconds, request_seconds (from the request's arrival).
---
--- Returns "done" when the answer was relayed whole ("done_close": the client's body did not
--- come whole, so its connection must not be kept); "truncated" when it began and was cut off
--- (ngx.var.ate_outcome says why: timeout, error, client_gone); before any answer, what the
--- caller answers: "connect" (no connection, nothing sent: it may try another worker),
--- "broken" (no valid answer), "timeout" and what ran out ("head" or "request"), "cut",
--- "stalled" (the client's body: 408), "client_gone".
function M.run(ctx, route, settings)
  local ip, port = route.ip, route.port
  local sock = ngx.socket.tcp()
  local ex = {
    sock = sock, ip = ip, port = port, ctx = ctx,
    idle_seconds = settings.idle_seconds, head_seconds = settings.head_seconds,
    deadline = ngx.req.start_time() + settings.request_seconds,
  }
  ctx.exchange = ex
  ctx.method = ctx.method or ngx.req.get_method()
  local idle = math.max(1, math.floor(settings.idle_seconds * 1000))
  sock:settimeouts(math.max(1, math.floor(settings.connect_seconds * 1000)), idle, idle)
  if not sock:connect(ip, port) then
    return "connect"
  end
  local length = tonumber(ngx.var.http_content_length) or 0
  ctx.body_length = length
  if not sock:send(request_head(ctx, route)) then
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
  local status, names, values, lowers, rest = read_head(ex)
  if not status then
    reset(ex)
    return names, values  -- why, what
  end
  local frame, length_given = framing(ctx.method, status, values, lowers)
  if frame == nil then
    reset(ex)
    return "broken"
  end
  set_head(status, names, values, lowers, frame, length_given, ctx.request_id)
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
