"""The errors that are the user's, shown by Spark in one line.

A Python data source's exception reaches a DataFrame user as the text its Python worker sends
(``pyspark.util.handle_worker_exception``): the whole traceback, unless the worker's environment
has ``SPARK_HIDE_TRACEBACK``, and then only the exception's own line. Spark sets that variable
for its planner workers only when ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` is
true, and never for the streaming source runner. For the errors whose message says all a user
needs (:data:`USER_ERRORS`: bad options, an unreachable broker, refused credentials, a WAL
another query holds, a bad row to publish, ...) the source sets it in its own worker process as
the error leaves, so the first line a user sees is Spark's prefix and then the product's
message; any other exception (a bug) keeps its traceback. The worker ends with the error
(docs/architecture.md, decision 40).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from connector.mqtt.errors import MqttError
from connector.options.source import InvalidOptionError
from connector.receiver.receiver import ReceiverFailed
from connector.receiver.shard_handles import ShardFailed
from connector.receiver.shards import ShardLayoutError
from connector.wal.errors import WalError


class UserError(Exception):
    """Base of the Spark side's own errors written for the user (e.g. a bad row to publish)."""


HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"
"""The variable PySpark's worker reads to send an exception's line without its traceback."""

USER_ERRORS: tuple[type[BaseException], ...] = (
    InvalidOptionError,
    MqttError,
    WalError,
    ShardLayoutError,
    ReceiverFailed,
    ShardFailed,
    UserError,
)
"""Errors whose message is written for the user: shown without a traceback."""

_Method = TypeVar("_Method", bound=Callable[..., Any])


def one_line(method: _Method) -> _Method:
    """``method`` (a generator function too) with its user errors shown in one line."""
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(*args, **kwargs)
            except USER_ERRORS:
                os.environ[HIDE_TRACEBACK] = "1"
                raise

        return cast(_Method, generator)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except USER_ERRORS:
            os.environ[HIDE_TRACEBACK] = "1"
            raise

    return cast(_Method, call)
