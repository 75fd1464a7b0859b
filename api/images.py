"""Template images from container registries, resolved when a template is created (issue 29):
each container's registry reference by tag is pinned to its manifest's digest, asked of the
registry with skopeo (containers/image), so that every actor and snapshot of the template runs
the same bits; the recorded image reads `<name>:<tag>@<digest>` (`domain.image_references`).

A reference by digest is checked to exist all the same. A registry on loopback may speak plain
HTTP, as may those the operator lists (`ApiSettings.insecure_registries`). Local layouts
(`oci:...`) are left to the atelets.

Credentials: an image is looked up with the template's pull secrets for its registry
(`spec.imagePullSecrets`, `domain.registry_credentials`), one after the other until one is let in,
each in an auth file of its own (mode 0600 in a private temp dir, removed at once); an image
whose registry has none is looked up anonymously (`--no-creds`): never with the logins of the
machine the api-server runs on, which are not the atespace's.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api.errors import ApiError
from domain.image_references import (
    RUNTIME_PLATFORM,
    RegistryImage,
    is_registry_reference,
    parse_registry_image,
    pull_failure,
    skopeo_message,
)
from domain.reasons import Reason
from domain.registry_credentials import RegistryCredentials, attempts, refused_hint, write_auth_file

INSPECT_TIMEOUT_SECONDS = 60.0

_REASONS = {
    "no such image": Reason.INVALID_ARGUMENT,
    "not for this platform": Reason.INVALID_ARGUMENT,
    "registry unreachable": Reason.UNAVAILABLE,
}
"""The API reason of a failed lookup by kind; the others (unauthorized, TLS, disk) are FAILED_PRECONDITION."""


async def inspect_digest(reference: str, insecure: bool, skopeo: str = "skopeo",
                         credentials: RegistryCredentials | None = None) -> tuple[bool, str]:  # fmt: skip
    """(True, `<digest> <os>/<architecture>`) of the manifest `reference` (`docker://...`) names,
    or (False, skopeo's output). Of a manifest list, the digest is the list's and the platform
    that of the instance skopeo chose for this machine (it fails when there is none). With
    `credentials`, asked with them (an auth file of its own); without, anonymously."""
    with tempfile.TemporaryDirectory(prefix="ate-auth-") as private:  # mode 0700
        auth = ["--no-creds"]
        if credentials is not None:
            auth = [f"--authfile={write_auth_file(Path(private) / 'auth.json', credentials)}"]
        return await _inspect(skopeo, [f"--tls-verify={'false' if insecure else 'true'}", *auth, "--format",
                                       "{{.Digest}} {{.Os}}/{{.Architecture}}", reference])  # fmt: skip


async def _inspect(skopeo: str, args: list[str]) -> tuple[bool, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            skopeo, "inspect", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except FileNotFoundError:
        return False, "skopeo is not installed where the api-server runs (scripts/install.sh)"
    try:
        out, err = await asyncio.wait_for(process.communicate(), INSPECT_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        return False, f"no answer from the registry within {INSPECT_TIMEOUT_SECONDS:.0f} s (timeout)"
    if process.returncode == 0:
        return True, out.decode().strip()
    return False, err.decode() or out.decode()


def registry_allowed(image: RegistryImage, allowed: Sequence[str]) -> bool:
    """Whether `image`'s registry is among `allowed` (`host` or `host:port`; empty: any)."""
    return not allowed or image.registry in allowed or image.host in allowed


async def pin_images(spec: dict[str, Any], insecure_registries: Sequence[str],
                     allowed_registries: Sequence[str] = (),
                     credentials: Sequence[RegistryCredentials] = ()) -> None:  # fmt: skip
    """Rewrites, in place, each `spec.containers[i].image` that names a registry to its pinned form,
    looked up with those of `credentials` (the template's pull secrets, opened) for its registry,
    in order until one is let in (anonymously when there are none).

    Raises:
        ApiError: naming the field and the image: INVALID_ARGUMENT (malformed, a registry not in
            `allowed_registries`, no such image, not for this platform: an image or manifest
            list without a `RUNTIME_PLATFORM` variant), UNAVAILABLE (the
            registry cannot be reached), FAILED_PRECONDITION (unauthorized, its TLS not trusted,
            plain HTTP from a registry not listed insecure).
    """
    for index, container in enumerate(spec.get("containers") or []):
        text = container.get("image")
        if not isinstance(text, str) or not is_registry_reference(text):
            continue
        field = f"spec.containers[{index}].image"
        try:
            image = parse_registry_image(text)
        except ValueError as error:
            raise ApiError(f"{field}: {error}", {"field": field}, Reason.INVALID_ARGUMENT) from None
        if not registry_allowed(image, allowed_registries):
            raise ApiError(f"{field}: {image}: registry {image.registry} is not one this cluster takes images from; "
                           f"use one of {', '.join(allowed_registries)} (ATE_ALLOWED_REGISTRIES)",
                           {"field": field, "allowed": list(allowed_registries)}, Reason.INVALID_ARGUMENT)  # fmt: skip
        insecure = image.loopback or image.registry in insecure_registries
        used: list[RegistryCredentials] = []
        for candidate in attempts(credentials, image.registry):
            found, answer = await inspect_digest(image.transport_reference(), insecure, credentials=candidate)
            if candidate is not None:
                used.append(candidate)
            if found or pull_failure(answer)[0] != "unauthorized":
                break
        digest, _, platform = answer.partition(" ")
        if found and platform != RUNTIME_PLATFORM:
            answer = f"the image is for {platform or 'no stated platform'}, not {RUNTIME_PLATFORM} (architecture)"
        elif found and digest.startswith("sha256:") and (image.digest is None or digest == image.digest):
            container["image"] = str(image.pinned(digest))
            continue
        elif found:  # answered, but not the digest asked for (or no digest at all)
            answer = f"manifest unknown: the registry gave {digest or 'no digest'}"
        kind, hint = pull_failure(answer)
        details: dict[str, Any] = {"field": field, "image": str(image), "problem": kind}
        if kind == "unauthorized" and used:
            details["secrets"] = [c.secret for c in used]
            hint = refused_hint(used)
        raise ApiError(f"{field}: {image}: {kind} ({skopeo_message(answer)}); {hint}", details,
                       _REASONS.get(kind, Reason.FAILED_PRECONDITION))  # fmt: skip
