"""Damaged datasets served by a real `quiver serve`: copies of datasets at every storage
version with a data, deletion or manifest file truncated, overwritten with garbage, emptied,
removed, or with bytes flipped inside. Reads answer `data_corrupt` naming the dataset,
version, fragment and file (no leak), or (flipped bytes that still decode) read; earlier
versions still read as pylance reads them, other datasets are unaffected."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from campaign import Campaign, base_table
from flight_helpers import error_info
from server_process import quiver_serve

from quiver.format.dataset import dataset, write_dataset
from quiver.format.table.deletion import deletion_file_path
from quiver.format.table.manifest import manifest_name

STORAGE_VERSIONS = ("legacy", "2.0", "2.1", "2.2")
DAMAGES = ("truncated", "garbage", "empty", "missing", "flipped", "directory")
# which file of the latest version (3) is damaged, and the versions that do not use it
TARGETS = {"data": (1, 2), "deletion": (1,), "manifest": (1, 2)}


@dataclass(frozen=True)
class Damaged:
    """One damaged copy: what was done to which file, and what still reads."""

    name: str
    pristine: str  # the undamaged dataset it was copied from
    target: str
    damage: str
    file: str  # relative to the dataset directory
    fragment: int | None
    unaffected: tuple[int, ...]


def make_history(uri: str, storage: str) -> None:
    """Version 1: two fragments; 2: deletions in both; 3: a third fragment appended."""
    t = base_table(40)
    write_dataset(t, uri, data_storage_version=storage, max_rows_per_file=20)
    dataset(uri).delete("id % 4 = 1")
    write_dataset(base_table(50).slice(40), uri, mode="append")


def damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "missing":
        path.unlink()
    elif how == "directory":  # a directory where the file was
        path.unlink()
        path.mkdir()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        os.truncate(path, size // 2)
    elif how == "flipped":  # a few bytes inside, the end (footer, metadata) intact
        data = bytearray(path.read_bytes())
        for at in range(size // 8, size * 3 // 4, max(1, size // 16)):
            data[at] ^= 0xA5
        path.write_bytes(bytes(data))
    else:  # garbage in the middle and over the end, where footers and metadata live
        data = bytearray(path.read_bytes())
        for start in (size // 3, max(0, size - 48)):
            data[start : start + 48] = bytes((i * 37 + 11) % 256 for i in range(48))
        path.write_bytes(bytes(data[:size]))


def damaged_copy(root: Path, storage: str, target: str, how: str) -> Damaged:
    pristine = f"pristine_{storage.replace('.', '')}"
    name = f"{target}_{how}_{storage.replace('.', '')}"
    shutil.copytree(root / f"{pristine}.lance", root / f"{name}.lance")
    uri = str(root / f"{name}.lance")
    frags = dataset(uri).manifest.pb.fragments
    if target == "data":
        fragment: int | None = int(frags[-1].id)  # the fragment version 3 appended
        file = f"data/{frags[-1].files[0].path}"
    elif target == "deletion":
        d = frags[0].deletion_file
        fragment = int(frags[0].id)
        bitmap = d.file_type == d.BITMAP
        file = deletion_file_path(fragment, d.read_version, d.id, bitmap)
    else:
        fragment = None
        v2 = (root / f"{name}.lance" / "_versions" / manifest_name(3)).exists()
        file = f"_versions/{manifest_name(3, v2=v2)}"
    damage(root / f"{name}.lance" / file, how)
    return Damaged(name, pristine, target, how, file, fragment, TARGETS[target])


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Campaign, list]]:
    tmp = tmp_path_factory.mktemp("corrupt")
    root = tmp / "root"
    cases = []
    for storage in STORAGE_VERSIONS:
        short = storage.replace(".", "")
        make_history(str(root / f"pristine_{short}.lance"), storage)
        for target in TARGETS:
            for how in DAMAGES:
                cases.append(damaged_copy(root, storage, target, how))
    with quiver_serve(root) as (uri, pid):
        client = fl.connect(uri)
        yield Campaign(client, root, pid, pa.table({})), cases
        client.close()


def cmd(doc: Any) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(json.dumps(doc))


def oracle(root: Path, name: str, version: int) -> pa.Table:
    return lance.dataset(str(root / f"{name}.lance"), version=version).to_table().sort_by("id")


def test_damaged_files_answer_data_corrupt(
    corrupted: tuple[Campaign, list[Damaged]], record_property: Any
) -> None:
    c, cases = corrupted
    assert len(cases) == len(STORAGE_VERSIONS) * len(TARGETS) * len(DAMAGES)
    for case in cases:
        reads = {
            "read": cmd({"dataset": case.name}),
            "filtered read": cmd({"dataset": case.name, "filter": "id >= 0", "limit": 1000}),
            "read of version 3": cmd({"dataset": case.name, "version": 3, "columns": ["id"]}),
        }
        if case.target == "manifest" and case.damage in ("missing", "directory"):
            # a version whose manifest is gone (or a directory) does not exist: the dataset
            # ends at version 2
            for what, d in reads.items():
                if what != "read of version 3":
                    got = c.send(f"{what} {case.name}", lambda d=d: c.read(d), set(), ok=True)
                    assert got.sort_by("id").equals(oracle(c.root, case.pristine, 2))
            label = f"read of version 3 {case.name}"
            c.send(label, lambda d=reads["read of version 3"]: c.read(d), {"not_found"})
            continue
        for what, descriptor in reads.items():
            label = f"{what} {case.name}"
            if case.damage == "flipped":  # the bytes may fall in values, or flip a feature flag
                c.send(
                    label,
                    lambda d=descriptor: c.read(d),
                    {"data_corrupt", "unimplemented"},
                    ok=True,
                )
                continue
            with pytest.raises((fl.FlightError, pa.ArrowException)) as err:
                c.inputs.add(label)
                c.read(descriptor)
            c.check_error(label, err.value, {"data_corrupt"})
            message = str(err.value)
            where = f"dataset '{case.name}' version 3"
            if case.fragment is not None:
                where += f" fragment {case.fragment}"
            assert where in message and case.file in message, message
            info = error_info(err.value)
            if info:
                assert info["file"] == case.file and info["version"] == 3
                assert info.get("fragment") == case.fragment
        for v in case.unaffected:  # what an operator restores to still reads, as pylance reads it
            got = c.read(cmd({"dataset": case.name, "version": v}))
            assert got.sort_by("id").equals(oracle(c.root, case.pristine, v))
        c.alive()
    record_property("hostile_inputs", len(c.inputs))


def test_damage_stays_with_its_dataset(corrupted: tuple[Campaign, list[Damaged]]) -> None:
    """After every damaged read, the pristine datasets read exactly as pylance reads them
    and the listing still shows every dataset whose latest manifest is readable."""
    c, cases = corrupted
    for storage in STORAGE_VERSIONS:
        name = f"pristine_{storage.replace('.', '')}"
        for v in (1, 2, 3):
            got = c.read(cmd({"dataset": name, "version": v}))
            assert got.sort_by("id").equals(oracle(c.root, name, v))
    listed = {i.descriptor.path[0].decode() for i in c.client.list_flights()}
    manifests = {d.name: d.damage for d in cases if d.target == "manifest"}
    unreadable = {
        n for n, how in manifests.items() if how not in ("missing", "directory", "flipped")
    }
    maybe = {n for n, how in manifests.items() if how == "flipped"}  # may still decode
    every = {d.name for d in cases} | {f"pristine_{s.replace('.', '')}" for s in STORAGE_VERSIONS}
    assert listed - maybe == every - unreadable - maybe
    assert c.action("healthcheck", {}) == {"status": "serving"}
