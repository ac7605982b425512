# Thin wrappers over real commands; see README.md.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: help bootstrap demo test lint site unit e2e bench bench-pipeline crds chart helm victoria-metrics node-exporter docs dashboards check-generated upstream-tools thanos image-lock image-lock-check controlplane controllers clean

help:
	@echo "make demo   - the quickstart's rules and routes on real Prometheus and Alertmanager (a minute); then, with the"
	@echo "              control plane cached, the operator answering a node fault (under a minute more);"
	@echo "              DEMO_ARGS=--with-operator builds the control plane first, --no-operator skips that act"
	@echo "make test   - everything CI runs: lint, types, layer contracts, docs site, unit, integration and e2e tests"
	@echo "make e2e    - the e2e suite on a local control plane built from Go modules (cached)"
	@echo "make bench  - every benchmark, one after the other (about an hour on 2 cores): exporter cost, SDK overhead,"
	@echo "              alert noise, detection quality, operator and rule scale, fault to action, restart in place,"
	@echo "              training time lost (ETTR), signal handling, admission latency"
	@echo "make bench-pipeline - fault to action alone at its full defaults (about 45 minutes)"
	@echo "make crds   - regenerate crds/ from the models; make docs - docs/alerts.md from the catalogue; make dashboards - the chart's Grafana dashboards"
	@echo "make controlplane - build (or reuse) the local Kubernetes control plane binaries"
	@echo "make controllers - build (or reuse) JobSet, Kueue, Kubeflow Trainer v2 and the training-operator for e2e"
	@echo "make thanos - build (or reuse) Thanos (Receive, Query, Ruler) for e2e's distributed rules test"
	@echo "make site  - the docs site (mkdocs.yml, docs/) into .site/, with --strict: a broken link fails it"
	@echo "make image-lock - requirements/image.lock and build.lock, what the image installs, pinned with hashes;"
	@echo "              make image-lock-check resolves them again and fails on a difference (needs the package index)"

bootstrap:
	@scripts/bootstrap.sh

# act 1 (the rules and routes, no cluster) always; act 2 (the operator answering a node fault on the local
# control plane) when `make controlplane` has cached its binaries, or with DEMO_ARGS=--with-operator, which
# builds them first (about 8 minutes on 2 cores, needs Go); DEMO_ARGS=--no-operator skips it
DEMO_ARGS ?=
demo: bootstrap
	$(PY) scripts/demo.py $(DEMO_ARGS)

lint: bootstrap
	$(BIN)/ruff check operator tests e2e examples bench scripts
	$(BIN)/ruff format --check operator tests e2e examples bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/mkdocs build --strict -d .site

# the docs site: mkdocs.yml, every page under docs/ in its nav, the Material theme. --strict fails on a
# broken link or anchor and on a page left out of the nav (make lint builds it too, so CI does)
site: bootstrap
	$(BIN)/mkdocs build --strict -d .site

# the unit and integration tests in $(TEST_WORKERS) processes (pytest-xdist), a test file per process so
# that module fixtures (a Prometheus, a VictoriaMetrics) start once; TEST_WORKERS=0 runs them in this one
TEST_WORKERS ?= 4
unit: bootstrap helm victoria-metrics upstream-tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --cov=trainguard.render --cov=trainguard.catalog --cov=trainguard.api --cov-report=term

# e2e in $(E2E_WORKERS) processes, a test file each at a time, each with a local control plane of its own
# (most of e2e waits on alerts, not the CPU: 3 take it from ~20 to ~9 minutes on 2 cores; E2E_WORKERS=0
# runs it in this one). The 15 slowest tests are listed at the end, so a run that creeps towards CI's
# time says where.
E2E_WORKERS ?= 3
e2e: bootstrap
	$(PY) -m pytest e2e -q -n $(E2E_WORKERS) --dist loadfile --durations=15

test: lint check-generated unit e2e

