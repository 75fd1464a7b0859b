"""`ate create atespace|template|actor|token|secret`."""

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ate.cli.client import ApiClient, ApiError
from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.egress import EgressFileOpt, read_egress_file
from ate.cli.idle import IdleOpt, parse_idle_option
from ate.cli.manifest import ManifestError, load_template_spec
from ate.cli.output import (
    print_actors,
    print_atespaces,
    print_schedules,
    print_secrets,
    print_templates,
    print_tokens,
)
from domain.forks import MAX_FORK_COUNT

app = new_typer("create", "Create an atespace, a template, an actor, a token or a secret.")

TEMPLATE_WAIT_SECONDS = 600.0
"""How long `create template` waits for Ready or Failed."""
POLL_INTERVAL = 1.0
"""Longest pause between two polls of a template that is not Ready yet."""
FINAL_PHASES = ("Ready", "Failed")


def parse_selector(values: list[str] | None) -> dict[str, str]:
    """Turn `k=v` strings into a mapping.

    Args:
        values: The `--selector` values.

    Returns:
        The selector.

    Raises:
        typer.BadParameter: A value is not `key=value`.
    """
    selector: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint="'--selector'")
        selector[key.strip()] = value.strip()
    return selector


@app.command("atespace")
def create_atespace(ctx: typer.Context, name: str, output: OutputOpt = None) -> None:
    """Create an atespace.

    Example: ate create atespace demo
    """
    atespace = client(ctx).create_atespace(name)
    if output is None:
        typer.echo(f"atespace/{name} created")
    else:
        print_atespaces(atespace, output)


def poll_delays() -> Iterator[float]:
    """Seconds between polls of a template: short at first, then every POLL_INTERVAL."""
    delay = 0.25
    while True:
        yield delay
        delay = min(delay * 2, POLL_INTERVAL)


