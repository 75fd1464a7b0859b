"""Reading an actor template file: a YAML document whose `spec` is sent to the API.

`kind` must be `ActorTemplate` when present; `apiVersion` and `metadata` are accepted and
ignored (the name comes from the command line). A document without `kind` and `spec` is taken
as the spec itself.
"""

from pathlib import Path
from typing import Any

import yaml

TEMPLATE_KIND = "ActorTemplate"


class ManifestError(ValueError):
    """The file cannot be used as a template; the message says why."""


def load_template_spec(path: Path) -> dict[str, Any]:
    """Load a template file and return its spec.

    Args:
        path: The YAML file.

    Returns:
        The spec mapping.

    Raises:
        ManifestError: The file is missing, not YAML, or not a template.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise ManifestError(f"{path} must hold a YAML mapping")
    kind = doc.get("kind")
    if kind is not None and kind != TEMPLATE_KIND:
        raise ManifestError(f"{path} has kind {kind!r}, want {TEMPLATE_KIND!r}")
    if "spec" in doc:
        spec = doc["spec"]
        if not isinstance(spec, dict):
            raise ManifestError(f"{path}: spec must be a mapping")
        return spec
    if kind is not None or "apiVersion" in doc or "metadata" in doc:
        raise ManifestError(f"{path} has no spec")
    return doc
