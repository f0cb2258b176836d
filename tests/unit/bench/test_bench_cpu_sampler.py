"""bench.cpu_sampler on a procfs tree written to a directory: components and the JVM's rest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.cpu_sampler import CLOCK_TICKS, CpuSampler, classify_process, classify_thread

ME = os.getpid()
JVM, RUNNER, MOSQUITTO, FOREIGN = 900_001, 900_002, 900_003, 900_004


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int = 0) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    return f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n"


def _process(proc: Path, pid: int, comm: str, ppid: int, cmdline: list[str], ticks: int) -> None:
    (proc / str(pid)).mkdir(exist_ok=True)
    (proc / str(pid) / "stat").write_text(_stat(pid, comm, ppid, ticks))
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")


def _thread(proc: Path, pid: int, tid: int, name: str, ticks: int) -> None:
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "stat").write_text(_stat(tid, name, pid, ticks))
    (task / "comm").write_text(name + "\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text("cpu  3000 0 1000 50000 100 0 0 0 0 0\ncpu0 1 2 3 4 5\n")
    _process(tmp_path, ME, "python", 1, ["python", "-m", "bench.ingest"], 40)
    java = ["/usr/lib/jvm/bin/java", "-cp", "jars", "org.apache.spark.deploy.SparkSubmit"]
    _process(tmp_path, JVM, "java", ME, java, 700)
    _thread(tmp_path, JVM, JVM, "java", 150)
    _thread(tmp_path, JVM, JVM + 10, "Executor task l", 200)
    _thread(tmp_path, JVM, JVM + 11, "C2 CompilerThre", 300)
    _thread(tmp_path, JVM, JVM + 12, "block-manager-a", 50)
    runner = ["python", "-m", "pyspark.sql.streaming.python_streaming_source_runner"]
    _process(tmp_path, RUNNER, "python", JVM, runner, 80)
    _process(tmp_path, MOSQUITTO, "mosquitto", ME, ["mosquitto", "-c", "broker.conf"], 60)
    _process(tmp_path, FOREIGN, "sshd", 1, ["sshd"], 5000)
    return tmp_path


def _seconds(ticks: int) -> float:
    return ticks / CLOCK_TICKS


def test_a_sample_groups_processes_and_the_jvm_threads(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    totals = sampler.samples[-1][1]
    assert totals["jvm: task threads"] == pytest.approx(_seconds(200))
    assert totals["jvm: JIT compiler"] == pytest.approx(_seconds(300))
    # The JVM's other threads are its total minus the named groups: 700 - 200 - 300.
    assert totals["jvm: other threads"] == pytest.approx(_seconds(200))
    assert totals["python: source runner (receiver, offsets, partitions)"] == pytest.approx(
        _seconds(80)
    )
    assert totals["mosquitto"] == pytest.approx(_seconds(60))
    # The foreign process is not ours; the machine's busy time minus ours is.
    ours = sum(v for k, v in totals.items() if k != "not ours (other processes)")
    assert totals["not ours (other processes)"] == pytest.approx(_seconds(4000) - ours)


def test_hypervisor_steal_counts_as_not_ours_and_guest_time_once(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    # user nice system idle iowait irq softirq steal guest guest_nice: 300 ticks of steal more,
    # and 500 of guest time, which the kernel already counts in user.
    (proc / "stat").write_text("cpu  3500 0 1000 50000 100 0 0 300 500 0\n")
    sampler.sample()
    first, last = sampler.samples[0][1], sampler.samples[1][1]
    others = last["not ours (other processes)"] - first["not ours (other processes)"]
    assert others == pytest.approx(_seconds(800))


def test_only_named_threads_are_read_after_the_first_sample(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    # An unnamed thread's stat is never read: break it, the sample still works.
    (proc / str(JVM) / "task" / str(JVM + 12) / "stat").write_text("garbage")
    _thread(proc, JVM, JVM + 10, "Executor task l", 260)
    (proc / str(JVM) / "stat").write_text(_stat(JVM, "java", ME, 800))
    sampler.sample()
    first, last = sampler.samples[0][1], sampler.samples[1][1]
    assert last["jvm: task threads"] - first["jvm: task threads"] == pytest.approx(_seconds(60))
    assert last["jvm: other threads"] - first["jvm: other threads"] == pytest.approx(_seconds(40))


def test_an_exited_named_thread_keeps_its_time_in_its_group(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    for name in ("stat", "comm"):
        (proc / str(JVM) / "task" / str(JVM + 11) / name).unlink()
    (proc / str(JVM) / "task" / str(JVM + 11)).rmdir()
    sampler.sample()
    seconds, cpu = sampler.window(sampler.samples[0][0], sampler.samples[1][0])
    assert seconds == pytest.approx(sampler.samples[1][0] - sampler.samples[0][0])
    assert cpu["jvm: JIT compiler"] == 0
    assert cpu["jvm: other threads"] == 0


def test_a_process_that_appears_later_is_counted_from_its_first_sample(proc: Path) -> None:
    sampler = CpuSampler(proc=str(proc))
    sampler.sample()
    worker = ["python", "-m", "pyspark.daemon", "pyspark.worker"]
    _process(proc, 900_005, "python", JVM, worker, 30)
    sampler.sample()
    assert sampler.samples[0][1]["python: task workers (read)"] == 0
    assert sampler.samples[1][1]["python: task workers (read)"] == pytest.approx(_seconds(30))


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("Executor task l", "jvm: task threads"),
        ("C1 CompilerThre", "jvm: JIT compiler"),
        ("GC Thread#0", "jvm: GC"),
        ("G1 Refine#0", "jvm: GC"),
        ("stream executio", "jvm: stream execution"),
        ("block-manager-a", "jvm: other threads"),
    ],
)
def test_jvm_threads_are_grouped_by_name(name: str, group: str) -> None:
    assert classify_thread(name) == group


@pytest.mark.parametrize(
    ("cmdline", "component"),
    [
        (
            "python -m pyspark.sql.streaming.python_streaming_source_runner",
            "python: source runner (receiver, offsets, partitions)",
        ),
        ("python -m pyspark.daemon pyspark.worker", "python: task workers (read)"),
        ("/usr/sbin/mosquitto -c broker.conf", "mosquitto"),
        ("/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit", "jvm"),
        ("/bin/sh -c true", "other descendants"),
    ],
)
def test_processes_are_grouped_by_command_line(cmdline: str, component: str) -> None:
    assert classify_process(cmdline, is_me=False) == component
    assert classify_process(cmdline, is_me=True) == "driver Python process (foreachBatch, Py4J)"
