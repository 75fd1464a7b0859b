"""ate-router: the HTTP entry point for actor traffic.

Parses the target actor from each request, resumes it through the REST API when it is not
known to be RUNNING (one resume in flight per actor, requests parked meanwhile), and streams
the request to the actor's worker with no keep-alive connection left behind.

``router.core`` holds every decision (entry point ``RouterCore.find``); ``router.python`` and
``router.nginx`` are the two data paths on top of it, which never import each other;
``router.main`` parses the flags and wires the chosen one.
"""
