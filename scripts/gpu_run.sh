#!/usr/bin/env bash
# Issue 36's measurement on a lent device machine, as one prepared call of at most 8 minutes (docs/gpu-run.md):
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
    export PYTHONPATH="$PWD:$DEPS"
else
    export PYTHONPATH="$PWD"
fi
{
    date -u; nvidia-smi -L 2>&1; lscpu | grep -E 'Model name|^CPU\(s\)'
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    git log -1 --format='%h %s'; ls checkpoints
} > "$OUT/machine.txt" 2>&1
if [ "${DRY:-0}" = 1 ]; then
    STARTUP="--workers 2 --repeats 1"; SCALE=(--duration 1 --budget-s 20 --routes /sentiment --no-ceiling)
else
    STARTUP="--workers 8 --repeats 2"
    ONLY=${SCALE_ONLY:-"defaults (8 HTTP processes, 1 model process)|1 process|CPU only|8 plain replica(s) x 2 cores (CPU)|CPU pinned to 2 core(s)"}
    IFS='|' read -r -a NAMES <<< "$ONLY"
    SCALE=(--duration 4 --budget-s 240 --only "${NAMES[@]}")
fi
# ready with the defaults (and where the time goes), then the matrix with the model-alone ceiling
timeout 150 $PY -m bench.startup $STARTUP > "$OUT/startup.txt" 2>&1; echo "startup: rc $?" >> "$OUT/machine.txt"
timeout 300 $PY -m bench.scale "${SCALE[@]}" > "$OUT/scale.txt" 2>&1; echo "scale: rc $?" >> "$OUT/machine.txt"
tail -n 30 "$OUT/startup.txt" "$OUT/scale.txt"
