"""docker/: the Dockerfile's essentials from its text (no Docker needed), the broker config it
mounts, and ``docker compose config`` when the compose plugin is installed (it needs no engine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
COMPOSE = DOCKER_DIR / "compose.yaml"
MOSQUITTO_CONF = DOCKER_DIR / "mosquitto" / "mosquitto.conf"
COMPOSE_TIMEOUT = 60.0


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each Dockerfile instruction: continuations joined, comments
    dropped, ``${NAME}`` of ``ARG NAME=default`` substituted."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    args: dict[str, str] = {}
    result = []
    for entry in logical:
        keyword, _, rest = entry.partition(" ")
        keyword = keyword.upper()
        rest = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), rest.strip())
        if keyword == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name] = default
        result.append((keyword, " ".join(rest.split())))
    return result


def of(kind: str, parsed: list[tuple[str, str]]) -> list[str]:
    return [rest for keyword, rest in parsed if keyword == kind]


def test_dockerfile_has_the_essentials() -> None:
    parsed = instructions(DOCKERFILE.read_text())
    froms = of("FROM", parsed)
    runs = of("RUN", parsed)
    assert froms, "no FROM"
    # The runtime image (the last stage) is Debian with Python 3.11 ...
    base = froms[-1].split()[0]
    stages = {f.split()[-1]: f.split()[0] for f in froms if " AS " in f.upper()}
    runtime = base
    while runtime in stages:  # a stage built on other stages: follow them to the image
        runtime = stages[runtime]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-(slim-)?(bookworm|bullseye)", runtime), runtime
    # ... with Java 17 for Spark's JVM,
    assert any(re.search(r"apt-get install .*openjdk-17-jre", r) for r in runs), runs
    # the project installed with pip,
    assert any(re.search(r"\bpip install\b.*\.whl|\bpip install\b.* \.(\s|$)", r) for r in runs)
    # Delta's jars fetched with Maven from the project's pom at build time,
    copies = of("COPY", parsed)
    assert any(c.startswith("tools/delta-jars/pom.xml ") for c in copies), copies
    mvn = [r for r in runs if re.search(r"\bmvn\b", r)]
    assert len(mvn) == 1 and "dependency:copy-dependencies" in mvn[0], mvn
    jars_dir = re.search(r"-DoutputDirectory=(\S+)", mvn[0])
    assert jars_dir is not None
    assert any(c.endswith(f"{jars_dir.group(1)} {jars_dir.group(1)}") for c in copies), copies
    # handed to Spark through DELTA_JARS_DIR (streaming_jobs.spark_session),
    env = " ".join(of("ENV", parsed))
    assert f"DELTA_JARS_DIR={jars_dir.group(1)}" in env
    # and the ingest job as the entry point, in exec form so SIGTERM reaches it.
    entrypoint = of("ENTRYPOINT", parsed)
    assert len(entrypoint) == 1
    command = json.loads(entrypoint[0])
    assert command[-2:] == ["-m", "streaming_jobs.ingest"] or command[-1].endswith(
        "streaming_jobs/ingest.py"
    ), command
    # Everything it copies from the build context exists, and the context skips the venv.
    for copy in copies:
        if copy.startswith("--from"):
            continue
        for source in copy.split()[:-1]:
            assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".jars", "data", ".git"} <= set(ignored)


def test_broker_config_keeps_queued_messages() -> None:
    settings: dict[str, str] = {}
    for line in MOSQUITTO_CONF.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            settings.setdefault(key, value)
    assert settings["persistence"] == "true"
    assert int(settings["max_queued_messages"]) >= 100_000  # Mosquitto's default is 1000
    assert settings["max_queued_bytes"] == "0"
    assert settings["listener"] == "1883"


def compose_config() -> dict:
    """``docker compose config`` of docker/compose.yaml as a dict, volumes as
    ``{"source", "target"}`` dicts. Uses the compose plugin when it works, else the standalone
    ``docker-compose`` that ``make setup`` installs from Debian next to a docker client (its
    ``config`` prints YAML, parsed with the interpreter that runs it); skips without docker."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("the docker command is not installed")
    plugin = run([docker, "compose", "version"])
    if plugin.returncode == 0:
        done = run([docker, "compose", "-f", str(COMPOSE), "config", "--format", "json"])
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    standalone = shutil.which("docker-compose")
    assert standalone is not None, (
        "docker is installed but neither `docker compose` nor "
        "`docker-compose` works: `make setup` installs docker-compose"
    )
    done = run([standalone, "-f", str(COMPOSE), "config"])
    assert done.returncode == 0, done.stderr
    interpreter = Path(standalone).read_text().splitlines()[0].removeprefix("#!").split()
    as_json = run(
        [
            *interpreter,
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ],
        stdin=done.stdout,
    )
    assert as_json.returncode == 0, as_json.stderr
    config = json.loads(as_json.stdout)
    for service in config["services"].values():
        service["volumes"] = [volume_dict(v) for v in service.get("volumes", [])]
    return config


