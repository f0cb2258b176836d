# Developer and CI entry points. `make setup` is idempotent and cheap once done:
# each step leaves a stamp file and only re-runs when its inputs change.
# `make` alone runs `make unit` (the fast tests); `make test` runs the whole suite (CI);
# `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := unit
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.setup-stamp
VENV_DEMO_STAMP := $(VENV)/.demo-stamp

JARS_DIR := .jars
JARS_POM := tools/delta-jars/pom.xml
JARS_STAMP := $(JARS_DIR)/.setup-stamp
LOCAL_FS_SRC := $(sort $(wildcard tools/local-fs/src/mqtt/lakehouse/localfs/*.java))
LOCAL_FS_JAR := $(JARS_DIR)/local-fs/spawn-free-local-fs.jar

PYTEST_ARGS ?=
# Debian installs the broker here, outside many users' PATH.
MOSQUITTO_SBIN ?= /usr/sbin/mosquitto

# Two more brokers for the interop tests (tests/interop): mochi-mqtt, a Go module built from
# tools/mochi-broker, and aedes, an npm package installed into tools/aedes-broker.
BROKERS_DIR := .brokers
MOCHI_SRC := $(wildcard tools/mochi-broker/*.go) tools/mochi-broker/go.mod tools/mochi-broker/go.sum
MOCHI_BIN := $(BROKERS_DIR)/mochi/mochi-broker
AEDES_DIR := tools/aedes-broker
AEDES_STAMP := $(AEDES_DIR)/node_modules/.setup-stamp
# An S3-compatible server for the tests of WALs on object storage (s3proxy, Apache-2.0, from
# Maven Central; runs on the Java that Spark uses).
S3PROXY_VERSION := 4.1.0
S3PROXY_JAR := $(BROKERS_DIR)/s3proxy/s3proxy-$(S3PROXY_VERSION).jar
# Sparkplug B edge nodes written by others, for tests/interop/test_sparkplug_edge_nodes.py:
# Eclipse Tahu's JavaScript client (npm sparkplug-client and sparkplug-payload, installed into
# tools/sparkplug-edge like aedes) and Tahu's Java edge library (org.eclipse.tahu:tahu-edge-compat
# from Maven Central, a shaded jar), driven by tools/tahu-edge's TahuEdgeNode, compiled here.
SPARKPLUG_EDGE_DIR := tools/sparkplug-edge
SPARKPLUG_EDGE_STAMP := $(SPARKPLUG_EDGE_DIR)/node_modules/.setup-stamp
TAHU_VERSION := 1.0.21
TAHU_DIR := $(BROKERS_DIR)/tahu
TAHU_JAR := $(TAHU_DIR)/tahu-edge-compat-$(TAHU_VERSION).jar
TAHU_EDGE_SRC := $(wildcard tools/tahu-edge/src/mqtt/lakehouse/tahuedge/*.java)
TAHU_EDGE_JAR := $(TAHU_DIR)/tahu-edge-node.jar
# Go's official tarball installs here, outside many users' PATH.
GO ?= $(shell command -v go 2>/dev/null || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; })
NPM ?= $(shell command -v npm 2>/dev/null)
NODE ?= $(shell command -v node 2>/dev/null)

.PHONY: help setup setup-demo demo-deps system-deps interop-brokers test lint bench demo fuzz chaos clean

## help: the targets that have a `## name: text` block above them, one per line with its text
## (continuation lines joined)
# A block starts at a `## name:` line after a line that is not `##` and runs while lines start
# with `## `; only names defined as targets (`name:` at the start of a line) are printed.
help:
	@awk ' \
		open && /^## / { sub(/^## */, ""); text[name] = text[name] " " $$0; next } \
		/^## [A-Za-z0-9_-]+:/ { \
			name = $$2; sub(/:$$/, "", name); sub(/^## [A-Za-z0-9_-]+: */, ""); \
			if (!(name in text)) order[++n] = name; text[name] = $$0; open = 1; next \
		} \
		{ open = 0 } \
		/^[A-Za-z0-9_-]+:([^=]|$$)/ { target = $$0; sub(/:.*/, "", target); is_target[target] = 1 } \
		END { \
			width = 0; \
			for (i = 1; i <= n; i++) if (order[i] in is_target && length(order[i]) > width) width = length(order[i]); \
			for (i = 1; i <= n; i++) if (order[i] in is_target) printf "%-" width "s  %s\n", order[i], text[order[i]]; \
		}' $(MAKEFILE_LIST)

