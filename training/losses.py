"""Training losses: label-smoothed cross-entropy on target tokens, classification, masked-LM (BERT masking)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from model import pad_ids
from training.config import TrainConfig
from training.prepare import Prepared


def mask_tokens(
    ids: torch.Tensor, cfg: TrainConfig, mask_id: int, vocab: int, special: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: mask_prob of the real tokens are targets; 80% -> [MASK], 10% random, 10% kept."""
    can = torch.ones_like(ids, dtype=torch.bool)
    for s in special:
        can &= ids != s
    target = (torch.rand(ids.shape, device=ids.device) < cfg.mask_prob) & can
    labels = torch.where(target, ids, torch.full_like(ids, -100))
    roll = torch.rand(ids.shape, device=ids.device)
    inputs = torch.where(target & (roll < 0.8), torch.full_like(ids, mask_id), ids)
    random_ids = torch.randint(len(special), vocab, ids.shape, device=ids.device)
    inputs = torch.where(target & (roll >= 0.8) & (roll < 0.9), random_ids, inputs)
    return inputs, labels


def mlm_loss(
    model: torch.nn.Module, data: Prepared, ids: torch.Tensor, cfg: TrainConfig
) -> tuple[torch.Tensor, int]:
    mc, tok = data.model_cfg, data.tokenizer
    special = sorted({mc.pad_id, mc.unk_id, mc.bos_id, mc.eos_id, mc.cls_id or 0})
    inputs, labels = mask_tokens(ids, cfg, tok.piece_to_id("[MASK]"), mc.vocab_size, special)
    core = model.module if isinstance(model, DistributedDataParallel) else model
    hidden, _, _ = core.encode(inputs)
    keep = labels != -100
    logits = core.mlm_logits(hidden[keep]).float()  # (N, V) for the N masked positions only
    return F.cross_entropy(logits, labels[keep]), int(keep.sum())


def batch_loss(
    model: torch.nn.Module, data: Prepared, idx: list[int], cfg: TrainConfig, dev: torch.device
) -> tuple[torch.Tensor, int]:
    """Mean loss over the batch's target tokens (or examples) and their count."""
    pad = data.model_cfg.pad_id
    if cfg.objective == "mlm":
        return mlm_loss(model, data, pad_ids([data.train[i][0] for i in idx], pad, dev), cfg)
    if data.model_cfg.task == "sentiment":
        ids = pad_ids([data.train[i][0] for i in idx], pad, dev)
        # class indices (B,), or class probabilities (B, C) when distilling
        labels = torch.tensor([data.train[i][1] for i in idx], device=dev)
        return F.cross_entropy(model(ids).float(), labels), len(idx)
    src = pad_ids([data.train[i][0] for i in idx], pad, dev)
    tgt = pad_ids([data.train[i][1] for i in idx], pad, dev)  # type: ignore[misc]
    logits = model(src, tgt[:, :-1]).float()
    gold = tgt[:, 1:]
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        gold.reshape(-1),
        ignore_index=pad,
        label_smoothing=cfg.label_smoothing,
    )
    return loss, int((gold != pad).sum())
