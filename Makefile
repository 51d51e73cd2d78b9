# prover_jax: `make demo` (the main job on its built-in default) and `make test` (the whole suite, on
# Python 3.11 / jax 0.10 and on Python 3.12 / jax 0.12, the version pod workers resolve).
PY ?= python3
# Python 3.12 for the second lane: on PATH, else pyenv's.
PY312 ?= $(firstword $(shell command -v python3.12 2>/dev/null | grep -v shims) $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12))
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENV312 := .venv312
STAMP312 := $(VENV312)/.installed
EXTRAS := test,alfworld,serve
# Every package at the version the suite last passed with (constraints/py3XX.txt, `pip freeze` of the lane's
# venv): a new release reaches CI only when these files change. Refresh: make constraints (after make test).
# The 3.11 lane also installs libtpu (the tpu extra, ~700 MB) and requires the TPU compile tests
# (tests/aot) to run. Each test runs in one lane (PROVER_TEST_LANE; the table is in tests/conftest.py):
# model, sharding, rollout and training on 3.12 / jax 0.12, everything else on 3.11 / jax 0.10.
STAMP_TPU := $(VENV)/.installed-tpu
# ALFWorld tests must run (not skip) wherever the suite runs. One worker per core, a file per worker
# (module fixtures built once): most of the suite's time is single-threaded tracing and compiling.
PYTEST := PROVER_REQUIRE_ALFWORLD=1 python -m pytest -q -ra --durations=8 --timeout=900 -n auto --dist loadfile tests

.PHONY: test test-py311 test-py312 test-latest demo install clean constraints peers

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): setup.py constraints/py311.txt | $(BIN)/python
	$(BIN)/pip install -q -e ".[$(EXTRAS)]" -c constraints/py311.txt
	touch $(STAMP)

$(STAMP_TPU): $(STAMP)
	$(BIN)/pip install -q -e ".[tpu]" -c constraints/py311.txt
	touch $(STAMP_TPU)

$(VENV312)/bin/python:
	@test -n "$(PY312)" || { echo "make test-py312: no Python 3.12 found (set PY312=/path/to/python3.12)"; exit 2; }
	$(PY312) -m venv $(VENV312)
	$(VENV312)/bin/pip install -q --upgrade pip

$(STAMP312): setup.py constraints/py312.txt | $(VENV312)/bin/python
	$(VENV312)/bin/pip install -q -e ".[$(EXTRAS)]" -c constraints/py312.txt
	touch $(STAMP312)

install: $(STAMP)

# the same suite on the newest releases (constraints floated), in venvs of their own: how a new jax / flax /
# transformers is tried before `make constraints` moves the pins
test-latest:
	$(PY) -m venv .venv-latest && .venv-latest/bin/pip install -q --upgrade pip
	.venv-latest/bin/pip install -q --upgrade -e ".[$(EXTRAS)]" && .venv-latest/bin/pip install -q --upgrade -e ".[tpu]"
	PATH=$(CURDIR)/.venv-latest/bin:$$PATH PROVER_TEST_LANE=jax010 PROVER_REQUIRE_TPU_AOT=1 $(PYTEST)
	$(PY312) -m venv .venv312-latest && .venv312-latest/bin/pip install -q --upgrade pip
	.venv312-latest/bin/pip install -q --upgrade -e ".[$(EXTRAS)]"
	PATH=$(CURDIR)/.venv312-latest/bin:$$PATH PROVER_TEST_LANE=jax012 $(PYTEST)

# the peers bench/grpo_peers.py times against (not needed by the suite): TRL with the CPU torch on Python 3.11,
# Tunix on 3.12 with the pins it resolves quickly with
peers:
	$(PY) -m venv .venv-trl && .venv-trl/bin/pip install -q --upgrade pip && .venv-trl/bin/pip install -q torch==2.13.0 trl
	$(PY312) -m venv .venv-tunix && .venv-tunix/bin/pip install -q --upgrade pip && \
		.venv-tunix/bin/pip install -q google-tunix==0.1.7 jax==0.12.0.1

constraints:
	$(BIN)/pip freeze | grep -v "^-e \|^prover.jax" > constraints/py311.txt
	$(VENV312)/bin/pip freeze | grep -v "^-e \|^prover.jax" > constraints/py312.txt

test: test-py311 test-py312

test-py311: $(STAMP_TPU)
	PATH=$(CURDIR)/$(BIN):$$PATH PROVER_TEST_LANE=jax010 PROVER_REQUIRE_TPU_AOT=1 $(PYTEST)

test-py312: $(STAMP312)
	PATH=$(CURDIR)/$(VENV312)/bin:$$PATH PROVER_TEST_LANE=jax012 $(PYTEST)

# SFT warm start + GRPO on the built-in household env (configs/learn.py), fresh each time (prover-train resumes).
DEMO_DIR ?= runs/demo
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m prover_jax.demo --workdir=$(DEMO_DIR)

clean:
	rm -rf $(VENV) $(VENV312) build *.egg-info
