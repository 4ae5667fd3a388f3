# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-slow lint bench clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	@touch $@

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

run: $(STAMP)
	$(BIN)/pagemq serve

test: $(TEST_STAMP)
	$(BIN)/ruff check pagemq tests benchmarks
	$(BIN)/python -m pytest -q

test-slow: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(TEST_STAMP)
	$(BIN)/ruff check pagemq tests benchmarks

clean:
	rm -rf $(VENV) data *.egg-info
