"""Training loop for both tasks: single process or `torchrun` DDP, bf16 autocast, exact resume.

A run lives in runs/<name>/: state.pt (resumable: training/run_state.py), best/ (checkpoint of the best
validation metric), metrics.jsonl, curves.png. `_train` reads as its steps: prepare the data, build the run,
resume it, fit it epoch by epoch (`_epoch`, `_step`), evaluate and keep the best (`_checkpoint`).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
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
from training.prepare import Prepared, prepare
from training.run_state import Progress, Run, is_done, load_state, log_jsonl, save_state

log = logging.getLogger(__name__)
StopCheck = Callable[[], bool]


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
        if not is_done(mlm.run_dir):  # stopped early (stop_at_step or a signal): resume later
            return best
        cfg = replace(cfg, init_from=str(best), tokenizer_from=str(cfg.run_dir / "tokenizer.model"))
    return _train(cfg)


def _epochs_left(cfg: TrainConfig, prog: Progress) -> bool:
    """max_steps, when set, alone decides the length (a masked-LM phase of pretrain_steps may take more epochs
    of its text than the fine-tuning's `epochs`) unless pretrain_epochs caps that phase; otherwise the epochs
    do."""
    capped = cfg.objective == "mlm" and cfg.pretrain_epochs > 0
    return (cfg.max_steps > 0 and not capped) or prog.epoch < cfg.epochs


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
    """One phase (supervised or masked-LM) of a run, from scratch or resumed."""
    rank, world = setup_distributed()
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    run = _build(cfg, _prepare(cfg, rank, world), rank, world)
    if _resume(run) or run.prog.done:
        return cfg.run_dir / "best"
    _fit(run)
    run.prog.done = run.prog.done or not _epochs_left(cfg, run.prog)
    if rank == 0:
        save_state(run)
    return cfg.run_dir / "best"


def _prepare(cfg: TrainConfig, rank: int, world: int) -> Prepared:
    """The data on every rank: rank 0 trains the tokenizer; the others wait and reuse it."""
    if world == 1:
        return prepare(cfg)
    data = prepare(cfg) if rank == 0 else None
    dist.barrier()
    return data if data is not None else prepare(cfg)


def _build(cfg: TrainConfig, data: Prepared, rank: int, world: int) -> Run:
    """A seeded model (initialised from cfg.init_from if set), its optimizer and schedule."""
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
    return Run(cfg, data, model, opt, sched, lengths, total, rank, world)


def _resume(run: Run) -> bool:
    """Load the run's saved state if any; True when this command has nothing to train (a paused run)."""
    if not load_state(run):
        return False
    cfg, prog = run.cfg, run.prog
    log.info(
        "resumed from %s at step %d (epoch %d, batch %d)", run.state_path, prog.step, prog.epoch, prog.batch
    )
    if run.paused():  # a command that paused the run at this step: a later command goes on
        return True
    extended = _epochs_left(cfg, prog) and prog.step < run.total and prog.bad_evals < cfg.patience
    if prog.done and extended and not cfg.dry_run:  # a finished run given a longer schedule continues
        prog.done = False
        log.info("the schedule now runs to epoch %d (step %d): continuing", cfg.epochs, run.total)
    return False


@dataclass
class Throughput:
    """Wall time and tokens of this command, for the logged tokens/s and the run's total seconds."""

    seconds_before: float  # the run's training time in earlier commands
    start: float
    tokens: int = 0


def _fit(run: Run) -> None:
    """Epochs of steps until the schedule, early stopping, a pause or a signal ends the run."""
    cfg, prog = run.cfg, run.prog
    # the masked-LM phase leaves the classifier head unused
    ddp = (
        DistributedDataParallel(run.model, find_unused_parameters=cfg.objective == "mlm")
        if run.world > 1
        else run.model
    )
    autocast = torch.autocast(run.device.type, dtype=torch.bfloat16) if cfg.bf16 else nullcontext()
    run.model.train()
    speed = Throughput(prog.seconds, time.time())
    with _stop_on_signal(run.world == 1) as stop_requested:
        while _epochs_left(cfg, prog) and not prog.done:
            batches = shard(
                token_batches(run.lengths, cfg.batch_tokens, cfg.seed, prog.epoch), run.rank, run.world
            )
            if prog.batch >= len(batches):  # nothing left in this epoch (e.g. an empty shard)
                if not batches and cfg.max_steps:  # no data at all: max_steps would never be reached
                    prog.done = True
                    break
                prog.epoch, prog.batch = prog.epoch + 1, 0
                continue
            _epoch(run, ddp, autocast, batches, speed, stop_requested)
            if cfg.dry_run or run.paused() or stop_requested():
                break


def _epoch(
    run: Run,
    ddp: torch.nn.Module,
    autocast: AbstractContextManager[Any],
    batches: list[list[int]],
    speed: Throughput,
    stop_requested: StopCheck,
) -> None:
    """The epoch's remaining batches, from prog.batch; evaluates and saves on schedule."""
    cfg, prog = run.cfg, run.prog
    bar = tqdm(
        total=len(batches),
        initial=prog.batch,
        desc=f"epoch {prog.epoch}",
        disable=run.rank != 0,
        mininterval=1 if sys.stderr.isatty() else 60,
        file=sys.stderr,
    )
    for idx in batches[prog.batch :]:
        loss, grad_norm = _step(run, ddp, autocast, idx)
        prog.step, prog.batch = prog.step + 1, prog.batch + 1
        prog.seconds = speed.seconds_before + time.time() - speed.start
        speed.tokens += sum(run.lengths[i] for i in idx)
        bar.update(1)
        _log_step(run, bar, loss, grad_norm, speed)
        end_of_epoch = prog.batch == len(batches)
        if end_of_epoch:  # the position of the next batch to run; eval records count finished epochs
            prog.epoch, prog.batch = prog.epoch + 1, 0
        scheduled = bool(cfg.eval_every) and prog.step % cfg.eval_every == 0
        if end_of_epoch or scheduled or cfg.dry_run or prog.step == run.total:
            _checkpoint(run)
        elif run.rank == 0 and prog.step % cfg.save_every == 0:
            save_state(run)
        if prog.done or prog.step >= run.total or cfg.dry_run or run.paused() or stop_requested():
            prog.done = prog.done or prog.step >= run.total or cfg.dry_run
            break
    bar.close()


def _step(
    run: Run, ddp: torch.nn.Module, autocast: AbstractContextManager[Any], idx: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on the batch `idx`: its loss and the gradient norm before clipping."""
    with autocast:
        loss, _ = batch_loss(ddp, run.data, idx, run.cfg, run.device)
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    run.opt.step()
    run.sched.step()
    return loss, grad_norm


def _log_step(run: Run, bar: tqdm, loss: torch.Tensor, grad_norm: torch.Tensor, speed: Throughput) -> None:
    """Every log_every steps (and the first few) on rank 0: the progress bar and a metrics.jsonl line."""
    cfg, prog = run.cfg, run.prog
    if run.rank != 0 or not (prog.step % cfg.log_every == 0 or cfg.dry_run or prog.step <= 3):
        return
    rate = speed.tokens * run.world / (time.time() - speed.start)
    bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{rate:.0f}")
    log_jsonl(
        run.metrics_path,
        {
            "step": prog.step,
            "epoch": prog.epoch,
            "loss": loss.item(),
            "grad_norm": float(grad_norm),
            "lr": run.sched.get_last_lr()[0],
            "tokens_per_s": rate,
        },
    )


def _checkpoint(run: Run) -> None:
    """Evaluate on rank 0, keep the best checkpoint, apply early stopping, save the resumable state."""
    prog = run.prog
    if run.rank == 0:
        record: dict[str, Any] = {"step": prog.step, "epoch": prog.epoch}
        candidate, res, averaged = _candidate(run, record)
        if res["metric"] > prog.best:
            prog.best, prog.bad_evals = res["metric"], 0
            _save_best(run, candidate, res, averaged)
        else:
            prog.bad_evals += 1
            prog.done = prog.bad_evals >= run.cfg.patience
        log_jsonl(run.metrics_path, record | {"best": prog.best})
        log.info("step %d epoch %d: %s (best %.4f)", prog.step, prog.epoch, res, prog.best)
        from training.plots import plot_curves  # matplotlib: imported by the rank that plots only

        plot_curves(run.metrics_path, run.cfg.run_dir / "curves.png")
        save_state(run)
    if run.world > 1:
        flag = torch.tensor([int(prog.done)], device=run.device)  # nccl needs CUDA tensors
        dist.broadcast(flag, 0)
        prog.done = bool(flag.item())


def _candidate(run: Run, record: dict[str, Any]) -> tuple[torch.nn.Module, dict[str, float], list[int]]:
    """The model to compare with the best (with average_last: the mean of the last snapshots when it
    scores higher), its validation results and the steps it averages; the results go into `record`."""
    cfg, model = run.cfg, run.model
    res = evaluate(model, run.data, cfg)
    record["eval"] = res
    if cfg.average_last <= 1:
        return model, res, []
    kept = save_snapshot(cfg.run_dir, model, run.prog.step, cfg.average_last)
    if len(kept) <= 1:
        return model, res, []
    avg = copy.deepcopy(model)
    average_into(avg, kept)
    avg_res = evaluate(avg, run.data, cfg)
    record["eval_average"] = avg_res | {"snapshots": len(kept)}
    if avg_res["metric"] > res["metric"]:
        return avg, avg_res, [snapshot_step(p) for p in kept]
    return model, res, []


def _save_best(run: Run, model: torch.nn.Module, res: dict[str, float], averaged: list[int]) -> None:
    """runs/<name>/best: the checkpoint (float16) with its training settings, position and metrics."""
    cfg, prog = run.cfg, run.prog
    training = {
        "config": cfg.to_dict(),
        "step": prog.step,
        "epoch": prog.epoch,
        "seconds": round(prog.seconds),
    }
    save_checkpoint(
        cfg.run_dir / "best",
        model,
        run.data.tokenizer_path,
        dtype=torch.float16,
        training=training | ({"averaged_steps": averaged} if averaged else {}),
        metrics={"valid": res},
    )


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
    teardown_distributed()  # not on an error: that rank exits, and torchrun stops the others
    return 0


def teardown_distributed() -> None:
    """Under torchrun: every rank done, then the process group closed. A rank that exits while gloo's threads
    still run aborts ("terminate called without an active exception", SIGABRT) and fails the launch."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def sentiment_cli(argv: list[str]) -> int:
    return cli(argv, "sentiment")


def translate_cli(argv: list[str]) -> int:
    return cli(argv, "translate")
