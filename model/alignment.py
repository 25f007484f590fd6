"""Which source position each output token comes from (model/unknowns.py's `pick_sources`): from the last
decoder layer's cross-attention, computed by one teacher-forced pass over the hypotheses that need it
(`align`), or given by CTranslate2's search. The torch half of unknown-token replacement; model.unknowns
holds the text half (no torch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from model.layers import make_causal_mask
from model.options import Hypothesis
from model.preprocess import pad_ids
from model.translator import Translator
from model.unknowns import needs_alignment


def pick_sources(attention: Tensor, src_ids: Sequence[int], tokens: Sequence[int], unk_id: int) -> list[int]:
    """attention (T', S') over the source (S' = S, or S - 1 without EOS; T' >= T) -> per output token the
    source position (EOS never) of highest weight: for an <unk>, among the source's <unk>s when it has some;
    ties go to the first."""
    n = len(src_ids) - 1
    if n < 1:
        return [0] * len(tokens)
    attn = attention.float()[: len(tokens), :n]  # (T, n)
    best = attn.argmax(-1).tolist()
    unks = [s for s in range(n) if src_ids[s] == unk_id]
    if unks and unk_id in tokens:
        index = torch.tensor(unks)
        among = index[attn[:, index].argmax(-1)].tolist()
        best = [among[j] if t == unk_id else best[j] for j, t in enumerate(tokens)]
    return best


@torch.inference_mode()
def cross_attention(model: Translator, pairs: Sequence[tuple[list[int], list[int]]]) -> list[Tensor]:
    """(source ids, decoder input [start] + tokens) pairs -> per pair the last decoder layer's cross-attention
    averaged over heads, (T, S) float32 on CPU: row t is the attention of the step that chose token t."""
    dev = model.banned.device
    src = pad_ids([s for s, _ in pairs], model.cfg.pad_id, dev)
    tgt = pad_ids([t for _, t in pairs], model.cfg.pad_id, dev)  # padding after a row's end changes nothing
    memory, mask, _ = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    x = model.tgt_embed(tgt)  # (B, T, D)
    causal = make_causal_mask(tgt.size(1), dev)
    *first, last = model.decoder.layers  # weights from the last layer only (no output projection either)
    for layer in first:
        x, _, _ = layer(x, memory, causal, mask)
    _, _, weights = last(x, memory, causal, mask, need_weights=True)
    mean = weights.float().mean(1).cpu()  # (B, T, S)
    return [mean[b, : len(t), : len(s)] for b, (s, t) in enumerate(pairs)]


def eager(model: object) -> Translator:
    """The Translator behind a decoder (a model.jit.TracedTranslator's `model`): its attention maps."""
    model = getattr(model, "model", model)
    assert isinstance(model, Translator), type(model)
    return model


def align(
    model: Translator,
    seqs: Sequence[list[int]],
    results: Sequence[list[Hypothesis]],
    start_id: int,
    want: Sequence[int],
    batch_size: int = 64,
    source_prefix: Sequence[int] = (),
) -> None:
    """Set `alignment` on the hypotheses that need one (`needs_alignment` with the source's `want`), by
    teacher-forced passes of `batch_size` hypotheses; `source_prefix`: the ids decoding put before each
    source (ModelConfig.source_prefix), whose attention columns are dropped."""
    unk = model.cfg.unk_id
    todo = [
        (seqs[i], h)
        for i, hyps in enumerate(results)
        for h in hyps
        if needs_alignment(seqs[i], h.tokens, unk, want[i])
    ]
    for k in range(0, len(todo), batch_size):
        group = todo[k : k + batch_size]
        maps = cross_attention(model, [([*source_prefix, *s], [start_id, *h.tokens]) for s, h in group])
        for (s, h), attn in zip(group, maps, strict=True):
            h.alignment = pick_sources(attn[:, len(source_prefix) :], s, h.tokens, unk)
