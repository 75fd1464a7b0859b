"""`ate exec actor NAME -a ATESPACE -- CMD...`."""

import sys
from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, client, new_typer

app = new_typer("exec", "Run a command inside a running actor's sandbox, for debugging.")


@app.command("actor")
def exec_actor(
    ctx: typer.Context,
    name: str,
    command: Annotated[list[str], typer.Argument(help="The command and its arguments, after `--`.")],
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds the command may run.", min=1, max=3600)] = 60.0,
) -> None:
    """Run a command inside a RUNNING actor's sandbox, print its stdout and stderr, and exit with
    its exit status (as `kubectl exec` does). Only `operator` and above; every exec is recorded in
    the actor's history with who ran what. A suspend of the actor ends the command (exit 137 here,
    and a note on stderr). Not interactive (no `-it`) yet.

    Example: ate exec actor c1 -a demo -- cat /data/count.txt
    """
    done = client(ctx).exec_in_actor(atespace, name, command, timeout)
    sys.stdout.write(done.get("stdout", ""))
    sys.stdout.flush()
    sys.stderr.write(done.get("stderr", ""))
    for stream in ("stdout", "stderr"):
        if done.get(f"{stream}_truncated"):
            typer.echo(f"ate: {stream} was cut at 256 KiB", err=True)
    ended = done.get("ended") or ""
    if ended:
        why = {"timeout": f"it ran longer than --timeout {timeout:g} s and was killed",
               "suspended": "the actor was suspended, which ended it",
               "stopped": "the actor's sandbox stopped"}.get(ended, ended)  # fmt: skip
        typer.echo(f"ate: the command did not finish: {why}", err=True)
        raise typer.Exit(137)
    code = int(done.get("exit_code", 1))
    raise typer.Exit(code if 0 <= code <= 255 else 1)
