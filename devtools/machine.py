"""What a measurement ran on, for the benchmarks' results and the chaos run's tally."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from devtools import REPO_ROOT
from devtools.system_tools import which

_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin")


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.processor() or "unknown"


def mosquitto_version() -> str | None:
    """Version of the installed ``mosquitto`` broker, e.g. ``"2.0.11"``."""
    binary = which("mosquitto", _SBIN_DIRS)
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"mosquitto version (\S+)", done.stdout + done.stderr)
    return match.group(1) if match else None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git_revision() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "mosquitto": mosquitto_version(),
        "paho_mqtt": package_version("paho-mqtt"),
        "git_revision": _git_revision(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