crds: bootstrap
	$(BIN)/trainguard crds --out-dir crds
	rm -f charts/trainguard/crds/*.yaml
	cp crds/*.yaml deploy/peering-crd.yaml charts/trainguard/crds/

# the chart: its CRDs (above), its RBAC, Secret-write and namespace-label policies, copied from deploy/ (tests/packaging
# fails on drift), and its remote_write keep-list, generated from render/longterm.py (check-generated
# fails on drift)
chart: crds
	cp deploy/rbac*.yaml deploy/secret-write-policy.yaml deploy/namespace-label-policy.yaml deploy/api-priority.yaml charts/trainguard/files/
	$(BIN)/trainguard keep-list --out-dir charts/trainguard/files

# helm for the chart tests (tests/packaging), built from its Go module into the e2e cache; without Go
# those tests skip (or fail under TRAINGUARD_REQUIRE_TOOLS=1, as in CI)
helm:
	@if command -v go >/dev/null 2>&1; then e2e/controlplane/build.sh helm; \
	else echo "go is not installed: no helm, the chart tests will not run"; fi

# node_exporter for bench/exporter.py's side-by-side, built the same way (about 30 s, cached by version)
node-exporter:
	@if command -v go >/dev/null 2>&1; then e2e/controlplane/build.sh node-exporter; \
	else echo "go is not installed: no node_exporter, bench/exporter.py will use one on PATH if any"; fi

# VictoriaMetrics single node for tests/integration/test_longterm_storage.py, built the same way
# (about a minute on 2 cores, cached by version); without Go that test skips (fails in CI)
victoria-metrics:
	@if command -v go >/dev/null 2>&1; then e2e/controlplane/build.sh victoria-metrics; \
	else echo "go is not installed: no victoria-metrics, the long-term storage test will not run"; fi

# Prometheus 3 and Alertmanager 0.35 with promtool and amtool, built the same way (cached by version): the
# rule and routing tests run on them as well as on Debian's 2.42 and 0.25 (tests/toolchains.py); without Go
# those runs skip (or fail under TRAINGUARD_REQUIRE_TOOLS=1, as in CI)
upstream-tools:
	@if command -v go >/dev/null 2>&1; then e2e/controlplane/build.sh upstream; \
	else echo "go is not installed: no Prometheus 3 or Alertmanager 0.35, the rule and routing tests run on Debian's only"; fi

# Thanos (Receive, Query and Ruler are one binary) for e2e/test_distributed_rules.py, the rules on a
# distributed engine (docs/distributed.md), built the same way and cached by version; like the controllers
# not a prerequisite of e2e: the test asks for it (waiting for a build in progress), and skips without Go
thanos:
	@if command -v go >/dev/null 2>&1; then e2e/controlplane/build.sh thanos; \
	else echo "go is not installed: no thanos, the distributed rules test will not run"; fi

docs: bootstrap
	$(BIN)/trainguard docs --out-dir docs

# the Grafana dashboards the chart ships, generated from the catalogue (check-generated fails on drift)
dashboards: bootstrap
	$(BIN)/trainguard dashboards --out-dir charts/trainguard/dashboards

check-generated: bootstrap
	$(BIN)/trainguard crds --out-dir crds --check
	$(BIN)/trainguard docs --out-dir docs --check
	$(BIN)/trainguard reference --out-dir docs/reference --check
	$(BIN)/trainguard dashboards --out-dir charts/trainguard/dashboards --check
	$(BIN)/trainguard keep-list --out-dir charts/trainguard/files --check

# what the image installs (Dockerfile: pip install --require-hashes --no-deps), resolved by uv from
# pyproject.toml with the hashes of every file; the current pins are kept unless pyproject.toml needs
# others. tests/packaging/test_image_lock.py fails, offline, when pyproject.toml's requirements change
# and the locks do not; image-lock-check resolves again (package index) and fails on any difference
image-lock: bootstrap
	$(PY) scripts/image_lock.py

image-lock-check: bootstrap
	$(PY) scripts/image_lock.py --check

bench: bootstrap node-exporter
	$(PY) bench/exporter.py
	$(PY) bench/sdk_overhead.py
	$(PY) bench/noise.py
	$(PY) bench/detection.py
	$(PY) bench/repeat_page.py
	$(PY) bench/scale.py
	$(PY) bench/pipeline.py --injections 4 --per-class 3
	$(PY) bench/restart_in_place.py --runs 3
	$(PY) bench/ettr.py
	$(PY) bench/goodput_signals.py
	$(PY) bench/signal_handling.py
	$(PY) bench/admission.py

# fault to cordon and to training resumed through the whole pipeline, by path and fault class, at its full
# defaults (about 45 minutes on 2 cores; make bench runs it with fewer injections; bench/ettr.py reads its
# results)
bench-pipeline: bootstrap
	$(PY) bench/pipeline.py

controlplane:
	e2e/controlplane/build.sh all

# the training controllers that e2e/test_training_controllers.py runs beside the control plane (JobSet,
# Kueue, Kubeflow Trainer v2, the training-operator), built the same way and cached by version; not in
# `controlplane`, as they add 16 CPU-minutes from cold (~8 minutes on 2 idle cores): the test asks for
# each one it starts
controllers:
	e2e/controlplane/build.sh controllers

clean:
	rm -rf $(VENV) out .site .pytest_cache .mypy_cache .ruff_cache .coverage
