"""The ingest job's Sparkplug flags: they become source options, the tables they name, and the
combinations refused with the flag's name (docs/sparkplug.md)."""

from __future__ import annotations

import pytest

from connector.options.table import requiring
from streaming_jobs.ingest_config import (
    SPARKPLUG_ONLY,
    UsageError,
    parse_config,
    source_options,
)
from streaming_jobs.ingest_flags import BY_DEST, FLAGS
from streaming_jobs.payloads import SchemaError, make_plan

BASE = ["--broker", "tcp://127.0.0.1:1883", "--topic", "spBv1.0/#", "--table", "t"]
SPB = [*BASE, "--checkpoint", "c", "--payload-format", "sparkplug"]


def test_sparkplug_flags_become_source_options() -> None:
    config, _ = parse_config(
        [*SPB, "--events-table", "e", "--sparkplug-host-id", "scada",
         "--sparkplug-reorder-timeout", "2", "--sparkplug-rebirth-interval", "10"],
        environ={},
    )  # fmt: skip
    options = source_options(config)
    assert options["payloadFormat"] == "sparkplug"
    assert options["sparkplugHostId"] == "scada"
    assert (options["sparkplugReorderTimeout"], options["sparkplugRebirthInterval"]) == (
        "2.0",
        "10.0",
    )
    assert config.events_table == "e"
    plain, _ = parse_config([*BASE, "--checkpoint", "c"], environ={})
    assert not {"payloadFormat", "sparkplugHostId"} & set(source_options(plain))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--events-table", "e"], "--events-table goes with --payload-format sparkplug"),
        (["--sparkplug-host-id", "h"], "--sparkplug-host-id goes with --payload-format sparkplug"),
        (["--payload-format", "sparkplug", "--topic-columns", "a"], "--topic-columns does not go"),
        (
            ["--payload-format", "sparkplug", "--events-table", "t"],
            "--events-table must differ from --table",
        ),
        (
            ["--payload-format", "sparkplug", "--sparkplug-host-id", "a/b"],
            "--sparkplug-host-id must be a non-empty name",
        ),
        (
            ["--payload-format", "sparkplug", "--sparkplug-rebirth-interval", "5"],
            "--sparkplug-rebirth-interval applies only with --sparkplug-host-id",
        ),
    ],
)
def test_refused_naming_the_flag(extra: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_config([*BASE, "--checkpoint", "c", *extra], environ={})


def test_every_flag_of_a_sparkplug_option_goes_only_with_sparkplug() -> None:
    options = {flag.row.name for flag in FLAGS if flag.row is not None}
    assert set(requiring("sparkplug")) <= options
    assert {BY_DEST[dest].option for dest in SPARKPLUG_ONLY} == {None, *requiring("sparkplug")}
    for dest in SPARKPLUG_ONLY:
        flag = BY_DEST[dest]
        value = "1" if flag.row is not None and flag.row.kind == "seconds" else "x"
        with pytest.raises(UsageError, match=f"^{flag.name} goes with --payload-format sparkplug"):
            parse_config([*BASE, "--checkpoint", "c", flag.name, value], environ={})


def test_the_sparkplug_plan_takes_partition_columns_of_its_table() -> None:
    plan = make_plan("sparkplug", None, partition_by=("group_id", "date"), events=True)
    assert plan.sparkplug and plan.events
    assert "metric_name" in plan.table_columns() and "date" in plan.table_columns()
    assert "event" not in plan.table_columns()
    with pytest.raises(SchemaError, match="Delta cannot partition by a struct or array"):
        make_plan("sparkplug", None, partition_by=("long_array",))
    with pytest.raises(SchemaError, match="no such column"):
        make_plan("sparkplug", None, partition_by=("site",))
    with pytest.raises(SchemaError, match="--events-table goes with"):
        make_plan("json", None, events=True)


def test_cluster_columns_are_checked_like_partition_columns() -> None:
    plan = make_plan("binary", None, cluster_by=("topic", "date"))
    assert plan.cluster_by == ("topic", "date") and "date" in plan.table_columns()
    assert "date" not in make_plan("binary", None, cluster_by=("topic",)).table_columns()
    with pytest.raises(SchemaError, match="--cluster-by 'site': no such column"):
        make_plan("binary", None, cluster_by=("site",))
    with pytest.raises(SchemaError, match="--cluster-by 'long_array': Delta cannot cluster by"):
        make_plan("sparkplug", None, cluster_by=("long_array",))
