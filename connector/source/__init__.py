"""The names a user imports: the PySpark data source ``mqtt`` and what goes with it.

``MqttDataSource`` (:mod:`connector.spark.datasource`), ``create_session``, which makes a
query's broker session ahead of its first run (:mod:`connector.receiver.first_run`), the
options and their error (:mod:`connector.options.source`), and ``DataLossError``, the WAL's
:class:`~connector.wal.errors.WalDataLossError`, the one error for offsets that are not stored
(``failOnDataLoss``). The parts live in rooms named for them: the Spark-free receiver in
:mod:`connector.receiver`, the Spark reader and writer in :mod:`connector.spark`.

The names are imported on first use (PEP 562), so importing this package brings in neither
PySpark nor pyarrow until the data source is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from connector.wal.errors import WalDataLossError as DataLossError

if TYPE_CHECKING:
    from connector.options.source import InvalidOptionError, SourceOptions
    from connector.receiver.first_run import create_session
    from connector.spark.datasource import MqttDataSource

__all__ = [
    "DataLossError",
    "InvalidOptionError",
    "MqttDataSource",
    "SourceOptions",
    "create_session",
]

_MODULES = {
    "InvalidOptionError": "connector.options.source",
    "MqttDataSource": "connector.spark.datasource",
    "SourceOptions": "connector.options.source",
    "create_session": "connector.receiver.first_run",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