def wait_for_template(
    api: ApiClient, atespace: str, name: str, template: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Poll a template until its phase is Ready or Failed, or `timeout` seconds passed; meanwhile
    print (to stderr) what its golden snapshot's workflow is doing each time that changes, e.g.
    that it waits for a free worker and why none has room (a template stays Pending, with no
    reason, while it waits), and how the nodes' pulls of its images go (`pull_lines`)."""
    deadline = time.monotonic() + timeout
    delays = poll_delays()
    said = ""
    pulls_said: set[str] = set()
    while template.get("phase") not in FINAL_PHASES and time.monotonic() < deadline:
        time.sleep(min(next(delays), max(deadline - time.monotonic(), 0)))
        template = api.get_template(atespace, name)
        if template.get("phase") in FINAL_PHASES:
            break
        step = golden_step(api, atespace, name)
        if step and _shape(step) != _shape(said):
            typer.echo(f"template/{name}: {step}", err=True)
            said = step
        for line in pull_lines(template):
            if line not in pulls_said:
                typer.echo(f"template/{name}: {line}", err=True)
                pulls_said.add(line)
    return template


def pull_lines(template: dict[str, Any]) -> list[str]:
    """What a Pending template's `pulls` say, one line per node and image, e.g. `pulling
    127.0.0.1:5000/team/agent:v3@sha256:... on node n1: 1.2 MiB of 3.3 MiB (2 layers)`."""
    return [f"pulling {p.get('image')} on node {p.get('node')}: {p.get('text')}" for p in template.get("pulls") or []]


def golden_step(api: ApiClient, atespace: str, name: str) -> str:
    """The step the golden snapshot workflow of template `atespace/name` is at ('' if none is
    in flight, or the operations cannot be read with this token)."""
    workflow_id = f"template/{atespace}/{name}"
    try:
        running = api.list_operations(atespace)
    except ApiError:
        return ""
    return next((str(op.get("step") or "") for op in running if op.get("workflow_id") == workflow_id), "")


def _shape(step: str) -> str:
    """A step without its numbers: a wait's growing seconds do not make it news."""
    return re.sub(r"[0-9.]+", "#", step)


@app.command("template")
def create_template(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    file: Annotated[
        Path,
        typer.Option(
            "--filename", "-f", help="YAML file: apiVersion, kind, metadata.name and spec (the only top-level keys)."
        ),
    ],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the template is Ready or Failed.")] = True,
    output: OutputOpt = None,
) -> None:
    """Create an actor template from a YAML file and (by default) wait for its golden snapshot.

    Example: ate create template counter -a demo -f examples/counter/template.yaml
    """
    try:
        spec = load_template_spec(file, name)
    except ManifestError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-f' / '--filename'") from None
    api = client(ctx)
    # Created without the server-side wait, so that the 201 comes at once: progress is printed
    # only once the server accepted the template, then it is polled until Ready or Failed.
    template = api.create_template(atespace, name, spec, wait=False)
    if wait and template.get("phase") not in FINAL_PHASES:
        typer.echo(f"template/{name}: created, waiting for Ready (golden snapshot)...", err=True)
        template = wait_for_template(api, atespace, name, template, TEMPLATE_WAIT_SECONDS)
    phase = template.get("phase", "Pending")
    if output is None:
        if phase == "Failed":
            typer.echo(f"template/{name} Failed: {template.get('reason') or 'no reason given'}")
        elif wait and phase not in FINAL_PHASES:
            typer.echo(
                f"template/{name} created, still {phase} after {TEMPLATE_WAIT_SECONDS:.0f} s"
                f" (see: ate get template {name} -a {atespace})"
            )
        else:
            typer.echo(f"template/{name} created ({phase})")
    else:
        print_templates(template, output)
    if phase == "Failed":
        raise typer.Exit(1)


@app.command("actor")
def create_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    template: Annotated[
        str | None, typer.Option("--template", "-t", help="The template, in the same atespace.")
    ] = None,
    from_tag: Annotated[
        str | None,
        typer.Option("--from-tag", help="Start from a tagged snapshot, ATESPACE/TAG (template: the tag's)."),
    ] = None,
    from_actor: Annotated[
        str | None,
        typer.Option(
            "--from-actor",
            help="Fork: start from another actor's snapshot, SOURCE (its latest) or SOURCE@GENERATION (a kept "
            "one); takes the source's template, selector, idle and egress policies.",
        ),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, max=MAX_FORK_COUNT, help="With --from-actor: create NAME-1..NAME-COUNT."),
    ] = None,
    selector: Annotated[
        list[str] | None, typer.Option("--selector", "-l", help="Worker label the actor needs, key=value (repeatable).")
    ] = None,
    idle: IdleOpt = None,
    egress_file: EgressFileOpt = None,
    output: OutputOpt = None,
) -> None:
    """Create an actor (it starts SUSPENDED).

    Examples: ate create actor c1 -a demo --template counter --selector zone=a
              ate create actor c2 -a demo --from-tag demo/v1
              ate create actor c3 -a demo --template counter --idle 20:Freeze --idle 600:Suspend
              ate create actor f -a demo --from-actor c1@3 --count 20   (f-1..f-20)
    """
    if from_actor is not None:
        given = [flag for flag, value in (("--template", template), ("--from-tag", from_tag), ("--selector", selector),
                                          ("--idle", idle), ("--egress", egress_file)) if value]  # fmt: skip
        if given:
            raise typer.BadParameter(
                f"a fork takes its source's template, selector, idle and egress policies; leave out {', '.join(given)}",
                param_hint="'--from-actor'",
            )
        source, generation = parse_fork_source(from_actor)
        forked = client(ctx).fork_actor(atespace, source, name, generation, count)
        if output is not None:
            print_actors(forked, output)
            return
        for actor in forked:
            made_from = (actor.get("latest_snapshot") or {}).get("generation")
            typer.echo(f"actor/{actor['name']} created (from {source} generation {made_from})")
        return
    if count is not None:
        raise typer.BadParameter("--count makes forks: give --from-actor SOURCE[@GENERATION]", param_hint="'--count'")
    if template is None and from_tag is None:
        raise typer.BadParameter(
            "give --template TEMPLATE, --from-tag ATESPACE/TAG or --from-actor SOURCE[@GENERATION]",
            param_hint="'--template'",
        )
    if from_tag is not None and from_tag.count("/") != 1:
        raise typer.BadParameter(f"{from_tag!r} is not ATESPACE/TAG", param_hint="'--from-tag'")
    policy = parse_idle_option(idle)
    egress = read_egress_file(egress_file)
    actor = client(ctx).create_actor(
        atespace, name, template, parse_selector(selector), from_tag=from_tag, idle=policy, egress=egress
    )
    if output is None:
        typer.echo(f"actor/{name} created")
    else:
        print_actors(actor, output)


