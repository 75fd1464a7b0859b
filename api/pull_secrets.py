"""Pull secrets (issue 29, `domain.registry_credentials`): a template's `imagePullSecrets` must
name registry secrets of its atespace, opened for the api-server's own look-up of its images
(`template_credentials`), and a node learns the credentials for an image it must pull only when a
template it can run uses that image and lists them (`node_credentials`), over the node's own
authenticated channel.
"""

from __future__ import annotations

from collections.abc import Sequence

from api.errors import ApiError, InvalidArgument
from api.secret_box import SecretBox, SecretKeyMissing, SecretOpenFailed
from domain.image_references import RegistryImage
from domain.reasons import Reason
from domain.registry_credentials import RegistryCredentials, parse_registry_value
from store.errors import NotFound
from store.interfaces import ApiStore
from store.secrets import SealedSecret


def _open(box: SecretBox, sealed: SealedSecret) -> RegistryCredentials:
    """Raises SecretKeyMissing, SecretOpenFailed, ValueError (not registry credentials)."""
    value = box.open(sealed.atespace, sealed.name, sealed.key_id, sealed.sealed)
    return parse_registry_value(sealed.registry or "", value, f"{sealed.atespace}/{sealed.name}")


async def template_credentials(store: ApiStore, box: SecretBox | None, atespace: str,
                               names: Sequence[str]) -> list[RegistryCredentials]:  # fmt: skip
    """The opened credentials of the pull secrets `names` (a template's `imagePullSecrets`), in order.

    Raises:
        InvalidArgument: naming `spec.imagePullSecrets[i].name`: no such secret (and how to make
            one), or one that is not of type registry.
        ApiError: UNAVAILABLE when the api-server has no key ring; FAILED_PRECONDITION when a
            secret cannot be opened (its key is gone from the ring).
        NotFound: no such atespace.
    """
    found: list[RegistryCredentials] = []
    for index, name in enumerate(names):
        field = f"spec.imagePullSecrets[{index}].name"
        try:
            sealed = await store.secrets.sealed(atespace, name)
        except NotFound:
            await store.atespaces.get(atespace)
            raise InvalidArgument(
                f"{field}: atespace {atespace} has no secret {name}; create it first ('ate create secret {name} "
                f"-a {atespace} --type registry --registry HOST[:PORT] --username USER --password-stdin')",
                {"field": field},
            ) from None
        if sealed.type != "registry":
            raise InvalidArgument(f"{field}: secret {name} is of type {sealed.type}, not registry; an image pull "
                                  "takes a registry secret (--type registry)", {"field": field})  # fmt: skip
        if box is None:
            raise ApiError("secrets are not enabled on this api-server (no ATE_SECRET_KEYS_FILE), so it cannot open "
                           f"pull secret {name}", {"field": field}, Reason.UNAVAILABLE)  # fmt: skip
        try:
            found.append(_open(box, sealed))
        except (SecretKeyMissing, SecretOpenFailed, ValueError) as error:
            raise ApiError(f"{field}: {error}", {"field": field}, Reason.FAILED_PRECONDITION) from None
    return found


async def node_credentials(store: ApiStore, box: SecretBox | None, node: str, image: RegistryImage,
                           recorded: str) -> tuple[list[RegistryCredentials], list[str]]:  # fmt: skip
    """(the credentials `node` may pull `image` with, the problems of those it may not use).

    `recorded` is the image as a template records it (pinned); the credentials are those of the
    registry secrets for `image`'s registry that the templates running it, of a sandbox class the
    node's active workers serve, list in `imagePullSecrets`. A secret that cannot be opened is
    left out, its problem said (the pull then fails as unauthorized, naming it).
    """
    usable: list[RegistryCredentials] = []
    problems: list[str] = []
    for sealed in await store.secrets.pull_secrets_for_node(node, recorded, image.registry):
        if box is None:
            problems.append(f"{sealed.atespace}/{sealed.name}: the api-server has no secret key ring")
            continue
        try:
            usable.append(_open(box, sealed))
        except (SecretKeyMissing, SecretOpenFailed, ValueError) as error:
            problems.append(f"{sealed.atespace}/{sealed.name}: {error}")
    return usable, problems
