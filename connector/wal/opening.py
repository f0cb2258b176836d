"""Opening a WAL by its ``walPath``: the file layout for local directories, the object layout
for stores and FUSE mounts of them (the choice is :func:`connector.wal.location.parse_location`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeAlias

from connector.wal.file_reader import WalReader
from connector.wal.file_writer import WalWriter, make_directory

from .identity import read_identity as read_file_identity
from .location import WalLocation, parse_location
from .object_reader import ObjectWalReader
from .object_writer import ObjectWalWriter, read_object_identity
from .objects import ObjectStore
from .segment import fsync_dir

AnyWalWriter: TypeAlias = WalWriter | ObjectWalWriter
AnyWalReader: TypeAlias = WalReader | ObjectWalReader


def location_of(path: str | os.PathLike[str] | WalLocation) -> WalLocation:
    """``path`` parsed (a WalLocation is returned as it is)."""
    return path if isinstance(path, WalLocation) else parse_location(os.fspath(path))


def open_writer(path: str | os.PathLike[str] | WalLocation) -> AnyWalWriter:
    """The single writer of the WAL at ``path`` (created when absent)."""
    location = location_of(path)
    if location.objects:
        return ObjectWalWriter.open(location)
    return WalWriter.open(location.text)


def open_reader(path: str | os.PathLike[str] | WalLocation) -> AnyWalReader:
    """A reader of the WAL at ``path``."""
    location = location_of(path)
    if location.objects:
        return ObjectWalReader(location)
    return WalReader(location.text)


def wal_identity(path: str | os.PathLike[str] | WalLocation) -> str | None:
    """The identity of the WAL at ``path``, None when there is none."""
    location = location_of(path)
    if location.objects:
        return read_object_identity(ObjectStore(location))
    return read_file_identity(location.text)


def child_names(path: str | os.PathLike[str] | WalLocation) -> list[str]:
    """Names of the folders directly under ``path`` ([] when it does not exist)."""
    location = location_of(path)
    if location.objects:
        return sorted(name for name, _, is_dir in ObjectStore(location).entries() if is_dir)
    try:
        return sorted(e.name for e in os.scandir(location.text) if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_sidecar(path: str | os.PathLike[str] | WalLocation, name: str) -> bytes | None:
    """A small file kept beside the WAL (the receiver's subscription record), None when absent."""
    location = location_of(path)
    try:
        if location.objects:
            return ObjectStore(location).read(name)
        with open(os.path.join(location.text, name), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_sidecar(path: str | os.PathLike[str] | WalLocation, name: str, data: bytes) -> None:
    """Replace the file ``name`` beside the WAL atomically and durably (written, fsynced,
    renamed, the directory fsynced; owner-only, like the WAL's files); a local WAL's directory
    is made when missing (before the WAL's first run)."""
    location = location_of(path)
    if location.objects:
        ObjectStore(location).write(name, data)
        return
    make_directory(Path(location.text), fsync=True)
    final = os.path.join(location.text, name)
    temp = final + ".tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, final)
    fsync_dir(Path(location.text))