## setup: everything the tests use: setup-demo, then the interop brokers (mochi-mqtt, aedes),
## the Sparkplug edge nodes and s3proxy
setup: setup-demo $(VENV_STAMP) system-deps interop-brokers $(S3PROXY_JAR)

## setup-demo: what the demo and a local job need, nothing more: the virtualenv with the
## project and its demo extra (PySpark, delta-spark, pyarrow), Mosquitto, Delta's jars and the
## local file system for Spark's file: paths (tools/local-fs)
setup-demo: $(VENV_DEMO_STAMP) demo-deps $(JARS_STAMP) $(LOCAL_FS_JAR)

# Re-run when pyproject.toml changes; the stamps live inside .venv, so deleting .venv also
# forces a rebuild. The demo's stamp: the project with the pinned versions the demo runs.
$(VENV_DEMO_STAMP): pyproject.toml
	@if [ ! -x "$(VENV_PY)" ]; then \
		echo "Creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(VENV_PY) -m pip install --quiet --config-settings editable_mode=compat -e '.[demo]'
	@# `.venv/bin/spark-submit` finds Spark and runs the job with `python3` from PATH unless
	@# told otherwise: pin both to this virtualenv's interpreter.
	@for launcher in spark-submit pyspark; do \
		f=$(VENV)/bin/$$launcher; \
		if [ -f "$$f" ] && ! grep -q '# venv-python' "$$f"; then \
			sed -i '1a export PYSPARK_PYTHON="$${PYSPARK_PYTHON:-$(abspath $(VENV_PY))}" PYSPARK_DRIVER_PYTHON="$${PYSPARK_DRIVER_PYTHON:-$(abspath $(VENV_PY))}"  # venv-python' "$$f"; \
		fi; \
	done
	@touch $@

# The tests' and tools' stamp: the dev and bench extras on top.
$(VENV_STAMP): $(VENV_DEMO_STAMP) pyproject.toml
	$(VENV_PY) -m pip install --quiet --config-settings editable_mode=compat -e '.[dev,bench]'
	@# The Sparkplug tests' decoding oracle: pysparkplug's protobuf classes (never the product's
	@# decoder). Its own pin of paho-mqtt<2 is for its client, which nothing here uses.
	$(VENV_PY) -m pip install --quiet --no-deps pysparkplug==0.6.1
	@touch $@

# The system packages of the demo: Mosquitto, and Maven for Delta's jars.
demo-deps:
	@missing=""; \
	if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x "$(MOSQUITTO_SBIN)" ]; then \
		missing="$$missing mosquitto"; \
	fi; \
	if ! command -v mvn >/dev/null 2>&1; then missing="$$missing maven"; fi; \
	$(APT_INSTALL)

# System packages the tests need. Nothing runs when everything is present. Next to a docker
# client without the compose plugin, Debian's docker-compose lets the tests check
# docker/compose.yaml (`config` needs no engine).
system-deps: demo-deps
	@missing=""; \
	if ! command -v mosquitto_sub >/dev/null 2>&1; then missing="$$missing mosquitto-clients"; fi; \
	if ! command -v openssl >/dev/null 2>&1; then missing="$$missing openssl"; fi; \
	if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1 \
		&& ! command -v docker-compose >/dev/null 2>&1; then \
		missing="$$missing docker-compose"; \
	fi; \
	$(APT_INSTALL)

# Installs the Debian packages named in $$missing (none: nothing runs), as root or with sudo.
APT_INSTALL = if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
		elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
		else echo "error: need root or sudo to install:$$missing" >&2; exit 1; fi; \
		echo "Installing system packages:$$missing"; \
		$$sudo apt-get update; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	fi

# Delta's JVM jar plus its runtime dependencies, for local Spark sessions, without the
# artifacts the installed PySpark ships itself (Hadoop's client, Parquet, Jackson, ...: Spark's
# own copies load first, so Maven's would never be used). Re-runs when the pom or the
# virtualenv changes; a failed run leaves no stamp. The sed drops the colour codes some Maven
# builds print even in batch mode.
$(JARS_STAMP): $(JARS_POM) $(VENV_DEMO_STAMP) | demo-deps
	@echo "Fetching Delta jars into $(JARS_DIR)/"
	rm -rf $(JARS_DIR)
	mvn -q -B -f $(JARS_POM) dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS_DIR)) 2>&1 \
		| sed -e 's/\x1b\[[0-9;]*m//g'
	$(VENV_PY) -m devtools.prune_jars $(JARS_DIR)
	@touch $@

