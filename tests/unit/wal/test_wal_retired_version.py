"""Format version 1, written only before the first release, is no longer read: a WAL whose
``wal.json`` or segment header says version 1 is refused on open by readers and writers of
both layouts, and left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.wal import NewRecord, WalCorruptError, WalReader, WalWriter, decode_blob
from connector.wal.appends import segment_prefix
from connector.wal.blob import BLOB_HEAD, BLOB_MAGIC
from connector.wal.identity import encode_meta
from connector.wal.objects import part_name, segment_dir
from connector.wal.opening import open_reader, open_writer, wal_identity
from connector.wal.segment import segment_name
from connector.wal.state import QosState

IDENTITY = "0d1c2b3a495867768594a3b2c1d0e0f1"
RETIRED = r"format version 1 \(written only before the first release\) is no longer read"


def write_wal(root: Path, layout: str, meta_version: int | None, header_version: int) -> str:
    """A WAL of one empty segment, made with the package's encoders, whose ``wal.json`` says
    ``meta_version`` (None: no ``wal.json``) and whose segment header says
    ``header_version``; returns its walPath."""
    prefix = segment_prefix(bytes.fromhex(IDENTITY), 0, QosState(), header_version)
    if layout == "files":
        root.mkdir()
        (root / segment_name(0)).write_bytes(prefix)
    else:
        (root / segment_dir(0)).mkdir(parents=True)
        (root / segment_dir(0) / part_name(0, 0)).write_bytes(prefix)
    if meta_version is not None:
        (root / "wal.json").write_bytes(encode_meta(IDENTITY, meta_version))
    return str(root) if layout == "files" else f"file://{root}"


def stored(root: Path) -> dict[str, bytes]:
    """The WAL's files (not the writer's lock or lease) and their bytes."""
    return {
        str(file.relative_to(root)): file.read_bytes()
        for file in sorted(root.rglob("*"))
        if file.is_file() and file.name != "LOCK" and "lease" not in file.relative_to(root).parts
    }


@pytest.mark.parametrize("layout", ["files", "objects"])
@pytest.mark.parametrize(
    ("meta_version", "refused"),
    [
        (1, "WAL"),  # a version 1 WAL
        (2, "segment"),  # a version 1 WAL whose wal.json a writer had rewritten to version 2
        (None, "segment"),  # a version 1 WAL whose writer stopped before writing wal.json
    ],
)
def test_a_version_1_wal_is_refused_on_open_and_left_alone(
    tmp_path: Path, layout: str, meta_version: int | None, refused: str
) -> None:
    root = tmp_path / "wal"
    path = write_wal(root, layout, meta_version, 1)
    before = stored(root)
    message = f"{refused} {RETIRED}"
    if refused == "WAL":
        with pytest.raises(WalCorruptError, match=message):
            wal_identity(path)
    with pytest.raises(WalCorruptError, match=message):
        open_reader(path).read(0, 1)
    with pytest.raises(WalCorruptError, match=message) as raised:
        open_writer(path)
    assert raised.value.position == (0 if refused == "WAL" else 8)
    assert stored(root) == before, "nothing rewritten, cut or deleted"


@pytest.mark.parametrize("layout", ["files", "objects"])
def test_the_same_wal_at_version_2_opens(tmp_path: Path, layout: str) -> None:
    path = write_wal(tmp_path / "wal", layout, 2, 2)
    assert wal_identity(path) == IDENTITY
    with open_writer(path) as writer:
        assert writer.next_offset == 0
        writer.append([NewRecord("t", b"x", 1, False, False, 1, 0)])
    assert open_reader(path).read(0, 1).payloads == [b"x"]


def test_a_version_1_blob_is_refused(tmp_path: Path) -> None:
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append([NewRecord("t", b"x", 0, False, False, None, 0)])
    blob = WalReader(tmp_path / "wal").encode_range(0, 1)
    with pytest.raises(WalCorruptError, match="unsupported blob version 1"):
        decode_blob(BLOB_HEAD.pack(BLOB_MAGIC, 1, 0, 0, 1) + blob[BLOB_HEAD.size :])
