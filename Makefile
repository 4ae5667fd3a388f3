# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# pagemq's JVM reader of page files for Spark (jvm/, docs/spark.md "The JVM reader")
JAR := pagemq/spark/jars/pagemq-spark.jar
JVM_SOURCES := jvm/build.sh $(wildcard jvm/src/io/pagemq/spark/*.java) $(wildcard jvm/resources/META-INF/services/*)

.PHONY: run test test-slow test-long soak lint bench clean browser jar

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

# Needs a JDK (javac) and PySpark (a test extra); without javac it notes so and builds nothing.
$(JAR): $(JVM_SOURCES) | $(TEST_STAMP)
	jvm/build.sh $(BIN)/python $@

jar: $(JAR)

run: $(STAMP)
	$(BIN)/pagemq serve

# The web console's browser tests (tests/e2e/test_console.py) drive Debian's chromium through
# /usr/bin/chromedriver with selenium (a test extra). Run as root, this installs the two
# packages when missing; otherwise (or if apt fails) it says so and those tests skip, naming
# what to install.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium and chromium-driver for the console's browser tests"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; } || \
	  echo "note: could not install chromium/chromium-driver: the console's browser tests will skip"; \
	else \
	  echo "note: no /usr/bin/chromium or /usr/bin/chromedriver: the console's browser tests will skip" \
	       "(as root: apt-get install chromium chromium-driver)"; \
	fi

# mypy reads [tool.mypy] in pyproject.toml: strict over pagemq/ (protocol/, core/ and
# storage/ included), but for the few modules listed there (server/config, the perf tools).
test: $(TEST_STAMP) browser $(JAR)
	$(BIN)/ruff check pagemq tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# The slow tests, marked `slow` and kept out of `make test` to keep it well under 20 minutes:
# the model-based soak (tests/model), 10 minutes of generated programs in this one pytest
# process (`make soak` is the same with workers, a count and a summary), and `make test-long`.
test-slow: $(TEST_STAMP) $(JAR)
	$(BIN)/python -m pytest -q -s -m slow

# The long end-to-end tests alone (about 3 minutes): randomized kill -9 loops, restarts of
# every FIFO variant, 600 paging addresses, 15 MiB frames, the randomized dead-letter runs.
test-long: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -m slow tests/e2e

# The model-based soak (tests/model/soak.py): `make soak SOAK_MINUTES=60` runs for that long,
# `make soak SOAK_PROGRAMS=2000` runs that many programs (seeds B .. B+1999; B from
# PAGEMQ_MODEL_BASE_SEED, else drawn from the clock and printed). SOAK_WORKERS=2 splits them
# over two worker processes (seeds B+i, B+i+2, ...; own ports and data directories each):
# 2000 programs took 15 minutes that way on a 2-core machine. A summary ends the run: programs,
# seeds covered, failures. The first failure stops every worker and is shrunk, saved under
# tests/model/failures/ and reported with its seed. Replay: `PAGEMQ_MODEL_SEED=N make soak`
# (or PAGEMQ_MODEL_TRACE=FILE for a saved shrunk trace).
SOAK_MINUTES ?= 60
SOAK_PROGRAMS ?=
SOAK_WORKERS ?= 1
soak: $(TEST_STAMP)
	$(BIN)/python tests/model/soak.py --workers $(SOAK_WORKERS) \
	  $(if $(SOAK_PROGRAMS),--programs $(SOAK_PROGRAMS),--minutes $(SOAK_MINUTES))

lint: $(TEST_STAMP)
	$(BIN)/ruff check pagemq tests benchmarks

clean:
	rm -rf $(VENV) data *.egg-info $(JAR)
