# One-command entry points. `make serve` and `make test` create .venv and install everything (torch CPU first).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ../shared/data
RUNS ?= runs

TRAIN := train-sentiment-ko train-sentiment-en train-translate-fr-en train-translate-es-en train-translate-de-en
# runs a shipped preset starts from (distillation teachers, init_from), trained first, in order, not shipped
STARTS_sentiment-en := sentiment-en-base sentiment-en-mlm
STARTS_sentiment-ko := sentiment-ko-base sentiment-ko-mlm sentiment-ko-kd
STARTS := $(STARTS_sentiment-en) $(STARTS_sentiment-ko)

.PHONY: install serve test lint format bench $(TRAIN) $(addprefix run-,$(STARTS))

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
CONTINUE_sentiment-ko-mlm := --epochs=7
# shipped classifiers whose finished run then gets a hashed n-gram head (python -m training ngram-head)
HEAD_sentiment-en := --spec w3c4 --buckets 2097152
HEAD_sentiment-ko := --spec w3c4 --buckets 2097152

# python -m training <task> --preset=$(1), then each CONTINUE_$(1) command
train_cmd = $(PY) -m training $(if $(findstring sentiment,$(1)),sentiment,translate) --preset=$(1) --out_dir=$(RUNS) --data_dir=$(DATA_DIR)
run_preset = $(call train_cmd,$(1)) && $(foreach c,$(CONTINUE_$(1)),$(call train_cmd,$(1)) $(subst $(comma), ,$(c)) &&) true
# the card's Reproduce section: the start runs' commands, then the continuations
requires = $(foreach t,$(STARTS_$(1)),--requires='--preset=$(t)' $(foreach c,$(CONTINUE_$(t)),--requires='--preset=$(t) $(subst $(comma), ,$(c))'))

$(addprefix run-,$(STARTS)): run-%: install
	$(call run_preset,$*)

train-sentiment-en: $(addprefix run-,$(STARTS_sentiment-en))
train-sentiment-ko: $(addprefix run-,$(STARTS_sentiment-ko))

$(TRAIN): train-%: install  # a static pattern rule: implicit rules skip .PHONY targets
	$(call run_preset,$*)
	$(if $(HEAD_$*),$(PY) -m training ngram-head --run $(RUNS)/$* --data-dir $(DATA_DIR) $(HEAD_$*))
	$(PY) -m training ship --run $(RUNS)/$* --name $* --data-dir $(DATA_DIR) $(foreach c,$(CONTINUE_$*),--continued='$(subst $(comma), ,$(c))') $(call requires,$*)
