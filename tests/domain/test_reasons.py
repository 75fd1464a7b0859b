"""The failure reasons (domain/reasons.py): one spelling each, and the wire strings they were."""

from __future__ import annotations

from domain.reasons import PLACEMENT_REFUSALS, Reason, atelet_reason


def test_no_two_reasons_share_a_wire_string() -> None:
    # An Enum makes a second member with the same value an alias, silently: one meaning lost.
    assert len(Reason.__members__) == len({member.value for member in Reason.__members__.values()})


def test_a_reason_is_its_wire_string() -> None:
    assert Reason.UNREACHABLE == "Unreachable" and f"{Reason.UNREACHABLE}" == "Unreachable"
    assert "NoMatchingWorker" in PLACEMENT_REFUSALS  # a type read back from a history (a str) finds its member
    assert {Reason.NOT_FOUND: 404}.get("NotFound") == 404


def test_an_atelet_status_becomes_atelet_and_its_code() -> None:
    assert atelet_reason("NOT_FOUND") == Reason.ATELET_NOT_FOUND
    assert atelet_reason("FAILED_PRECONDITION") == Reason.ATELET_FAILED_PRECONDITION
    assert atelet_reason("DATA_LOSS") == Reason.ATELET_DATA_LOSS
    assert atelet_reason("UNAVAILABLE") == Reason.ATELET_UNAVAILABLE
    assert atelet_reason("DEADLINE_EXCEEDED") == "AteletDeadlineExceeded"


def test_the_placement_refusals_are_the_store_s_and_not_the_pinned_node() -> None:
    assert PLACEMENT_REFUSALS == {
        Reason.NOT_FOUND, Reason.FAILED_PRECONDITION, Reason.NO_CAPACITY, Reason.NO_MATCHING_WORKER,
        Reason.UNREACHABLE, Reason.INVALID_ARGUMENT,
    }  # fmt: skip
    assert Reason.PINNED_NODE_FULL not in PLACEMENT_REFUSALS
