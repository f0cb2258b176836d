"""System binaries the developer tools run: found on PATH or where their installers put them.

``make setup`` installs them (Debian's ``mosquitto``, ``mosquitto-clients``, ``openssl``, ...);
Debian puts the broker in ``/usr/sbin``, which is not on every user's PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from devtools.broker_process import BrokerError

_EXTRA_BIN_DIRS: tuple[str, ...] = ("/usr/sbin", "/usr/local/sbin")


class MissingToolError(BrokerError):
    """A system binary the developer tools need is not installed."""


def which(name: str, directories: Sequence[str]) -> str | None:
    """The path of binary ``name`` on PATH, else in the first of ``directories`` holding an
    executable of that name; None when there is none."""
    found = shutil.which(name)
    if found:
        return found
    for directory in directories:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_tool(name: str) -> str:
    """The path of system binary ``name`` (PATH, then the sbin directories); raises
    :class:`MissingToolError` pointing at ``make setup`` when it is not installed."""
    found = which(name, _EXTRA_BIN_DIRS)
    if found:
        return found
    where = f" or in {', '.join(_EXTRA_BIN_DIRS)}" if _EXTRA_BIN_DIRS else ""
    raise MissingToolError(f"`{name}` was not found on PATH{where}; run `make setup` to install it")


def run_tool(cmd: Sequence[str], cwd: Path | None = None) -> None:
    """Run a helper command; raises BrokerError with its output when it fails."""
    try:
        subprocess.run(list(cmd), cwd=cwd, check=True, capture_output=True, text=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        raise BrokerError(
            f"command failed ({exc.returncode}): {' '.join(cmd)}\n{exc.stdout}{exc.stderr}"
        ) from exc
