"""bench.cpu_sampler on a procfs tree written to a directory: components, the JVM's rest, steal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.cpu_sampler import CLOCK_TICKS, CpuSampler, classify_process, classify_thread

ME = os.getpid()
JVM, RUNNER, FOREIGN = 900_001, 900_002, 900_004


def _stat(pid: int, comm: str, ppid: int, ticks: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    return f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n"


def _process(proc: Path, pid: int, ppid: int, cmdline: str, ticks: int) -> None:
    (proc / str(pid)).mkdir(exist_ok=True)
    (proc / str(pid) / "stat").write_text(_stat(pid, "x", ppid, ticks))
    (proc / str(pid) / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")


def _thread(proc: Path, tid: int, name: str, ticks: int) -> None:
    task = proc / str(JVM) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "stat").write_text(_stat(tid, name, JVM, ticks))
    (task / "comm").write_text(name + "\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text("cpu  3000 0 1000 50000 100 0 0 0 0 0\n")
    _process(tmp_path, ME, 1, "python -m bench.ingest", 40)
    _process(tmp_path, JVM, ME, "/usr/bin/java -cp j org.apache.spark.deploy.SparkSubmit", 700)
    _thread(tmp_path, JVM + 10, "Executor task l", 200)
    _thread(tmp_path, JVM + 11, "C2 CompilerThre", 300)
    _thread(tmp_path, JVM + 12, "block-manager-a", 50)
    _process(tmp_path, RUNNER, JVM, "python -m x.python_streaming_source_runner", 80)
    _process(tmp_path, FOREIGN, 1, "sshd", 5000)
    return tmp_path


def test_a_sample_groups_processes_jvm_threads_and_the_rest(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    totals = sampler.samples[-1][1]
    assert totals["jvm: task threads"] == pytest.approx(200 / CLOCK_TICKS)
    # The JVM's other threads are its total minus the named groups: 700 - 200 - 300.
    assert totals["jvm: other threads"] == pytest.approx(200 / CLOCK_TICKS)
    runner = "python: source runner (receiver, offsets, partitions)"
    assert totals[runner] == pytest.approx(80 / CLOCK_TICKS)
    ours = sum(v for k, v in totals.items() if k != "not ours (other processes)")
    assert totals["not ours (other processes)"] == pytest.approx(4000 / CLOCK_TICKS - ours)
    # 300 ticks of steal more and 500 of guest time, which the kernel already counts in user;
    # an exited named thread keeps its time in its group.
    (proc / "stat").write_text("cpu  3500 0 1000 50000 100 0 0 300 500 0\n")
    for name in ("stat", "comm"):
        (proc / str(JVM) / "task" / str(JVM + 11) / name).unlink()
    sampler.sample()
    seconds, cpu = sampler.window(sampler.samples[0][0], sampler.samples[1][0])
    assert cpu["not ours (other processes)"] == pytest.approx(800 / CLOCK_TICKS, abs=0.02)
    assert cpu["jvm: JIT compiler"] == 0 and seconds >= 0


def test_components_by_command_line_and_thread_name() -> None:
    assert classify_process("python -m pyspark.daemon", False) == "python: task workers (read)"
    assert classify_process("/usr/sbin/mosquitto -c b.conf", False) == "mosquitto"
    assert classify_process("/bin/sh -c true", False) == "other descendants"
    assert classify_process("/bin/sh", True) == "driver Python process (foreachBatch, Py4J)"
    assert classify_thread("G1 Refine#0") == "jvm: GC"
    assert classify_thread("stream executio") == "jvm: stream execution"
    assert classify_thread("block-manager-a") == "jvm: other threads"
