"""Training loop for both tasks: single process or `torchrun` DDP, bf16 autocast, exact resume.

Run state lives in runs/<name>/: state.pt (model, optimizer, scheduler, RNG, data position: our own file,
loaded with weights_only=True), best/ (checkpoint of the best validation metric), metrics.jsonl, curves.png.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from model import DecodeOptions, build_model, load_checkpoint, pad_ids, save_checkpoint
from model.inference import classify_ids, translate_ids
from training.averaging import average_into, save_snapshot, snapshot_step
from training.batches import shard, token_batches
from training.config import TrainConfig, parse_overrides, usage
from training.losses import batch_loss, mlm_loss
from training.metrics import accuracy_f1, bleu_chrf
from training.plots import plot_curves
from training.prepare import Prepared, prepare

log = logging.getLogger(__name__)


@dataclass
class Progress:
    step: int = 0
    epoch: int = 0
    batch: int = 0  # batches of the current epoch already consumed
    best: float = -math.inf
    bad_evals: int = 0
    done: bool = False
    seconds: float = 0.0  # training wall time summed over every resume


def setup_distributed() -> tuple[int, int]:
    """(rank, world size); initialises the process group under torchrun (gloo on CPU, nccl on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank() if world > 1 else 0), world


def lr_lambda(cfg: TrainConfig, total: int):  # noqa: ANN201
    """Linear warmup, then cosine decay to min_lr_ratio at `total` steps."""

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac))

    return f


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases, norms and embeddings."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def evaluate(model: torch.nn.Module, data: Prepared, cfg: TrainConfig) -> dict[str, float]:
    """Validation metric(s); `metric` is what selects the best checkpoint."""
    model.eval()
    if cfg.objective == "mlm":  # metric: minus the masked-LM loss on held-out texts, with a fixed mask
        gen_state = torch.get_rng_state()
        torch.manual_seed(0)
        losses = []
        with torch.no_grad():
            for i in range(0, len(data.valid), 64):
                ids = pad_ids(
                    [x for x, _ in data.valid[i : i + 64]],
                    data.model_cfg.pad_id,
                    next(model.parameters()).device,
                )
                losses.append(mlm_loss(model, data, ids, cfg)[0].item())
        torch.set_rng_state(gen_state)
        model.train()
        return {"metric": -sum(losses) / len(losses), "mlm_loss": sum(losses) / len(losses)}
    if data.model_cfg.task == "sentiment":
        probs = classify_ids(model, [x for x, _ in data.valid])  # type: ignore[arg-type]
        res = accuracy_f1(probs.argmax(-1).tolist(), [y for _, y in data.valid])
        out = {"metric": res["accuracy"], **res}
    else:
        opts = DecodeOptions(beam_size=cfg.eval_beam_size, max_length=cfg.max_tgt_len + 1)
        out, scores = {}, []
        for c in data.corpora:
            hyps = translate_ids(model, c.valid_src, opts, c.target_lang)  # type: ignore[arg-type]
            texts = [data.tokenizer.decode(h[0].tokens) for h in hyps]
            res = bleu_chrf(texts, c.valid_refs)
            out[f"bleu/{c.name}"], out[f"chrf/{c.name}"] = res["bleu"], res["chrf"]
            scores.append(res["bleu"])
        out["metric"] = sum(scores) / len(scores)
    model.train()
    return out


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


# settings a resumed run must share with the saved one (data order, vocabulary, architecture, objective)
RESUME_KEYS = (
    "task",
    "dataset",
    "seed",
    "vocab_size",
    "spm_model_type",
    "d_model",
    "n_heads",
    "n_layers",
    "n_decoder_layers",
    "d_ff",
    "norm_first",
    "pooling",
    "max_src_len",
    "max_tgt_len",
    "truncation",
    "batch_tokens",
    "objective",
    "teachers",
    "distill_dataset",
    "distill_examples",
)


