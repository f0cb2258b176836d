"""The product as a user deploys it, in processes of its own: the project's wheel, fresh
virtualenvs, and Spark JVMs started with ``spark-class`` (a standalone master and worker, or
any other Spark server).

* :func:`build_wheel` runs ``pip wheel --no-deps`` on a copy of the repository's files (what
  git tracks, plus untracked files it does not ignore), so a build writes nothing into the
  working tree.
* :meth:`FreshVenv.create` makes a virtualenv that sees the project virtualenv's packages
  (PySpark, pyarrow, delta-spark, ...) through one ``.pth`` line, but not the project itself:
  paths a ``.pth`` file adds are put on ``sys.path`` without their own ``.pth`` files being
  read, so the editable install's ``.pth`` never runs there. Wheels given to it are installed
  into its own site-packages, offline; ``without`` leaves packages out (delta-spark, say).
* :class:`SparkProcess` runs one command (``spark-class <main class> ...``, ``spark-submit
  ...``) in a process group of its own with its output in a log file, in an environment
  (:func:`clean_env`) that finds Spark in the project virtualenv's PySpark and keeps it on
  loopback; :meth:`SparkProcess.stop` ends the group and those its descendants made.
* :class:`StandaloneCluster` is a master and one worker on free loopback ports, started once
  the worker has registered with the master.

Which Python runs a Python data source: Spark 4.2 runs all of its code (``format(...)``'s
lookup, planning and the streaming source runner on the driver, the partition reads on the
executors) with the Python the driver JVM's environment names, ``PYSPARK_DRIVER_PYTHON``, else
``PYSPARK_PYTHON`` (``PythonUtils.defaultPythonExec``), whatever ``spark.pyspark.python`` says,
and without the files of ``--py-files``. Pass those variables to :meth:`SparkProcess.start`.

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from devtools import REPO_ROOT
from devtools.broker_process import LOOPBACK, free_port
from devtools.process_tree import alive_in, process_groups
from tests.support.waiting import wait_until

DIST_NAME = "mqtt-lakehouse-connector"
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
"""The project virtualenv's site-packages: PySpark and the other dependencies."""
SPARK_HOME = Path(SITE_PACKAGES / "pyspark")
"""The pip-installed PySpark is Spark's home: ``bin/``, ``jars/``, the launcher scripts."""
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
"""Spark's own launcher, not the virtualenv's ``bin/spark-submit``, which ``make setup`` makes
default ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to the project virtualenv's Python."""
BUILD_TIMEOUT = 180.0
START_TIMEOUT = 180.0
"""A JVM's start on a busy two-core machine."""
STOP_TIMEOUT = 30.0
LOG_TAIL = 6_000
SCRUBBED_ENV = (
    "PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS",
    "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_CONF_DIR", "MQTT_USERNAME",
    "MQTT_PASSWORD",
)  # fmt: skip
"""Variables of this process's environment a child does not inherit: they would reach into
the project's sources or pick Spark's Pythons (local sessions of this process set
``PYSPARK_PYTHON`` to the project virtualenv's); a child gets a Python only when it is told."""


def tail(path: Path, chars: int = LOG_TAIL) -> str:
    """The end of a log file ('' when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return text if len(text) <= chars else "[...]\n" + text[-chars:]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without :data:`SCRUBBED_ENV`, with Spark found at
    :data:`SPARK_HOME` and bound to loopback, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    spark = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": LOOPBACK}
    return {**env, **spark, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def run_checked(
    args: Sequence[str | Path], cwd: Path, timeout: float = BUILD_TIMEOUT, **env: str
) -> str:
    """Run a command to completion; its stdout, or AssertionError with its output."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env=clean_env(**env), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited with {done.returncode}:\n"
            f"--- stdout\n{done.stdout[-LOG_TAIL:]}\n--- stderr\n{done.stderr[-LOG_TAIL:]}"
        )
    return done.stdout


def source_files() -> list[str]:
    """The repository's files a checkout has: tracked, and untracked but not ignored."""
    listed = run_checked(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO_ROOT
    )
    return sorted(name for name in listed.split("\0") if name and (REPO_ROOT / name).is_file())


