"""CPU time of a Spark peer's run per component, sampled from ``/proc`` in a thread: the stat
line of each process of ours and, in the driver JVM, only the threads of the named groups."""

from __future__ import annotations

import os
import re
import threading
import time

from devtools.process_tree import read_small, stat_fields

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OTHER_JVM_THREADS = "jvm: other threads"
JVM_THREADS = (
    ("jvm: task threads", re.compile(r"^Executor task")),
    ("jvm: JIT compiler", re.compile(r"Compiler")),
    ("jvm: GC", re.compile(r"^(GC Thread|G1 |VM Thread|VM Periodic)")),
    ("jvm: stream execution", re.compile(r"^stream exec")),
)
COMPONENTS = (
    "jvm: task threads", "jvm: stream execution", "jvm: JIT compiler", "jvm: GC",
    OTHER_JVM_THREADS, "python: source runner (receiver, offsets, partitions)",
    "python: task workers (read)", "mosquitto", "driver Python process (foreachBatch, Py4J)",
    "bench: this CPU sampler", "other descendants", "not ours (other processes)",
)  # fmt: skip
"""By process (this one's descendants) and, in the JVM, by thread name (its first 15
characters); ``not ours``: the machine's busy time minus ours (others, kernel, steal)."""
NOT_THE_PIPELINE = frozenset({"bench: this CPU sampler", "not ours (other processes)"})


def stat_ticks(path: str) -> tuple[int, int] | None:
    """(parent pid, user + system clock ticks) from a ``stat`` file, or None."""
    fields = stat_fields(path)
    return None if fields is None else (int(fields[1]), int(fields[11]) + int(fields[12]))


def classify_process(cmdline: str, is_me: bool) -> str:
    """The component of a descendant process, from its command line."""
    if is_me:
        return "driver Python process (foreachBatch, Py4J)"
    if "python_streaming_source_runner" in cmdline:
        return "python: source runner (receiver, offsets, partitions)"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python: task workers (read)"
    if "mosquitto" in cmdline:
        return "mosquitto"
    if cmdline.split(" ", 1)[0].endswith("/java") and "SparkSubmit" in cmdline:
        return "jvm"
    return "other descendants"


def classify_thread(name: str) -> str:
    """The component of a driver JVM thread, from its name."""
    return next((group for group, rx in JVM_THREADS if rx.search(name)), OTHER_JVM_THREADS)


class CpuSampler:
    """CPU time of this process's descendants by COMPONENTS, and the machine's, in a thread."""

    def __init__(self, interval: float = 0.25, proc: str = "/proc") -> None:
        self.interval = interval
        self.proc = proc
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.own_cpu = 0.0
        self._last: dict[tuple[str, int], tuple[str, int]] = {}  # (kind, id) -> component, ticks
        self._kind: dict[int, str] = {}
        self._foreign: set[int] = set()  # pids that are not descendants: never read again
        self._threads: dict[int, str] = {}  # JVM thread id -> component
        self._named: dict[int, set[int]] = {}  # JVM pid -> ids of its threads in named groups
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _component(self, pid: int, me: int) -> str:
        kind = self._kind.get(pid)
        if kind is None:
            raw = read_small(f"{self.proc}/{pid}/cmdline") or b""
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
            kind = self._kind[pid] = classify_process(cmdline, pid == me)
        return kind

    def _jvm(self, pid: int, ticks: int) -> None:
        """The JVM's named-group threads, and its other threads as the rest of its total."""
        task = f"{self.proc}/{pid}/task"
        try:
            tids = os.listdir(task)
        except OSError:
            return
        named = self._named.setdefault(pid, set())
        for tid in map(int, tids):
            group = self._threads.get(tid)
            if group is None:
                raw = read_small(f"{task}/{tid}/comm") or b""
                group = self._threads[tid] = classify_thread(raw.decode(errors="replace").strip())
                if group != OTHER_JVM_THREADS:
                    named.add(tid)
            if group == OTHER_JVM_THREADS:
                continue
            found = stat_ticks(f"{task}/{tid}/stat")
            if found is not None:
                self._last[("tid", tid)] = (group, found[1])
        in_groups = sum(self._last[("tid", tid)][1] for tid in named if ("tid", tid) in self._last)
        self._last[("jvm", pid)] = (OTHER_JVM_THREADS, max(0, ticks - in_groups))

    def _system_busy(self) -> int:
        """Busy clock ticks of all CPUs since boot (guest time is inside user and nice)."""
        raw = read_small(f"{self.proc}/stat") or b"cpu 0 0 0 0 0"
        values = [int(v) for v in raw.split(b"\n", 1)[0].split()[1:9]]
        return sum(values) - values[3] - values[4]

    def sample(self) -> None:
        began = time.thread_time()
        me = os.getpid()
        parents: dict[int, int] = {}
        ticks: dict[int, int] = {}
        for entry in os.listdir(self.proc):
            if not entry.isdigit() or int(entry) in self._foreign:
                continue
            if found := stat_ticks(f"{self.proc}/{entry}/stat"):
                parents[int(entry)], ticks[int(entry)] = found
        busy = self._system_busy()
        for pid in ticks:
            ancestor = pid
            while ancestor != me and ancestor in parents:
                ancestor = parents[ancestor]
            if ancestor != me:
                self._foreign.add(pid)  # a process never becomes our descendant later
                continue
            component = self._component(pid, me)
            if component == "jvm":
                self._jvm(pid, ticks[pid])
            else:
                self._last[("pid", pid)] = (component, ticks[pid])
        totals = dict.fromkeys(COMPONENTS, 0.0)
        for component, value in self._last.values():
            totals[component] += value / CLOCK_TICKS
        totals["driver Python process (foreachBatch, Py4J)"] -= self.own_cpu
        totals["bench: this CPU sampler"] = self.own_cpu
        ours = sum(totals.values())
        totals["not ours (other processes)"] = busy / CLOCK_TICKS - ours
        self.samples.append((time.time(), totals))
        self.own_cpu += time.thread_time() - began

    def window(self, start: float, end: float) -> tuple[float, dict[str, float]]:
        """Seconds covered and CPU seconds per component from ``start`` to ``end``."""
        before = [s for s in self.samples if s[0] <= start] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= end] or self.samples[-1:]
        (t0, first), (t1, last) = before[-1], after[0]
        return t1 - t0, {c: max(0.0, last[c] - first[c]) for c in COMPONENTS}
