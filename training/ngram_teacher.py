"""The hashed n-gram distillation teacher: k-fold n-gram models label texts with class probabilities.

Teacher names (in ``teachers``): ``ngram-w3c4`` = word 1..3-grams and character 1..4-grams; ``ngram-w3c0`` =
words only. Texts that are also in the labeled set get out-of-fold probabilities (k-fold cross-fitting), so a
teacher never labels a text it was fit on; other texts get the mean of the fold models.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import torch

from model.ngram import NgramSpec
from training.data import LabeledText
from training.ngram_fit import Bags, fit, predict

log = logging.getLogger(__name__)
_SPEC = re.compile(r"ngram-(w\dc\d)")


def teacher_spec(teacher: str) -> NgramSpec | None:
    """NgramSpec for a teacher named 'ngram-wWcC', None for anything else (a checkpoint directory)."""
    m = _SPEC.fullmatch(teacher)
    return NgramSpec.parse(m[1]) if m else None


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
        out[held_out] = predict(model, targets, held_out)  # held out of this fold's fit
        out[unseen] += predict(model, targets, unseen) / folds  # not in train: the mean of all folds
    return out
