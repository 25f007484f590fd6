"""Service settings from the environment (prefix APP_), validated once at start-up."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.schemas import MAX_TEXTS

# torch is imported where a method needs it: an HTTP process never does (app/parallel/http.py)
if TYPE_CHECKING:
    import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_PREFIX = "APP_"
# APP_EXPENSIVE_WORKERS=0 (auto) keeps the cheap lane this long after the last cheap call; then decoding may
# use every worker (a translation-only load keeps its throughput)
CHEAP_LANE_HOLD_S = 2.0


CUDA_WORKERS = 2  # inference workers per model process on CUDA (auto)
MANY_CORES = 8  # from this many usable cores, APP_HTTP_WORKERS=0 serves from several processes
MAX_AUTO_HTTP_WORKERS = 8
MAX_AUTO_INFERENCE_WORKERS = 8
# from MANY_CORES on a CPU, APP_MODEL_PROCESSES=0 runs one model process per this many cores left after the
# HTTP processes: the issue-36 run on 16 cores, 8 replicas pinned to 2 cores each did 2.6x (/sentiment) and
# 1.5x (/translate) one 16-core server. To be confirmed on a many-core box: docs/scaling.md
CORES_PER_MODEL_PROCESS = 2
MAX_AUTO_MODEL_PROCESSES = 16
# a batch on CUDA when APP_MAX_BATCH_SIZE / APP_MAX_BATCH_WORK are not set: (items, work units); work units
# bound it (512 short sentences, or a few dozen long texts). To be measured on a GPU: docs/scaling.md
CUDA_BATCH = (512, 65_536)


def torch_gpu_build() -> bool:
    """Whether the installed torch may be built for a GPU (CUDA or ROCm): torch.version's `cuda` and `hip`,
    read from its torch/version.py when torch is not imported yet (every build writes it; importing takes
    about a second that a process which needs no tensors can skip). True when that file says nothing clear:
    the caller then imports torch to find out."""
    if (torch := sys.modules.get("torch")) is not None:
        return bool(torch.version.cuda or torch.version.hip)
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False  # no torch at all: no GPU build either (the model processes say what is missing)
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return True
    found = dict(re.findall(r"^(cuda|hip)\s*(?::[^=\n]*)?=\s*(.*?)\s*$", text, re.MULTILINE))
    return found.keys() != {"cuda", "hip"} or any(v != "None" for v in found.values())


def usable_cores() -> int:
    """The cores this process may run on (taskset, cgroup cpusets), at most its cgroup's CPU quota (a
    container's CPU limit, e.g. Kubernetes resources.limits.cpu), else os.cpu_count()."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" (no limit) or "<quota> <period>" in microseconds
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, -(-int(quota) // int(period))))


class SettingsError(ValueError):
    """An invalid setting; the message names the environment variable."""


def cpu_workers(cores: int) -> int:
    """Auto inference workers on `cores` CPU cores: 1 on one core, 2 below MANY_CORES, then a quarter of the
    cores, at most MAX_AUTO_INFERENCE_WORKERS (Settings.inference_workers_count; each model process's slice:
    app/parallel/shares.py)."""
    if cores < 2:
        return 1
    return 2 if cores < MANY_CORES else min(MAX_AUTO_INFERENCE_WORKERS, cores // 4)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    checkpoint_dir: Path = REPO_ROOT / "checkpoints"  # every subdirectory holding a config.json is served
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantize: Literal["none", "int8"] = "none"  # int8: dynamic int8 Linear layers (CPU, float32)
    max_batch_size: int = Field(
        default=32, ge=1, le=1024
    )  # items (texts/sentences) per forward; 1 = no batching
    max_batch_delay_ms: float = Field(
        default=5.0, ge=0, le=10_000
    )  # while a batch of its key runs or every worker is busy: the longest a partial batch waits for more
    max_queue: int = Field(default=1024, ge=1)  # items waiting per model (all its queues) before 429
    # work units (app/batching/batcher.py: tokens through a model; a translated sentence: its source tokens +
    # beam_size x its output length limit): one request's budget (422 above), what may wait per model
    # (429 above), and the most one translation or attention batch takes (a bound on its duration)
    max_work: int = Field(default=50_000, ge=1)
    max_queue_work: int = Field(default=200_000, ge=1)
    max_batch_work: int = Field(default=8_192, ge=1)
    max_decode_queues: int = Field(default=64, ge=1)  # live translation queues (model, target, beam size)
    request_timeout_s: float = Field(default=30.0, gt=0)  # 504 past this deadline
    max_texts: int = Field(default=64, ge=1, le=MAX_TEXTS)  # texts per request (the schema's hard cap)
    max_chars: int = Field(default=2000, ge=1)  # characters per text
    max_body_bytes: int = Field(default=1_048_576, ge=1024)  # request body size; 413 above
    api_key: SecretStr | None = None  # when set: Authorization: Bearer <key> or X-API-Key on model routes
    # GET /metrics takes APP_API_KEY or this key (a scrape credential that cannot run models); with only this
    # key set, /metrics alone needs it. metrics_public: /metrics needs no key (e.g. scraped by pod annotations)
    metrics_api_key: SecretStr | None = None
    metrics_public: bool = False
    cors_origins: Annotated[list[str], NoDecode] = []  # comma-separated
    # Host header values served (comma-separated; "*.example.com" takes subdomains; "*" any): others get 400,
    # against DNS rebinding (app/edge/hosts.py; /health and /ready answer any Host)
    allowed_hosts: Annotated[list[str], NoDecode] = ["*"]
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one JSON object per line (app/core/logs.py)
    access_log: bool = False  # one log line per request (app.edge.gate.Gate), with its request id and latency
    warmup: bool = True  # one inference per model before /ready turns 200
    # a model that fails to load (Triton's --strict-readiness): true, /ready stays 503 naming it and why while
    # the others serve; false, /ready turns 200 and its pairs go to the next model in the routing order
    strict_readiness: bool = True
    # forward passes that run at once, each in its own thread; 0 = auto: 2 on a CPU with 2+ cores (two
    # single-threaded batches side by side beat one batch on two threads), CUDA_WORKERS on CUDA
    inference_workers: int = Field(default=0, ge=0, le=64)
    # HTTP processes (app/parallel/): each runs the app on one shared socket, one model process runs the models;
    # 1 = one process for everything; 0 = auto (http_workers_count)
    http_workers: int = Field(default=0, ge=0, le=64)
    # model processes (app/parallel/), each with its own models, batches and share of the admission limits;
    # on a CPU each pinned to its own slice of the cores, with CUDA one per visible GPU; 0 = auto
    # (model_processes_count)
    model_processes: int = Field(default=0, ge=0, le=64)
    # of those, how many may run expensive batches (decoding, attention maps) at once; 0 = auto: all but one
    # when there are 2+ workers and a classifier is served (a lane for its cheap batches), held for
    # CHEAP_LANE_HOLD_S after the last cheap batch (then all); else all
    expensive_workers: int = Field(default=0, ge=0, le=64)
    # intra-op threads per worker; 0 = auto: on CPU the cores left after one for the event loop, shared by
    # the workers (at least 1 each); on CUDA 1 (the GPU runs the math; idle intra-op threads spin)
    torch_threads: int = Field(default=0, ge=0)
    # the LibreTranslate-compatible API (app/api/libretranslate/routes.py) under this path; "" = not served
    libretranslate_prefix: str = "/libretranslate"
    # its answers carry Access-Control-Allow-Origin: * as LibreTranslate's (app/edge/open_cors.py); false:
    # APP_CORS_ORIGINS, as the native routes
    libretranslate_cors: bool = True
    fast_path: bool = True  # JSON POST routes skip FastAPI's per-request machinery (app/edge/fastpath.py)
    # classifier batches run as one TorchScript graph (model.jit.compile_classifier), translators'
    # encoder and decoder step as traced graphs (model.jit.trace_translator)
    torchscript: bool = True
    # translators' graphs are built after /ready turns 200, one model at a time off the inference workers,
    # each swapped in once built and warmed up (the eager path answers the same until then); false: built
    # before ready, as part of each model's load. A classifier's graph is always built at load (cheap)
    torchscript_after_ready: bool = True
    # /translate decodes with this engine; ctranslate2: the checkpoint converted at load (the optional
    # `ctranslate2` extra); /attention stays on torch either way
    translation_engine: Literal["torch", "ctranslate2"] = "torch"
    # which model answers a language pair (app/registry.py): origins in this order (comma-separated; trained:
    # here, opus-mt: `python -m training import marian`, argos: an Argos Translate package), and explicit
    # routes "fr-en=opus-mt-fr-en,de-en=translate-de-en" that override the order
    origin_order: Annotated[list[str], NoDecode] = ["opus-mt", "argos", "trained"]
    routes: Annotated[dict[str, str], NoDecode] = {}
    # sys.setswitchinterval: how long a thread waiting for the GIL waits before it asks for it. Python's
    # 5 ms default makes an inference worker wait up to 5 ms for the event loop after every batch
    gil_switch_interval_ms: float = Field(default=0.2, gt=0, le=100)
    # connections (python -m app, app/edge/connections.py): slow or idle clients are cut, one client cannot hold
    # every file descriptor
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)  # request line + headers, else 408 / close
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)  # the whole body after the headers, else 408
    # a body's average rate since its head, in bytes/s, past a grace period (Kestrel's MinRequestBodyDataRate:
    # 240 bytes/s after 5 s), else 408; 0 = none. While every connection is taken, a lagging body is closed
    # sooner to make room (app/edge/body_rate.py)
    min_body_rate: float = Field(default=240.0, ge=0)
    body_rate_grace_s: float = Field(default=5.0, gt=0, le=3600)
    # a client that half-closes (SHUT_WR) after its request still gets the answer; off: its end of input means
    # it left, so its queued work is dropped and a decoding stops (a fully closed socket looks the same)
    answer_half_closed: bool = False
    keepalive_timeout_s: float = Field(default=5.0, gt=0, le=3600)  # idle between requests, then closed
    max_header_bytes: int = Field(default=32_768, ge=1024, le=1_048_576)  # request line + headers; 431 above
    max_headers: int = Field(default=100, ge=8, le=10_000)  # header fields per request; 431 above
    # open client connections; past it the longest-waiting idle one is closed, else 503 (GET /health, /ready
    # still answered)
    max_connections: int = Field(default=2048, ge=8, le=1_000_000)
    # SIGTERM: in-flight requests finish within this, then the rest are cancelled; below the orchestrator's
    # grace period (Kubernetes 30 s minus the 5 s preStop, compose stop_grace_period 30 s)
    shutdown_timeout_s: float = Field(default=20.0, gt=0, le=3600)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        v = v.strip().lower()
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError(f"must be auto, cpu, cuda or cuda:N, got {v!r}")
        return v

    @field_validator("libretranslate_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        v = v.strip()
        if v and not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", v):
            raise ValueError(
                f'must be "" (off) or a path such as /libretranslate, without a trailing /, got {v!r}'
            )
        return v

    @field_validator("cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_origins(cls, v: object) -> object:
        if isinstance(v, str):
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @field_validator("origin_order", mode="before")
    @classmethod
    def _split_origins_order(cls, v: object) -> object:
        if isinstance(v, str):
            v = [o.strip() for o in v.split(",") if o.strip()]
        if isinstance(v, list) and (unknown := [o for o in v if o not in ("trained", "opus-mt", "argos")]):
            raise ValueError(f"origins are trained, opus-mt and argos, got {unknown}")
        return v

    @field_validator("routes", mode="before")
    @classmethod
    def _parse_routes(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        routes = {}
        for part in (p.strip() for p in v.split(",") if p.strip()):
            pair, _, name = part.partition("=")
            if not re.fullmatch(r"[A-Za-z_]+-[A-Za-z_]+", pair.strip()) or not name.strip():
                raise ValueError(f"routes look like fr-en=MODEL,de-en=MODEL; got {part!r}")
            routes[pair.strip()] = name.strip()
        return routes

    @field_validator("api_key", "metrics_api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("max_queue_work")
    @classmethod
    def _holds_a_request(cls, v: int, info: ValidationInfo) -> int:
        if (budget := info.data.get("max_work")) is not None and v < budget:
            raise ValueError(f"must be at least APP_MAX_WORK ({budget}): a request within budget must fit")
        return v

    @field_validator("api_key", "metrics_api_key")
    @classmethod
    def _key_can_match(cls, v: SecretStr | None) -> SecretStr | None:
        """Header values are latin-1 bytes, stripped of surrounding whitespace, without control characters:
        a key outside printable ASCII could never match. The message never shows the key."""
        key = "" if v is None else v.get_secret_value()
        if key != key.strip():
            raise ValueError("leading or trailing whitespace: no header value can carry it")
        for i, c in enumerate(key):
            if not c.isascii():
                raise ValueError(f"non-ASCII character at position {i}: send keys of printable ASCII")
            if not c.isprintable():
                raise ValueError(f"control character at position {i}: send keys of printable ASCII")
        return v

    @field_validator("metrics_public")
    @classmethod
    def _one_way_to_open_metrics(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("metrics_api_key") is not None:
            raise ValueError(f"leaves /metrics open: unset it or {ENV_PREFIX}METRICS_API_KEY")
        return v

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    def inference_workers_count(self) -> int:
        """APP_INFERENCE_WORKERS, or for 0: on a CPU with 2+ cores 2, and from MANY_CORES on a quarter of
        the cores (at most MAX_AUTO_INFERENCE_WORKERS: small models gain little from intra-op threads, so
        many cores are better used as more batches side by side); on CUDA CUDA_WORKERS (one batch's CPU
        side, padding and copies, overlaps another's kernels: BENCHMARKS.md, "GPU box")."""
        import torch

        if self.inference_workers:
            return self.inference_workers
        cores = torch.get_num_threads()
        if self.torch_device().type == "cuda":
            return CUDA_WORKERS
        return cpu_workers(cores)

    def http_workers_count(self) -> int:
        """APP_HTTP_WORKERS, or for 0: one process below MANY_CORES cores (measured best on 2 cores:
        BENCHMARKS.md), else a quarter of the cores on a CPU (the rest run the models) and half of them on
        CUDA (the GPU runs the models), at most MAX_AUTO_HTTP_WORKERS."""
        if self.http_workers:
            return self.http_workers
        cores = usable_cores()
        if cores < MANY_CORES:
            return 1
        share = cores // 2 if self.device_type() == "cuda" else cores // 4
        return max(2, min(MAX_AUTO_HTTP_WORKERS, share))

    def model_processes_count(self) -> int:
        """APP_MODEL_PROCESSES, or for 0: with CUDA one per visible GPU (one for APP_DEVICE=cuda:N); on a
        CPU one below MANY_CORES cores, else one per CORES_PER_MODEL_PROCESS cores left after the HTTP
        processes, at most MAX_AUTO_MODEL_PROCESSES and at most as many as the admission limits can be
        shared out between (split_limits_error)."""
        if self.model_processes:
            return self.model_processes
        if self.device_type() == "cuda":
            import torch

            return 1 if self.torch_device().index is not None else max(1, torch.cuda.device_count())
        cores = usable_cores()
        if cores < MANY_CORES:
            return 1
        http = self.http_workers_count()
        n = min(MAX_AUTO_MODEL_PROCESSES, (cores - http) // CORES_PER_MODEL_PROCESS)
        while n > 1 and self.split_limits_error(n):
            n -= 1
        return max(1, n)

    def split_limits_error(self, processes: int) -> str | None:
        """Why the admission limits cannot be shared out between `processes` model processes (each takes
        its floor/ceil share of APP_MAX_QUEUE, APP_MAX_QUEUE_WORK and APP_MAX_DECODE_QUEUES), if they cannot:
        each share must hold one request within APP_MAX_WORK, and one item and one decoding queue."""
        if processes <= 1:
            return None
        p = f"{ENV_PREFIX}MODEL_PROCESSES={processes}"
        if (work := self.max_queue_work // processes) < self.max_work:
            return (
                f"{p} shares {ENV_PREFIX}MAX_QUEUE_WORK={self.max_queue_work:,} out in parts of {work:,} "
                f"work units, below {ENV_PREFIX}MAX_WORK={self.max_work:,}: a request within budget could "
                f"never be admitted; set {ENV_PREFIX}MAX_QUEUE_WORK to at least {processes * self.max_work:,} "
                "or run fewer model processes"
            )
        for name, value in (("MAX_QUEUE", self.max_queue), ("MAX_DECODE_QUEUES", self.max_decode_queues)):
            if value < processes:
                return f"{p} needs {ENV_PREFIX}{name} of at least {processes} (one per model process), got {value}"
        return None

    def expensive_workers_count(self, cheap_models: bool) -> int:
        """APP_EXPENSIVE_WORKERS (at most the workers), or for 0: workers - 1 with 2+ workers and cheap
        (classifier) models to serve, else every worker."""
        workers = self.inference_workers_count()
        if self.expensive_workers:
            return min(self.expensive_workers, workers)
        return workers - 1 if workers >= 2 and cheap_models else workers

    def cheap_lane_hold_s(self) -> float | None:
        """How long the auto lane is held after a cheap call (None: APP_EXPENSIVE_WORKERS is a hard cap)."""
        return None if self.expensive_workers else CHEAP_LANE_HOLD_S

    def inference_threads(self) -> int:
        """APP_TORCH_THREADS, or for 0: on CPU the cores left after the event loop and the HTTP processes
        (APP_HTTP_WORKERS > 1), shared by the workers, at least 1 each; on CUDA 1: the GPU runs the math,
        and idle intra-op threads spin on cores the HTTP processes need (4x the CPU per request)."""
        import torch

        if self.torch_threads:
            return self.torch_threads
        cores = torch.get_num_threads()
        if self.torch_device().type == "cuda":
            return 1
        http = self.http_workers_count()
        return max(1, (cores - 1 - (http if http > 1 else 0)) // self.inference_workers_count())

    def graphs_at_load(self) -> bool:
        """Whether translators build their TorchScript graphs as they load (else after ready, or never)."""
        return self.torchscript and not self.torchscript_after_ready

    def device_type(self) -> str:
        """torch_device()'s type ("cpu" or "cuda"), without importing torch where the answer is certain:
        APP_DEVICE=cpu, or auto with a torch built for CPUs only. The supervisor (app/parallel/) then starts
        its processes without it; SettingsError as torch_device's."""
        if self.device == "cpu" or (self.device == "auto" and not torch_gpu_build()):
            return "cpu"
        return self.torch_device().type

    def torch_device(self) -> torch.device:
        """The device to serve on; `auto` takes CUDA when present. Raises SettingsError if unavailable."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dev = torch.device(self.device)
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise SettingsError(
                    f"{ENV_PREFIX}DEVICE={self.device}: CUDA is not available on this machine"
                )
            if dev.index is not None and dev.index >= torch.cuda.device_count():
                raise SettingsError(
                    f"{ENV_PREFIX}DEVICE={self.device}: only {torch.cuda.device_count()} CUDA device(s)"
                )
        return dev

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        """float32 for `auto`, on CUDA too: float16 runs a batch of a new shape (every batch, under real
        traffic) many times slower, for a small gain on repeated shapes (docs/scaling.md)."""
        import torch

        if self.dtype == "auto":
            return torch.float32
        return getattr(torch, self.dtype)  # type: ignore[no-any-return]

    def batch_limits(self, expensive: bool) -> tuple[int, int | None]:
        """(items, work units) a batch may hold: APP_MAX_BATCH_SIZE and, for expensive batches (decoding,
        attention), APP_MAX_BATCH_WORK. On CUDA, where these are not set, batches are bounded by work units
        (tokens) rather than by items, every kind of batch: CUDA_BATCH (a GPU's throughput keeps growing
        with the batch far past a CPU's batch size)."""
        cuda = self.torch_device().type == "cuda"
        items = self.max_batch_size
        work = self.max_batch_work if expensive else None
        if cuda:
            if "max_batch_size" not in self.model_fields_set:
                items = CUDA_BATCH[0]
            work = self.max_batch_work if "max_batch_work" in self.model_fields_set else CUDA_BATCH[1]
        return items, work

    def quantize_mode(self, device: torch.device, dtype: torch.dtype) -> str | None:
        """The load_checkpoint quantize mode, or None; SettingsError where it cannot run."""
        import torch

        if self.quantize == "none":
            return None
        if device.type != "cpu" or dtype != torch.float32:
            raise SettingsError(
                f"{ENV_PREFIX}QUANTIZE={self.quantize} runs on a CPU in float32, not {device.type} with "
                f"{ENV_PREFIX}DTYPE={str(dtype).removeprefix('torch.')} (set {ENV_PREFIX}DEVICE=cpu and "
                f"{ENV_PREFIX}DTYPE=float32 or auto)"
            )
        return self.quantize

    def ctranslate2_kwargs(
        self, device: torch.device, dtype: torch.dtype, always: bool = False
    ) -> dict[str, Any] | None:
        """ctranslate2.Translator keyword arguments for APP_TRANSLATION_ENGINE=ctranslate2 (None for torch,
        unless `always`: Argos packages run on CTranslate2 whatever the engine):
        the server's device and dtype (APP_QUANTIZE=int8: compute_type int8), one replica per inference worker
        (inter_threads) so the workers decode side by side, each with the workers' intra-op threads.
        SettingsError when ctranslate2 is missing or cannot run this device and compute type."""
        if self.translation_engine != "ctranslate2" and not always:
            return None
        engine = f"{ENV_PREFIX}TRANSLATION_ENGINE=ctranslate2" if not always else "an Argos Translate package"
        if importlib.util.find_spec("ctranslate2") is None:
            raise SettingsError(
                f"{engine}: the ctranslate2 package is not installed (pip install ctranslate2, or the "
                "extra: pip install 'transformer-serving[ctranslate2]')"
            )
        import ctranslate2

        compute_type = "int8" if self.quantize == "int8" else str(dtype).removeprefix("torch.")
        supported = ctranslate2.get_supported_compute_types(device.type, device.index or 0)
        if compute_type not in supported:
            setting = (
                f"{ENV_PREFIX}QUANTIZE=int8"
                if self.quantize == "int8"
                else f"{ENV_PREFIX}DTYPE={compute_type}"
            )
            raise SettingsError(
                f"{engine} with {setting}: CTranslate2 runs {', '.join(sorted(supported))} on this {device.type}, "
                f"not {compute_type}"
            )
        return {
            "device": device.type,
            "device_index": device.index or 0,
            "compute_type": compute_type,
            "inter_threads": self.inference_workers_count(),
            "intra_threads": self.inference_threads(),
        }

    def dtype_warning(self, device: torch.device, dtype: torch.dtype) -> str | None:
        """Why `dtype` will be slow on this CPU, if it will (start-up logs it; serving goes on)."""
        import torch

        if device.type != "cpu" or dtype == torch.float32:
            return None
        if dtype == torch.bfloat16 and (
            torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        ):
            return None  # native bf16 matrix products: faster than float32 (BENCHMARKS.md)
        if dtype == torch.float16 and torch.cpu._is_amx_fp16_supported():
            return None
        native = "AVX512-BF16 or AMX" if dtype == torch.bfloat16 else "AMX-FP16"
        name = str(dtype).removeprefix("torch.")
        return (
            f"{ENV_PREFIX}DTYPE={name} on a CPU without {native}: its matrix products are emulated and run "
            f"several times slower than float32 (on a CPU, {ENV_PREFIX}DTYPE=auto is float32)"
        )

    def check_checkpoint_dir(self) -> Path:
        path = self.checkpoint_dir.expanduser()
        if not path.is_dir():
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={path}: directory does not exist")
        return path


def load_settings() -> Settings:
    """Settings from the environment; a SettingsError naming every invalid APP_ variable otherwise."""
    try:
        return Settings()
    except ValidationError as e:
        lines = []
        for err in e.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            got = "" if field in ("api_key", "metrics_api_key") else f" (got {err.get('input')!r})"
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{ENV_PREFIX}{field.upper()} ({field}): {msg}{got}")
        raise SettingsError("invalid settings: " + "; ".join(lines)) from None  # one log line
