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

# Shipped checkpoints: train (resumable: re-run the same command to continue), then evaluate + ship.
# later commands that continued a finished preset run, in order, commas for spaces (each shipped card lists
# them under Reproduce)
comma := ,
CONTINUE_translate-es-en := --epochs=9 --epochs=11,--average_last=6,--eval_every=129,--patience=30
CONTINUE_translate-de-en := --epochs=13,--average_last=6,--eval_every=81,--patience=30

$(TRAIN): train-%: install  # a static pattern rule: implicit rules skip .PHONY targets
	$(PY) -m training $(if $(findstring sentiment,$*),sentiment,translate) --preset=$* --out_dir=$(RUNS) --data_dir=$(DATA_DIR)
	$(foreach c,$(CONTINUE_$*),$(PY) -m training $(if $(findstring sentiment,$*),sentiment,translate) --preset=$* --out_dir=$(RUNS) --data_dir=$(DATA_DIR) $(subst $(comma), ,$(c)) &&) true
	$(PY) -m training ship --run $(RUNS)/$* --name $* --data-dir $(DATA_DIR) $(foreach c,$(CONTINUE_$*),--continued='$(subst $(comma), ,$(c))')
