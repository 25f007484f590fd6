#!/usr/bin/env bash
# Installs torch into $PYTHON (default python3) for `make install`. PyPI's `torch==2.13.0` for Linux x86_64 is the
# CUDA build (~17 nvidia-* packages, several GB), so a CPU machine takes the PyTorch CPU index's build instead:
#
#   TORCH_VARIANT=auto (default)  cuda when `nvidia-smi -L` lists a GPU, else cpu
#   TORCH_VARIANT=cpu             torch==2.13.0+cpu from TORCH_CPU_INDEX_URL, added to pip's own index (which still
#                                 serves torch's dependencies). When that index does not answer within
#                                 TORCH_INDEX_TIMEOUT seconds: torch==2.13.0 from pip's own index alone (a warning
#                                 says so; on a machine with a local CPU wheel that is the one pip takes)
#   TORCH_VARIANT=cuda            torch==2.13.0 from pip's own index (PyPI's Linux build bundles CUDA)
#
# Further arguments go to `pip install` (tests/deploy/test_install.py passes --dry-run --report FILE).
set -euo pipefail

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_VARIANT=${TORCH_VARIANT:-auto}
TORCH_CPU_INDEX_URL=${TORCH_CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}
TORCH_INDEX_TIMEOUT=${TORCH_INDEX_TIMEOUT:-10}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}

say() { echo "install_torch: $*" >&2; }

has_nvidia_gpu() {
    "$NVIDIA_SMI" -L 2>/dev/null | grep -q '^GPU '
}

index_answers() {  # URL: its simple-index page for torch comes back within the timeout (the outer `timeout` also
    # bounds a DNS look-up, which urllib's own timeout does not)
    timeout "$((TORCH_INDEX_TIMEOUT + 2))" "$PYTHON" -c '
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=float(sys.argv[2])).close()
' "$1" "$TORCH_INDEX_TIMEOUT" >/dev/null 2>&1
}

variant=$TORCH_VARIANT
case "$variant" in
    auto) if has_nvidia_gpu; then variant=cuda; else variant=cpu; fi ;;
    cpu | cuda) ;;
    *)
        say "TORCH_VARIANT must be auto, cpu or cuda, not '${TORCH_VARIANT}'"
        exit 2
        ;;
esac

if [ "$variant" = cuda ]; then
    say "torch==${TORCH_VERSION} (CUDA) from pip's default index"
    exec "$PYTHON" -m pip install "$@" "torch==${TORCH_VERSION}"
fi
if index_answers "$TORCH_CPU_INDEX_URL"; then
    say "torch==${TORCH_VERSION}+cpu from ${TORCH_CPU_INDEX_URL}"
    exec "$PYTHON" -m pip install "$@" --extra-index-url "$TORCH_CPU_INDEX_URL" "torch==${TORCH_VERSION}+cpu"
fi
say "WARNING: ${TORCH_CPU_INDEX_URL} is unreachable (${TORCH_INDEX_TIMEOUT} s timeout): torch==${TORCH_VERSION}" \
    "from pip's default index instead (from PyPI on Linux x86_64 that is the CUDA build, several GB)"
exec "$PYTHON" -m pip install "$@" "torch==${TORCH_VERSION}"
