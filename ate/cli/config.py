"""The `ate` config file: named contexts, each a server and its token, like a kubeconfig.

Where: `ATE_CONFIG`, else `$XDG_CONFIG_HOME/ate/config.yaml` (`~/.config/ate/config.yaml`).
Shape (`ate dev` writes the `ate-dev` context)::

    current-context: ate-dev
    contexts:
      ate-dev:
        server: http://127.0.0.1:8080
        token-file: /home/me/project/.ate/credentials/local-admin.token   # or token: ate_...

Which server and token a command uses: `--server` / `ATE_SERVER`, else the context's server;
`ATE_TOKEN`, else the context's token, but only when the server in use is the context's own (a
token is never sent to a server it was not written for). The context is `--context` /
`ATE_CONTEXT`, else `current-context`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ate.cli.client import DEFAULT_SERVER


class ConfigError(Exception):
    """The config file cannot be used; the message names the file and what is wrong."""


def config_path() -> Path:
    """`ATE_CONFIG`, else `$XDG_CONFIG_HOME/ate/config.yaml`."""
    if os.environ.get("ATE_CONFIG"):
        return Path(os.environ["ATE_CONFIG"]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "ate" / "config.yaml"


@dataclass
class Context:
    """One named context: a server URL and its token (inline or in a file)."""

    server: str
    token: str | None = None
    token_file: str | None = None

    def read_token(self, where: Path) -> str | None:
        """The token, from `token` or from `token_file`.

        Raises:
            ConfigError: the token file is unreadable.
        """
        if self.token:
            return self.token
        if self.token_file:
            try:
                return Path(self.token_file).expanduser().read_text().strip() or None
            except OSError as error:
                raise ConfigError(f"{where}: token-file {self.token_file}: {error.strerror}") from None
        return None


@dataclass
class AteConfig:
    """The whole file: its contexts and which one is current."""

    contexts: dict[str, Context]
    current_context: str | None = None

    @classmethod
    def load(cls, path: Path) -> AteConfig:
        """Read `path`; an absent file is an empty config.

        Raises:
            ConfigError: the file is not YAML of the shape above.
        """
        try:
            text = path.read_text()
        except FileNotFoundError:
            return cls(contexts={})
        except OSError as error:
            raise ConfigError(f"{path}: {error.strerror}") from None
        try:
            document: Any = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"{path} is not valid YAML: {error}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: expected a mapping with current-context and contexts")
        contexts: dict[str, Context] = {}
        raw = document.get("contexts") or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: contexts must be a mapping of name to {{server, token | token-file}}")
        for name, entry in raw.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("server"), str):
                raise ConfigError(f"{path}: contexts.{name} needs a server URL")
            unknown = set(entry) - {"server", "token", "token-file"}
            if unknown:
                raise ConfigError(
                    f"{path}: contexts.{name}: unknown field {sorted(unknown)[0]} (server, token, token-file)"
                )
            contexts[str(name)] = Context(entry["server"], entry.get("token"), entry.get("token-file"))
        current = document.get("current-context")
        return cls(contexts=contexts, current_context=str(current) if current else None)

    def save(self, path: Path) -> None:
        """Write the file atomically, readable by its owner only (it may hold tokens)."""
        document: dict[str, Any] = {"current-context": self.current_context, "contexts": {}}
        for name, context in self.contexts.items():
            entry: dict[str, str] = {"server": context.server}
            if context.token:
                entry["token"] = context.token
            if context.token_file:
                entry["token-file"] = context.token_file
            document["contexts"][name] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".config-", delete=False) as out:
            yaml.safe_dump(document, out, sort_keys=False)
        os.chmod(out.name, 0o600)
        os.replace(out.name, path)


@dataclass
class Target:
    """What one command talks to: the server, the token (None: none), and where they came from."""

    server: str
    token: str | None
    context: str | None
    path: Path


def resolve(server: str | None, context_name: str | None) -> Target:
    """The server and token for a command (precedence in the module docstring).

    Args:
        server: `--server` / `ATE_SERVER`, or None.
        context_name: `--context` / `ATE_CONTEXT`, or None.

    Raises:
        ConfigError: the file is unusable or names no such context.
    """
    path = config_path()
    config = AteConfig.load(path)
    name = context_name or config.current_context
    context = None
    if name is not None:
        context = config.contexts.get(name)
        if context is None and context_name is not None:
            known = ", ".join(sorted(config.contexts)) or "none"
            raise ConfigError(f"context {name} is not in {path} (contexts: {known})")
    chosen = server or (context.server if context else DEFAULT_SERVER)
    token = os.environ.get("ATE_TOKEN") or None
    if token is None and context is not None and context.server.rstrip("/") == chosen.rstrip("/"):
        token = context.read_token(path)
    return Target(server=chosen, token=token, context=name if context else None, path=path)


def write_context(name: str, server: str, token_file: Path, make_current: bool) -> Path:
    """Add or replace context `name` (server + token file) and, with `make_current` or when no
    context is current, make it current. Returns the file written."""
    path = config_path()
    config = AteConfig.load(path)
    config.contexts[name] = Context(server=server, token_file=str(token_file))
    if make_current or not config.current_context or config.current_context not in config.contexts:
        config.current_context = name
    config.save(path)
    return path
