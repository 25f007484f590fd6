# One-command entry points. `make serve` and `make test` create .venv and install everything (torch CPU first).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ../shared/data
RUNS ?= runs

TRAIN := train-sentiment-ko train-sentiment-en train-translate-fr-en train-translate-es-en train-translate-de-en

.PHONY: install serve test lint format bench $(TRAIN)

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0  # the CPU wheel; any other spec pulls gigabytes of CUDA packages
	$(PY) -m pip install -e ".[dev]"
	touch $@

serve: install
	$(PY) -m app

test: install
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Shipped checkpoints: each runs its recipe in training/recipes.py (resumable: re-run to continue);
# `python -m training reproduce NAME --dry-run` prints the commands.
REPRODUCE = $(PY) -m training reproduce --runs-dir $(RUNS) --data-dir $(DATA_DIR)
train-sentiment-ko: install ; $(REPRODUCE) sentiment-ko
train-sentiment-en: install ; $(REPRODUCE) sentiment-en
train-translate-fr-en: install ; $(REPRODUCE) translate-fr-en
train-translate-es-en: install ; $(REPRODUCE) translate-es-en
train-translate-de-en: install ; $(REPRODUCE) translate-de-en
