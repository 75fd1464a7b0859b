"""The counter as a microvm template on the real stack (`ate dev --microvm-workers 2`: QEMU under
TCG here, MICROVM.md), through the same workflows, router and CLI as a gVisor one: the tour (FULL
keeps memory, DATA only the file), pause and resume, revert, an async suspend and its upload, and a
snapshot whose RAM file was damaged, refused with the actor left SUSPENDED on its snapshot.

Counts come from the counter's definition (examples/counter): each request to `/` adds one to
a memory counter and one to a file counter on the durable dir.

The tests share atespace `vm` and its microvm template (each actor has a name of its own): the
template's golden snapshot, a VM boot under TCG, is made once for the module, not once per test
(`setup` takes the template that is already there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import REPO, Stack, running_stack
from tests.e2e.test_lifecycle import api
from tests.e2e.test_pause import wait_uploaded

pytestmark = [pytest.mark.slow, pytest.mark.runsc, pytest.mark.qemu]
PORTS = {"api": 24080, "router": 24000, "atelet": 24085, "temporal": 24233, "ui": 24234, "metrics": 24500}
"""Apart from the other stacks' (tests/e2e/conftest.py, test_object_storage.py, tests/durability)."""
TEMPLATE = REPO / "examples/counter/template-microvm.yaml"


