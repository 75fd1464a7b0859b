"""The router's nginx data path: nginx (with its Lua module) proxies, Python keeps the control path.

``config`` writes nginx.conf, ``ate_router.lua`` (with its ``ate_*.lua`` modules) is the data path inside nginx, ``control`` is the
Python control service nginx asks on a cache miss, ``supervisor`` runs and restarts nginx, and
``run`` puts them together for ``ate router --data-path nginx``. Its decisions are router.core's;
it never imports router.python (router.main hands it the relay for WebSockets, event streams
and chunked uploads).
"""
