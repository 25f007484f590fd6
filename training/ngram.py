"""Fitting hashed n-gram linear models (model.ngram): k-fold distillation teachers and a classifier's head.

A linear model over hashed word and character n-grams (fastText / NBSVM family) scores about what the small
Transformers score and errs on other examples, so the two together are ~1.5 points better than either on
NSMC valid. It is used twice: as a distillation teacher (here) and as the n-gram head of a shipped classifier
(training/wide.py fits one with `fit`).

Teacher names (in ``teachers``): ``ngram-w3c4`` = word 1..3-grams and character 1..4-grams; ``ngram-w3c0`` =
words only. Texts that are also in the labeled set get out-of-fold probabilities (k-fold cross-fitting), so a
teacher never labels a text it was fit on; other texts get the mean of the fold models.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from model.ngram import CHUNK, NgramHead, NgramSpec, hash_texts
from training.data import LabeledText

log = logging.getLogger(__name__)
BUCKETS = 1 << 22
_SPEC = re.compile(r"ngram-(w\dc\d)")


def teacher_spec(teacher: str) -> NgramSpec | None:
    """NgramSpec for a teacher named 'ngram-wWcC', None for anything else (a checkpoint directory)."""
    m = _SPEC.fullmatch(teacher)
    return NgramSpec.parse(m[1]) if m else None


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


def _predict(model: NgramHead, bags: Bags, rows: torch.Tensor) -> torch.Tensor:
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
        log.info("n-gram model epoch %d: valid accuracy %.4f", epoch, acc)
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
    bags = Bags([x.text for x in train], spec)
    labels = torch.tensor([x.label for x in train])
    vbags, vlabels = Bags([x.text for x in valid], spec), torch.tensor([x.label for x in valid])
    # folds by distinct text, so a duplicated review never sits on both sides of a fold
    distinct = list(dict.fromkeys(x.text for x in train))
    order = torch.randperm(len(distinct), generator=torch.Generator().manual_seed(seed)).tolist()
    fold = {distinct[j]: i % folds for i, j in enumerate(order)}
    fold_of = torch.tensor([fold[x.text] for x in train])
    targets = Bags(texts, spec)
    own = torch.tensor([fold.get(t, -1) for t in texts])
    out = torch.zeros(len(texts), classes)
    for k in range(folds):
        log.info("n-gram teacher %s: fold %d of %d", spec, k + 1, folds)
        model = fit(
            bags, labels, (fold_of != k).nonzero().squeeze(1), (vbags, vlabels), classes, epochs, seed + k
        )
        held_out, unseen = (own == k).nonzero().squeeze(1), (own == -1).nonzero().squeeze(1)
        out[held_out] = _predict(model, targets, held_out)  # held out of this fold's fit
        out[unseen] += _predict(model, targets, unseen) / folds  # not in train: the mean of all folds
    return out
