"""Evaluation metrics: accuracy, macro-F1 and calibration error for sentiment, sacreBLEU BLEU and chrF for
translation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sacrebleu
import torch

ECE_BINS = 15


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """ECE (Naeini et al. 2015; Guo et al. 2017): the top score of each row of probs (N, C) in `bins`
    equal-width bins over (0, 1]; the mean over rows of |accuracy - mean top score| of the row's bin."""
    conf, pred = probs.max(-1)
    right = (pred == labels).float()
    which = (conf * bins).ceil().clamp(1, bins).long() - 1  # (N,) bin i holds (i/bins, (i+1)/bins]
    gap = torch.zeros(bins).index_add_(0, which, right - conf).abs()  # per bin: |sum(right - conf)|
    return float(gap.sum() / max(1, len(labels)))


def accuracy_f1(pred: Sequence[int], gold: Sequence[int]) -> dict[str, float]:
    assert len(pred) == len(gold) > 0, (len(pred), len(gold))
    acc = sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)
    f1s = []
    for c in sorted(set(gold) | set(pred)):
        tp = sum(p == c and g == c for p, g in zip(pred, gold, strict=True))
        fp = sum(p == c and g != c for p, g in zip(pred, gold, strict=True))
        fn = sum(p != c and g == c for p, g in zip(pred, gold, strict=True))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"accuracy": acc, "macro_f1": sum(f1s) / len(f1s), "n": len(gold)}


def bleu_chrf(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU (13a tokenisation) and chrF with their sacrebleu signatures."""
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(list(hyps), [list(refs)])
    c = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "n": len(refs),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