def build_wheel(out_dir: Path) -> Path:
    """Build the project's wheel into ``out_dir`` from a copy of its sources; its path.

    Offline: the build runs without isolation, with the setuptools and wheel of the project
    virtualenv (its dev extra), and ``--check-build-dependencies`` fails it when those do not
    meet ``[build-system] requires``."""
    source = out_dir / "source"
    for name in source_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    wheels = out_dir / "dist"
    run_checked(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
         "--check-build-dependencies", "--disable-pip-version-check", "-w", wheels, source],
        out_dir,
    )  # fmt: skip
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == 1, f"expected one wheel in {wheels}, found {built}"
    return built[0]


@dataclass(frozen=True)
class FreshVenv:
    """A virtualenv with the project virtualenv's packages on its path, not the project."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        return self.root / "lib" / version / "site-packages"

    @classmethod
    def create(
        cls, root: Path, wheels: Sequence[Path] = (), without: Sequence[str] = ()
    ) -> FreshVenv:
        """A new virtualenv at ``root`` (without pip of its own: the project virtualenv's
        serves), with ``wheels`` installed without their dependencies and without an index.

        ``without``: glob patterns of entries of the project virtualenv's site-packages to
        leave out (``"delta", "delta_spark-*"``): its ``.pth`` line then names a folder of
        links to the other entries instead of the site-packages itself."""
        run_checked([sys.executable, "-m", "venv", "--without-pip", root], root.parent)
        venv = cls(root)
        assert venv.site_packages.is_dir(), f"no {venv.site_packages}"
        shared = SITE_PACKAGES
        if without:
            shared = root / "project-site-packages"
            shared.mkdir()
            for entry in SITE_PACKAGES.iterdir():
                if not any(fnmatch.fnmatch(entry.name, pattern) for pattern in without):
                    (shared / entry.name).symlink_to(entry)
        (venv.site_packages / "project-venv.pth").write_text(f"{shared}\n")
        if wheels:
            venv.install(wheels)
        return venv

    def install(self, wheels: Sequence[Path]) -> None:
        """Install ``wheels`` into this virtualenv only: no dependencies, no index, and
        ``--ignore-installed`` so that pip never uninstalls the project's editable install,
        which it can see through the ``.pth`` line."""
        self.run(
            "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
            "--disable-pip-version-check", "--no-warn-script-location", *wheels,
        )  # fmt: skip

    def run(self, *args: str | Path, timeout: float = BUILD_TIMEOUT, **env: str) -> str:
        """Run this virtualenv's Python with ``args`` in its root directory (not the
        repository: a script's directory or the working directory goes on ``sys.path``)."""
        return run_checked([self.python, *args], self.root, timeout, **env)

    def run_script(self, code: str, *args: str, timeout: float = BUILD_TIMEOUT, **env: str) -> Any:
        """Run ``code`` (dedented) with this virtualenv's Python; the JSON it prints last."""
        script = self.root / "check.py"
        script.write_text(textwrap.dedent(code))
        out = self.run(script, *args, timeout=timeout, **env)
        return json.loads(out.strip().splitlines()[-1])

    def unmet_requirements(
        self, dist_name: str = DIST_NAME, extras: Sequence[str] = ()
    ) -> list[list[str | None]]:
        """The requirements of ``dist_name`` as installed here (with ``extras``) that the
        versions on this virtualenv's path do not meet, as ``[requirement, found]`` pairs."""
        return list(
            self.run_script(
                """
                import json, sys
                from importlib import metadata
                from packaging.requirements import Requirement

                site, name, extras = sys.argv[1], sys.argv[2], sys.argv[3:]
                (dist,) = [d for d in metadata.distributions(path=[site])
                           if d.metadata["Name"] == name]
                unmet = []
                for line in dist.requires or []:
                    req = Requirement(line)
                    wanted = req.marker is None or any(
                        req.marker.evaluate({"extra": e}) for e in ["", *extras])
                    if not wanted:
                        continue
                    try:
                        found = metadata.version(req.name)
                    except metadata.PackageNotFoundError:
                        found = None
                    if found is None or not req.specifier.contains(found, prereleases=True):
                        unmet.append([line, found])
                print(json.dumps(unmet))
                """,
                str(self.site_packages),
                dist_name,
                *extras,
            )
        )


