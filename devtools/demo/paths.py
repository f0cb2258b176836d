"""Where one demo run keeps everything (``<data-dir>/demo``), and clearing a previous run's."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from devtools.demo.errors import DemoFailed


@dataclass(frozen=True)
class DemoPaths:
    """Where one demo run keeps everything: ``<data-dir>/demo/...``."""

    root: Path

    @property
    def table(self) -> Path:
        return self.root / "tables" / "telemetry"

    @property
    def dead_letter(self) -> Path:
        return self.root / "tables" / "telemetry_dead_letter"

    @property
    def status_table(self) -> Path:
        """With ``--routes``: the devices' status messages, a VARIANT column."""
        return self.root / "tables" / "status"

    @property
    def config(self) -> Path:
        """With ``--routes``: the job's config file with its two routes."""
        return self.root / "routes.toml"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoints" / "telemetry"

    @property
    def broker(self) -> Path:
        return self.root / "broker"

    @property
    def job_log(self) -> Path:
        return self.root / "ingest.log"

    @property
    def report(self) -> Path:
        return self.root / "report.json"


DEMO_ENTRIES = frozenset(
    {"tables", "checkpoints", "broker", "ingest.log", "report.json", "routes.toml"}
)
"""What a demo run puts directly in its directory; anything else there is not the demo's."""


def clear_previous_run(root: Path) -> bool:
    """Remove a previous run's ``root``; True when there was one.

    Refuses (DemoFailed) when ``root`` holds anything a demo run does not make, so a
    ``--data-dir`` pointing at someone's own ``demo`` folder is never wiped.
    """
    if not root.exists():
        return False
    if not root.is_dir():
        raise DemoFailed(f"{root} is not a directory: choose another --data-dir")
    foreign = sorted(p.name for p in root.iterdir() if p.name not in DEMO_ENTRIES)
    if foreign:
        raise DemoFailed(
            f"{root} holds files the demo did not make ({', '.join(foreign[:5])}): "
            "remove them or choose another --data-dir"
        )
    shutil.rmtree(root)
    return True
