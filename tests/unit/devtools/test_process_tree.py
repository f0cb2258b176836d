"""devtools.process_tree: reading ``stat`` lines of /proc."""

from __future__ import annotations

import os
from pathlib import Path

from devtools.process_tree import processes, read_small, stat_fields


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(
    tmp_path: Path,
) -> None:
    stat = tmp_path / "stat"
    stat.write_text("4242 (a) (b c)) S 17 4242 4242 0 -1 0 0 0 0 0 31 7 0 0\n")
    fields = stat_fields(str(stat))
    assert fields is not None
    assert fields[:3] == ["S", "17", "4242"]
    assert (int(fields[11]), int(fields[12])) == (31, 7)


def test_a_file_that_is_gone_reads_as_none(tmp_path: Path) -> None:
    assert read_small(str(tmp_path / "missing")) is None
    assert stat_fields(str(tmp_path / "missing")) is None


def test_this_process_is_listed_with_its_parent_and_group() -> None:
    state, parent, group = processes()[os.getpid()]
    assert state in {"R", "S"}
    assert (parent, group) == (os.getppid(), os.getpgrp())
