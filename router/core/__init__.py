"""The router's decision core: which actor a request is for, whether it may reach it, and where
that actor serves (the RUNNING cache and its LISTEN, resume and parking, drains, the replica's
registration, the API client, the status page's data), apart from any proxy mechanics.

Both data paths (router.python, router.nginx) use it; it imports neither.
"""