# Hadoop's file: file system without a process spawn per file operation, compiled against
# the Hadoop jars of the installed PySpark (no download). Needs a JDK's javac; without one,
# local sessions keep Hadoop's own (slower) file system and say so in their log.
$(LOCAL_FS_JAR): $(LOCAL_FS_SRC) $(VENV_DEMO_STAMP) $(JARS_STAMP)
	@if ! command -v javac >/dev/null 2>&1; then \
		echo "note: no javac (JDK) found: local Spark sessions use Hadoop's own local file system"; \
	else \
		echo "Compiling tools/local-fs into $@"; \
		spark_jars="$$($(VENV_PY) -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"; \
		rm -rf $(JARS_DIR)/local-fs; \
		javac --release 17 -cp "$$spark_jars/*" -d $(JARS_DIR)/local-fs/classes $(LOCAL_FS_SRC); \
		jar cf $@ -C $(JARS_DIR)/local-fs/classes .; \
	fi

$(S3PROXY_JAR): | system-deps
	@mkdir -p $(@D)
	mvn -q dependency:copy -Dartifact=org.gaul:s3proxy:$(S3PROXY_VERSION):jar:jar-with-dependencies \
		-DoutputDirectory="$(abspath $(@D))" -Dmdep.stripClassifier=true -Dmdep.overWriteReleases=true

## interop-brokers: mochi-mqtt (Go) and aedes (Node) for tests/interop, and the Sparkplug edge
## nodes (Tahu's JavaScript client, Tahu's Java library); without Go, Node or a JDK and Maven a
## note is printed and those tests skip
interop-brokers: $(MOCHI_BIN) $(AEDES_STAMP) $(SPARKPLUG_EDGE_STAMP) $(TAHU_EDGE_JAR)

# Rebuilt when its sources change. go.sum pins every module; the module and build caches are
# Go's defaults. Without Go, nothing is built: the mochi tests skip, saying why.
$(MOCHI_BIN): $(MOCHI_SRC)
	@if [ -z "$(GO)" ]; then \
		echo "note: no Go toolchain found (go on PATH or /usr/local/go/bin/go): the mochi-mqtt interop tests will skip"; \
	else \
		echo "Building tools/mochi-broker into $@"; \
		mkdir -p $(@D); \
		cd tools/mochi-broker && GOTOOLCHAIN=local "$(GO)" build -trimpath -buildvcs=false -o "$(abspath $@).tmp" . ; \
		mv "$(abspath $@).tmp" "$(abspath $@)"; \
	fi

# `npm ci` installs exactly the lock file into tools/aedes-broker/node_modules (which it first
# deletes, stamp included). Without Node and npm, nothing is installed: the aedes tests skip.
$(AEDES_STAMP): $(AEDES_DIR)/package.json $(AEDES_DIR)/package-lock.json
	@if [ -z "$(NODE)" ] || [ -z "$(NPM)" ]; then \
		echo "note: no node or npm found on PATH: the aedes interop tests will skip"; \
	else \
		echo "Installing aedes into $(AEDES_DIR)/node_modules"; \
		cd $(AEDES_DIR) && "$(NPM)" ci --no-audit --no-fund --loglevel=error; \
		touch "$(abspath $@)"; \
	fi

# The lock file pins sparkplug-client, sparkplug-payload and their dependencies; `npm ci` as for
# aedes. Without Node and npm, nothing is installed: the JavaScript edge node's tests skip.
$(SPARKPLUG_EDGE_STAMP): $(SPARKPLUG_EDGE_DIR)/package.json $(SPARKPLUG_EDGE_DIR)/package-lock.json
	@if [ -z "$(NODE)" ] || [ -z "$(NPM)" ]; then \
		echo "note: no node or npm found on PATH: the Sparkplug JavaScript edge node tests will skip"; \
	else \
		echo "Installing sparkplug-client into $(SPARKPLUG_EDGE_DIR)/node_modules"; \
		cd $(SPARKPLUG_EDGE_DIR) && "$(NPM)" ci --no-audit --no-fund --loglevel=error; \
		touch "$(abspath $@)"; \
	fi

