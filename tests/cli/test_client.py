"""Error handling of the client, through the CLI, against real HTTP servers."""

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from typer.testing import CliRunner

from ate.cli.client import ApiClient, ApiError, ApiUnreachable
from ate.cli.main import app

from .conftest import ServerThread

runner = CliRunner()


def error_app() -> FastAPI:
    """An API that fails every call the way the ate API does."""
    api = FastAPI()

    @api.get("/v1/atespaces/{atespace}/actors/{name}")
    async def missing(atespace: str, name: str) -> JSONResponse:
        body = {"reason": "NotFound", "message": f"actor {atespace}/{name} not found", "details": {}}
        return JSONResponse(body, status_code=404)

    @api.post("/v1/atespaces/{atespace}/actors/{name}/resume")
    async def busy(atespace: str, name: str) -> JSONResponse:
        body = {
            "reason": "OperationInProgress",
            "message": "another operation is in progress for this actor",
            "details": {"operation": "SuspendActor", "actor": f"actor {atespace}/{name}", "workflow_id": "x"},
        }
        return JSONResponse(body, status_code=409)

    @api.get("/v1/workers")
    async def broken() -> PlainTextResponse:
        return PlainTextResponse("upstream exploded", status_code=502)

    return api


@pytest.fixture(scope="module")
def error_server() -> ServerThread:
    with ServerThread(error_app()) as server:
        yield server


def test_api_error_message_goes_to_stderr(error_server: ServerThread) -> None:
    result = runner.invoke(app, ["--server", error_server.url, "get", "actor", "nope", "-a", "demo"])
    assert result.exit_code == 1
    assert result.stderr == "error: actor demo/nope not found\n"
    assert result.stdout == ""


def test_conflict_message(error_server: ServerThread) -> None:
    result = runner.invoke(app, ["resume", "actor", "c1", "-a", "demo"], env={"ATE_SERVER": error_server.url})
    assert result.exit_code == 1
    # the API's fixed text (ARCHITECTURE.md), then the operation from its details and how to follow it
    assert result.stderr == (
        "error: another operation is in progress for this actor: SuspendActor is running; try again once it has "
        "ended; follow it with 'ate get operations -a demo --actor c1'\n"
    )


def test_non_json_error(error_server: ServerThread) -> None:
    result = runner.invoke(app, ["--server", error_server.url, "get", "workers"])
    assert result.exit_code == 1
    assert result.stderr == "error: HTTP 502: upstream exploded\n"


def test_client_raises_structured_errors(error_server: ServerThread) -> None:
    with ApiClient(error_server.url) as api, pytest.raises(ApiError) as caught:
        api.resume_actor("demo", "c1")
    assert (caught.value.status, caught.value.reason) == (409, "OperationInProgress")
    assert caught.value.details == {"operation": "SuspendActor", "actor": "actor demo/c1", "workflow_id": "x"}


def test_connection_refused(closed_port_url: str) -> None:
    result = runner.invoke(app, ["--server", closed_port_url, "get", "atespaces"])
    assert result.exit_code == 1
    assert result.stderr == f"error: cannot reach the ate API at {closed_port_url}: is 'ate dev' running?\n"
    with ApiClient(closed_port_url) as api, pytest.raises(ApiUnreachable):
        api.list_workers()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["create", "actor", "c1", "-a", "demo"], "--template"),
        (["create", "actor", "c1", "-a", "demo", "--template", "t", "--selector", "novalue"], "--selector"),
        (["get", "actors", "-o", "xml"], "--output"),
        (["get", "actor", "c1"], "--atespace"),
        (["create", "template", "t", "-a", "demo", "-f", "/nonexistent/template.yaml"], "--filename"),
        (["suspend", "actor", "c1", "-a", "demo", "--mode", "later"], "--mode"),
    ],
)
def test_usage_errors_name_the_flag(argv: list[str], flag: str, closed_port_url: str) -> None:
    result = runner.invoke(app, ["--server", closed_port_url, *argv], env={"ATE_ATESPACE": None})
    assert result.exit_code == 2, result.output
    assert flag in result.stderr
