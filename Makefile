# precisionflow: `make run` sets up and runs the default experiment; `make test` sets up and runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-fast lint format lock clean-results typecheck-tensorrt docs samples

setup: $(VENV)/.installed

# Exact versions come from requirements.lock, so every machine gets the same environment.
$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

run: setup
	$(BIN)/precisionflow run $(ARGS)

# All tests, the slow end-to-end ones included (plain `pytest` skips those), in three worker processes
# (pytest-xdist; a test file stays in one worker, so its module fixtures run once). The tests keep a
# core busy about half their time (the suite prints CPU beside wall time), so three workers fill the
# two cores (docs/benchmarks.md, "the suite from a fresh clone"). Files go out longest first
# (tests/conftest.py), not xdist's default of most tests first, which handed the longest one-test
# files out last.
test: setup
	$(BIN)/python -m pytest -m "slow or not slow" -n 3 --dist loadfile --no-loadscope-reorder --durations=25 $(ARGS)

# The README's and getting-started's sample output from a default run of the program as it is
# (tools/samples.py; tests/test_docs.py fails when their model ids drift from a fresh clone's).
samples: setup
	$(BIN)/python tools/samples.py run

test-fast: setup
	$(BIN)/python -m pytest $(ARGS)

# ruff: the formatter's check and the linter (pycodestyle, pyflakes, bugbear, bandit; pyproject.toml).
LINTED := src tests benchmarks tools setup.py
# The workflow: Snakemake's own linter at the root (every rule names its conda environment, no
# function beside a rule), and snakefmt's format check on every .smk it can parse (it cannot parse a
# rule made inside a function: workflow/rules/stages.smk is left to the linter).
SNAKEFILES := Snakefile workflow/Snakefile workflow/rules/common.smk workflow/rules/report.smk
lint: setup
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/snakefmt --check --line-length 130 $(SNAKEFILES)
	$(BIN)/snakemake --lint > .lint.log 2>&1 && grep -q "in a good condition" .lint.log || { cat .lint.log; exit 1; }
	rm -f .lint.log

format: setup
	$(BIN)/ruff format $(LINTED)
	$(BIN)/snakefmt --line-length 130 $(SNAKEFILES)

# Re-resolve the lock from pyproject.toml's ranges (needs network; review the diff).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -e '.[test]'
	.lock-venv/bin/pip freeze --exclude-editable > requirements.lock
	rm -rf .lock-venv

# The documentation site (MkDocs, Material theme) into site/; the configuration reference is
# generated from the schema first. Strict: a broken link or a warning fails the build.
docs: setup
	$(BIN)/python tools/config_reference.py
	$(BIN)/python tools/precision_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean-results:
	rm -rf results/*

# Check the TensorRT backend's use of the 10.x API against tensorrt-stubs (needs the package registry; CI runs it).
typecheck-tensorrt:
	tools/typecheck_tensorrt.sh
