"""The atelet's request validation (atelet/spec.py): names follow domain's one DNS-1123 label
rule, and the INVALID_ARGUMENT messages name the field as they always did."""

from __future__ import annotations

import grpc
import pytest

from atelet import spec
from atelet.errors import AteletError
from atelet.proto import atelet_pb2 as pb


@pytest.mark.parametrize(("atespace", "name", "field", "value"), [
    ("Demo", "a1", "actor.atespace", "Demo"),
    ("demo", "-a1", "actor.name", "-a1"),
    ("demo", "a" * 64, "actor.name", "a" * 64),
    ("", "a1", "actor.atespace", ""),
])  # fmt: skip
def test_actor_key_refuses_a_name_that_is_not_a_label(atespace: str, name: str, field: str, value: str) -> None:
    with pytest.raises(AteletError) as err:
        spec.actor_key(pb.ActorRef(atespace=atespace, name=name))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.reason == f"{field}: {value!r} is not a DNS-1123 label"


def test_actor_key_of_labels() -> None:
    assert spec.actor_key(pb.ActorRef(atespace="demo", name="a" * 63)) == ("demo", "a" * 63)


def test_a_volume_name_that_is_not_a_label_is_refused() -> None:
    workload = pb.WorkloadSpec(
        containers=[pb.Container(image="oci:x:latest")], volumes=[pb.Volume(name="Data", durable_dir=True)]
    )
    with pytest.raises(AteletError) as err:
        spec.validate_spec(workload)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.reason == "spec.volumes: name 'Data' is not a DNS-1123 label"