@pytest.fixture(scope="module")
def vm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`ate dev` with one gVisor worker and two microvm workers. A DATA resume is a cold boot,
    which under TCG takes seconds (more on a loaded machine): the router parks a request up to
    60 s here instead of its default 5 s (then it answers 504 and the resume goes on)."""
    base = Path(tmp_path_factory.mktemp("ate-dev-microvm"))
    flags = ("--workers", "1", "--microvm-workers", "2")
    env = {"ATE_ROUTER_PARKED_REQUEST_BUDGET_SECONDS": "60"}
    with running_stack(base, PORTS, "e2e-vm", "10.92.0.0/16", flags, env) as s:
        yield s


def get(stack: Stack, target: str) -> dict[str, int]:
    response = httpx.get(stack.router + "/", headers={"ate-target-actor": target}, timeout=120)
    assert response.status_code == 200, response.text
    return {k: v for k, v in response.json().items() if k != "ip"}


def setup(stack: Stack, atespace: str, name: str, template: Path = TEMPLATE) -> str:
    stack.ate("create", "atespace", atespace, check=False)
    created = stack.ate("create", "template", template.stem, "-a", atespace, "-f", str(template), check=False)
    assert created.returncode == 0 or "already exists" in created.stderr + created.stdout, created.stderr
    stack.ate("create", "actor", name, "-a", atespace, "--template", template.stem)
    return f"/v1/atespaces/{atespace}/actors/{name}"


def test_the_tour_on_microvm_workers(vm_stack: Stack, tmp_path: Path) -> None:
    path = setup(vm_stack, "vm", "v1")
    assert get(vm_stack, "vm/v1") == {"memory_count": 1, "file_count": 1}
    assert get(vm_stack, "vm/v1") == {"memory_count": 2, "file_count": 2}
    actor = api(vm_stack, "GET", path).json()
    assert actor["state"] == "RUNNING" and actor["worker"]["name"].startswith("microvm-"), actor  # never the gVisor one
    vm_stack.ate("suspend", "actor", "v1", "-a", "vm")
    assert api(vm_stack, "GET", path).json()["state"] == "SUSPENDED"
    assert get(vm_stack, "vm/v1") == {"memory_count": 3, "file_count": 3}  # FULL: the VM's memory came back
    vm_stack.ate("suspend", "actor", "v1", "-a", "vm")

    data = tmp_path / "counter-vm-data.yaml"  # the microvm template with DATA snapshots, as template-data.yaml
    data.write_text(TEMPLATE.read_text().replace("onCommit: Full", "onCommit: Data"))
    setup(vm_stack, "vm", "d1", data)
    assert get(vm_stack, "vm/d1") == {"memory_count": 1, "file_count": 1}
    assert get(vm_stack, "vm/d1") == {"memory_count": 2, "file_count": 2}
    vm_stack.ate("suspend", "actor", "d1", "-a", "vm")
    assert get(vm_stack, "vm/d1") == {"memory_count": 1, "file_count": 3}  # a fresh boot; the file goes on
    vm_stack.ate("suspend", "actor", "d1", "-a", "vm")


def test_pause_resume_and_revert_of_a_microvm_actor(vm_stack: Stack) -> None:
    path = setup(vm_stack, "vm", "p1")
    assert get(vm_stack, "vm/p1")["memory_count"] == 1
    vm_stack.ate("suspend", "actor", "p1", "-a", "vm")  # generation 1 (stored): count 1
    assert get(vm_stack, "vm/p1")["memory_count"] == 2
    node = api(vm_stack, "GET", path).json()["worker"]["node"]
    paused = vm_stack.ate("pause", "actor", "p1", "-a", "vm")
    assert paused.stdout.strip() == f"actor/p1 paused: PAUSED on node {node}"
    assert get(vm_stack, "vm/p1") == {"memory_count": 3, "file_count": 3}  # the paused VM's memory
    reverted = vm_stack.ate("revert", "actor", "p1", "-a", "vm")
    assert reverted.stdout.strip() == "actor/p1 reverted: SUSPENDED (back to generation 1)"
    assert get(vm_stack, "vm/p1") == {"memory_count": 2, "file_count": 2}  # generation 1 held count 1
    vm_stack.ate("suspend", "actor", "p1", "-a", "vm")


def test_a_damaged_ram_file_is_refused_and_the_actor_keeps_its_snapshot(vm_stack: Stack) -> None:
    path = setup(vm_stack, "vm", "c1")
    assert get(vm_stack, "vm/c1")["memory_count"] == 1
    vm_stack.ate("suspend", "actor", "c1", "-a", "vm")
    before = api(vm_stack, "GET", path).json()
    generation = before["latest_snapshot"]["generation"]
    (snapshot,) = (vm_stack.data_dir / "snapshots/vm/actors/c1").glob(f"{generation}-*")
    ram = snapshot / "checkpoint/ram"
    with ram.open("r+b") as f:  # one byte of guest memory: QEMU would load it without noticing
        f.seek(32 * 2**20)
        original = f.read(1)
        f.seek(32 * 2**20)
        f.write(bytes([original[0] ^ 0xFF]))
    refused = httpx.get(vm_stack.router + "/", headers={"ate-target-actor": "vm/c1"}, timeout=120)
    assert refused.status_code == 503, refused.text
    # what happened, where, and what to do; no "retry later": the same snapshot would be refused again
    assert refused.text.startswith("resume of actor vm/c1 failed and was rolled back: "), refused.text
    assert "snapshot file checkpoint/ram: sha256 " in refused.text and "retry" not in refused.text, refused.text
    assert "put the damaged file back from a copy" in refused.text, refused.text
    after = api(vm_stack, "GET", path).json()
    assert (after["state"], after["worker"]) == ("SUSPENDED", None), json.dumps(after)
    assert after["latest_snapshot"]["generation"] == generation  # the snapshot is still the actor's
    with ram.open("r+b") as f:  # mended, the same snapshot resumes with its memory: nothing was lost
        f.seek(32 * 2**20)
        f.write(original)
    assert get(vm_stack, "vm/c1") == {"memory_count": 2, "file_count": 2}
    vm_stack.ate("suspend", "actor", "c1", "-a", "vm")


def test_an_async_suspend_of_a_microvm_actor_uploads_its_vm_in_the_background(vm_stack: Stack) -> None:
    path = setup(vm_stack, "vm", "a1")
    assert get(vm_stack, "vm/a1")["memory_count"] == 1
    assert get(vm_stack, "vm/a1")["memory_count"] == 2
    answered = api(vm_stack, "POST", path + "/suspend", json={"mode": "async"})
    assert answered.status_code == 200 and answered.json()["state"] == "SUSPENDED", answered.text
    actor = wait_uploaded(vm_stack, path, timeout=120)
    assert (actor["latest_snapshot"]["generation"], actor["latest_snapshot"]["state"]) == (2, "COMPLETED")  # type: ignore[index]
    (uploaded,) = (vm_stack.data_dir / "snapshots/vm/actors/a1").glob("2-*")
    assert (uploaded / "checkpoint/ram").is_file() and (uploaded / "checkpoint/vm.json").is_file()
    assert get(vm_stack, "vm/a1") == {"memory_count": 3, "file_count": 3}  # the uploaded VM, then +1
    vm_stack.ate("suspend", "actor", "a1", "-a", "vm")
