"""Reading an actor template file: a YAML document whose `spec` is sent to the API.

The whole document is checked before anything is sent. Its top level may hold only
`apiVersion` (`ate.dev/v1alpha1`), `kind` (`ActorTemplate`), `metadata` (only `name`, which
must equal the name on the command line) and `spec` (required, a mapping). `apiVersion`, `kind`
and `metadata` may be left out. The spec's own fields are checked by the API server.

A file from someone else is read with limits, so it fails fast with a message instead of
exhausting the machine: at most MAX_FILE_BYTES; nesting, counted from the parser's events before
any object is built, at most `domain.documents.MAX_DEPTH` deep (PyYAML builds nested objects
recursively and would overflow the stack); and once built, the limits of
`domain.documents.check_document`, where a YAML alias counts each time it is used (a "billion
laughs" file of a few hundred bytes would expand to gigabytes when sent as JSON).
"""

from pathlib import Path
from typing import Any

import yaml

from domain.documents import MAX_DEPTH, DocumentError, check_document

MAX_FILE_BYTES = 1024 * 1024
"""The largest template file read (the api-server's default body limit)."""

API_VERSION = "ate.dev/v1alpha1"
TEMPLATE_KIND = "ActorTemplate"
TOP_LEVEL_KEYS = ("apiVersion", "kind", "metadata", "spec")
METADATA_KEYS = ("name",)


class ManifestError(ValueError):
    """The file cannot be used as a template; the message says why."""


def _names(keys: list[Any]) -> str:
    return ", ".join(repr(str(k)) for k in keys)


def check_template_document(doc: Any, where: str, name: str | None = None) -> dict[str, Any]:
    """Check a parsed template document and return its spec.

    Args:
        doc: The parsed YAML document.
        where: How to name the document in messages (its path).
        name: The template's name from the command line; `metadata.name`, when given, must equal it.

    Returns:
        The spec mapping.

    Raises:
        ManifestError: The document is not an acceptable template; the message names the
            offending key or value and what is expected.
    """
    if not isinstance(doc, dict):
        raise ManifestError(f"{where} must hold a YAML mapping with {', '.join(TOP_LEVEL_KEYS)}")
    unknown = [k for k in doc if k not in TOP_LEVEL_KEYS]
    if unknown:
        noun = "key" if len(unknown) == 1 else "keys"
        raise ManifestError(
            f"{where}: unknown top-level {noun} {_names(unknown)} (allowed: {', '.join(TOP_LEVEL_KEYS)})"
        )
    if "apiVersion" in doc and doc["apiVersion"] != API_VERSION:
        raise ManifestError(f"{where}: apiVersion is {doc['apiVersion']!r}, expected {API_VERSION!r}")
    if "kind" in doc and doc["kind"] != TEMPLATE_KIND:
        raise ManifestError(f"{where}: kind is {doc['kind']!r}, expected {TEMPLATE_KIND!r}")
    metadata = doc.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise ManifestError(f"{where}: metadata must be a mapping (allowed key: name)")
        unknown = [k for k in metadata if k not in METADATA_KEYS]
        if unknown:
            noun = "key" if len(unknown) == 1 else "keys"
            raise ManifestError(f"{where}: unknown metadata {noun} {_names(unknown)} (allowed: name)")
        meta_name = metadata.get("name")
        if meta_name is not None and name is not None and str(meta_name) != name:
            raise ManifestError(
                f"{where}: metadata.name is {str(meta_name)!r} but the command names the template {name!r};"
                " make them equal or drop metadata.name"
            )
    if "spec" not in doc:
        raise ManifestError(f"{where} has no spec (allowed top-level keys: {', '.join(TOP_LEVEL_KEYS)})")
    spec = doc["spec"]
    if not isinstance(spec, dict):
        raise ManifestError(f"{where}: spec must be a mapping")
    return spec


def load_template_spec(path: Path, name: str | None = None) -> dict[str, Any]:
    """Load and check a template file and return its spec.

    Args:
        path: The YAML file.
        name: The template's name; `metadata.name`, when given, must equal it (None: not checked).

    Returns:
        The spec mapping.

    Raises:
        ManifestError: The file is missing, not YAML, or not an acceptable template.
    """
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ManifestError(f"{path} is {size} bytes; a template file may be at most {MAX_FILE_BYTES} bytes")
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ManifestError(f"{path} is not UTF-8 text") from None
    try:
        _check_nesting(text, path)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from exc
    try:
        check_document(doc)
    except DocumentError as exc:
        raise ManifestError(f"{path}: {exc}") from None
    return check_template_document(doc, str(path), name)


def _check_nesting(text: str, path: Path) -> None:
    """Refuse a document nested deeper than MAX_DEPTH, from the parser's events alone.

    Raises:
        ManifestError: It nests too deep (the message gives the line).
        yaml.YAMLError: It is not YAML.
    """
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ManifestError(f"{path}: line {line}: nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