@dataclass
class SparkProcess:
    """One process (a Spark JVM and whatever it starts) in a process group of its own."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        command: Sequence[str | Path],
        log_dir: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SparkProcess:
        """Start ``command`` with stdout and stderr in ``<log_dir>/<name>.log``, in ``cwd``
        (default ``log_dir``), with :func:`clean_env` plus ``env``."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [str(c) for c in command], cwd=cwd or log_dir, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=clean_env(**(env or {})),
                start_new_session=True,
            )  # fmt: skip
        return cls(name, proc, log_path)

    def logs(self) -> str:
        return f"--- {self.name} ({self.log_path})\n{tail(self.log_path)}"

    def alive_or_fail(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(f"{self.name} exited with {code}:\n{self.logs()}")

    def wait(self, timeout: float) -> int:
        """Its exit status once it ends by itself; AssertionError with its log at the deadline."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still runs after {timeout} s:\n{self.logs()}"
            ) from None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM to its process group, SIGKILL when it outlives ``timeout``; then SIGKILL to
        every process group its descendants used (PySpark's daemons make their own) and wait
        until none of their processes is left."""
        groups = process_groups(self.proc.pid) | {self.proc.pid}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        groups |= process_groups(self.proc.pid)
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.proc.wait(timeout=timeout)
        wait_until(
            lambda: not alive_in(groups), timeout,
            message=lambda: f"processes of {self.name} outlive SIGKILL: {alive_in(groups)}",
        )  # fmt: skip


def spark_class(main_class: str, *args: str | int | Path) -> list[str]:
    """The command that runs one of Spark's JVM main classes (``bin/spark-class``)."""
    return [str(SPARK_CLASS), main_class, *map(str, args)]


def http_json(url: str, timeout: float = 2.0) -> Any:
    """GET ``url`` (a loopback address, without any proxy); its JSON body."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as response:
        return json.loads(response.read())


class StandaloneCluster:
    """A Spark standalone master and one worker, each a JVM of its own on loopback.

    ``executor_python`` is the Python the worker's executors run (``spark.pyspark.python``
    of the applications submitted to it): pass it to spark-submit with :meth:`submit_conf`.
    The worker keeps its executors' directories in ``<base>/worker``."""

    def __init__(self, base: Path, cores: int = 1, memory: str = "1g") -> None:
        self.base = base
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_webui_port = free_port()
        self.work_dir = base / "worker"
        self.cores = cores
        self.memory = memory
        self.processes: list[SparkProcess] = []

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def status_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}/json/"

    def status(self) -> dict[str, Any]:
        """The master's status page (``/json/``): workers, applications; {} while it is down."""
        try:
            return dict(http_json(self.status_url))
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        workers = self.status().get("workers", [])
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        """Start the master, then the worker; return once the worker has registered."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        master = SparkProcess.start(
            "spark-master",
            spark_class("org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                        "--port", self.port, "--webui-port", self.webui_port),
            self.base,
        )  # fmt: skip
        self.processes.append(master)
        worker = SparkProcess.start(
            "spark-worker",
            spark_class("org.apache.spark.deploy.worker.Worker", self.url, "--host", LOOPBACK,
                        "--work-dir", self.work_dir, "--cores", self.cores,
                        "--memory", self.memory, "--webui-port", self.worker_webui_port),
            self.base,
            cwd=self.work_dir,
        )  # fmt: skip
        self.processes.append(worker)

        def registered() -> bool:
            for process in self.processes:
                process.alive_or_fail()
            return self.alive_workers() >= 1

        wait_until(
            registered, timeout, interval=0.2,
            message=lambda: "no worker registered with the master\n" + self.logs(),
        )  # fmt: skip
        return self

    def logs(self) -> str:
        return "\n".join(p.logs() for p in self.processes)

    def stop(self) -> None:
        """Stop the worker (and its executors), then the master."""
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
