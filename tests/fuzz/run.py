"""Drive the fuzz targets: atheris for a time budget per target, then the property-based
(hypothesis) fuzz tests with a large example budget; write the counts of inputs tried to
``bench/results/fuzz.json`` as a flat dict.

    python -m tests.fuzz.run --seconds 60 --hypothesis-examples 20000

Corpora grow under ``build/fuzz/corpus/<target>`` (seeded from each target's ``seeds()``);
a failing input is written to ``build/fuzz/artifacts/`` and the run exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

TARGETS = ("decoder", "session", "sparkplug", "wal")
ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "fuzz"


def seed_corpus(target: str) -> Path:
    corpus = BUILD / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    module = importlib.import_module(f"tests.fuzz.{target}_target")
    for index, seed in enumerate(module.seeds()):
        path = corpus / f"seed-{index:04d}"
        if not path.exists():
            path.write_bytes(seed)
    return corpus


def run_atheris(target: str, seconds: int) -> tuple[int, bool, str]:
    """Inputs tried, whether the target held, and the tail of the output."""
    corpus = seed_corpus(target)
    artifacts = BUILD / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "tests.fuzz.atheris_main", target, str(corpus),
        f"-max_total_time={seconds}", "-print_final_stats=1", "-timeout=20",
        "-rss_limit_mb=4096", f"-artifact_prefix={artifacts}/{target}-",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    found = re.search(r"stat::number_of_executed_units:\s*(\d+)", output)
    inputs = int(found.group(1)) if found else 0
    tail = "\n".join(line for line in output.splitlines()[-40:] if "# Uses" not in line)
    return inputs, done.returncode == 0, tail


def run_hypothesis(examples: int) -> tuple[int, bool]:
    """Examples tried by the hypothesis tests whose name contains 'fuzz' under tests/unit.
    The suite's per-test timeout is off: a large example budget takes minutes per test."""
    env = {**os.environ, "FUZZ_EXAMPLES": str(examples)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit",
         "-k", "fuzz", "--hypothesis-show-statistics", "--timeout=0"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    log = BUILD / "hypothesis.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(done.stdout + done.stderr)
    summary = [line for line in done.stdout.splitlines() if "passing" in line or "::" in line]
    print("\n".join(summary[-20:]), done.stdout.splitlines()[-1:], f"(full output: {log})")
    # "- 20000 passing, 0 failing, and 541 invalid test cases", one line per phase and test
    tried = sum(
        int(n) + int(f) + int(i)
        for n, f, i in re.findall(r"(\d+) passing, (\d+) failing, and (\d+) invalid", done.stdout)
    )
    return tried, done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="atheris time per target")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--hypothesis-examples", type=int, default=20000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz.json"))
    args = parser.parse_args(argv)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print(
            "atheris is not installed: pip install -e '.[fuzz]' (make fuzz does)", file=sys.stderr
        )
        return 2

    results: dict[str, object] = {}
    counts: list[int] = []  # the *_inputs values, for their total
    failed: list[str] = []
    started = time.monotonic()
    for target in args.targets.split(","):
        inputs, held, tail = run_atheris(target, args.seconds)
        results[f"{target}_inputs"] = inputs
        counts.append(inputs)
        print(f"fuzz {target}: {inputs} inputs in {args.seconds} s: {'ok' if held else 'FAILED'}")
        if not held or not inputs:
            failed.append(target)
            print(tail, file=sys.stderr)
    if args.hypothesis_examples:
        tried, held = run_hypothesis(args.hypothesis_examples)
        results["hypothesis_inputs"] = tried
        counts.append(tried)
        print(f"fuzz hypothesis: {tried} examples: {'ok' if held else 'FAILED'}")
        if not held:
            failed.append("hypothesis")
    results["total_inputs"] = sum(counts)
    results["seconds_per_target"] = args.seconds
    results["failures"] = len(failed)
    results["engine"] = "atheris " + _version("atheris")
    results["python"] = platform.python_version()
    results["cpus"] = os.cpu_count() or 0
    results["wall_seconds"] = round(time.monotonic() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out)
    print(f"wrote {out}: {results}")
    if failed:
        print(f"fuzz: findings in {', '.join(failed)} (inputs in {BUILD / 'artifacts'})")
        return 1
    return 0


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
