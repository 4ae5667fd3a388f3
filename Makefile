# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-slow soak lint bench clean

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

# The slow tests: today the model-based soak (tests/model), 10 minutes of generated programs.
test-slow: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -s -m slow

# The model-based soak for as long as asked: `make soak SOAK_MINUTES=60`, or a number of
# programs with `make soak SOAK_PROGRAMS=2000`. Stops at the first failure with its seed and
# shrunk trace. Replay: `PAGEMQ_MODEL_SEED=N make soak` (or PAGEMQ_MODEL_TRACE=FILE).
SOAK_MINUTES ?= 60
SOAK_PROGRAMS ?=
soak: $(TEST_STAMP)
	PAGEMQ_MODEL_MINUTES=$(SOAK_MINUTES) $(if $(SOAK_PROGRAMS),PAGEMQ_MODEL_PROGRAMS=$(SOAK_PROGRAMS)) \
	  $(BIN)/python -m pytest -q -s -m slow -p no:cacheprovider tests/model/test_model_based.py

lint: $(TEST_STAMP)
	$(BIN)/ruff check pagemq tests benchmarks

clean:
	rm -rf $(VENV) data *.egg-info
