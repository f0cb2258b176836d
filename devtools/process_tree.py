"""The process groups of a job and its descendants, read from ``/proc`` (Linux).

A Spark job is more than one process group: PySpark's worker daemons put themselves and their
forked workers in groups of their own (``os.setpgid(0, 0)``), so stopping a job for good means
signalling every group its descendants use.
"""

from __future__ import annotations

import os


def read_small(path: str) -> bytes | None:
    """The first 4 KiB of a ``/proc`` file, or None once its process is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(path: str) -> list[str] | None:
    """The fields of a ``stat`` file after ``pid (comm)``: state, ppid, pgrp, ... (proc(5);
    utime and stime are [11] and [12]), or None once the process is gone."""
    data = read_small(path)
    if data is None:
        return None
    text = data.decode(errors="replace")
    return text[text.rindex(")") + 2 :].split()  # comm may hold spaces and parentheses


def processes() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, parent pid, process group) of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(f"/proc/{entry}/stat")):
            found[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
    return found


def process_groups(root: int) -> set[int]:
    """Process groups of ``root`` and its descendants, never the caller's own group."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (_, parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    groups, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            groups.add(table[pid][2])
        todo.extend(children.get(pid, []))
    groups.discard(os.getpgrp())
    return groups


def alive_in(groups: set[int]) -> list[int]:
    """Live (non-zombie) processes of the process groups ``groups``."""
    return [
        pid for pid, (state, _, group) in processes().items() if group in groups and state != "Z"
    ]


def process_figures(root: int) -> dict[str, int]:
    """RSS (KiB) of the JVM and of the Python processes, open fds and threads of every
    process of the job's process groups."""
    groups = process_groups(root)
    figures = {"jvm_rss_kib": 0, "python_rss_kib": 0, "fds": 0, "threads": 0}
    for pid, (state, _, group) in processes().items():
        status = read_small(f"/proc/{pid}/status")
        if group not in groups or state == "Z" or status is None:
            continue
        fields = dict(
            line.split(":", 1)
            for line in status.decode(errors="replace").splitlines()
            if ":" in line
        )
        rss = int(fields.get("VmRSS", "0 kB").split()[0])
        java = (read_small(f"/proc/{pid}/comm") or b"").strip() == b"java"
        figures["jvm_rss_kib" if java else "python_rss_kib"] += rss
        figures["threads"] += int(fields.get("Threads", "0"))
        try:
            figures["fds"] += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return figures
