"""The egress of an actor in the CLI: `--egress-file` (a policy as a template's `egress`, YAML or
JSON) for `ate create actor` and `ate set actor`, and the `Egress:` lines of `ate describe actor`."""

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

EgressFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--egress-file",
        help="The actor's own egress policy, within its template's: a YAML or JSON file with allow and "
        "credentials, as a template's egress ('{}' in the file gives it none).",
    ),
]


def read_egress_file(path: Path | None) -> dict[str, Any] | None:
    """The policy in `path`, or None when no file was given.

    Raises:
        typer.BadParameter: the file cannot be read or is not a YAML/JSON mapping.
    """
    if path is None:
        return None
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise typer.BadParameter(f"cannot read {path}: {error}", param_hint="'--egress-file'") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise typer.BadParameter(
            f"{path} must hold a mapping with allow and credentials, e.g. 'allow: [{{host: api.example.com, "
            "ports: [443]}]'", param_hint="'--egress-file'",
        )  # fmt: skip
    return document


def egress_lines(actor: dict[str, Any], template_spec: dict[str, Any] | None) -> list[str]:
    """The `Egress:` lines of `ate describe actor`: each allow rule and credential in force, and
    where the policy comes from (the actor's own or its template's)."""
    own = actor.get("egress")
    policy, source = (own, "the actor") if own is not None else ((template_spec or {}).get("egress"), "the template")
    rules = (policy or {}).get("allow") or []
    if not rules:
        return ["Egress:           <none> (it cannot connect out)" + (" (its own)" if own is not None else "")]
    lines = [f"Egress:           {len(rules)} rule(s) (from {source}), through its node's egress proxy"]
    for rule in rules:
        target = rule.get("host") or rule.get("cidr")
        lines.append(f"  allow {target} ports {','.join(str(p) for p in rule.get('ports') or [])}")
    for credential in (policy or {}).get("credentials") or []:
        lines.append(
            f"  credential {credential.get('header')} from secret {credential.get('secret')} on {credential.get('host')}"
        )
    return lines
