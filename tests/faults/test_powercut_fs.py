"""The power-cut file system (tests/powercut.py) loses what a real cut may lose, and only
that: un-fsynced data and names go, fsynced data and names whose folder was fsynced stay."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powercut import Mount


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path).start()
    try:
        yield m
    finally:
        m.stop()


def put(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_unsynced_data_is_lost_and_synced_data_kept(mount: Mount) -> None:
    root = mount.path
    put(root / "kept", b"synced", sync=True)
    put(root / "emptied", b"never synced", sync=False)
    sync_dir(root)
    with open(root / "kept", "ab") as f:  # appended after the sync: lost
        f.write(b" and more")
    assert (root / "kept").read_bytes() == b"synced and more"
    mount.cut()
    assert (root / "kept").read_bytes() == b"synced"
    # Its name was synced, its data never: an empty file, as ext4 leaves one.
    assert (root / "emptied").read_bytes() == b""


def test_a_name_needs_its_folder_synced(mount: Mount) -> None:
    root = mount.path
    put(root / "orphan", b"data synced, name not", sync=True)
    (root / "sub").mkdir()
    sync_dir(root)  # `sub` is kept; what is made in it afterwards is not
    put(root / "sub" / "inner", b"x", sync=True)
    mount.cut()
    assert sorted(os.listdir(root)) == ["orphan", "sub"]  # orphan was there at the dir sync
    assert (root / "orphan").read_bytes() == b"data synced, name not"
    assert os.listdir(root / "sub") == []

    put(root / "late", b"y", sync=True)  # made after the last folder sync: gone
    mount.cut()
    assert "late" not in os.listdir(root)


def test_an_unsynced_rename_or_unlink_is_undone(mount: Mount) -> None:
    root = mount.path
    put(root / "old", b"v1", sync=True)
    put(root / "gone", b"g", sync=True)
    sync_dir(root)
    put(root / "new.tmp", b"v2", sync=True)
    os.replace(root / "new.tmp", root / "old")
    os.unlink(root / "gone")
    assert (root / "old").read_bytes() == b"v2" and not (root / "gone").exists()
    mount.cut()
    assert (root / "old").read_bytes() == b"v1"
    assert (root / "gone").read_bytes() == b"g"
    assert not (root / "new.tmp").exists()


def test_a_synced_rename_is_kept(mount: Mount) -> None:
    root = mount.path
    put(root / "old", b"v1", sync=True)
    sync_dir(root)
    put(root / "new.tmp", b"v2", sync=True)
    os.replace(root / "new.tmp", root / "old")
    os.link(root / "old", root / "hard")
    sync_dir(root)
    mount.cut()
    assert sorted(os.listdir(root)) == ["hard", "old"]
    assert (root / "old").read_bytes() == (root / "hard").read_bytes() == b"v2"
    assert os.stat(root / "old").st_nlink == 2


def test_a_cut_without_any_sync_keeps_nothing(mount: Mount) -> None:
    root = mount.path
    (root / "a" / "b").mkdir(parents=True)
    put(root / "a" / "b" / "f", b"x", sync=True)
    os.symlink("a", root / "link")
    mount.cut()
    mount.cut()  # twice: a cut of what the last one left keeps it
    assert os.listdir(root) == []