# Tahu's edge library: one shaded jar (tahu-core, tahu-edge, Paho, protobuf, logback inside).
# Without Maven or Java nothing is fetched: the Tahu (Java) edge node's tests skip.
$(TAHU_JAR):
	@if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then \
		echo "note: no mvn or java found: the Sparkplug Tahu (Java) edge node tests will skip"; \
	else \
		mkdir -p $(@D); \
		mvn -q -B dependency:copy -Dartifact=org.eclipse.tahu:tahu-edge-compat:$(TAHU_VERSION) \
			-DoutputDirectory="$(abspath $(@D))" -Dmdep.overWriteReleases=true 2>&1 \
			| sed -e 's/\x1b\[[0-9;]*m//g'; \
	fi

# tools/tahu-edge's driver, compiled against that jar. Needs a JDK's javac; without one (or
# without the jar) nothing is built: the Tahu (Java) edge node's tests skip.
$(TAHU_EDGE_JAR): $(TAHU_EDGE_SRC) $(TAHU_JAR)
	@if ! command -v javac >/dev/null 2>&1 || [ ! -f "$(TAHU_JAR)" ]; then \
		echo "note: no javac (JDK) or no $(TAHU_JAR): the Sparkplug Tahu (Java) edge node tests will skip"; \
	else \
		echo "Compiling tools/tahu-edge into $@"; \
		rm -rf $(TAHU_DIR)/classes; \
		javac --release 17 -encoding UTF-8 -cp "$(TAHU_JAR)" -d $(TAHU_DIR)/classes $(TAHU_EDGE_SRC); \
		jar cf "$@" -C $(TAHU_DIR)/classes .; \
	fi

## test: the whole suite under tests/ (pyproject's testpaths), after the full setup; what CI
## (.ci/run) runs. Two tiers at once (tests/tiers.py): the Spark, chaos, cluster, Connect,
## pipeline and packaging tests one after another in one process, every other test (and the
## ingest job's subprocess tests) beside them in a second; each lists its 25 slowest tests. PYTEST_ARGS="..." (narrower paths, -k,
## ...) runs one plain pytest instead
# The Spark JVMs' class-data archive (devtools/class_archive.py) needs only what setup-demo
# makes: it is built beside the rest of the set-up (brokers, npm, Maven), so that every test's
# JVM finds it and no test runs beside its build. Nothing to do when it is there.
test: setup-demo
	@$(VENV_PY) -m devtools.class_archive & archive=$$!; \
	$(MAKE) --no-print-directory setup || { kill $$archive 2>/dev/null; exit 1; }; \
	wait $$archive || echo "no class-data archive: the tests' JVMs start without it"
ifeq ($(strip $(PYTEST_ARGS)),)
	$(VENV_PY) -m tests.tiers
else
	$(VENV_PY) -m pytest -q $(PYTEST_ARGS)
endif

## unit: the default goal. The fast tests, which need neither Spark nor a broker: tests/unit,
## tests/fuzz's bounded runs and bench/tests (the benchmarks' own), without the few tests
## there marked integration, spark or interop (tests/conftest.py marks a test that uses the
## mosquitto or broker_factory fixture integration). Well under a minute; needs only the
## virtualenv, not the rest of `make setup`. Extra pytest arguments via PYTEST_ARGS="..."
.PHONY: unit
UNIT_PATHS := tests/unit tests/fuzz bench/tests
UNIT_MARKERS := not integration and not spark and not interop
unit: $(VENV_STAMP)
	$(VENV_PY) -m pytest -q -m "$(UNIT_MARKERS)" $(UNIT_PATHS) $(PYTEST_ARGS)

## lint: ruff (the rules, then the format) over the repository, then mypy over connector/,
## streaming_jobs/, bench/, devtools/, tests/ and pyspark_mqtt.py ([tool.mypy] in
## pyproject.toml: strict for connector)
lint: $(VENV_STAMP)
	$(VENV_PY) -m ruff check .
	$(VENV_PY) -m ruff format --check .
	$(VENV_PY) -m mypy

