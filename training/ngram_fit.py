"""Fitting a hashed n-gram linear model (model.ngram.NgramHead) on labeled texts, and its logits.

A linear model over hashed word and character n-grams (fastText / NBSVM family) scores about what the small
Transformers score and errs on other examples, so the two together score better than either on NSMC valid
(BENCHMARKS.md). It is used twice: as a distillation teacher (training/ngram_teacher.py) and as the n-gram head of
a shipped classifier (training/ngram_head.py, `python -m training ngram-head`).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from model.ngram import CHUNK, NgramHead, NgramSpec, hash_texts

log = logging.getLogger(__name__)
BUCKETS = 1 << 22


class Bags:
    """Feature ids of many texts, flat (CSR): rows i's ids are ids[starts[i]:starts[i + 1]]."""

    def __init__(self, texts: list[str], spec: NgramSpec, buckets: int = BUCKETS):
        parts = [hash_texts(texts[i : i + CHUNK], spec, buckets) for i in range(0, len(texts), CHUNK)]
        self.ids = torch.cat([ids for ids, _ in parts] or [torch.zeros(0, dtype=torch.long)])
        lengths = torch.cat([n for _, n in parts] or [torch.zeros(0, dtype=torch.long)])
        self.starts = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, offsets) for nn.EmbeddingBag of the given rows."""
        start, length = self.starts[rows], self.starts[rows + 1] - self.starts[rows]
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), length.cumsum(0)[:-1]])
        pos = torch.arange(int(length.sum())) - torch.repeat_interleave(offsets, length)
        return self.ids[torch.repeat_interleave(start, length) + pos], offsets


def logits(model: NgramHead, bags: Bags, rows: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    """(len(rows), C) logits of the given rows."""
    if not len(rows):
        return torch.zeros(0, model.bias.numel())
    with torch.no_grad():
        return torch.cat(
            [model(*bags.batch(rows[i : i + batch_size])) for i in range(0, len(rows), batch_size)]
        )


def predict(model: NgramHead, bags: Bags, rows: torch.Tensor) -> torch.Tensor:
    """(len(rows), C) class probabilities of the given rows."""
    return logits(model, bags, rows).softmax(-1)


def fit(
    bags: Bags,
    labels: torch.Tensor,
    rows: torch.Tensor,
    valid: tuple[Bags, torch.Tensor],
    classes: int,
    epochs: int,
    seed: int,
    buckets: int = BUCKETS,
    lr: float = 0.02,
) -> NgramHead:
    """Fit on `rows` with Adam; keep the epoch with the best validation accuracy (the last of equals)."""
    gen = torch.Generator().manual_seed(seed)
    model = NgramHead(buckets, classes, sparse=True)
    opt = torch.optim.SparseAdam([model.table.weight], lr=lr)
    opt_bias = torch.optim.Adam([model.bias], lr=lr)
    vrows = torch.arange(len(valid[1]))
    # SparseAdam moves only the table rows that the fitted texts hash to: an epoch's snapshot is those rows
    # and the bias (the whole table is buckets x classes, and most epochs are snapshots on a small set)
    touched = bags.batch(rows)[0].unique()
    weight = model.table.weight

    def snapshot() -> tuple[torch.Tensor, torch.Tensor]:
        return weight.detach()[touched], model.bias.detach().clone()

    best, best_acc = snapshot(), -1.0
    for epoch in range(epochs):
        for chunk in rows[torch.randperm(len(rows), generator=gen)].split(256):
            loss = F.cross_entropy(model(*bags.batch(chunk)), labels[chunk])
            opt.zero_grad()
            opt_bias.zero_grad()
            loss.backward()
            opt.step()
            opt_bias.step()
        acc = (predict(model, valid[0], vrows).argmax(-1) == valid[1]).float().mean().item()
        log.info("n-gram model epoch %d: valid accuracy %.4f", epoch, acc)
        if acc >= best_acc:  # ties: the later, better-fit epoch
            best, best_acc = snapshot(), acc
    with torch.no_grad():
        weight[touched] = best[0]
        model.bias.copy_(best[1])
    return model