def _check_resumable(saved: dict[str, Any], cfg: TrainConfig, path: Path) -> None:
    now = cfg.to_dict()
    defaults = {
        f.name: f.default for f in fields(TrainConfig)
    }  # keys newer than the saved state: their default
    diff = {
        k: (saved.get(k, defaults[k]), now[k]) for k in RESUME_KEYS if saved.get(k, defaults[k]) != now[k]
    }
    if diff:
        raise ValueError(
            f"{path}: cannot resume with different settings (saved, now): {diff}; "
            "use another --name or --out-dir for a new run"
        )


def _save_state(
    path: Path,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: Any,
    prog: Progress,
    cfg: TrainConfig,
) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "progress": vars(prog),
            "rng": _rng_state(),
            "config": cfg.to_dict(),
        },
        tmp,
    )
    tmp.replace(path)  # atomic: a kill mid-save never leaves a broken state.pt


def _log_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def init_from(model: torch.nn.Module, path: str) -> None:
    """Copy every tensor of a checkpoint whose name and shape match (e.g. a masked-LM pretrained encoder)."""
    src = load_checkpoint(path).model.state_dict()
    own = model.state_dict()
    matched = {k: v for k, v in src.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(matched, strict=False)
    log.info("initialised %d/%d tensors from %s", len(matched), len(own), path)


def train(cfg: TrainConfig) -> Path:
    """Train (or resume) the run in cfg.run_dir; returns the best checkpoint directory.

    With a pretrain_dataset, a masked-LM phase (its own resumable run in <run>/mlm) comes first and the
    supervised phase starts from its best checkpoint.
    """
    if cfg.threads:  # before any prepare(): teachers label their texts there
        torch.set_num_threads(cfg.threads)
    if cfg.pretrain_dataset and cfg.pretrain_steps and cfg.objective == "supervised" and not cfg.init_from:
        prepare(cfg)  # the tokenizer, trained on labeled + unlabeled text, is shared by both phases
        mlm = replace(
            cfg,
            objective="mlm",
            name=f"{cfg.run_dir.name}/mlm",
            dataset=cfg.pretrain_dataset,
            max_steps=cfg.pretrain_steps,
            epochs=cfg.pretrain_epochs or cfg.epochs,
            batch_tokens=cfg.pretrain_batch_tokens,
            patience=10**6,
            eval_every=min(1000, cfg.pretrain_steps),
            tokenizer_from=str(cfg.run_dir / "tokenizer.model"),
            pretrain_dataset="",
            pretrain_steps=0,
            teachers="",
            distill_dataset="",
        )
        best = train(mlm)
        if not _done(mlm.run_dir):  # stopped early (stop_at_step or a signal): resume later
            return best
        cfg = replace(cfg, init_from=str(best), tokenizer_from=str(cfg.run_dir / "tokenizer.model"))
    return _train(cfg)


def _epochs_left(cfg: TrainConfig, prog: Progress) -> bool:
    """max_steps, when set, alone decides the length (a masked-LM phase of pretrain_steps may take more epochs
    of its text than the fine-tuning's `epochs`) unless pretrain_epochs caps that phase; otherwise the epochs
    do."""
    capped = cfg.objective == "mlm" and cfg.pretrain_epochs > 0
    return (cfg.max_steps > 0 and not capped) or prog.epoch < cfg.epochs


def _done(run: Path) -> bool:
    state = run / "state.pt"
    return state.exists() and torch.load(state, weights_only=True)["progress"]["done"]


@contextmanager
def _stop_on_signal(enabled: bool) -> Iterator[Callable[[], bool]]:
    """SIGTERM/SIGINT ask the loop to finish its step, save the resumable state and return (preemptible
    runs: `kill PID`, then the same command resumes). Single process only: DDP ranks would stop at
    different steps."""
    requested: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum: int, frame: object) -> None:
        if not requested:
            log.warning(
                "%s: stopping after this step (the state is saved for resuming)", signal.Signals(signum).name
            )
        requested.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield lambda: bool(requested)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _train(cfg: TrainConfig) -> Path:
    rank, world = setup_distributed()
    run = cfg.run_dir

    def paused(prog: Progress) -> bool:
        return bool(cfg.stop_at_step) and prog.step >= cfg.stop_at_step

    run.mkdir(parents=True, exist_ok=True)
    if world > 1:  # rank 0 trains the tokenizer; the others wait and reuse it
        if rank == 0:
            data = prepare(cfg)
        dist.barrier()
        if rank != 0:
            data = prepare(cfg)
    else:
        data = prepare(cfg)
    dev = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(data.model_cfg).to(dev)
    if cfg.init_from:
        init_from(model, cfg.init_from)
    opt = make_optimizer(model, cfg)
    lengths = [len(s) + (len(t) if isinstance(t, list) else 0) for s, t in data.train]
    total = cfg.max_steps or sum(
        len(shard(token_batches(lengths, cfg.batch_tokens, cfg.seed, e), rank, world))
        for e in range(cfg.epochs)
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, total))
    prog = Progress()
    state_path = run / "state.pt"
    if state_path.exists():
        st = torch.load(state_path, map_location="cpu", weights_only=True)  # RNG states must stay on the CPU
        _check_resumable(st["config"], cfg, state_path)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        prog = Progress(**st["progress"])
        _set_rng_state(st["rng"])
        log.info(
            "resumed from %s at step %d (epoch %d, batch %d)", state_path, prog.step, prog.epoch, prog.batch
        )
        if paused(prog):  # a command that paused the run at this step: a later command goes on
            return run / "best"
        extended = _epochs_left(cfg, prog) and prog.step < total and prog.bad_evals < cfg.patience
        if prog.done and extended and not cfg.dry_run:  # a finished run given a longer schedule continues
            prog.done = False
            log.info("the schedule now runs to epoch %d (step %d): continuing", cfg.epochs, total)
    if prog.done:
        return run / "best"
    # the masked-LM phase leaves the classifier head unused
    ddp = (
        DistributedDataParallel(model, find_unused_parameters=cfg.objective == "mlm") if world > 1 else model
    )
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if cfg.bf16 else nullcontext()
    metrics_path = run / "metrics.jsonl"
    model.train()
    t0, tokens_seen, seconds0 = time.time(), 0, prog.seconds
    with _stop_on_signal(world == 1) as stop_requested:
        while _epochs_left(cfg, prog) and not prog.done:
            batches = shard(token_batches(lengths, cfg.batch_tokens, cfg.seed, prog.epoch), rank, world)
            if prog.batch >= len(batches):  # nothing left in this epoch (e.g. an empty shard)
                if not batches and cfg.max_steps:  # no data at all: max_steps would never be reached
                    prog.done = True
                    break
                prog.epoch, prog.batch = prog.epoch + 1, 0
                continue
            bar = tqdm(
                total=len(batches),
                initial=prog.batch,
                desc=f"epoch {prog.epoch}",
                disable=rank != 0,
                mininterval=1 if sys.stderr.isatty() else 60,
                file=sys.stderr,
            )
            for idx in batches[prog.batch :]:
                with autocast:
                    loss, n = batch_loss(ddp, data, idx, cfg, dev)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                sched.step()
                prog.step, prog.batch = prog.step + 1, prog.batch + 1
                prog.seconds = seconds0 + time.time() - t0
                tokens_seen += sum(lengths[i] for i in idx)
                bar.update(1)
                if rank == 0 and (prog.step % cfg.log_every == 0 or cfg.dry_run or prog.step <= 3):
                    rate = tokens_seen * world / (time.time() - t0)
                    bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{rate:.0f}")
                    _log_jsonl(
                        metrics_path,
                        {
                            "step": prog.step,
                            "epoch": prog.epoch,
                            "loss": loss.item(),
                            "grad_norm": float(grad_norm),
                            "lr": sched.get_last_lr()[0],
                            "tokens_per_s": rate,
                        },
                    )
                end_of_epoch = prog.batch == len(batches)
                if end_of_epoch:  # the position of the next batch to run; eval records count finished epochs
                    prog.epoch, prog.batch = prog.epoch + 1, 0
                scheduled = bool(cfg.eval_every) and prog.step % cfg.eval_every == 0
                if end_of_epoch or scheduled or cfg.dry_run or prog.step == total:
                    _checkpoint(model, opt, sched, prog, cfg, data, rank, world, state_path, metrics_path)
                elif rank == 0 and prog.step % cfg.save_every == 0:
                    _save_state(state_path, model, opt, sched, prog, cfg)
                if prog.done or prog.step >= total or cfg.dry_run or paused(prog) or stop_requested():
                    prog.done = prog.done or prog.step >= total or cfg.dry_run
                    break
            bar.close()
            if cfg.dry_run or paused(prog) or stop_requested():
                break
    prog.done = prog.done or not _epochs_left(cfg, prog)
    if rank == 0:
        _save_state(state_path, model, opt, sched, prog, cfg)
    return run / "best"


