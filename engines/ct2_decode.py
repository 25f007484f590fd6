"""Decoding with a CTranslate2 export of a translator (engines/ct2_convert.py), in this project's terms.

`CT2Decoder.translate_ids` is `model.inference.translate_ids` on CTranslate2: the same length-sorted batches
and `Hypothesis` lists, scores in our convention (log_prob / GNMT length penalty, EOS counted). How the
options map (CTranslate2's `translate_batch`):

- Ranking: CTranslate2 is asked for `beam_size` hypotheses with its |Y| ** beta penalty (`ct2_length_penalty`;
  any penalty != 0 selects its stopping rule, which is ours: stop once `beam_size` hypotheses have ended),
  their raw log-probabilities are recovered (score * |Y| ** beta, EOS counted) and ranked again here with
  our GNMT penalty. Neither engine's search depends on the penalty, so this is exact at length_penalty 0
  (beta = NO_EARLY_EXIT: |Y| ** 1e-20 == 1); above 0 a lower-ranked hypothesis can differ when more than
  `beam_size` end at the last step (CTranslate2 keeps its best `beam_size` of them, by its penalty).
- Length limit: ours is per sentence and forces EOS at it; CTranslate2 has one max_decoding_length per batch
  and stops there without EOS. The batch runs to its longest limit, and a sentence whose search reached its
  own limit is redone: greedy exactly in CTranslate2 (its first limit - 1 tokens, then the forced EOS scored
  by `score_batch`); beam search by the torch decoder (`fallback`), since no CTranslate2 option forces EOS
  inside a beam. Real translations rarely reach the limit (2 x source + 10 tokens by default).
- Unknown-token replacement (model/unknowns.py): the export's alignment attention is the last decoder
  layer averaged over all heads, the matrix the torch engine computes; `return_attention` gives it for the
  batches whose sources hold an <unk> or had items taken out (model/protect.py), and `model.unknowns.pick_sources` reads it as for torch. CTranslate2's own
  `replace_unknowns` copies the attended source *piece* ("<unk>" itself), not its surface text, and looks at
  every source position: not used. Hypotheses decoded without that attention (redone, or an <unk> from a
  source without one) get their alignment from the torch model.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engines.ct2_convert import export_ctranslate2, require_ctranslate2
from model.alignment import align, eager, pick_sources
from model.checkpoint import LoadedModel
from model.config import ModelConfig
from model.decoding import Decodable, DecodeOptions, Hypothesis, length_penalty
from model.inference import length_sorted_chunks, translate_ids
from model.tokenizer import Tokenizer
from model.translator import Translator
from model.unknowns import ALIGN_ALL, needs_alignment

if TYPE_CHECKING:
    import ctranslate2

NO_EARLY_EXIT = 1e-20  # a length penalty != 0 that leaves every score unchanged (see the module docstring)


def ct2_length_penalty(alpha: float) -> float:
    """CTranslate2's length penalty beta (|Y| ** beta) closest to our GNMT alpha (((5 + |Y|) / 6) ** alpha) at
    |Y| = 10: both change the score by the same factor per token there (d log / d|Y|: beta / |Y| = alpha /
    (5 + |Y|)). CTranslate2 cuts its finished hypotheses to `beam_size` by it before CT2Decoder re-ranks them:
    on the 3,000 fr-en test sentences (beam 4, alpha 0.6, 4 hypotheses) all 4 then equal ours for 2,995,
    against 2,920 with raw scores (beta ~ 0); the best hypothesis for all 3,000 either way."""
    return max(NO_EARLY_EXIT, alpha * 10 / 15)


def ctranslate2_options(options: DecodeOptions, src_lens: Sequence[int], cfg: ModelConfig) -> dict[str, Any]:
    """`translate_batch` keyword arguments with which CTranslate2 decodes the best hypothesis as `options`
    do, for a batch of sources of these lengths (ids, EOS included): the plain mapping the bench times.

    - Length limit: ours counts EOS and forces it at the limit; CTranslate2's max_decoding_length stops
      without EOS. So its max is our limit - 1: the same tokens whenever an output ends before the limit, and
      greedy always. One max per batch (the longest source's): in a batch a shorter source could run past
      its own limit (never seen on the test split; CT2Decoder redoes such sentences).
    - Length penalty: ours is GNMT's ((5 + |Y|) / 6) ** alpha, CTranslate2's |Y| ** alpha, so beam search
      agrees only at alpha = 0 (a ValueError otherwise; CT2Decoder re-ranks instead). And at 0 CTranslate2
      stops when its best beam ends, while we stop once `beam_size` hypotheses have ended (as CTranslate2
      does with any penalty): a penalty of NO_EARLY_EXIT selects its rule without changing any score.
    - min_decoding_length 0 (ours may end at the first step), EOS not returned, sources cut as
      `model.preprocess.source_ids` cuts them (max_len positions, EOS kept).
    """
    if options.beam_size > 1 and options.length_penalty != 0:
        raise ValueError(
            f"length_penalty={options.length_penalty}: CTranslate2 has no GNMT length penalty, beam search "
            "agrees with ours only at length_penalty=0"
        )
    limit = max(min(options.limit(n), cfg.max_len) for n in src_lens)
    return {
        "beam_size": options.beam_size,
        "num_hypotheses": options.num_hypotheses,
        "length_penalty": NO_EARLY_EXIT,
        "max_decoding_length": max(1, limit - 1),
        "min_decoding_length": 0,
        "return_end_token": False,
        "max_input_length": cfg.max_len,
    }


def translate_ids_ctranslate2(
    translator: ctranslate2.Translator,
    tokenizer: Tokenizer,
    cfg: ModelConfig,
    seqs: list[list[int]],
    options: DecodeOptions,
    target_lang: str | None = None,
    batch_size: int = 64,
) -> list[list[int]]:
    """The best hypothesis' token ids (no start token, no EOS) per source, in input order, with the plain
    `ctranslate2_options` mapping (length penalty 0): what bench/ctranslate2.py times."""
    results: list[list[int]] = [[] for _ in seqs]
    tag_first = cfg.target_lang_ids and cfg.target_lang_position == "decoder"
    prefix = [tokenizer.pieces([cfg.start_id(target_lang)])] if tag_first else None
    tag = cfg.source_prefix(target_lang)  # a target-language tag on the source side
    for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
        sources = [tokenizer.pieces(tag + seqs[i][:-1]) for i in chunk]  # CTranslate2 appends EOS itself
        kwargs = ctranslate2_options(options, [len(tag) + len(seqs[i]) for i in chunk], cfg)
        out = translator.translate_batch(sources, prefix and prefix * len(chunk), **kwargs)
        for i, res in zip(chunk, out, strict=True):
            results[i] = [tokenizer.piece_to_id(p) for p in res.hypotheses[0]]  # no start token
    return results


class CT2Decoder:
    """A CTranslate2 translator decoding as model.decoding does (see the module docstring).

    `fallback`: the same model in torch, for the beam searches that reach their length limit. One
    `translate_ids` call per thread at a time; the translator runs as many at once as its inter_threads.
    `lone`: the same model on every core of the process (`open_translators`), for a call made while no other
    runs: a lone request then takes the cores the others would (the batches of a busy server take one
    each, side by side).
    """

    def __init__(
        self,
        translator: ctranslate2.Translator,
        tokenizer: Tokenizer,
        cfg: ModelConfig,
        fallback: Decodable[Any] | None,
        lone: ctranslate2.Translator | None = None,
    ) -> None:
        """fallback None (a model with no torch weights, e.g. an Argos package): a beam search that reaches
        its length limit keeps CTranslate2's hypotheses, unfinished (no EOS), ranked by our penalty."""
        self.translator, self.tokenizer, self.cfg, self.fallback = translator, tokenizer, cfg, fallback
        self.lone = lone
        self._calls = 0  # translate_ids calls running
        self._eos = tokenizer.pieces([cfg.eos_id])[0]
        self.redone = 0  # sentences decoded again by `fallback` (tests, logs)
        self._lock = threading.Lock()

    def _prefix(self, target_lang: str | None) -> list[str]:
        """A multilingual decoder starts from its target-language tag (the export's decoder_start_token is
        None then): CTranslate2 takes it as a one-token target prefix."""
        cfg = self.cfg
        tag_first = cfg.target_lang_ids and cfg.target_lang_position == "decoder"
        return self.tokenizer.pieces([cfg.start_id(target_lang)]) if tag_first else []

    def _hypothesis(
        self,
        pieces: list[str],
        log_prob: float,
        alpha: float,
        src: list[int] | None = None,
        attention: list[list[float]] | None = None,
        tag: int = 0,
        want: int = 0,
    ) -> Hypothesis:
        """A hypothesis that ended in EOS, in our convention; with its source and attention (T + 1 rows: an EOS
        row; tag + S - 1 columns: a source-side tag's, none for EOS), its alignment when `restore` needs one."""
        ids = [self.tokenizer.piece_to_id(p) for p in pieces]
        assert ids[-1] == self.cfg.eos_id, ids  # only ended hypotheses get here
        hyp = Hypothesis(ids[:-1], log_prob / length_penalty(len(ids), alpha), log_prob)
        if (
            src is not None
            and attention is not None
            and needs_alignment(src, hyp.tokens, self.cfg.unk_id, want)
        ):
            rows = torch.tensor(attention, dtype=torch.float32)[:, tag:]
            hyp.alignment = pick_sources(rows, src, hyp.tokens, self.cfg.unk_id)
        return hyp

    def _unfinished(self, pieces: list[str], log_prob: float, alpha: float) -> Hypothesis:
        """A hypothesis CTranslate2 stopped at the length limit (EOS, if it has one, dropped)."""
        ids = [self.tokenizer.piece_to_id(p) for p in pieces]
        body = ids[:-1] if ids and ids[-1] == self.cfg.eos_id else ids
        return Hypothesis(body, log_prob / length_penalty(len(body) + 1, alpha), log_prob)

    def translate_per_row(
        self,
        seqs: list[list[int]],
        opts: Sequence[DecodeOptions],
        target_lang: str | None = None,
        align_unknowns: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        """translate_ids with options per source: one call per distinct options (CTranslate2 takes its length
        penalty and limit per call), results in input order."""
        groups: dict[DecodeOptions, list[int]] = {}
        for i, o in enumerate(opts):
            groups.setdefault(o, []).append(i)
        results: list[list[Hypothesis]] = [[] for _ in seqs]
        for o, idxs in groups.items():
            align = None if align_unknowns is None else [align_unknowns[i] for i in idxs]
            hyps = self.translate_ids([seqs[i] for i in idxs], o, target_lang, len(idxs), align)
            for i, h in zip(idxs, hyps, strict=True):
                results[i] = h
        return results

    def translate_ids(
        self,
        seqs: list[list[int]],
        options: DecodeOptions,
        target_lang: str | None = None,
        batch_size: int = 64,
        align_unknowns: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        """Source id lists (each ending in EOS) -> n-best hypotheses per source, in input order;
        align_unknowns: per source, which of its hypotheses get an `alignment` (model.unknowns.needs_alignment:
        0/False none, ALIGN_UNKNOWNS/True those with an <unk>, ALIGN_ALL every one)."""
        with self._lock:
            self._calls += 1
            translator = self.lone if self.lone is not None and self._calls == 1 else self.translator
        try:
            return self._translate(translator, seqs, options, target_lang, batch_size, align_unknowns)
        finally:
            with self._lock:
                self._calls -= 1

    def _translate(
        self,
        translator: ctranslate2.Translator,
        seqs: list[list[int]],
        options: DecodeOptions,
        target_lang: str | None,
        batch_size: int,
        align_unknowns: Sequence[int] | None,
    ) -> list[list[Hypothesis]]:
        cfg, k, alpha = self.cfg, options.beam_size, options.length_penalty
        want = list(align_unknowns) if align_unknowns is not None else [0] * len(seqs)
        beta = ct2_length_penalty(alpha)
        prefix = self._prefix(target_lang)
        tag = cfg.source_prefix(target_lang)  # a target-language tag on the source side
        limits = [min(options.limit(len(tag) + len(s)), cfg.max_len) for s in seqs]
        results: list[list[Hypothesis]] = [[] for _ in seqs]
        at_limit: list[tuple[int, list[str]]] = []  # greedy: (sentence, its tokens before the forced EOS)
        redo: list[int] = []  # beam search: sentences for the torch decoder
        for chunk in length_sorted_chunks([len(s) for s in seqs], batch_size):
            attend = any(  # else rare: aligned below
                want[i] == ALIGN_ALL or (want[i] and cfg.unk_id in seqs[i]) for i in chunk
            )
            out = translator.translate_batch(
                [self.tokenizer.pieces(tag + seqs[i][:-1]) for i in chunk],  # CTranslate2 appends EOS itself
                [prefix] * len(chunk) if prefix else None,
                beam_size=k,
                num_hypotheses=k,  # all it keeps: ranked here with our length penalty
                length_penalty=beta,
                max_decoding_length=max(limits[i] for i in chunk),
                min_decoding_length=0,
                return_end_token=True,
                return_scores=True,
                return_attention=attend,
                max_input_length=cfg.max_len,
            )
            wanted = [i for i in chunk if want[i]]
            first = self._first_rows(translator, wanted, seqs, prefix, tag) if attend and k > 1 else {}
            for i, res in zip(chunk, out, strict=True):
                steps = max(map(len, res.hypotheses))  # the step its search ended at (EOS counted)
                if steps < limits[i]:  # ended before its limit: every hypothesis ends in EOS
                    attention: list[Any] = [None] * len(res.hypotheses)
                    if want[i] and attend:
                        attention = [[first[i], *a[1:]] if i in first else a for a in res.attention]
                    hyps = [  # raw log-probabilities: score * |Y| ** beta
                        self._hypothesis(h, s * len(h) ** beta, alpha, seqs[i], a, len(tag), want[i])
                        for h, s, a in zip(res.hypotheses, res.scores, attention, strict=True)
                    ]
                    hyps.sort(key=lambda h: h.score, reverse=True)
                    results[i] = hyps[: options.num_hypotheses]
                elif k == 1:
                    at_limit.append((i, res.hypotheses[0][: limits[i] - 1]))
                elif self.fallback is None:
                    hyps = [
                        self._unfinished(h, s * len(h) ** beta, alpha)
                        for h, s in zip(res.hypotheses, res.scores, strict=True)
                    ]
                    hyps.sort(key=lambda h: h.score, reverse=True)
                    results[i] = hyps[: options.num_hypotheses]
                else:
                    redo.append(i)
        if at_limit:  # the tokens greedy decoding chose, then EOS forced: scored in one teacher-forced pass
            scored = translator.score_batch(
                [self.tokenizer.pieces(tag + seqs[i][:-1]) for i, _ in at_limit],
                [prefix + tokens for _, tokens in at_limit],
                max_input_length=cfg.max_len,
            )  # the prefix (a start tag) is the decoder's first input: the log-probs start after it
            for (i, tokens), res in zip(at_limit, scored, strict=True):
                log_prob = sum(res.log_probs)  # the tokens', then EOS's
                results[i] = [self._hypothesis([*tokens, self._eos], log_prob, alpha)]
        if redo:
            assert self.fallback is not None
            with self._lock:
                self.redone += len(redo)
            with torch.inference_mode():
                hyps = translate_ids(self.fallback, [seqs[i] for i in redo], options, target_lang, batch_size)
            for i, h in zip(redo, hyps, strict=True):
                results[i] = h
        # hypotheses with an <unk> but no alignment yet (redone, or decoded without attention): by torch;
        # with no torch model (fallback None) they keep none: their <unk>s are detokenized as they are
        late = [i for i in range(len(seqs)) if any(self._unaligned(seqs[i], h, want[i]) for h in results[i])]
        if late and self.fallback is not None:
            with torch.inference_mode():
                align(eager(self.fallback), [seqs[i] for i in late], [results[i] for i in late],
                      cfg.start_id(target_lang), [want[i] for i in late], source_prefix=tag)  # fmt: skip
        return results

    def _first_rows(
        self,
        translator: ctranslate2.Translator,
        todo: list[int],
        seqs: list[list[int]],
        prefix: list[str],
        tag: list[int],
    ) -> dict[int, list[float]]:
        """The first step's attention row of the sources `todo`, from a one-step greedy search: batched beam
        search returns another example's row there (CTranslate2 4.x; its greedy search and its later beam
        steps agree with torch)."""
        out = translator.translate_batch(
            [self.tokenizer.pieces(tag + seqs[i][:-1]) for i in todo],
            [prefix] * len(todo) if prefix else None,
            beam_size=1,
            max_decoding_length=1,
            min_decoding_length=0,
            return_end_token=True,
            return_attention=True,
            max_input_length=self.cfg.max_len,
        )
        return {i: res.attention[0][0] for i, res in zip(todo, out, strict=True)}

    def _unaligned(self, src: list[int], hyp: Hypothesis, want: int) -> bool:
        return hyp.alignment is None and needs_alignment(src, hyp.tokens, self.cfg.unk_id, want)


def open_translators(
    path: Path, lone_threads: int = 0, **translator_kwargs: Any
) -> tuple[ctranslate2.Translator, ctranslate2.Translator | None]:
    """The CTranslate2 model at `path` as a translator of `translator_kwargs` (inter_threads replicas of
    intra_threads each), and, when lone_threads is more than intra_threads, as a second one of one replica
    on lone_threads (CT2Decoder.lone: its weights once more in memory)."""
    ctranslate2 = require_ctranslate2()
    translator = ctranslate2.Translator(str(path), **translator_kwargs)  # reads every file now
    if lone_threads <= translator_kwargs.get("intra_threads", 1):
        return translator, None
    lone = ctranslate2.Translator(
        str(path), **(translator_kwargs | {"inter_threads": 1, "intra_threads": lone_threads})
    )
    return translator, lone


def load_ct2_decoder(
    loaded: LoadedModel,
    fallback: Decodable[Any] | None = None,
    lone_threads: int = 0,
    **translator_kwargs: Any,
) -> CT2Decoder:
    """Convert the checkpoint `loaded` came from (its float32 weights on disk) and open it in CTranslate2
    (`translator_kwargs`: device, compute_type, inter_threads, intra_threads, ...); `fallback` (default:
    `loaded.model`, eager) decodes the sentences CTranslate2 cannot. The converted files live in a temporary
    directory only while the translator loads them."""
    assert isinstance(loaded.model, Translator), f"{loaded.name} is a {loaded.config.task} model"
    with tempfile.TemporaryDirectory(prefix=f"ct2-{loaded.name}-") as tmp:
        path = export_ctranslate2(loaded.path, Path(tmp) / "model")
        translator, lone = open_translators(path, lone_threads, **translator_kwargs)
    return CT2Decoder(translator, loaded.tokenizer, loaded.config, fallback or loaded.model, lone)
