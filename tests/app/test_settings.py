"""Settings: defaults, APP_ environment parsing, and start-up failures that name the setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from asgi_lifespan import LifespanManager

import app.core.settings.machine
from app.core.settings import CUDA_BATCH, REPO_ROOT, Settings, SettingsError, load_settings
from app.main import create_app


def test_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {
        "CHECKPOINT_DIR": str(tmp_path), "DEVICE": "CPU", "DTYPE": "bfloat16", "MAX_BATCH_SIZE": "1",
        "MAX_BATCH_DELAY_MS": "0", "API_KEY": "sekrit-42", "CORS_ORIGINS": "http://a.example, http://b.example",
        "PORT": "9000", "LOG_LEVEL": "WARNING",
    }.items():  # fmt: skip
        monkeypatch.setenv(f"APP_{name}", value)
    s = load_settings()
    assert s.checkpoint_dir == tmp_path
    assert (s.device, s.dtype, s.max_batch_size, s.max_batch_delay_ms) == ("cpu", "bfloat16", 1, 0.0)
    assert s.api_key is not None
    assert s.api_key.get_secret_value() == "sekrit-42"
    assert "sekrit-42" not in repr(s)  # the key never shows in logs
    assert s.cors_origins == ["http://a.example", "http://b.example"]
    assert (s.port, s.log_level) == (9000, "warning")
    assert s.torch_dtype(s.torch_device()) == torch.bfloat16


def test_auto_device_and_dtype() -> None:
    s = Settings()
    if not torch.cuda.is_available():
        assert s.torch_device() == torch.device("cpu")
        assert s.torch_dtype(torch.device("cpu")) == torch.float32
    assert s.torch_dtype(torch.device("cuda")) == torch.float32  # float16: slow on new shapes


@pytest.mark.parametrize("native", [True, False])
def test_a_reduced_precision_without_native_support_is_warned_about(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: native)
    s, cpu = Settings(), torch.device("cpu")
    assert s.dtype_warning(cpu, torch.float32) is None
    assert s.dtype_warning(torch.device("cuda"), torch.float16) is None
    for dtype, name, native_name in (
        (torch.bfloat16, "bfloat16", "AVX512-BF16"),
        (torch.float16, "float16", "AMX-FP16"),
    ):
        warning = s.dtype_warning(cpu, dtype)
        if native:
            assert warning is None
        else:
            assert warning is not None
            assert f"APP_DTYPE={name} on a CPU without" in warning
            assert native_name in warning
            assert "slower than float32" in warning


@pytest.mark.anyio
async def test_start_up_logs_the_dtype_warning(
    sentiment_only_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    settings = Settings(checkpoint_dir=sentiment_only_dir, device="cpu", dtype="bfloat16", warmup=False)
    with caplog.at_level("WARNING", logger="app.runtime.lifecycle"):
        async with LifespanManager(create_app(settings)):
            pass
    assert any("APP_DTYPE=bfloat16 on a CPU without AVX512-BF16" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_BATCH_SIZE", "0"),
        ("MAX_BATCH_SIZE", "many"),
        ("MAX_BATCH_DELAY_MS", "-1"),
        ("MAX_QUEUE", "0"),
        ("MAX_WORK", "0"),
        ("MAX_QUEUE_WORK", "10"),  # below APP_MAX_WORK
        ("MAX_BATCH_WORK", "0"),
        ("MAX_DECODE_QUEUES", "0"),
        ("REQUEST_TIMEOUT_S", "0"),
        ("MAX_TEXTS", "0"),
        ("MAX_CHARS", "0"),
        ("DEVICE", "tpu"),
        ("DTYPE", "int8"),
        ("PORT", "70000"),
        ("TORCH_THREADS", "-1"),
        ("INFERENCE_WORKERS", "-1"),
        ("GIL_SWITCH_INTERVAL_MS", "0"),
        ("HEADER_TIMEOUT_S", "0"),
        ("BODY_TIMEOUT_S", "-1"),
        ("KEEPALIVE_TIMEOUT_S", "0"),
        ("MAX_HEADER_BYTES", "100"),
        ("MAX_HEADERS", "2"),
        ("MAX_CONNECTIONS", "0"),
        ("SHUTDOWN_TIMEOUT_S", "0"),
    ],
)
def test_invalid_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"APP_{name}", value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert f"APP_{name} ({name.lower()})" in str(info.value)  # the variable and the field
    assert value in str(info.value)


def test_cpu_workers_and_threads_leave_the_event_loop_a_core() -> None:
    cores = torch.get_num_threads()
    auto = Settings(device="cpu")
    assert auto.inference_workers_count() == (2 if cores >= 2 else 1)
    assert auto.inference_threads() == max(1, (cores - 1) // auto.inference_workers_count())
    assert Settings(device="cpu", inference_workers=1).inference_threads() == max(1, cores - 1)
    explicit = Settings(device="cpu", inference_workers=3, torch_threads=2)
    assert (explicit.inference_workers_count(), explicit.inference_threads()) == (3, 2)


def many_cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: cores)
    monkeypatch.setattr(app.core.settings.machine, "usable_cores", lambda: cores)


@pytest.mark.parametrize(
    ("cores", "http", "workers", "threads"),
    [(2, 1, 2, 1), (4, 1, 2, 1), (16, 4, 4, 2), (64, 8, 8, 6)],
)
def test_processes_workers_and_threads_follow_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, http: int, workers: int, threads: int
) -> None:
    """One process below 8 cores (measured best on 2); above, HTTP processes and more inference workers,
    each with the cores left after the HTTP processes and the model process's event loop."""
    many_cores(monkeypatch, cores)
    s = Settings(device="cpu")
    assert (s.http_workers_count(), s.inference_workers_count(), s.inference_threads()) == (
        http,
        workers,
        threads,
    )
    assert Settings(device="cpu", http_workers=3).http_workers_count() == 3


