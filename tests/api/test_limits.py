"""Size and time limits of the real api-server process, spoken to over raw sockets.

This module's api-server runs with small limits (ATE_MAX_REQUEST_BYTES=65536,
ATE_HEAD_TIMEOUT_SECONDS=1) so the tests send little and wait little. A body over the limit is
refused with 413 in the one error format before the server reads it (a declared
Content-Length is answered before one body byte is sent; a chunked body is answered while its
end is never sent). A head over ATE_MAX_HEAD_BYTES gets 431, and a client that does not send
its head within the timeout is disconnected.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from store import Store
from tests.api.conftest import ApiServer, start_api_server, stored_state

MAX_BODY = 65536
TOO_LARGE = {
    "reason": "RequestTooLarge",
    "message": f"request body larger than {MAX_BODY} bytes; send less (the limit is the api-server's max_request_bytes)",
    "details": {},
}


@pytest.fixture(scope="module")
def api_server(
    tmp_path_factory: pytest.TempPathFactory, api_database_url: str, temporal_address: str
) -> Iterator[ApiServer]:
    """This module's api-server, with small limits."""
    child, server = start_api_server(
        tmp_path_factory.mktemp("api"), api_database_url, temporal_address,
        env={"ATE_MAX_REQUEST_BYTES": str(MAX_BODY), "ATE_HEAD_TIMEOUT_SECONDS": "1"},
    )  # fmt: skip
    try:
        yield server
    finally:
        child.stop()


async def connect(server: ApiServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = urlsplit(server.url)
    assert address.hostname is not None and address.port is not None
    return await asyncio.open_connection(address.hostname, address.port)


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response (read until the server closes)."""
    raw = await asyncio.wait_for(reader.read(), 30)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(
    api_server: ApiServer, api_store: Store
) -> None:
    before = await stored_state(api_store)
    reader, writer = await connect(api_server)
    writer.write(
        b"POST /v1/atespaces HTTP/1.1\r\nhost: api\r\ncontent-type: application/json\r\n"
        b"content-length: 10485760\r\n\r\n"
    )  # the head only: not one byte of the 10 MiB follows
    await writer.drain()
    status, headers, body = await answer(reader)
    writer.close()
    assert status == 413
    assert headers["connection"] == "close"
    assert json.loads(body) == TOO_LARGE
    assert await stored_state(api_store) == before


async def test_a_chunked_body_is_refused_once_it_passes_the_limit(api_server: ApiServer, api_store: Store) -> None:
    before = await stored_state(api_store)
    reader, writer = await connect(api_server)
    writer.write(
        b"POST /v1/atespaces HTTP/1.1\r\nhost: api\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    chunk = b"a" * 16384
    for _ in range(MAX_BODY // len(chunk) + 2):  # past the limit; the last chunk never comes
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await writer.drain()
    status, headers, body = await answer(reader)
    writer.close()
    assert status == 413
    assert headers["connection"] == "close"
    assert json.loads(body) == TOO_LARGE
    assert await stored_state(api_store) == before


async def test_a_body_within_the_limit_is_read_and_validated(api: httpx.AsyncClient) -> None:
    padded = {"name": "padded", "colour": "x" * (MAX_BODY - 100)}
    response = await api.post("/v1/atespaces", json=padded)
    assert response.status_code == 400  # read and validated, not refused for its size
    fields = {f["field"] for f in response.json()["details"]["fields"]}
    assert fields == {"colour"}


async def test_a_head_over_the_limit_gets_431_in_the_one_format(api_server: ApiServer) -> None:
    reader, writer = await connect(api_server)
    writer.write(b"GET /v1/atespaces HTTP/1.1\r\nhost: api\r\nx-padding: " + b"p" * (64 * 1024) + b"\r\n\r\n")
    await writer.drain()
    status, headers, body = await answer(reader)
    writer.close()
    assert status == 431
    assert headers["connection"] == "close"
    assert json.loads(body) == {
        "reason": "HeadersTooLarge",
        "message": "request head larger than 32768 bytes (request line and headers)",
        "details": {},
    }


async def test_a_client_that_sends_no_head_is_disconnected(api_server: ApiServer) -> None:
    reader, writer = await connect(api_server)
    assert await asyncio.wait_for(reader.read(), 30) == b""  # closed by the server, nothing sent
    writer.close()


async def test_a_client_that_sends_its_head_a_byte_at_a_time_is_disconnected(api_server: ApiServer) -> None:
    reader, writer = await connect(api_server)
    head = b"GET /v1/atespaces HTTP/1.1\r\nhost: api\r\n" + b"x-slow: " + b"s" * 1000
    closed = asyncio.create_task(reader.read())
    for byte in head:  # far more than the 1 s the head may take
        if closed.done():
            break
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.05)
    assert await asyncio.wait_for(closed, 30) == b""  # no answer: the connection was closed
    writer.close()
