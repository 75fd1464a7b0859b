"""The router's Python data path: the ASGI app that proxies requests and WebSockets to actors'
workers itself (proxy, upstream client, WebSocket, open sessions), on top of router.core.
"""
