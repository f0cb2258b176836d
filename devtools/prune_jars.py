"""Delete from a folder of fetched Delta jars the artifacts Spark ships itself.

    python -m devtools.prune_jars DIR

``make setup`` runs it on ``.jars/`` after Maven's copy, and the Docker image's build on its
own copy. Which jars a session hands to Spark is the run-time rule
(:func:`streaming_jobs.spark_session.delta_jars`); this removes, once, the files that rule would
always leave out.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from streaming_jobs.spark_session import jar_artifact, spark_jar_artifacts


def prune_shipped_jars(folder: Path) -> list[Path]:
    """Delete the jars in ``folder`` whose artifact Spark ships itself, in any version: Spark's
    own class path is searched first, so they would never load. Deletes nothing when Spark's
    jars folder is not found. Returns the deleted paths."""
    shipped = spark_jar_artifacts()
    pruned = sorted(p for p in folder.glob("*.jar") if jar_artifact(p.name) in shipped)
    for path in pruned:
        path.unlink()
    return pruned


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m devtools.prune_jars DIR\n")
        return 2
    folder = Path(argv[0])
    removed = prune_shipped_jars(folder)
    kept = len(list(folder.glob("*.jar")))
    sys.stderr.write(f"{folder}: removed {len(removed)} jars Spark ships, kept {kept}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
