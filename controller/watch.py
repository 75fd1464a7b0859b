"""List-then-watch of one kind of object, with the official client, that loses no event.

`Watcher.run` lists the objects, hands each to `emit` as ADDED (or MODIFIED when already known),
then watches from the list's resourceVersion. When the watch expires (410 Gone: the server has
compacted that far) or breaks, it lists again and emits what changed meanwhile: MODIFIED for
what is there, DELETED for what it knew and is gone. A restarted controller converges the same
way: its first list is the truth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], None]


def key_of(obj: dict[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Watcher:
    """One kind of object, listed and watched.

    Args:
        name: for logs, e.g. "workerpools".
        list_objects: the client's list call (e.g. `CoreV1Api.list_namespaced_pod` with its
            namespace and label selector bound); must accept `resource_version`, `watch` and
            `timeout_seconds` and `_preload_content` like every list call of the client.
        emit: called with ("ADDED" | "MODIFIED" | "DELETED", the object as a dict) for every event.
        timeout_seconds: how long one watch call lasts before it is renewed.
        listed: called after each list with everything there is (for what a watch cannot say: the
            objects deleted while nobody watched, e.g. before a restart).
    """

    def __init__(
        self,
        name: str,
        list_objects: Callable[..., Any],
        emit: Emit,
        timeout_seconds: int = 300,
        listed: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.name = name
        self.list_objects = list_objects
        self.emit = emit
        self.listed = listed
        self.timeout_seconds = timeout_seconds
        self.known: dict[tuple[str, str], dict[str, Any]] = {}
        self.relists = 0
        self._watch: watch.Watch | None = None

    def relist(self) -> str:
        """List everything and emit the difference with what was known. Returns the list's
        resourceVersion, where the next watch starts."""
        import json

        response = self.list_objects(_preload_content=False)
        listing = json.loads(response.data)
        kind = str(listing.get("kind", "")).removesuffix("List")
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for item in listing.get("items", []):
            item.setdefault("kind", kind)
            seen[key_of(item)] = item
        for key, obj in seen.items():
            self.emit("MODIFIED" if key in self.known else "ADDED", obj)
        for key in list(self.known):
            if key not in seen:
                self.emit("DELETED", self.known[key])
        self.known = seen
        self.relists += 1
        if self.listed is not None:
            self.listed(list(seen.values()))
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    def run(self, stop: threading.Event) -> None:
        """Relist and watch until `stop` is set."""
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.relist()
                version = self._watch_from(version, stop)
            except ApiException as error:
                if error.status == 410:
                    log.info("%s: watch expired (410 Gone); listing again", self.name)
                else:
                    log.warning("%s: %s; listing again in 1 s", self.name, error.reason)
                    stop.wait(1.0)
                version = ""
            except Exception:
                log.exception("%s: watch failed; listing again in 1 s", self.name)
                stop.wait(1.0)
                version = ""

    def stop(self) -> None:
        """End the watch call in progress (its thread then sees the stop event)."""
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]

    def _watch_from(self, version: str, stop: threading.Event) -> str:
        """Watch from `version`; returns the version to continue from ("" to list again)."""
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        for event in self._watch.stream(  # type: ignore[no-untyped-call]
            self.list_objects, resource_version=version, timeout_seconds=self.timeout_seconds, allow_watch_bookmarks=True
        ):
            if stop.is_set():
                break
            kind = event["type"]
            obj = event.get("raw_object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    log.info("%s: watch expired (410 Gone); listing again", self.name)
                    return ""
                raise ApiException(status=obj.get("code") or 500, reason=str(obj.get("message") or "watch error"))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            key = key_of(obj)
            if kind == "DELETED":
                self.known.pop(key, None)
            else:
                self.known[key] = obj
            self.emit(kind, obj)
        return version
