# One-command entry points. `make serve` and `make test` create .venv and install everything (torch first: the CPU
# build on a machine without an NVIDIA GPU, see scripts/install_torch.sh; TORCH_VARIANT=cuda|cpu to choose).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ../shared/data
RUNS ?= runs

TRAIN := train-sentiment-ko train-sentiment-en train-translate-fr-en train-translate-es-en train-translate-de-en

.PHONY: install serve test test-fast e2e lint format lock bench $(TRAIN)

install: $(VENV)/.installed

# Python 3.11+: a one-line message here rather than an error from deep inside pip (any Python 3 can run this line).
PYTHON_CHECK = import sys; sys.exit(sys.version_info < (3, 11) and \
	"Python >= 3.11 is needed; $(PYTHON) is %d.%d.%d (make install PYTHON=python3.11 or newer)" % sys.version_info[:3])

$(VENV)/.installed: pyproject.toml scripts/install_torch.sh
	@$(PYTHON) -c '$(PYTHON_CHECK)'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	PYTHON=$(PY) bash scripts/install_torch.sh
	$(PY) -m pip install -e ".[dev]"
	touch $@

serve: install
	$(PY) -m app

# The whole suite (what CI runs) in TEST_WORKERS pytest-xdist processes (auto: one per core, at most 4), each
# test file on one worker so that a module's shared server starts once, handed out in collection order (the
# files with the most slow tests first: tests/conftest.py) so that no long file starts last; the 15 slowest
# tests are listed at the end. Budget: 7 minutes on a quiet 2-core machine, no test over 10 s (CONTRIBUTING.md).
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder
test: install
	$(PY) -m pytest -q $(XDIST) --durations=15

# The inner loop: unit and in-process API tests, not those marked slow (a server process, training, the
# shipped checkpoints, the browser, the image) or data (they read the real corpora in ../shared/data): under
# 2 minutes on 2 cores.
FAST_TESTS = tests/model tests/training tests/app tests/bench tests/test_docs.py tests/test_layering.py
test-fast: install
	$(PY) -m pytest -q $(XDIST) -m "not slow and not data" --durations=15 $(FAST_TESTS)

# The browser tests (tests/e2e) on a fresh Debian machine: Debian's chromium (scripts/install_browser.sh: apt as root
# or via sudo), then the tests (`make test` skips them while /usr/bin/chromium is missing).
e2e: install
	bash scripts/install_browser.sh
	$(PY) -m pytest -q tests/e2e

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: install
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# requirements.lock (what the Docker image installs) after a change to [project].dependencies; UPGRADE=1 moves every
# pin to the newest release allowed.
lock: install
	PYTHON=$(PY) UPGRADE=$(UPGRADE) bash scripts/lock.sh

# Shipped checkpoints: each runs its recipe in training/recipes.py (resumable: re-run to continue);
# `python -m training reproduce NAME --dry-run` prints the commands.
REPRODUCE = $(PY) -m training reproduce --runs-dir $(RUNS) --data-dir $(DATA_DIR)
train-sentiment-ko: install ; $(REPRODUCE) sentiment-ko
train-sentiment-en: install ; $(REPRODUCE) sentiment-en
train-translate-fr-en: install ; $(REPRODUCE) translate-fr-en
train-translate-es-en: install ; $(REPRODUCE) translate-es-en
train-translate-de-en: install ; $(REPRODUCE) translate-de-en