def test_cuda_batches_are_bounded_by_work_units_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(device="cpu").batch_limits(False) == (32, None)
    assert Settings(device="cpu").batch_limits(True) == (32, 8_192)
    monkeypatch.setattr(app.core.settings.machine, "torch_gpu_build", lambda: True)  # a CUDA machine's torch
    monkeypatch.setattr(Settings, "torch_device", lambda self: torch.device("cuda"))
    assert Settings().batch_limits(False) == CUDA_BATCH
    assert Settings().batch_limits(True) == CUDA_BATCH
    assert Settings(max_batch_size=64).batch_limits(False) == (64, CUDA_BATCH[1])
    assert Settings(max_batch_work=1000).batch_limits(True) == (CUDA_BATCH[0], 1000)
    many_cores(monkeypatch, 16)
    assert Settings().http_workers_count() == 8  # half the cores: the GPU runs the models


@pytest.mark.anyio
async def test_the_gil_switch_interval_is_set_while_serving_and_restored(sentiment_only_dir: Path) -> None:
    before = sys.getswitchinterval()
    app = create_app(Settings(checkpoint_dir=sentiment_only_dir, gil_switch_interval_ms=0.5))
    async with LifespanManager(app):
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_names_app_device() -> None:
    with pytest.raises(SettingsError, match="APP_DEVICE=cuda: CUDA is not available"):
        Settings(device="cuda").torch_device()


@pytest.mark.anyio
async def test_missing_checkpoint_dir_fails_start_up(tmp_path: Path) -> None:
    app = create_app(Settings(checkpoint_dir=tmp_path / "nope"))
    with pytest.raises(
        SettingsError, match=f"APP_CHECKPOINT_DIR={tmp_path / 'nope'}: directory does not exist"
    ):
        async with LifespanManager(app):
            pass


