"""A WebSocket through the router on the real stack (gVisor): the counter's `/ws` echo keeps an
actor's memory across a suspend and resume; the socket open at the suspend is closed cleanly (the
drain before the checkpoint ends it with 1001), and the checkpoint succeeds."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.e2e.conftest import Stack
from tests.e2e.test_lifecycle import api, setup_actor

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

TARGET = {"ate-target-actor": "wsdemo/w1"}


def test_a_websocket_closes_cleanly_at_a_suspend_and_a_new_one_reaches_the_resumed_memory(stack: Stack) -> None:
    path = setup_actor(stack, "wsdemo", "w1")
    url = stack.router.replace("http://", "ws://") + "/ws"

    async def session() -> tuple[list[dict[str, object]], int, str, list[dict[str, object]]]:
        async with connect(url, additional_headers=TARGET, proxy=None, open_timeout=60) as socket:
            answers = []
            for text in ("one", "two"):
                await socket.send(text)
                answers.append(json.loads(await socket.recv()))
            with ThreadPoolExecutor(1) as pool:  # the suspend while the socket is open
                suspend = asyncio.get_running_loop().run_in_executor(
                    pool, lambda: stack.ate("suspend", "actor", "w1", "-a", "wsdemo")
                )
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(socket.recv(), 60)
                await suspend
        assert closed.value.rcvd is not None
        code, reason = closed.value.rcvd.code, closed.value.rcvd.reason
        async with connect(url, additional_headers=TARGET, proxy=None, open_timeout=60) as socket:  # resumes it
            await socket.send("three")
            after = [json.loads(await socket.recv())]
        return answers, code, reason, after

    answers, code, reason, after = asyncio.run(session())
    assert answers == [{"echo": "one", "memory_count": 1}, {"echo": "two", "memory_count": 2}]
    assert (code, reason) == (1001, "the actor is being suspended; connect again")
    assert after == [{"echo": "three", "memory_count": 3}]  # the memory the checkpoint kept
    actor = api(stack, "GET", path).json()
    assert actor["state"] == "RUNNING" and actor["latest_snapshot"]["generation"] == 1, actor
    stack.ate("suspend", "actor", "w1", "-a", "wsdemo")  # the stack's workers are shared by the other tests
