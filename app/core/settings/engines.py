"""Models and engines: which checkpoints are served, how they load (warm-up, readiness, int8, TorchScript),
which engine decodes /translate, and which model answers a language pair."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from app.core.settings.base import ENV_PREFIX, REPO_ROOT, SettingsError

# torch is imported where a method needs it: an HTTP process never does (app/parallel/http.py)
if TYPE_CHECKING:
    import torch


# what `python -m training pull` takes: a hub repository, or an Argos package's pair
PULL_SPEC = re.compile(
    r"(?:[A-Za-z0-9][\w.-]*/(?P<repo>[A-Za-z0-9][\w.-]*)|argos:(?P<pair>[a-z]{2,3}-[a-z]{2,3}))(?:@[\w.-]+)?"
)


class EngineSettings(BaseSettings):
    """A group of Settings (app/core/settings/__init__.py), which reads it from the environment."""

    if TYPE_CHECKING:  # ProcessSettings', beside this group in Settings: for mypy only, nothing at run time

        def inference_workers_count(self) -> int: ...
        def inference_threads(self) -> int: ...
        def device_type(self) -> str: ...

    checkpoint_dir: Path = REPO_ROOT / "checkpoints"  # every subdirectory holding a config.json is served
    warmup: bool = True  # one inference per model before /ready turns 200
    # one model's load, handlers and warm-up: past it that model fails (the others go on to ready); its
    # worker thread finishes the load in the background, and its result is dropped
    model_load_timeout_s: float = Field(default=300.0, gt=0)
    # a model that fails to load (Triton's --strict-readiness): true, /ready stays 503 naming it and why while
    # the others serve; false, /ready turns 200 and its pairs go to the next model in the routing order
    strict_readiness: bool = True
    quantize: Literal["none", "int8"] = "none"  # int8: dynamic int8 Linear layers (CPU, float32)
    # the memory one model may take (its parameters, and its weights file while loading), checked from
    # config.json's shapes before anything is read or allocated: a model over it fails alone. 0: half of
    # the machine's memory (model_budget_bytes)
    max_model_bytes: int = Field(default=0, ge=0)
    # classifier batches run as one TorchScript graph (model.jit.compile_classifier), translators'
    # encoder and decoder step as traced graphs (model.jit.trace_translator)
    torchscript: bool = True
    # translators' graphs are built after /ready turns 200, one model at a time off the inference workers,
    # each swapped in once built and warmed up (the eager path answers the same until then); false: built
    # before ready, as part of each model's load. A classifier's graph is always built at load (cheap)
    torchscript_after_ready: bool = True
    # /translate decodes with this engine; ctranslate2: the checkpoint converted at load (the optional
    # `ctranslate2` extra); auto: ctranslate2 on a CPU where it is installed and runs the dtype, else torch
    # (the faster engine with the same answers: BENCHMARKS.md); /attention stays on torch either way
    translation_engine: Literal["auto", "torch", "ctranslate2"] = "auto"
    # which model answers a language pair (app/registry.py): origins in this order (comma-separated; trained:
    # here, opus-mt: `python -m training import marian`, argos: an Argos Translate package), and explicit
    # routes "fr-en=opus-mt-fr-en,de-en=translate-de-en" that override the order
    origin_order: Annotated[list[str], NoDecode] = ["opus-mt", "argos", "trained"]
    routes: Annotated[dict[str, str], NoDecode] = {}
    # models pulled at start when their folder is missing (`python -m training pull SPEC` each, into the
    # checkpoint dir, then loaded while serving: app/management/pulls.py): comma-separated hub repositories
    # ORG/NAME[@REVISION] (folder NAME) and Argos packages argos:SRC-TGT[@VERSION] (folder argos-SRC-TGT)
    models: Annotated[list[str], NoDecode] = []

    @field_validator("origin_order", mode="before")
    @classmethod
    def _split_origins_order(cls, v: object) -> object:
        if isinstance(v, str):
            v = [o.strip() for o in v.split(",") if o.strip()]
        if isinstance(v, list) and (unknown := [o for o in v if o not in ("trained", "opus-mt", "argos")]):
            raise ValueError(f"origins are trained, opus-mt and argos, got {unknown}")
        return v

    @field_validator("models", mode="before")
    @classmethod
    def _split_models(cls, v: object) -> object:
        if isinstance(v, str):
            v = [m.strip() for m in v.split(",") if m.strip()]
        for spec in v if isinstance(v, list) else []:
            if not PULL_SPEC.fullmatch(str(spec)):
                raise ValueError(
                    f"models look like ORG/NAME[@REVISION] or argos:SRC-TGT[@VERSION], comma-separated; got {spec!r}"
                )
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

    def check_checkpoint_dir(self) -> Path:
        path = self.checkpoint_dir.expanduser()
        if not path.is_dir():
            raise SettingsError(f"{ENV_PREFIX}CHECKPOINT_DIR={path}: directory does not exist")
        return path

    def graphs_at_load(self) -> bool:
        """Whether translators build their TorchScript graphs as they load (else after ready, or never)."""
        return self.torchscript and not self.torchscript_after_ready

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

    def model_budget_bytes(self) -> int | None:
        """APP_MAX_MODEL_BYTES, or for 0 half of this machine's memory (None where it cannot be read)."""
        if self.max_model_bytes:
            return self.max_model_bytes
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError, AttributeError):  # not a POSIX system that tells
            return None

    def ctranslate2_kwargs(
        self, device: torch.device, dtype: torch.dtype, always: bool = False
    ) -> dict[str, Any] | None:
        """ctranslate2.Translator keyword arguments for APP_TRANSLATION_ENGINE=ctranslate2, or auto where it
        applies (None for the torch engine, unless `always`: Argos packages run on CTranslate2 whatever the
        engine):
        the server's device and dtype (APP_QUANTIZE=int8: compute_type int8), one replica per inference worker
        (inter_threads) so the workers decode side by side, each with the workers' intra-op threads.
        SettingsError when ctranslate2 is missing or cannot run this device and compute type."""
        if self.translation_engine == "torch" and not always:
            return None
        if self.translation_engine == "auto" and not always:
            return self._auto_ctranslate2_kwargs(device, dtype)
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
        return self._translator_kwargs(device, compute_type)

    def openmp_env(self) -> dict[str, str]:
        """The OpenMP waiting a CPU server decoding with CTranslate2 needs, for the environment before torch
        or ctranslate2 loads (python -m app sets what the user has not): its bundled libgomp, in a process of
        more threads than cores, hands work between a batch's threads through sleeps, and a lone request on
        two threads took 3.5 times as long as with the threads spinning (BENCHMARKS.md); ACTIVE with a finite
        spin count spins that long (libgomp's own default), then sleeps: an idle server stays idle."""
        if self.translation_engine == "torch" or self.device_type() != "cpu":
            return {}
        return {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}

    def _auto_ctranslate2_kwargs(self, device: torch.device, dtype: torch.dtype) -> dict[str, Any] | None:
        """APP_TRANSLATION_ENGINE=auto: CTranslate2's kwargs where it is installed and gives the torch
        engine's answers: on a CPU in float32, not quantized (CTranslate2's int8 and bfloat16 round otherwise
        than torch's; on CUDA the torch engine's graphs stay the measured choice until CTranslate2 is measured
        there); None, the torch engine, otherwise."""
        plain = device.type == "cpu" and str(dtype) == "torch.float32" and self.quantize == "none"
        if not plain or importlib.util.find_spec("ctranslate2") is None:
            return None
        return self._translator_kwargs(device, "float32")

    def _translator_kwargs(self, device: torch.device, compute_type: str) -> dict[str, Any]:
        """lone_threads: on a CPU, a batch decoded while no other runs takes every thread of the workers
        (engines.ct2_decode.CT2Decoder.lone): a lone request as fast as on a translator of them all."""
        workers, threads = self.inference_workers_count(), self.inference_threads()
        return {
            "device": device.type,
            "device_index": device.index or 0,
            "compute_type": compute_type,
            "inter_threads": workers,
            "intra_threads": threads,
            "lone_threads": workers * threads if device.type == "cpu" else 0,
        }
