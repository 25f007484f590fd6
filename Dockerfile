# Serving image: the FastAPI app + the shipped checkpoints, one uvicorn worker (the batcher is per process).
#
# CPU (default):
#   docker build -t transformer-serving:latest .
#   docker run --rm -p 8000:8000 transformer-serving:latest
# CUDA (host needs the NVIDIA driver >= 580 for CUDA 13 and the NVIDIA Container Toolkit):
#   docker build -t transformer-serving:cuda \
#     --build-arg BASE_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04 \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130 .
#   docker run --rm --gpus all -p 8000:8000 -e APP_DEVICE=cuda transformer-serving:cuda
# The CUDA torch wheels bundle the CUDA runtime, so changing only TORCH_INDEX_URL (keeping the slim base) gives a
# smaller GPU image; the nvidia/cuda base adds the NVIDIA_* env defaults. A base without python3 (nvidia/cuda)
# gets its distribution's Python 3 (3.12 on Ubuntu 24.04). TORCH_VERSION and the index must agree (2.13.0: cpu, cu130).
# The default index is the CPU one: `torch==2.13.0` from PyPI would pull gigabytes of CUDA packages.
#
# The CTranslate2 engine (APP_TRANSLATION_ENGINE=auto's choice on a CPU where it is installed) needs the optional
# ctranslate2 package, not installed here (+146 MB beside torch CPU's 754 MB), so this image decodes with torch:
# add `RUN pip install "ctranslate2>=4.5,<5"` in an image built FROM this one.
# Settings are APP_* env vars (see app/core/settings/). The shipped checkpoints are baked in at /app/checkpoints; mount
# a volume over it (or point APP_CHECKPOINT_DIR elsewhere) to serve others.

ARG BASE_IMAGE=python:3.11-slim

# ---- builder: a venv with the dependencies only (the code changes more often than requirements.lock) ----
FROM ${BASE_IMAGE} AS builder
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    DEBIAN_FRONTEND=noninteractive

# Only for bases without Python (nvidia/cuda): their apt versions differ per base, so they cannot be pinned here.
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Every package but torch at the version and sha256 of requirements.lock ([project].dependencies and torch's own
# requirements, resolved for this Python and the CPU torch; `make lock` refreshes it), so builds a month apart
# install the same files.
COPY requirements.lock /tmp/build/
RUN pip install --no-cache-dir --require-hashes -r /tmp/build/requirements.lock && rm -rf /tmp/build

# Then torch from its own index (CPU wheel by default): its requirements are already met, so pip adds only torch (CUDA
# index: also the nvidia-* wheels torch pins exactly); `pip check` proves the whole set consistent.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" && pip check

# ---- runtime ----
FROM ${BASE_IMAGE} AS runtime

# Same interpreter as the builder's venv (only installed when the base has none).
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --user-group --home-dir /app --no-create-home --shell /usr/sbin/nologin app

ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    APP_HOST=0.0.0.0 \
    APP_PORT=8000 \
    APP_CHECKPOINT_DIR=/app/checkpoints

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
# Code and checkpoints stay root-owned: the service user only reads them (the image also runs with a read-only root).
COPY app/ /app/app/
COPY model/ /app/model/
COPY engines/ /app/engines/
COPY training/ /app/training/
RUN python -m compileall -q /app/app /app/model /app/training
COPY checkpoints/ /app/checkpoints/

USER 10001:10001
EXPOSE 8000

# Ready = models loaded and warmed up; a 503 (or no answer) makes urlopen raise, so the exit code is 1.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('APP_PORT', '8000'), timeout=4)"]

# One process, one uvicorn worker: scale out with replicas (docker-compose.scale.yml, deploy/k8s), not workers.
CMD ["python", "-m", "app"]
