"""``wal.json``: the WAL's random identity and format version.

The identity (uuid4 hex) is also stamped into every segment header. A Spark source stores it
in its checkpoint so that a recreated WAL directory is never mistaken for the old one. The
version is the newest format any segment of the directory may use (2 or 3, see
:mod:`connector.wal`): a writer about to store the first data block with properties (kind 6)
in a version 2 WAL rewrites it with version 3, so a reader that knows only version 2 refuses
the WAL with "unsupported WAL format version 3" instead of meeting a record kind it does not
know. Any other version is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import WalCorruptError
from .segment import FORMAT_VERSION, READABLE_VERSIONS, TEMP_SUFFIX, fsync_dir, version_refusal

META_NAME = "wal.json"
FORMAT_NAME = "connector-mqtt-wal"


def read_identity(path: str | os.PathLike[str]) -> str | None:
    """The identity of the WAL at ``path``, or None when it has no ``wal.json``.

    Raises WalCorruptError when the file exists but is unreadable or of another format.
    """
    meta = read_meta(path)
    return None if meta is None else meta[0]


def read_meta(path: str | os.PathLike[str]) -> tuple[str, int] | None:
    """``(identity, format version)`` of the WAL at ``path``, None without ``wal.json``."""
    file = Path(path) / META_NAME
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None
    return decode_meta(raw, file)


def decode_meta(raw: bytes, file: str | Path) -> tuple[str, int]:
    """``(identity, format version)`` from the bytes of a ``wal.json``; WalCorruptError
    naming ``file`` when they are not one this version reads."""
    try:
        meta = json.loads(raw)
        identity = meta["identity"]
        version = meta["version"]
        if meta["format"] != FORMAT_NAME or not isinstance(identity, str):
            raise ValueError("not a WAL metadata file")
        bytes.fromhex(identity)
    except (ValueError, KeyError, TypeError) as exc:
        raise WalCorruptError(file, 0, f"unreadable WAL metadata: {exc}") from exc
    if version not in READABLE_VERSIONS:
        raise WalCorruptError(file, 0, version_refusal("WAL", version))
    if len(identity) != 32:
        raise WalCorruptError(file, 0, f"identity {identity!r} is not 32 hex digits")
    return identity, version


def encode_meta(identity: str, version: int = FORMAT_VERSION) -> bytes:
    """The bytes of a ``wal.json`` for ``identity`` at format ``version``."""
    body = json.dumps({"format": FORMAT_NAME, "version": version, "identity": identity}, indent=2)
    return body.encode("ascii") + b"\n"


def write_identity(
    root: Path, identity: str, *, fsync: bool, version: int = FORMAT_VERSION
) -> None:
    """Atomically create or replace ``wal.json`` saying format ``version`` (temporary file,
    fsync, rename, directory fsync)."""
    temp = root / (META_NAME + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, encode_meta(identity, version))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, root / META_NAME)
    if fsync:
        fsync_dir(root)
