"""The search attributes a workflow sets on the workflows it starts (UploadSnapshot), as Temporal's
typed values; their names and values come from `domain.temporal`, their registration on a
namespace is the worker's (`temporal_worker.search_attributes`)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from domain.temporal import search_attribute_values


def operation_attributes(atespace: str, name: str, operation: str) -> TypedSearchAttributes:
    """`AteAtespace`, `AteActor` and `AteOperation` of a workflow acting on (atespace, name)."""
    values = search_attribute_values(atespace, name, operation)
    return TypedSearchAttributes([SearchAttributePair(SearchAttributeKey.for_keyword(k), v) for k, v in values.items()])
