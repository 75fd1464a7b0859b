"""Registration of ate's search attributes on a Temporal namespace, when they are missing."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client

from domain.temporal import SEARCH_ATTRIBUTES

log = logging.getLogger(__name__)


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Add `AteAtespace`, `AteActor`, `AteOperation` (Keyword) to `namespace` if absent.

    A server that refuses (no operator rights) is logged, not fatal: the dev server gets them
    from `--search-attribute` flags.
    """
    try:
        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        missing = [name for name in SEARCH_ATTRIBUTES if name not in listed.custom_attributes]
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=namespace,
                    search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing},
                )
            )
            log.info("registered search attributes %s", missing)
    except Exception as error:
        log.warning("could not check/register search attributes: %s", error)
