"""The failures of an exchange with a worker, as the Python data path's upstream client
(router.python.upstream_client) raises them and its callers tell them apart: nothing sent
(``UpstreamConnectError``, a retry is safe), the worker failed (``UpstreamBroken``, with
``UpstreamTimeout`` and ``UpstreamCut``), or the client left or stalled in its body
(``ClientGone``, ``ClientIdle``); and ``Cuttable``, what a drain marks to cut a connection."""

from __future__ import annotations

from typing import Protocol


class ClientGone(Exception):
    """The client disconnected while its request body was being read.

    Raised by the request body iterable given to ``UpstreamClient.open``; the exchange is then
    aborted and the exception comes out of ``open`` or ``UpstreamResponse.aiter_raw``.
    """


class ClientIdle(ClientGone):
    """The client was silent longer than the idle timeout while sending its request body."""


class UpstreamBroken(Exception):
    """The worker's connection failed or it broke HTTP/1.1 after the connection was made.

    Also raised when h11 refuses to send the request head (an illegal header value, say).
    """


class UpstreamTimeout(UpstreamBroken):
    """A timeout of the exchange ran out: the response head did not come in time, the worker
    was silent longer than the idle timeout, or the whole request took too long.

    Attributes:
        what: Which one, as a phrase for the caller's message (``"the response head within 60s"``).
    """

    def __init__(self, what: str) -> None:
        super().__init__(f"no {what}")
        self.what = what


class UpstreamCut(UpstreamBroken):
    """A drain cut the exchange off (the actor is being checkpointed and the request outlasted
    the drain timeout)."""

    def __init__(self) -> None:
        super().__init__("cut off: the actor is being checkpointed (router drain)")


class Cuttable(Protocol):
    """What a connection may be tagged with so that ``UpstreamClient.cut`` finds it (the router's
    ``Flight``): ``cut`` is set once the connection must go."""

    cut: bool


class UpstreamConnectError(Exception):
    """The worker could not be reached; no byte of the request was sent, so it may be retried."""