## proto: regenerate connector/sparkplug/sparkplug_b_pb2.py and its .pyi from sparkplug_b.proto
## with protoc from grpcio-tools, installed into .venv/proto-tools for this target only (not a
## dependency of the project; its protoc's gencode needs protobuf >= the version it prints)
GRPCIO_TOOLS_VERSION := 1.85.1
PROTO_TOOLS := $(VENV)/proto-tools
PROTO_TOOLS_STAMP := $(PROTO_TOOLS)/.stamp-grpcio-tools-$(GRPCIO_TOOLS_VERSION)
SPARKPLUG_PROTO := connector/sparkplug/sparkplug_b.proto
.PHONY: proto
proto: $(PROTO_TOOLS_STAMP)
	PYTHONPATH=$(PROTO_TOOLS) $(VENV_PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \
		$(SPARKPLUG_PROTO)
	@grep -m1 'Protobuf Python Version' $(SPARKPLUG_PROTO:.proto=_pb2.py)

$(PROTO_TOOLS_STAMP): | $(VENV_PY)
	rm -rf $(PROTO_TOOLS)
	$(VENV_PY) -m pip install --quiet --target $(PROTO_TOOLS) grpcio-tools==$(GRPCIO_TOOLS_VERSION)
	@touch $@

## bench: every benchmark (bench/results/*.json), then bench/REPORT.md with charts in
## bench/charts/; flags per benchmark via CODEC_ARGS, DRAIN_ARGS, DRAIN_QOS2_ARGS, INGEST_ARGS,
## INGEST_LONG_ARGS, BACKLOG_RSS_ARGS, LATENCY_ARGS, SCALE_ARGS, RECONNECT_ARGS, INGEST_S3_ARGS,
## INGEST_S3_INLINE_ARGS, INGEST_S3_LONG_ARGS, WAL_THROUGHPUT_ARGS, SHARED_SUBSCRIPTION_ARGS,
## FLOW_CONTROL_ARGS, MICRO_ARGS, SPARKPLUG_ARGS, ROUTES_ARGS (e.g. LATENCY_ARGS=--quick)
CODEC_ARGS ?=
DRAIN_ARGS ?=
DRAIN_QOS2_ARGS ?=
INGEST_ARGS ?=
INGEST_LONG_ARGS ?=
BACKLOG_RSS_ARGS ?=
LATENCY_ARGS ?=
SCALE_ARGS ?=
RECONNECT_ARGS ?=
INGEST_S3_ARGS ?=
INGEST_S3_INLINE_ARGS ?=
INGEST_S3_LONG_ARGS ?=
WAL_THROUGHPUT_ARGS ?=
SHARED_SUBSCRIPTION_ARGS ?=
FLOW_CONTROL_ARGS ?=
MICRO_ARGS ?=
SPARKPLUG_ARGS ?=
ROUTES_ARGS ?=
# The Sparkplug decoder timed beside this one in the same run: the last revision before upb
# (docs/architecture.md, decision 43); bench/results/before/sparkplug.json is that revision's run.
SPARKPLUG_BASELINE ?= 343bc15
bench: setup
	$(VENV_PY) -m bench.codec $(CODEC_ARGS)
	$(VENV_PY) -m bench.drain $(DRAIN_ARGS)
	$(VENV_PY) -m bench.drain --qos 2 $(DRAIN_QOS2_ARGS)
	$(VENV_PY) -m bench.ingest $(INGEST_ARGS)
	$(VENV_PY) -m bench.ingest --source-option receivers=2 --modes wal \
		--output bench/results/ingest_receivers.json $(INGEST_ARGS)
	$(VENV_PY) -m bench.ingest --qos 1 --modes wal --messages 1000000 --no-paho \
		--output bench/results/ingest_long.json $(INGEST_LONG_ARGS)
	$(VENV_PY) -m bench.backlog_rss $(BACKLOG_RSS_ARGS)
	$(VENV_PY) -m bench.latency $(LATENCY_ARGS)
	$(VENV_PY) -m bench.scale $(SCALE_ARGS)
	$(VENV_PY) -m bench.reconnect $(RECONNECT_ARGS)
	$(VENV_PY) -m bench.ingest --messages 100000 --repeat 3 --qos 1 2 --modes wal --s3-modes wal \
		--inflight 20 0 --no-paho --no-synthetic --append-profile \
		--output bench/results/ingest_s3.json $(INGEST_S3_ARGS)
	$(VENV_PY) -m bench.ingest --messages 100000 --repeat 3 --qos 1 2 --modes wal \
		--s3-modes wal inline --no-paho --no-synthetic --warmup-rows 400000 \
		--output bench/results/ingest_s3_inline.json $(INGEST_S3_INLINE_ARGS)
	$(VENV_PY) -m bench.ingest --messages 1000000 --repeat 3 --qos 1 --modes wal --s3-modes wal \
		--no-paho --no-synthetic --output bench/results/ingest_s3_long.json $(INGEST_S3_LONG_ARGS)
	$(VENV_PY) -m bench.wal_throughput --repeat 3 $(WAL_THROUGHPUT_ARGS)
	$(VENV_PY) -m bench.shared_subscription --messages 20000 --rounds 3 $(SHARED_SUBSCRIPTION_ARGS)
	$(VENV_PY) -m bench.flow_control $(FLOW_CONTROL_ARGS)
	$(VENV_PY) -m bench.micro $(MICRO_ARGS)
	$(VENV_PY) -m bench.sparkplug --baseline $(SPARKPLUG_BASELINE) \
		--before bench/results/before/sparkplug.json $(SPARKPLUG_ARGS)
	$(VENV_PY) -m bench.sink $(SINK_ARGS)
	$(VENV_PY) -m bench.routes $(ROUTES_ARGS)
	$(VENV_PY) -m bench.report

## demo: (after setup-demo) sensors -> local Mosquitto -> the ingest job -> Delta under data/demo (kept, replaced
## by the next run), then a report ending with PySpark lines that read the tables;
## flags via DEMO_ARGS="--messages 5000 --devices 10", --clean removes data/demo at the end
DEMO_ARGS ?=
demo: setup-demo
	$(VENV_PY) -m devtools.demo $(DEMO_ARGS)

## fuzz: coverage-guided fuzzing (atheris) of the MQTT decoder, the client session and WAL
## recovery for FUZZ_SECONDS each, then the property-based fuzz tests with FUZZ_EXAMPLES
## examples; counts of inputs tried go to bench/results/fuzz.json
FUZZ_SECONDS ?= 60
FUZZ_EXAMPLES ?= 20000
fuzz: setup
	@$(VENV_PY) -c 'import atheris' 2>/dev/null || $(VENV_PY) -m pip install --quiet \
		--config-settings editable_mode=compat -e '.[dev,fuzz]'
	$(VENV_PY) -m tests.fuzz.run --seconds $(FUZZ_SECONDS) --hypothesis-examples $(FUZZ_EXAMPLES)

## long-run: a week in an hour (bench/long_run.py): four ingest jobs side by side on one steady
## publisher for an hour, their tables and stores sampled; then bench/REPORT.md. Flags via
## LONG_RUN_ARGS (e.g. "--minutes 20 --configs none default")
LONG_RUN_ARGS ?=
.PHONY: long-run
long-run: setup
	$(VENV_PY) -m bench.long_run $(LONG_RUN_ARGS)
	$(VENV_PY) -m bench.report

## chaos: the fault-injection tests at full length (CHAOS_SCALE=long: more kills, restarts,
## cuts); counters go to bench/results/chaos.json, then bench/REPORT.md is rendered again.
## Replay a run with CHAOS_SEED=<seed printed by the run>.
chaos: setup
	@rc=0; CHAOS_SCALE=long CHAOS_RESULTS=bench/results/chaos.json \
		$(VENV_PY) -m pytest -q -p no:cacheprovider tests/chaos $(PYTEST_ARGS) || rc=$$?; \
	$(VENV_PY) -m bench.report; exit $$rc

## soak: loop the chaos tests (bench/chaos_soak.py: the network-faults test 20 times, the
## kill -9 and failover tests 3 times each; counts to bench/results/chaos_soak.json), then render
## bench/REPORT.md; e.g. SOAK_ARGS="--loops 2". Run it from a worktree of its own while editing
SOAK_ARGS ?=
.PHONY: soak
soak: setup
	@rc=0; $(VENV_PY) -m bench.chaos_soak $(SOAK_ARGS) || rc=$$?; \
	$(VENV_PY) -m bench.report; exit $$rc

## clean: remove everything setup and the tools generated (not data/)
clean:
	rm -rf $(VENV) $(JARS_DIR) $(BROKERS_DIR) $(AEDES_DIR)/node_modules \
		$(SPARKPLUG_EDGE_DIR)/node_modules .pytest_cache .ruff_cache \
		.hypothesis .mypy_cache *.egg-info
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
