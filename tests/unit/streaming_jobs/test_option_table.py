"""The table of source options and the table of job flags are the one definition: the parser,
the job's flags and config keys, and ``docs/options.md`` all follow them."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import cast

import pytest

from connector.options.source import InvalidOptionError, SourceOptions
from connector.options.table import KNOWN_OPTIONS, OPTIONS, Option
from connector.spark.writer.options import SinkOptions
from streaming_jobs import ingest_flags
from streaming_jobs.ingest_config import (
    CLI_ONLY,
    IngestConfig,
    UsageError,
    _actions,
    build_parser,
    flag_names,
    parse_config,
)
from streaming_jobs.ingest_flags import FLAGS
from streaming_jobs.routes import ROUTES_KEY

REPO_ROOT = Path(__file__).resolve().parents[3]
OPTIONS_DOC = REPO_ROOT / "docs" / "options.md"
BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "a/#"}
JOB = ["--broker", "tcp://127.0.0.1:1883", "--topic", "a/#", "--table", "t", "--checkpoint", "c"]


def test_docs_options_md_is_generated_from_the_tables() -> None:
    assert OPTIONS_DOC.read_text() == ingest_flags.markdown(), (
        "docs/options.md differs from the tables: run "
        "`python -m streaming_jobs.ingest_flags > docs/options.md`"
    )


def test_the_doc_lists_every_option_and_flag_with_its_default() -> None:
    doc = OPTIONS_DOC.read_text()
    for row in OPTIONS.values():
        line = next(line for line in doc.splitlines() if line.startswith(f"| `{row.name}` |"))
        assert row.default_text.replace("|", "\\|") in line
    for flag in FLAGS:
        line = next(line for line in doc.splitlines() if line.startswith(f"| {flag.synopsis} |"))
        assert (flag.default_text or "—") in line


def test_known_options_are_the_table_rows() -> None:
    assert tuple(OPTIONS) == KNOWN_OPTIONS
    assert len(set(map(str.lower, KNOWN_OPTIONS))) == len(KNOWN_OPTIONS)


def test_source_defaults_are_the_table_defaults() -> None:
    parsed = SourceOptions.parse(BASE)
    fields = {f.name: f.default for f in dataclasses.fields(SourceOptions)}
    for field, option in [
        ("qos", "qos"),
        ("keep_alive", "keepAlive"),
        ("connect_timeout", "connectTimeout"),
        ("max_backlog_messages", "maxBacklogMessages"),
        ("records_per_partition", "recordsPerPartition"),
        ("partition_data", "partitionData"),
        ("receivers", "receivers"),
        ("fail_on_data_loss", "failOnDataLoss"),
    ]:
        # A default of None (partitionData) goes in as None, which parse reads as not given.
        raw = cast("dict[str, str]", {**BASE, option: OPTIONS[option].default})
        expected = getattr(SourceOptions.parse(raw), field)
        assert getattr(parsed, field) == fields[field] == expected


@pytest.mark.parametrize(
    "row", [r for r in OPTIONS.values() if r.low is not None], ids=lambda r: r.name
)
def test_ranges_come_from_the_table(row: Option) -> None:
    assert row.low is not None
    parse = SourceOptions.parse if row.reads else SinkOptions.parse
    base = BASE if row.reads else {"brokerUrl": BASE["brokerUrl"]}
    below = str(row.low - 1) if row.kind == "int" else str(row.low / 2 if row.low else -1)
    with pytest.raises(InvalidOptionError, match=re.escape(repr(row.name))):
        parse({**base, row.name: below})
    if row.high is not None:
        with pytest.raises(InvalidOptionError, match=re.escape(f"must be {row.bounds}")):
            parse({**base, row.name: str(int(row.high) + 1)})


def test_every_value_a_flag_offers_is_accepted_by_the_source() -> None:
    tried = []
    for flag in FLAGS:
        if flag.row is not None:
            for value in flag.values:
                text = flag.to_option(value)  # None: the flag leaves the option out
                if text is not None:
                    SourceOptions.parse({**BASE, flag.row.name: text})
                    tried.append((flag.name, value))
    # The flags with few values (--qos, --mqtt-version, ...) were all tried.
    assert {"--qos", "--mqtt-version", "--payload-format"} <= {name for name, _ in tried}, tried


def test_the_parser_has_exactly_the_table_flags_in_its_order() -> None:
    parser = build_parser()
    names = [a.option_strings[0] for a in parser._actions if a.option_strings != ["-h", "--help"]]
    assert names == [flag.name for flag in FLAGS]
    actions = {a.dest: a for a in parser._actions}
    for flag in FLAGS:
        action = actions[flag.dest]
        assert action.default == flag.initial
        assert list(action.choices or ()) == list(flag.values)
        assert isinstance(action, argparse.BooleanOptionalAction) == (flag.kind == "switch")


def test_config_keys_are_the_flags_without_dashes(tmp_path: Path) -> None:
    parser = build_parser()
    config_flags = {flag.dest for flag in FLAGS if flag.key}
    assert set(_actions(parser)) == config_flags
    assert {flag.dest for flag in FLAGS if not flag.key} | {"help"} == CLI_ONLY
    # ... and the config file's [[routes]] (streaming_jobs/routes.py), which no flag sets
    assert config_flags | {ROUTES_KEY} == {f.name for f in dataclasses.fields(IngestConfig)}
    config = tmp_path / "ingest.toml"
    for flag in FLAGS:
        if flag.key is None:
            config.write_text(f"{flag.name[2:]} = true\n")
            with pytest.raises(UsageError, match="unknown key"):
                parse_config([*JOB, "--config", str(config)], environ={})


def test_job_defaults_are_the_table_defaults() -> None:
    config, _ = parse_config(JOB, environ={})
    for flag in FLAGS:
        if flag.key and flag.kind in ("value", "switch") and not flag.required:
            assert getattr(config, flag.dest) == flag.initial, flag.name
            if flag.initial is not None:
                field = IngestConfig.__dataclass_fields__[flag.dest]
                assert field.default == flag.initial, flag.name


def test_source_option_messages_name_the_flags() -> None:
    for flag in FLAGS:
        if flag.row is not None and not flag.row.secret:
            assert flag_names(f"option '{flag.row.name}' is bad") == f"{flag.name} is bad"
    assert flag_names("option 'password' needs option 'username'") == (
        "the password needs --username"
    )
    assert flag_names("option 'topic': bad") == "--topic: bad"
