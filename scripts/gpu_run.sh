#!/usr/bin/env bash
# Issues 36 and 46 on a lent device machine, as one prepared call of at most 8.5 minutes (docs/gpu-run.md):
# run from the repository root there, with .whl/ carried (scripts/gpu_wheels.sh) and only the checkpoints the
# run serves in the tree (sentiment-en and translate-fr-en: the 64 MiB limit). Writes every table to $OUT.
# DRY=1 runs the same steps briefly on any machine (that the script works before device time is spent).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
PY=${PY:-python3}
if ! $PY -c "import fastapi, uvicorn, pydantic_settings, sentencex, py3langid" 2>/dev/null; then
    DEPS=$(mktemp -d)
    $PY -m pip install -q --no-index --no-deps --target "$DEPS" .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:$DEPS" PATH="$DEPS/bin:$PATH"  # py-spy's binary, for the ceiling's profiles
else
    export PYTHONPATH="$PWD"
fi
{
    date -u; nvidia-smi -L 2>&1; lscpu | grep -E 'Model name|^CPU\(s\)'
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    git log -1 --format='%h %s'; ls checkpoints
} > "$OUT/machine.txt" 2>&1
# knobs: STAGES (a subset of "startup scale ceiling forward"), BASELINE (another checkout, e.g. main's code carried in
# the tree: bench.startup measures it first), SCALE_ONLY (setup names), SCALE_ENV (more rows, '|' between
# rows: "APP_X=1 APP_Y=2|APP_X=2"), SCALE_CONNS (connections; the first for every row), SCALE_ARGS (more)
STAGES=${STAGES:-"startup scale ceiling forward"}
if [ "${DRY:-0}" = 1 ]; then
    STARTUP=(--workers 2 --repeats 1); SCALE=(--duration 1 --budget-s 20 --routes /sentiment --no-ceiling)
    CEILING=(--duration 1 --http-workers 2 --clients 1 --setups near-free --routes "sentiment x1")
else
    STARTUP=(--workers 8 --repeats 2)
    ONLY=${SCALE_ONLY:-"defaults (8 HTTP processes, 2 model processes)|CPU only"}
    IFS='|' read -r -a NAMES <<< "$ONLY"
    SCALE=(--duration 4 --budget-s 150 --only "${NAMES[@]}")
    SCALE_ENV=${SCALE_ENV-"APP_MODEL_PROCESSES=1"}  # beside the defaults' 2 per GPU (2026-11-30); "" for none
    CEILING=(--duration 4 --http-workers 8 --clients 4 --connections 256
             --routes "sentiment x1" "sentiment x64" "translate beam 4")
fi
[ -n "${BASELINE:-}" ] && STARTUP+=(--baseline "$BASELINE")
if [ -n "${SCALE_ENV:-}" ]; then IFS='|' read -r -a ROWS <<< "$SCALE_ENV"; SCALE+=(--env "${ROWS[@]}"); fi
# shellcheck disable=SC2206  # connection counts: words
[ -n "${SCALE_CONNS:-}" ] && SCALE+=(--connections $SCALE_CONNS)
# shellcheck disable=SC2206  # routes: words
[ -n "${SCALE_ROUTES:-}" ] && SCALE+=(--routes $SCALE_ROUTES)
# shellcheck disable=SC2206  # more options, as words (--repeats 2 --no-ceiling)
[ -n "${SCALE_ARGS:-}" ] && SCALE+=($SCALE_ARGS)
# ready with the defaults (and where the time goes), then the matrix with the model-alone ceiling
if [[ $STAGES == *startup* ]]; then
    timeout 140 $PY -m bench.startup "${STARTUP[@]}" > "$OUT/startup.txt" 2>&1
    echo "startup: rc $?" >> "$OUT/machine.txt"
fi
if [[ $STAGES == *scale* ]]; then
    timeout 190 $PY -m bench.scale "${SCALE[@]}" > "$OUT/scale.txt" 2>&1; echo "scale: rc $?" >> "$OUT/machine.txt"
fi
# the machinery's ceiling by thread (issue 46), with py-spy profiles of each cell (one archive: $OUT's limits)
if [[ $STAGES == *ceiling* ]]; then
    PROF=$(mktemp -d)
    timeout 140 $PY -m bench.ceiling "${CEILING[@]}" --profile "$PROF" > "$OUT/ceiling.txt" 2>&1
    echo "ceiling: rc $?" >> "$OUT/machine.txt"
    tar -czf "$OUT/profiles.tar.gz" -C "$PROF" .
fi
# a classifier forward's fixed cost on the GPU, in tokens: model.inference.GPU_FORWARD_COST_TOKENS's estimate
if [[ $STAGES == *forward* && "${DRY:-0}" != 1 ]]; then
    timeout 50 $PY -m bench.forward_cost --device cuda --repeats 10 > "$OUT/forward_cost.txt" 2>&1
    echo "forward_cost: rc $?" >> "$OUT/machine.txt"
fi
tail -n 30 "$OUT"/*.txt