def run(
    command: list[str], stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMPOSE_TIMEOUT,
        check=False,
    )


def volume_dict(volume: str | dict) -> dict:
    """``source:target[:mode]`` (the short syntax ``docker-compose config`` prints) as a dict."""
    if isinstance(volume, dict):
        return volume
    source, target, *_ = volume.split(":")
    return {"source": source, "target": target}


def test_compose_project_name_is_set_for_both_compose_tools() -> None:
    settings = dict(
        line.split("=", 1)
        for line in (DOCKER_DIR / ".env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert settings["COMPOSE_PROJECT_NAME"] == "mqtt-lakehouse"


def test_compose_config_names_both_services_and_the_volumes() -> None:
    config = compose_config()
    assert config.get("name", "mqtt-lakehouse") == "mqtt-lakehouse"
    assert set(config["services"]) == {"mosquitto", "ingest"}
    assert {"tables", "checkpoints", "mosquitto-data"} <= set(config["volumes"])
    ingest = config["services"]["ingest"]
    mounts = {v["target"]: v for v in ingest["volumes"]}
    assert mounts["/data/tables"]["source"] == "tables"
    assert mounts["/data/checkpoints"]["source"] == "checkpoints"
    assert Path(ingest["build"]["context"]).resolve() == REPO_ROOT
    assert "tcp://mosquitto:1883" in " ".join(ingest["command"])
    broker_mounts = {v["target"]: v for v in config["services"]["mosquitto"]["volumes"]}
    conf = broker_mounts["/mosquitto/config/mosquitto.conf"]
    assert Path(conf["source"]).resolve() == MOSQUITTO_CONF


def stages(parsed: list[tuple[str, str]]) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Each build stage by name (unnamed ones by their index): (what it is FROM, its
    instructions). The last stage, the image itself, is also under ``"final"``."""
    found: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, rest in parsed:
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(found))
            current = []
            found[name] = (words[0], current)
            found["final"] = found[name]
        elif found:
            current.append((keyword, rest))
    return found


def test_the_image_gets_delta_jars_without_the_ones_pyspark_ships(tmp_path: Path) -> None:
    """The jars are pruned (``python -m devtools.prune_jars``, as ``make setup``
    does) in a stage with the project and PySpark installed, and only the pruned folder is
    copied into the image, so the deleted jars are in none of its layers. The Dockerfile's
    own command then runs here on a folder of Maven-named jars."""
    parsed = instructions(DOCKERFILE.read_text())
    built = stages(parsed)
    mvn = next(r for r in of("RUN", parsed) if re.search(r"\bmvn\b", r))
    jars_dir = re.search(r"-DoutputDirectory=(\S+)", mvn)
    assert jars_dir is not None
    folder = jars_dir.group(1)
    final_copies = of("COPY", built["final"][1])
    into_image = [c for c in final_copies if c.endswith(f" {folder} {folder}")]
    assert len(into_image) == 1, final_copies
    source = re.match(r"--from=(\S+) ", into_image[0])
    assert source is not None, into_image
    parent, pruning = built[source.group(1)]
    prune = [r for r in of("RUN", pruning) if "devtools.prune_jars" in r]
    assert len(prune) == 1, pruning
    command = prune[0].split("&&")[0].split()
    assert command[1:] == ["-m", "devtools.prune_jars", folder], command
    # The pruning stage copies the jars in before it prunes them, and has PySpark: the
    # project's wheel is pip-installed in it or in a stage it builds on.
    assert pruning.index(("RUN", prune[0])) > next(
        i for i, (k, r) in enumerate(pruning) if k == "COPY" and r.endswith(f" {folder} {folder}")
    )
    lineage = [pruning]
    while parent in built:
        parent, instructions_of = built[parent]
        lineage.append(instructions_of)
    assert any(
        re.search(r"\bpip install\b.*\.whl", r) for steps in lineage for r in of("RUN", steps)
    ), "the pruning stage has no PySpark installed"
    # The command itself: Maven's copies of what PySpark ships go, Delta's own jars stay.
    shipped = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    hadoop = next(name for name in shipped if name.startswith("hadoop-client-api-"))
    fetched = tmp_path / "delta-jars"
    fetched.mkdir()
    for name in ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", hadoop):
        (fetched / name).write_bytes(b"PK")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    done = run([sys.executable, *command[1:-1], str(fetched)], env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in fetched.iterdir()) == [
        "delta-spark_4.2_2.13-4.4.0.jar",
        "delta-storage-4.4.0.jar",
    ]
