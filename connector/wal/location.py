"""Where a WAL lives: a local directory (file layout) or a store (object layout).

``walPath`` is one of:

* a local path: the file layout (append + fsync, :mod:`connector.wal.file_writer`);
* a path under ``/Volumes/`` or ``/dbfs/`` (Databricks FUSE mounts over object storage) or a
  ``file://`` URI: the object layout (:mod:`connector.wal.objects`) on the local file system,
  since those mounts neither append durably nor fsync;
* ``s3://bucket/prefix``, ``gs://`` / ``gcs://``, ``abfs://`` / ``abfss://``, ``az://``,
  ``hdfs://`` / ``viewfs://``: the object layout through ``pyarrow.fs``. Store settings go in the
  query string the way ``pyarrow.fs.FileSystem.from_uri`` takes them (for example
  ``?endpoint_override=127.0.0.1:9000&scheme=http``).

Any other scheme is refused (a ``s3a://`` path is not silently a local directory named
``s3a:``). Credentials come from the store's own environment or credential chain, never from
``walPath``: a URI with a password or a secret-looking query key is refused, so the text of a
location is safe to log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit, urlunsplit

if TYPE_CHECKING:  # pyarrow is imported only for object layouts
    from pyarrow.fs import FileSystem

STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs", "file"})
FUSE_PREFIXES = ("/Volumes/", "/dbfs/")
"""Local paths that are FUSE mounts of object storage: they get the object layout."""

_SECRET_KEYS = frozenset(
    {
        "access_key",
        "secret_key",
        "session_token",
        "account_key",
        "sas_token",
        "client_secret",
        "password",
        "token",
        "credential",
        "credentials",
    }
)
_HINTS = {
    "s3a": "s3://",
    "s3n": "s3://",
    "wasb": "abfs://",
    "wasbs": "abfss://",
    "dbfs": "the FUSE path /dbfs/...",
}


class WalLocationError(ValueError):
    """``walPath`` names no usable location (unknown scheme, a secret in it, no path)."""


@dataclass(frozen=True, slots=True)
class WalLocation:
    """A parsed ``walPath``: ``text`` as given (safe to log), the layout, and for the object
    layout the store's scheme and the path inside it."""

    text: str
    objects: bool
    scheme: str = ""

    @property
    def local_path(self) -> str:
        """The directory of a local WAL (file layout, or object layout on a local mount)."""
        if self.scheme == "file":
            return urlsplit(self.text).path
        if self.scheme:
            raise WalLocationError(f"WAL {self.text} is not on the local file system")
        return self.text

    def child(self, name: str) -> WalLocation:
        """The location of ``name`` inside this one (a shard's WAL under the query's)."""
        if not self.scheme:
            return WalLocation(os.path.join(self.text, name), self.objects)
        parts = urlsplit(self.text)
        path = parts.path.rstrip("/") + "/" + name
        return WalLocation(urlunsplit(parts._replace(path=path)), True, self.scheme)

    def filesystem(self) -> tuple[FileSystem, str]:
        """``(pyarrow file system, path inside it)`` of an object-layout location."""
        import pyarrow.fs as pafs

        if not self.scheme:
            return pafs.LocalFileSystem(), self.text
        if self.scheme == "az":
            return _azure(self.text)
        try:
            filesystem, path = pafs.FileSystem.from_uri(_with_store_defaults(self.text))
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            raise WalLocationError(f"walPath {self.text}: the store refused it: {exc}") from exc
        return filesystem, str(path)

    def __str__(self) -> str:
        return self.text


def parse_location(text: str) -> WalLocation:
    """Parse ``walPath``; WalLocationError for a scheme we do not support or a secret."""
    if not text:
        raise WalLocationError("walPath is empty")
    scheme = _scheme(text)
    if not scheme:
        return WalLocation(text, objects=text.startswith(FUSE_PREFIXES))
    if scheme not in STORE_SCHEMES:
        hint = f" (write it as {_HINTS[scheme]})" if scheme in _HINTS else ""
        raise WalLocationError(
            f"walPath scheme {scheme}:// is not supported{hint}; use a local directory or one "
            f"of {', '.join(sorted(s + '://' for s in STORE_SCHEMES))}"
        )
    parts = urlsplit(text)
    if parts.password is not None:
        raise WalLocationError(
            f"walPath for {scheme}:// holds a password; give credentials through the store's "
            "environment or credential chain instead"
        )
    secrets = sorted({key for key, _ in parse_qsl(parts.query) if key.lower() in _SECRET_KEYS})
    if secrets:
        raise WalLocationError(
            f"walPath for {scheme}:// holds {', '.join(secrets)}: credentials are never taken "
            "from walPath (it is logged and stored in the checkpoint); use the store's "
            "environment variables or credential chain"
        )
    if not parts.path.strip("/") and scheme != "file":
        raise WalLocationError(f"walPath {scheme}:// needs a bucket or container and a prefix")
    return WalLocation(text, objects=True, scheme=scheme)


def _with_store_defaults(text: str) -> str:
    """``text`` with the settings the WAL needs unless given: on S3, ``allow_delayed_open``
    makes a part one PUT request instead of a three-request multipart upload."""
    parts = urlsplit(text)
    if parts.scheme.lower() != "s3" or "allow_delayed_open" in dict(parse_qsl(parts.query)):
        return text
    query = f"{parts.query}&allow_delayed_open=true" if parts.query else "allow_delayed_open=true"
    return urlunsplit(parts._replace(query=query))


def _scheme(text: str) -> str:
    """The URI scheme of ``text`` ('' for a plain path; a Windows drive is not a scheme)."""
    head, sep, _ = text.partition("://")
    if not sep or not head or not head.replace("+", "").replace("-", "").isalnum():
        return ""
    return head.lower()


def _azure(text: str) -> tuple[FileSystem, str]:
    """``az://container/path``: Azure Blob with the account from ``?account_name=`` or the
    ``AZURE_STORAGE_ACCOUNT_NAME`` environment variable (pyarrow knows only ``abfs://``)."""
    import pyarrow.fs as pafs

    parts = urlsplit(text)
    query = dict(parse_qsl(parts.query))
    account = query.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        raise WalLocationError(
            f"walPath {text}: az:// needs ?account_name=... or AZURE_STORAGE_ACCOUNT_NAME"
        )
    return pafs.AzureFileSystem(account_name=account), f"{parts.netloc}{parts.path}".rstrip("/")
