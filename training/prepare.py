"""Turn a TrainConfig into a tokenizer, a ModelConfig and tokenized train/valid sets."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from model import ModelConfig, Tokenizer
from model.preprocess import classifier_ids, source_ids
from training.config import TrainConfig
from training.data import LabeledText, Pair, load_split, resolve_data_dir
from training.distill import sample_texts, teacher_probs
from training.tokenizers import train_tokenizer

log = logging.getLogger(__name__)
LABELS = ("negative", "positive")  # label 0 / 1 of NSMC and IMDb
SENTIMENT_LANGS = {"nsmc": "ko", "imdb": "en"}  # corpus (nsmc, nsmc-unlabeled, ...) -> language, for routing


@dataclass
class Corpus:
    """One translation corpus: training pairs and the valid set kept as raw references for BLEU."""

    name: str
    source_lang: str
    target_lang: str
    valid_src: list[list[int]] = field(default_factory=list)
    valid_refs: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    model_cfg: ModelConfig
    tokenizer: Tokenizer
    tokenizer_path: Path
    # (src ids, target ids), (ids, label) or, when distilling, (ids, class probabilities)
    train: list[tuple[list[int], list[int] | int | tuple[float, ...]]]
    valid: list[tuple[list[int], int]]  # sentiment only
    corpora: list[Corpus]  # translation only


def languages(dataset: str) -> tuple[str, str]:
    """'tatoeba-fr-en' -> ('fr', 'en')."""
    parts = dataset.split("-")
    if len(parts) < 3:
        raise ValueError(f"cannot read a language pair from dataset name {dataset!r} (expected NAME-SRC-TGT)")
    return parts[-2], parts[-1]


def _tokenizer(cfg: TrainConfig, texts: list[str], controls: list[str]) -> tuple[Tokenizer, Path]:
    if cfg.tokenizer_from:
        return Tokenizer(cfg.tokenizer_from), Path(cfg.tokenizer_from)
    path = cfg.run_dir / "tokenizer.model"
    if not path.exists():  # trained once per run; a resumed run reuses it
        log.info(
            "training a %s tokenizer (vocab %d) on %d texts", cfg.spm_model_type, cfg.vocab_size, len(texts)
        )
        train_tokenizer(
            texts,
            path,
            cfg.vocab_size,
            model_type=cfg.spm_model_type,
            control_symbols=controls,
            seed=cfg.seed,
            split_digits=cfg.spm_split_digits,
            byte_fallback=cfg.spm_byte_fallback,
        )
    return Tokenizer(path), path


def prepare(cfg: TrainConfig) -> Prepared:
    data_dir = resolve_data_dir(cfg.data_dir or None)
    names = [n.strip() for n in cfg.dataset.split(",") if n.strip()]
    if cfg.task == "sentiment":
        return _prepare_sentiment(cfg, names, data_dir)
    return _prepare_translation(cfg, names, data_dir)


def _model_cfg(cfg: TrainConfig, tok: Tokenizer, **task: object) -> ModelConfig:
    return ModelConfig(
        vocab_size=tok.vocab_size,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        n_decoder_layers=cfg.n_decoder_layers,
        d_ff=cfg.d_ff,
        dropout=cfg.dropout,
        attn_dropout=cfg.attn_dropout,
        norm_first=cfg.norm_first,
        pad_id=tok.pad_id,
        unk_id=tok.unk_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        **task,  # type: ignore[arg-type]
    )


def _prepare_sentiment(cfg: TrainConfig, names: list[str], data_dir: Path) -> Prepared:
    if cfg.objective == "mlm":  # unlabeled texts; the last 2000 (at most 10%) are the validation set
        texts: list[str] = [t for n in names for t in load_split(n, "train", data_dir)]  # type: ignore[misc]
        cut = len(texts) - min(2000, len(texts) // 10)
        train = [LabeledText(t, 0) for t in texts[:cut]]
        valid = [LabeledText(t, 0) for t in texts[cut:]]
    else:
        train = [x for n in names for x in load_split(n, "train", data_dir)]  # type: ignore[misc]
        valid = [x for n in names for x in load_split(n, "valid", data_dir)]  # type: ignore[misc]
        texts = [x.text for x in train]
        if cfg.pretrain_dataset:
            texts += load_split(cfg.pretrain_dataset, "train", data_dir)  # type: ignore[arg-type]
    unlabeled: list[str] = []
    if cfg.distill_dataset and cfg.objective != "mlm":
        if not cfg.teachers:
            raise ValueError("--distill-dataset needs --teachers CHECKPOINT[,CHECKPOINT...]")
        pool: list[str] = load_split(cfg.distill_dataset, "train", data_dir)  # type: ignore[assignment]
        unlabeled = sample_texts(pool, {x.text for x in valid}, cfg.distill_examples, cfg.seed)
        texts += unlabeled
    tok, tok_path = _tokenizer(cfg, texts, ["[CLS]", "[MASK]"])
    mcfg = _model_cfg(
        cfg,
        tok,
        task="sentiment",
        labels=LABELS,
        source_langs=tuple(
            sorted({SENTIMENT_LANGS[n.split("-")[0]] for n in names if n.split("-")[0] in SENTIMENT_LANGS})
        ),
        pooling=cfg.pooling,
        cls_id=tok.piece_to_id("[CLS]"),
        max_len=cfg.max_src_len,
        truncation=cfg.truncation,
    )
    enc: list = [(classifier_ids(tok, x.text, mcfg), x.label) for x in train]
    val = [(classifier_ids(tok, x.text, mcfg), x.label) for x in valid]
    if unlabeled:  # every target becomes a probability row: gold one-hot, then the teachers' mean
        probs = teacher_probs(cfg.teachers.split(","), unlabeled, cfg.run_dir, LABELS, train, valid, cfg.seed)
        k = len(LABELS)
        enc = [(ids, tuple(float(c == y) for c in range(k))) for ids, y in enc]
        enc += [
            (classifier_ids(tok, t, mcfg), tuple(p)) for t, p in zip(unlabeled, probs.tolist(), strict=True)
        ]
        log.info("%d labeled + %d teacher-labeled training texts", len(train), len(unlabeled))
    return Prepared(mcfg, tok, tok_path, enc, val, [])  # type: ignore[arg-type]


def _prepare_translation(cfg: TrainConfig, names: list[str], data_dir: Path) -> Prepared:
    splits = {n: (load_split(n, "train", data_dir), load_split(n, "valid", data_dir)) for n in names}
    pairs = {n: languages(n) for n in names}
    targets = sorted({t for _, t in pairs.values()})
    controls = [f"<2{t}>" for t in targets] if len(targets) > 1 else []
    texts = [s for train, _ in splits.values() for p in train for s in (p.src, p.tgt)]  # type: ignore[union-attr]
    tok, tok_path = _tokenizer(cfg, texts, controls)
    mcfg = _model_cfg(
        cfg,
        tok,
        task="translation",
        max_len=max(cfg.max_src_len, cfg.max_tgt_len) + 2,
        source_langs=tuple(sorted({s for s, _ in pairs.values()})),
        target_langs=tuple(targets),
        target_lang_ids={t: tok.piece_to_id(f"<2{t}>") for t in targets} if controls else {},
    )
    train, corpora = [], []
    for n, (tr, va) in splits.items():
        src_lang, tgt_lang = pairs[n]
        start = mcfg.start_id(tgt_lang)
        for p in tr:
            assert isinstance(p, Pair)
            s, t = tok.encode(p.src), tok.encode(p.tgt)
            if len(s) <= cfg.max_src_len and len(t) <= cfg.max_tgt_len:  # drop, never cut, over-long pairs
                train.append((s + [mcfg.eos_id], [start, *t, mcfg.eos_id]))  # = source_ids / target_ids
        c = Corpus(n, src_lang, tgt_lang)
        for p in va[: cfg.eval_max_examples]:
            assert isinstance(p, Pair)
            c.valid_src.append(source_ids(tok, p.src, mcfg))
            c.valid_refs.append(p.tgt)
        corpora.append(c)
    log.info("%d training pairs (after dropping over-long ones)", len(train))
    return Prepared(mcfg, tok, tok_path, train, [], corpora)  # type: ignore[arg-type]
