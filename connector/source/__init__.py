"""The PySpark data source ``mqtt``: options, schema, stream reader and the receiver thread;
``create_session`` makes a query's broker session ahead of its first run.

The data source's names are imported on first use (PEP 562): a receiver process
(:mod:`connector.source.shard_worker`) needs the receiver and the WAL, not PySpark and pyarrow,
which the data source and the reader bring in. ``DataLossError`` is the WAL's
:class:`~connector.wal.errors.WalDataLossError`, the one error for offsets that are not stored
(``failOnDataLoss``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from connector.wal.errors import WalDataLossError as DataLossError

if TYPE_CHECKING:
    from .datasource import MqttDataSource
    from .first_run import create_session
    from .options import InvalidOptionError, SourceOptions

__all__ = [
    "DataLossError",
    "InvalidOptionError",
    "MqttDataSource",
    "SourceOptions",
    "create_session",
]

_MODULES = {
    "InvalidOptionError": "options",
    "MqttDataSource": "datasource",
    "SourceOptions": "options",
    "create_session": "first_run",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
