-- Resetting a worker connection (RST, not FIN) from the router's nginx data path: an exchange
-- that does not end normally is reset, so no connection is left half-open in the sandbox (a
-- gVisor checkpoint of a half-open connection restores to a listener that answers nothing).
-- Split from ate_exchange.lua.

local ffi = require("ffi")

local M = {}

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
function M.reset(ex)
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

return M
