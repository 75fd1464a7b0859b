"""The guest initramfs builder's rules that need no VM: a container's command is the image's own
program (never a busybox applet of the same name), found along the image's PATH with its
symlinks resolved inside the image; names the guest's init needs are refused in an image."""

from __future__ import annotations

from pathlib import Path

import pytest

from atelet.drivers.microvm.initramfs import GuestImage, build_initramfs, command_for


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/sh").write_text("#!...\n")
    (root / "usr/bin/app").write_text("#!...\n")
    (root / "bin").symlink_to("usr/bin")  # as merged-/usr images have it
    (root / "opt").mkdir()
    (root / "opt/escape").symlink_to("../../../../../../bin")  # would reach the host's /bin
    return root


def test_a_bare_command_is_the_images_program_along_its_path(rootfs: Path) -> None:
    script = command_for(["sh", "-c", "echo hi"], ["PATH=/bin:/usr/bin", "A=b c"], "/srv", rootfs)
    assert script == "cd /srv && exec /.ate/bin/env -i PATH=/bin:/usr/bin 'A=b c' /bin/sh -c 'echo hi'\n"


def test_a_command_missing_from_the_image_is_refused_naming_it(rootfs: Path) -> None:
    with pytest.raises(ValueError, match=r"command 'ls' is not in the image along PATH=/opt/escape"):
        command_for(["ls"], ["PATH=/opt/escape"], "/", rootfs)  # the host's /bin/ls is not the image's


def test_an_absolute_command_is_kept_and_an_empty_one_refused(rootfs: Path) -> None:
    assert command_for(["/usr/bin/app"], [], "/", rootfs).endswith(" /usr/bin/app\n")
    with pytest.raises(ValueError, match="no command"):
        command_for([], [], "/", rootfs)


@pytest.mark.parametrize("reserved", ["init", ".ate"])
def test_an_image_with_the_inits_own_names_is_refused(rootfs: Path, tmp_path: Path, reserved: str) -> None:
    (rootfs / reserved).write_text("x")
    with pytest.raises(ValueError, match=f"the image has /{reserved}"):
        build_initramfs(GuestImage("true\n", rootfs=rootfs), tmp_path / "initramfs.cpio")


def test_a_container_user_runs_the_command_through_su_and_root_runs_it_directly(rootfs: Path) -> None:
    as_user = command_for(["/usr/bin/app"], ["A=1"], "/", rootfs, user=(1000, 100))
    assert as_user == "cd / && exec /.ate/bin/su -s /.ate/bin/sh -c 'exec /.ate/bin/env -i A=1 /usr/bin/app' ate-workload\n"
    assert command_for(["/usr/bin/app"], ["A=1"], "/", rootfs, user=(0, 0)) == command_for(
        ["/usr/bin/app"], ["A=1"], "/", rootfs
    )
