"""Text -> model input ids, shared by training and serving so both see exactly the same inputs."""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from model.config import ModelConfig
from model.tokenizer import Tokenizer

# padded ids (rows x width) from which pad_ids' array ops cost less than one nested list (measured on an AMD
# EPYC Zen 4: 4 rows of 10, 6 against 8 us; 16 rows of 10, 16 against 10 us)
ARRAY_PAD_MIN = 128

if TYPE_CHECKING:
    import torch
    from torch import Tensor


def truncate(ids: list[int], limit: int, mode: str) -> list[int]:
    """Keep `limit` ids: the head, or the first third and the last two thirds (head+tail, Sun et al. 2019)."""
    if len(ids) <= limit:
        return ids
    if mode == "head_tail":
        head = limit // 3
        return ids[:head] + ids[len(ids) - (limit - head) :]
    return ids[:limit]


def classifier_ids(tokenizer: Tokenizer, text: str, cfg: ModelConfig) -> list[int]:
    """[CLS]? + pieces + EOS, within max_len (never empty, so a blank text still has one real position)."""
    prefix = [cfg.cls_id] if cfg.pooling == "cls" and cfg.cls_id is not None else []
    body = truncate(tokenizer.encode(text), cfg.max_len - len(prefix) - 1, cfg.truncation)
    return prefix + body + [cfg.eos_id]


def source_ids(tokenizer: Tokenizer, text: str, cfg: ModelConfig) -> list[int]:
    """Translator source: pieces + EOS, within max_len (one position kept free for a target-language tag
    that decoding puts in front: ModelConfig.source_prefix)."""
    return tokenizer.encode(text)[: cfg.max_source_len - 1] + [cfg.eos_id]


def target_ids(
    tokenizer: Tokenizer, text: str, cfg: ModelConfig, target_lang: str | None = None
) -> list[int]:
    """Translator target with its start token: [start] + pieces + [EOS] (decoder input = [:-1], labels = [1:])."""
    return [cfg.start_id(target_lang)] + tokenizer.encode(text)[: cfg.max_len - 2] + [cfg.eos_id]


def pad_ids(seqs: list[list[int]], pad_id: int, device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token id lists into a (B, S) long tensor."""
    import numpy as np
    import torch  # here: the id functions above serve processes that never import torch

    width = max(map(len, seqs))
    if len(seqs) * width < ARRAY_PAD_MIN:  # a few ids: one nested list costs less than the arrays' set-up
        return torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long, device=device)
    # array ops over the whole batch: torch.tensor on nested lists reads every id through Python (2.8x slower
    # at 64 rows of 10), per-row tensor ops would each release and re-take the GIL
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)  # (B, S)
    ids = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum()))
    out[np.arange(width) < lengths[:, None]] = ids  # row-major: each row's ids, then its padding
    return torch.from_numpy(out).to(device)
