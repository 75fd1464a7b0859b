"""What `ate dev` offers once it is ready: the tour's next commands, or the example made for you.

Without `--example` it prints the next commands of the README's five-minute tour (`tour`); with
it, it creates what those commands would (atespace demo, template counter, actor c1) through
the REST API, each only if it does not exist yet (`create_example`).
"""

from collections.abc import Callable

from ate.cli.client import ApiClient, ApiError
from ate.dev.config import DevConfig
from ate.dev.credentials import DevCredentials


def tour(config: DevConfig) -> str:
    """The next commands of the 5-minute tour."""
    server = "" if config.api_port == 8080 and config.host == "127.0.0.1" else f" --server {config.api_url}"
    return "\n".join([
        "",
        "Try it (the 5-minute tour):",
        f"  ate{server} create atespace demo",
        f"  ate{server} create template counter -a demo -f examples/counter/template.yaml",
        f"  ate{server} create actor c1 -a demo --template counter",
        f"  curl -H 'ate-target-actor: demo/c1' http://{config.host}:{config.router_port}/",
        f"  ate{server} get actors -a demo",
        f"  ate{server} suspend actor c1 -a demo",
        f"Temporal UI: http://{config.host}:{config.ui_port}   logs: {config.logs}",
        "Stop with Ctrl-C.",
    ])  # fmt: skip


def create_example(config: DevConfig, out: Callable[[str], None]) -> None:
    """Create atespace demo, template counter and actor c1 unless they exist.

    An API or manifest error is printed, not raised: the stack keeps running without them.

    Args:
        config: The stack's config (its API URL, router address and image root).
        out: Prints one line.
    """
    from ate.cli.manifest import ManifestError, load_template_spec

    path = config.image_root / "examples" / "counter" / "template.yaml"
    try:
        token = DevCredentials(config.data_dir).admin_token()
        with ApiClient(config.api_url, timeout=30, token=token) as api:
            if not _exists(lambda: api.get_atespace("demo")):
                api.create_atespace("demo")
                out("example: atespace demo created")
            if not _exists(lambda: api.get_template("demo", "counter")):
                out(f"example: creating template counter from {path} (waiting for Ready)")
                spec = load_template_spec(path, "counter")
                template = api.create_template("demo", "counter", spec, wait=True)
                reason = f": {template.get('reason')}" if template.get("phase") == "Failed" else ""
                out(f"example: template counter {template.get('phase')}{reason}")
            if not _exists(lambda: api.get_actor("demo", "c1")):
                api.create_actor("demo", "c1", "counter", {})
                out("example: actor c1 created")
    except (ApiError, ManifestError) as exc:
        out(f"example: {exc}")
        return
    out(f"example: try  curl -H 'ate-target-actor: demo/c1' http://{config.host}:{config.router_port}/")


def _exists(get: Callable[[], object]) -> bool:
    """Whether a GET succeeds; False on NotFound, other errors propagate."""
    try:
        get()
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True