def parse_fork_source(text: str) -> tuple[str, int | None]:
    """`SOURCE` or `SOURCE@GENERATION` (a positive integer) into (source, generation or None).

    Raises:
        typer.BadParameter: anything else.
    """
    source, at, generation = text.partition("@")
    if not source or (at and not (generation.isdigit() and int(generation) >= 1)):
        raise typer.BadParameter(
            f"{text!r} is not SOURCE or SOURCE@GENERATION (an actor's name, then a generation number from 1)",
            param_hint="'--from-actor'",
        )
    return source, int(generation) if at else None


_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """`90m`, `12h`, `30d`, `1d12h` into seconds.

    Raises:
        typer.BadParameter: anything else.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise typer.BadParameter(f"{text!r} is not a duration such as 90m, 12h or 30d", param_hint="'--expires-in'")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


@app.command("schedule")
def create_schedule(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    actor: Annotated[str, typer.Option("--actor", help="The actor it wakes.")],
    cron: Annotated[str | None, typer.Option("--cron", help="Five fields: minute hour day month weekday.")] = None,
    every: Annotated[int | None, typer.Option("--every", help="Seconds between two wakes.", min=1)] = None,
    time_zone: Annotated[str, typer.Option("--time-zone", help="IANA time zone of --cron.")] = "UTC",
    path: Annotated[str, typer.Option("--path", help="The request's path, sent through the router.")] = "/",
    catchup: Annotated[
        str, typer.Option("--catchup", help="Times missed while ate was down: Skip, One (one wake) or All.")
    ] = "Skip",
    output: OutputOpt = None,
) -> None:
    """Wake an actor at set times with a request through the router (a Temporal Schedule: see it,
    pause it in the Temporal UI); its idle policy takes it down again after.

    Examples: ate create schedule hourly -a demo --actor c1 --cron "0 * * * *" --path /tick
              ate create schedule poll -a demo --actor c1 --every 30
    """
    if (cron is None) == (every is None):
        raise typer.BadParameter("give --cron or --every (one of them)", param_hint="'--cron'")
    body = {"name": name, "cron": cron, "every_seconds": every, "time_zone": time_zone, "path": path, "catchup": catchup}
    made = client(ctx).create_schedule(atespace, actor, {k: v for k, v in body.items() if v is not None})
    if output is None:
        typer.echo(f"schedule/{name} created: next wake {(made.get('next_times') or ['-'])[0]}")
    else:
        print_schedules(made, output)


@app.command("token")
def create_token(
    ctx: typer.Context,
    name: str,
    grant: Annotated[
        list[str],
        typer.Option(
            "--grant",
            "-g",
            help="A role: ROLE:ATESPACE (viewer, operator, admin, user), user:ATESPACE/ACTOR, or a cluster role "
            "(cluster-viewer, cluster-operator, cluster-admin, router). Repeatable.",
        ),
    ],
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Lifetime, e.g. 12h or 30d (default: until revoked).")
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Create a bearer token; its secret is printed once and kept nowhere (only its hash is).

    Examples: ate create token ci --grant operator:demo --expires-in 30d
              ate create token alice --grant user:demo/c1
    """
    seconds = parse_duration(expires_in) if expires_in else None
    token = client(ctx).create_token(name, grant, seconds)
    if output is not None:
        print_tokens(token, output)
        return
    typer.echo(f"token/{token['token_id']} created ({', '.join(token['grants'])})")
    typer.echo(token["token"])
    typer.echo("Keep it now: it is not shown again. Revoke it with: ate delete token " + token["token_id"], err=True)