def _checkpoint(
    model,
    opt,
    sched,
    prog: Progress,
    cfg: TrainConfig,
    data: Prepared,
    rank: int,
    world: int,  # noqa: ANN001
    state_path: Path,
    metrics_path: Path,
) -> None:
    """Evaluate on rank 0, keep the best checkpoint, apply early stopping, save the resumable state."""
    if rank == 0:
        res = evaluate(model, data, cfg)
        record: dict[str, Any] = {"step": prog.step, "epoch": prog.epoch, "eval": res}
        candidate, averaged = model, []
        if cfg.average_last > 1:
            kept = save_snapshot(cfg.run_dir, model, prog.step, cfg.average_last)
            if len(kept) > 1:
                avg = copy.deepcopy(model)
                average_into(avg, kept)
                avg_res = evaluate(avg, data, cfg)
                record["eval_average"] = avg_res | {"snapshots": len(kept)}
                if avg_res["metric"] > res["metric"]:
                    candidate, res, averaged = avg, avg_res, [snapshot_step(p) for p in kept]
        improved = res["metric"] > prog.best
        if improved:
            prog.best, prog.bad_evals = res["metric"], 0
            save_checkpoint(
                cfg.run_dir / "best",
                candidate,
                data.tokenizer_path,
                dtype=torch.float16,
                training={
                    "config": cfg.to_dict(),
                    "step": prog.step,
                    "epoch": prog.epoch,
                    "seconds": round(prog.seconds),
                }
                | ({"averaged_steps": averaged} if averaged else {}),
                metrics={"valid": res},
            )
        else:
            prog.bad_evals += 1
            prog.done = prog.bad_evals >= cfg.patience
        _log_jsonl(metrics_path, record | {"best": prog.best})
        log.info("step %d epoch %d: %s (best %.4f)", prog.step, prog.epoch, res, prog.best)
        plot_curves(metrics_path, cfg.run_dir / "curves.png")
        _save_state(state_path, model, opt, sched, prog, cfg)
    if world > 1:
        flag = torch.tensor(
            [int(prog.done)], device=next(model.parameters()).device
        )  # nccl needs CUDA tensors
        dist.broadcast(flag, 0)
        prog.done = bool(flag.item())


# --- the `sentiment` and `translate` commands ------------------------------------------------------------


def cli(argv: list[str], command: str) -> int:
    """`python -m training sentiment|translate ...`: parse, train (or resume), print the best checkpoint."""
    if any(a in ("-h", "--help") for a in argv):
        print(usage(command))
        return 0
    task = "sentiment" if command == "sentiment" else "translation"
    try:
        cfg = parse_overrides(argv, {"task": task})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.task != task:
        print(f"error: preset/config is a {cfg.task} run, not {task}", file=sys.stderr)
        return 2
    print(train(cfg))
    return 0


def sentiment_cli(argv: list[str]) -> int:
    return cli(argv, "sentiment")


def translate_cli(argv: list[str]) -> int:
    return cli(argv, "translate")
