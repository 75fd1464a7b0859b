"""The API's part of egress (issue 28, `domain.egress`): a policy's credentials must name secrets
of the atespace, an actor's own policy must lie within its template's, and a node's egress proxy
learns the policy in force of the actor on one of its workers, with the values of its
credentials' secrets (`policy_for_node`), over the node's own authenticated channel only.
"""

from __future__ import annotations

from typing import Any

from api.errors import InvalidArgument
from api.secret_box import SecretBox, SecretKeyMissing, SecretOpenFailed
from domain.egress import EgressPolicy
from domain.idle import PolicyError
from domain.templates import ActorTemplateSpec
from store.errors import NotFound
from store.interfaces import ApiStore
from store.records import ActorRecord


async def check_credential_secrets(store: ApiStore, atespace: str, policy: EgressPolicy, field: str) -> None:
    """Each credential of `policy` names a secret that exists in `atespace`.

    Raises:
        InvalidArgument: naming `<field>.credentials[i].secret` and how to create the secret (also
            when it is a registry secret, which is no header value).
        NotFound: no such atespace.
    """
    if not policy.credentials:
        return
    types = {s.name: s.type for s in await store.secrets.all(atespace)}
    for index, credential in enumerate(policy.credentials):
        if types.get(credential.secret) == "registry":
            raise InvalidArgument(
                f"{field}.credentials[{index}].secret: {credential.secret} is a registry secret (for imagePullSecrets); "
                f"a credential header takes an opaque one ('ate create secret NAME -a {atespace} --from-file PATH')",
                {"field": f"{field}.credentials[{index}].secret"},
            )
        if credential.secret not in types:
            raise InvalidArgument(
                f"{field}.credentials[{index}].secret: atespace {atespace} has no secret {credential.secret}; create it "
                f"first ('ate create secret {credential.secret} -a {atespace} --from-file PATH')",
                {"field": f"{field}.credentials[{index}].secret"},
            )


def narrowed(template: ActorTemplateSpec, own: EgressPolicy, field: str = "egress") -> EgressPolicy:
    """`own` (an actor's policy), checked to lie within its template's.

    Raises:
        InvalidArgument: naming the rule or credential that goes beyond the template's.
    """
    try:
        return template.egress.narrowed(own, field)
    except PolicyError as error:
        raise InvalidArgument(f"invalid request: {error}", {"field": str(error).split(":", 1)[0]}) from None


def in_force(actor: ActorRecord, template: ActorTemplateSpec) -> tuple[EgressPolicy, str]:
    """The actor's policy in force and where it comes from: `actor` (its own), `template`, or `off`."""
    if actor.egress_policy is not None:
        return actor.egress_policy, "actor"
    if not template.egress.off:
        return template.egress, "template"
    return EgressPolicy(), "off"


async def policy_for_node(store: ApiStore, box: SecretBox | None, actor: ActorRecord) -> dict[str, Any]:
    """The document a node's egress proxy applies to `actor`: `{"allow": [...], "credentials":
    [{"host", "header", "secret", "value", "problem"}], "source"}` where `value` is the secret's
    value as text, or null when the secret is gone, cannot be opened (no key ring, a key missing)
    or is not a valid header value, with `problem` saying which (the proxy then refuses requests
    to that host with that problem, never sending them without their credential); `source` is
    `actor`, `template` or `off` (`in_force`).
    """
    template = await store.templates.get(actor.atespace, actor.template)
    policy, source = in_force(actor, template.spec)
    document = policy.document()
    for credential in document["credentials"]:
        credential["value"], credential["problem"] = await _value(store, box, actor.atespace, credential["secret"])
    document["source"] = source
    return document


async def _value(store: ApiStore, box: SecretBox | None, atespace: str, secret: str) -> tuple[str | None, str | None]:
    """(the secret's value as a header value, None) or (None, why it cannot be used)."""
    if box is None:
        return None, "the api-server has no secret key ring (ATE_SECRET_KEYS_FILE), so it cannot open secrets"
    try:
        sealed = await store.secrets.sealed(atespace, secret)
        value = box.open(atespace, secret, sealed.key_id, sealed.sealed)
    except NotFound:
        return None, f"secret {secret} no longer exists in atespace {atespace}"
    except (SecretKeyMissing, SecretOpenFailed) as error:
        return None, str(error)
    # a header value (RFC 9110, field-value): visible ASCII, with spaces or tabs only inside
    text = value.decode("latin-1")
    if not text or text != text.strip(" \t") or any(not (32 <= ord(c) < 127 or c == "\t") for c in text):
        return None, f"secret {secret} is not a valid header value (visible ASCII, no line breaks)"
    return text, None
