# prover_jax: `make demo` (the main job on its built-in default) and `make test` (the whole suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): setup.py | $(BIN)/python
	$(BIN)/pip install -q -e ".[test,alfworld]"
	touch $(STAMP)

install: $(STAMP)

# ALFWorld tests must run (not skip) wherever the suite runs. One worker per core, a file per worker
# (module fixtures built once): most of the suite's time is single-threaded tracing and compiling.
test: $(STAMP)
	PROVER_REQUIRE_ALFWORLD=1 $(BIN)/python -m pytest -q -ra --timeout=900 -n auto --dist loadfile tests

# SFT warm start + GRPO/ProVer on the built-in household env, fresh each time (prover-train resumes).
DEMO_DIR ?= runs/demo
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m prover_jax.demo --workdir=$(DEMO_DIR)

clean:
	rm -rf $(VENV) build *.egg-info
