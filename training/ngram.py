"""A hashed n-gram linear classifier: a distillation teacher whose errors differ from the Transformer's.

Word 1..W-grams and character 1..C-grams are hashed into BUCKETS rows of a (BUCKETS, classes) weight table
and summed (fastText / NBSVM family). On its own it scores about what the small Transformers score, and it
errs on other examples, so the mean of the two is ~1.5 points better than either on NSMC valid. It lives only
in training: the served model stays the Transformer student distilled from both.

Spec strings (in ``teachers``): ``ngram-w3c4`` = word 1..3-grams and character 1..4-grams; ``ngram-w3c0`` =
words only. Texts that are also in the labeled set get out-of-fold probabilities (k-fold cross-fitting), so a
teacher never labels a text it was fit on; other texts get the mean of the fold models.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from training.data import LabeledText

log = logging.getLogger(__name__)
BUCKETS = 1 << 22
_SPEC = re.compile(r"ngram-w(\d)c(\d)")
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class NgramSpec:
    words: int  # word n-grams of order 1..words
    chars: int  # character n-grams of order 1..chars (0 = none), over the space-joined words

    @staticmethod
    def parse(spec: str) -> NgramSpec | None:
        """NgramSpec for 'ngram-wWcC', None for anything else (a checkpoint directory)."""
        m = _SPEC.fullmatch(spec)
        return NgramSpec(int(m[1]), int(m[2])) if m else None


def features(text: str, spec: NgramSpec) -> list[int]:
    """Distinct hashed n-gram ids of one text."""
    words = _WORD.findall(text.lower().replace("<br />", " "))
    grams = {" ".join(words[i : i + n]) for n in range(1, spec.words + 1) for i in range(len(words) - n + 1)}
    if spec.chars:
        s = f" {' '.join(words)} "
        grams.update("\x01" + s[i : i + n] for n in range(1, spec.chars + 1) for i in range(len(s) - n + 1))
    return sorted({zlib.crc32(g.encode()) % BUCKETS for g in grams})


class _Bags:
    """Feature ids of many texts, flat (CSR): rows i's ids are ids[starts[i]:starts[i + 1]]."""

    def __init__(self, texts: list[str], spec: NgramSpec):
        rows = [features(t, spec) for t in texts]
        self.ids = torch.tensor([f for r in rows for f in r], dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        self.starts = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, offsets) for nn.EmbeddingBag of the given rows."""
        start, length = self.starts[rows], self.starts[rows + 1] - self.starts[rows]
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), length.cumsum(0)[:-1]])
        pos = torch.arange(int(length.sum())) - torch.repeat_interleave(offsets, length)
        return self.ids[torch.repeat_interleave(start, length) + pos], offsets


class _Linear(torch.nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.table = torch.nn.EmbeddingBag(BUCKETS, classes, mode="sum", sparse=True)
        torch.nn.init.zeros_(self.table.weight)
        self.bias = torch.nn.Parameter(torch.zeros(classes))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.table(ids, offsets) + self.bias  # (B, C) logits


def _predict(model: _Linear, bags: _Bags, rows: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    if not len(rows):
        return torch.zeros(0, model.bias.numel())
    with torch.no_grad():
        return torch.cat(
            [
                model(*bags.batch(rows[i : i + batch_size])).softmax(-1)
                for i in range(0, len(rows), batch_size)
            ]
        )


def _fit(
    bags: _Bags,
    labels: torch.Tensor,
    rows: torch.Tensor,
    valid: tuple[_Bags, torch.Tensor],
    classes: int,
    epochs: int,
    seed: int,
) -> _Linear:
    """Fit on `rows` with Adam; keep the epoch with the best validation accuracy (the last of equals)."""
    gen = torch.Generator().manual_seed(seed)
    model = _Linear(classes)
    opt = torch.optim.SparseAdam([model.table.weight], lr=0.02)
    opt_bias = torch.optim.Adam([model.bias], lr=0.02)
    vrows = torch.arange(len(valid[1]))
    best, best_acc = {k: v.clone() for k, v in model.state_dict().items()}, -1.0
    for epoch in range(epochs):
        for chunk in rows[torch.randperm(len(rows), generator=gen)].split(256):
            loss = F.cross_entropy(model(*bags.batch(chunk)), labels[chunk])
            opt.zero_grad()
            opt_bias.zero_grad()
            loss.backward()
            opt.step()
            opt_bias.step()
        acc = (_predict(model, valid[0], vrows).argmax(-1) == valid[1]).float().mean().item()
        log.info("n-gram teacher epoch %d: valid accuracy %.4f", epoch, acc)
        if acc >= best_acc:  # ties: the later, better-fit epoch
            best, best_acc = {k: v.clone() for k, v in model.state_dict().items()}, acc
    model.load_state_dict(best)
    return model


def ngram_probs(
    spec: NgramSpec,
    train: Sequence[LabeledText],
    valid: Sequence[LabeledText],
    texts: list[str],
    classes: int,
    folds: int = 5,
    epochs: int = 4,
    seed: int = 0,
) -> torch.Tensor:
    """Class probabilities (N, C) of k-fold n-gram models on `texts`: out-of-fold for texts in `train`."""
    bags = _Bags([x.text for x in train], spec)
    labels = torch.tensor([x.label for x in train])
    vbags, vlabels = _Bags([x.text for x in valid], spec), torch.tensor([x.label for x in valid])
    # folds by distinct text, so a duplicated review never sits on both sides of a fold
    distinct = list(dict.fromkeys(x.text for x in train))
    order = torch.randperm(len(distinct), generator=torch.Generator().manual_seed(seed)).tolist()
    fold = {distinct[j]: i % folds for i, j in enumerate(order)}
    fold_of = torch.tensor([fold[x.text] for x in train])
    targets = _Bags(texts, spec)
    own = torch.tensor([fold.get(t, -1) for t in texts])
    out = torch.zeros(len(texts), classes)
    for k in range(folds):
        log.info("n-gram teacher %s: fold %d of %d", spec, k + 1, folds)
        model = _fit(
            bags, labels, (fold_of != k).nonzero().squeeze(1), (vbags, vlabels), classes, epochs, seed + k
        )
        held_out, unseen = (own == k).nonzero().squeeze(1), (own == -1).nonzero().squeeze(1)
        out[held_out] = _predict(model, targets, held_out)  # held out of this fold's fit
        out[unseen] += _predict(model, targets, unseen) / folds  # not in train: the mean of all folds
    return out