@pytest.mark.anyio
async def test_empty_checkpoint_dir_fails_start_up(tmp_path: Path) -> None:
    (tmp_path / "not-a-checkpoint").mkdir()
    with pytest.raises(SettingsError, match="no checkpoints"):
        async with LifespanManager(create_app(Settings(checkpoint_dir=tmp_path))):
            pass


@pytest.mark.anyio
async def test_invalid_config_fails_its_model_naming_the_file(
    tmp_path: Path, tiny_sentiment_checkpoint: Path
) -> None:
    """As any checkpoint error (tests/app/test_failed_models.py): /ready 503 names the model and the file;
    start-up fails only when no model is left to serve."""
    from tests.app.conftest import eventually, serve

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    with pytest.raises(
        ValueError, match="no model can be served .broken: broken/config.json: not valid JSON"
    ):
        async with LifespanManager(create_app(Settings(checkpoint_dir=tmp_path))):
            pass
    (tmp_path / "sentiment-en").symlink_to(tiny_sentiment_checkpoint, target_is_directory=True)
    async with serve(Settings(checkpoint_dir=tmp_path), ready=False) as (app, client):
        await eventually(lambda: app.state.service.life.serving)
        r = await client.get("/ready")
        assert (r.status_code, r.json()["models"]) == (503, {"sentiment-en": "ready", "broken": "failed"})
        assert r.json()["failed"]["broken"].startswith("broken/config.json: not valid JSON")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"APP_MAX_BATCH_SIZE": "0"}, "APP_MAX_BATCH_SIZE (max_batch_size)"),
        ({"APP_CHECKPOINT_DIR": "/nonexistent/ckpts"}, "APP_CHECKPOINT_DIR=/nonexistent/ckpts"),
    ],
)
def test_python_m_app_exits_with_a_clear_message(env: dict[str, str], message: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("APP_")}
    proc = subprocess.run(
        [sys.executable, "-m", "app"],
        env=clean | env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr


def test_the_gpu_build_is_read_from_torch_files_as_torch_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor's device check without importing torch (Settings.device_type) reads the build from
    torch's libraries; it agrees with what the imported torch reports."""
    says = bool(torch.version.cuda or torch.version.hip)
    assert app.core.settings.torch_gpu_build() is says  # torch imported: its own word
    monkeypatch.delitem(sys.modules, "torch")  # as in the supervisor, before any import of it
    assert app.core.settings.torch_gpu_build() is says
    assert Settings(device="cpu").device_type() == "cpu"
    if not says:  # a CPU build: auto is the CPU, without importing torch
        assert Settings().device_type() == "cpu"
        assert "torch" not in sys.modules


_DRIVER_PROBE = """
import json, os, sys
from app.core.settings import Settings, SettingsError, machine
from app.parallel.shares import gpu_env
machine.torch_gpu_build = lambda: True  # a CUDA machine's torch, not imported
out = {}
cases = [(2, "auto", 16, None), (2, "cuda", 16, None), (2, "cuda:1", 16, None), (2, "cuda:3", 16, None),
         (2, "auto", 4, None), (0, "auto", 4, None), (0, "cuda", 4, None), (2, "auto", 16, "3,1,5,7")]
for gpus, device, cores, visible in cases:
    machine.cuda_driver_devices = lambda gpus=gpus: gpus  # what the driver says
    machine.usable_cores = lambda cores=cores: cores
    if visible:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    s = Settings(device=device, http_workers=0, model_processes=0)
    try:
        n = s.model_processes_count()
        out[f"{gpus} {device} {cores} {visible}"] = [s.device_type(), n, [gpu_env(s, i) for i in range(n)]]
    except SettingsError as e:
        out[f"{gpus} {device} {cores} {visible}"] = str(e)
out["torch imported"] = "torch" in sys.modules
print(json.dumps(out))
"""


def test_the_supervisor_lays_out_gpus_from_the_driver_without_torch() -> None:
    """Where the NVIDIA driver answers (machine.cuda_driver_devices), the supervisor's decisions (the device,
    model processes, each one's GPU) and its errors come without importing torch, as torch would make them."""
    import json

    clean = {k: v for k, v in os.environ.items() if not k.startswith("APP_") and k != "CUDA_VISIBLE_DEVICES"}
    run = subprocess.run([sys.executable, "-c", _DRIVER_PROBE], env=clean, cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    gpu = [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(2)]
    assert json.loads(run.stdout) == {
        # from 8 cores two model processes per GPU, in turns
        "2 auto 16 None": ["cuda", 4, gpu + gpu],
        "2 cuda 16 None": ["cuda", 4, gpu + gpu],
        "2 cuda:1 16 None": ["cuda", 2, [{}, {}]],  # the GPU named: torch picks it by index
        "2 cuda:3 16 None": "APP_DEVICE=cuda:3: only 2 CUDA device(s)",
        "2 auto 4 None": ["cuda", 2, gpu],  # below 8 cores one per GPU
        "0 auto 4 None": ["cpu", 1, [{}]],
        "0 cuda 4 None": "APP_DEVICE=cuda: CUDA is not available on this machine",
        # CUDA_VISIBLE_DEVICES names 4, the driver finds the first 2: those alone are handed out
        "2 auto 16 3,1,5,7": ["cuda", 4, [{"CUDA_VISIBLE_DEVICES": g} for g in "3131"]],
        "torch imported": False,
    }


class FakeLibcuda:
    """libcuda's three calls, answering as told (ctypes.byref's object is written as the driver would)."""

    def __init__(self, init: int = 0, driver: int = 13000, count: int = 2) -> None:
        self.init, self.driver, self.count = init, driver, count

    def cuInit(self, flags: int) -> int:  # noqa: N802 (the driver's names)
        return self.init

    def cuDriverGetVersion(self, ref: Any) -> int:  # noqa: N802
        ref._obj.value = self.driver
        return 0

    def cuDeviceGetCount(self, ref: Any) -> int:  # noqa: N802
        ref._obj.value = self.count
        return 0


@pytest.mark.parametrize(
    ("fake", "built", "count"),
    [
        (FakeLibcuda(), "'13.0'", 2),
        (FakeLibcuda(init=100), "'13.0'", 0),  # CUDA_ERROR_NO_DEVICE: none visible
        (FakeLibcuda(init=100), "None", None),  # a ROCm (or CPU) torch: torch counts its own GPUs
        (FakeLibcuda(init=999), "'13.0'", None),  # a failing driver: torch says what is wrong
        (FakeLibcuda(driver=12080), "'13.0'", None),  # a driver older than torch's CUDA
        (FakeLibcuda(driver=12020), "'12.8'", 2),  # the same major: minor-version compatibility
    ],
)
def test_the_driver_probe_answers_as_the_driver_and_torch_build_allow(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLibcuda, built: str, count: int | None
) -> None:
    import ctypes

    machine = app.core.settings.machine
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    monkeypatch.delitem(sys.modules, "torch")  # as in the supervisor: torch/version.py is read, not imported
    monkeypatch.setattr(machine, "_torch_version_fields", lambda: {"cuda": built, "hip": "None"})
    machine.cuda_driver_devices.cache_clear()
    try:
        assert machine.cuda_driver_devices() == count
    finally:
        machine.cuda_driver_devices.cache_clear()


def test_the_driver_probe_defers_to_torch_without_an_nvidia_driver() -> None:
    """No libcuda (this CI machine, a ROCm box): None, and torch's own answer decides."""
    import ctypes

    app.core.settings.machine.cuda_driver_devices.cache_clear()
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert app.core.settings.machine.cuda_driver_devices() is None
    else:  # a machine with the driver: the same count as torch's
        assert app.core.settings.machine.cuda_driver_devices() in (None, torch.cuda.device_count())