@app.command("secret")
def create_secret(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    from_literal: Annotated[str | None, typer.Option("--from-literal", help="The value, as text.")] = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="A file whose bytes are the value ('-': standard input).")
    ] = None,
    kind: Annotated[
        str, typer.Option("--type", help="opaque (an egress credential's value) or registry (a pull secret).")
    ] = "opaque",
    registry: Annotated[
        str | None, typer.Option("--registry", help="--type registry: the registry's host[:port].")
    ] = None,
    username: Annotated[str | None, typer.Option("--username", help="--type registry: the user name.")] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="--type registry: read the password (or token) from stdin.")
    ] = False,
    output: OutputOpt = None,
) -> None:
    """Create a secret: one value, sealed by the api-server and never shown again. Actors never
    hold it: the egress proxy puts an opaque one in requests to the host a template's credential
    names; a registry one is what a template's images are pulled with (spec.imagePullSecrets).

    Examples: ate create secret model-key -a demo --from-file ./key.txt
              printf %s "$KEY" | ate create secret model-key -a demo --from-file -
              printf %s "$TOKEN" | ate create secret pull -a demo --type registry
                  --registry registry.example.com --username ci --password-stdin
    """
    if kind not in ("opaque", "registry"):
        raise typer.BadParameter(f"{kind!r}: want opaque or registry", param_hint="'--type'")
    if kind == "registry":
        made = _create_registry_secret(ctx, name, atespace, registry, username, password_stdin, from_literal, from_file)
    else:
        for flag, given in (("--registry", registry), ("--username", username), ("--password-stdin", password_stdin)):
            if given:
                raise typer.BadParameter("only a secret of --type registry takes it", param_hint=f"'{flag}'")
        made = client(ctx).create_secret(atespace, name, _value(from_literal, from_file))
    if output is None:
        typer.echo(f"secret/{name} created ({made.get('size_bytes')} bytes)")
    else:
        print_secrets(made, output)


def _value(from_literal: str | None, from_file: Path | None) -> bytes:
    """The bytes of --from-literal or --from-file (exactly one); BadParameter otherwise."""
    if (from_literal is None) == (from_file is None):
        raise typer.BadParameter("give --from-literal or --from-file (one of them)", param_hint="'--from-literal'")
    if from_file is None:
        return (from_literal or "").encode()
    try:
        return typer.get_binary_stream("stdin").read() if str(from_file) == "-" else from_file.read_bytes()
    except OSError as error:
        raise typer.BadParameter(f"cannot read {from_file}: {error.strerror}", param_hint="'--from-file'") from None


def _create_registry_secret(ctx: typer.Context, name: str, atespace: str, registry: str | None,
                            username: str | None, password_stdin: bool, from_literal: str | None,
                            from_file: Path | None) -> dict[str, Any]:  # fmt: skip
    """A registry secret: --registry, --username and the password from --password-stdin (or
    --from-literal / --from-file); one trailing newline of the password is dropped."""
    for flag, given in (("--registry", registry), ("--username", username)):
        if not given:
            raise typer.BadParameter("required with --type registry", param_hint=f"'{flag}'")
    if password_stdin and (from_literal is not None or from_file is not None):
        raise typer.BadParameter("give the password one way: --password-stdin, --from-literal or --from-file",
                                 param_hint="'--password-stdin'")  # fmt: skip
    raw = _value(None, Path("-")) if password_stdin else _value(from_literal, from_file)
    try:
        password = raw.decode().removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise typer.BadParameter("the password is not UTF-8 text", param_hint="'--password-stdin'") from None
    return client(ctx).create_registry_secret(atespace, name, registry or "", username or "", password)
