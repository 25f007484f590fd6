#!/usr/bin/env bash
# The wheels a device machine (docs/gpu-run.md) lacks, at requirements.lock's pins, for its python 3.12:
# into .whl/ (ignored by git; the device tool's `carry` takes it along). Needs PyPI, so run it here.
set -euo pipefail
cd "$(dirname "$0")/.."
NAMES="fastapi starlette pydantic pydantic-core pydantic-settings python-dotenv uvicorn httptools click h11
annotated-types annotated-doc typing-inspection typing-extensions python-multipart sentencex py3langid anyio
idna opentelemetry-api python-docx python-pptx xlsxwriter"
SDISTS="srt"  # pure Python, published without a wheel: built here
mkdir -p .whl
pin_of() {  # NAME==VERSION from requirements.lock
    local pin
    pin=$(grep -iE "^${1}==" requirements.lock | head -1 | cut -d' ' -f1)
    [ -n "$pin" ] || { echo "no pin for $1 in requirements.lock" >&2; exit 1; }
    echo "$pin"
}
for name in $NAMES; do
    pin=$(pin_of "$name") || exit 1
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform any -d .whl "$pin"
done
for name in $SDISTS; do
    pin=$(pin_of "$name") || exit 1
    .venv/bin/python -m pip wheel -q --no-deps -w .whl "$pin"
done
# bench/ceiling.py --profile's sampler (not a dependency of the service)
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_5_x86_64 -d .whl py-spy==0.4.3
ls .whl | wc -l
du -sh .whl
