"""The model-only ceilings the HTTP figures are compared with: model.inference alone on the same inputs, and
the server's own inference-worker code without HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.load import FR_WORDS, SENTENCE_WORDS, sentiment_texts, texts

if TYPE_CHECKING:
    from app.core.settings import Settings
    from model import LoadedModel

ARRIVAL = "/sentiment, arrival order"  # a second /sentiment ceiling: unsorted batches of 32
WORKERS = "/sentiment, server's model work"  # a third: the server's inference workers' own code, no HTTP


def ceiling(
    checkpoint_dir: Path,
    sentiment: dict[str, Any],
    translate: dict[str, Any],
    beam_size: int,
    settings: dict[str, str] | None = None,
    runs: int | None = None,
    device: str = "cpu",
    batch_size: int = 32,
    sentiment_inputs: list[str] | None = None,
) -> dict[str, tuple[float, float]]:
    """(texts/s, CPU ms per text) of model.inference alone on the same inputs, batches of `batch_size`
    (32), on `device` (the CPU with torch's default threads: all cores, the best model-only figure) and,
    for classifiers, the graph the server runs (compiled unless `settings` turn APP_TORCHSCRIPT off); the
    best of 20 runs (translators: of 3). Input work (tokenizing,
    hashing n-grams) is left out: the server does it too, it is not the model's. Models load in the
    server's dtype (`settings`: the --set APP_* values, e.g. APP_DTYPE=bfloat16), and translators decode with
    its APP_TRANSLATION_ENGINE. `runs` replaces every best-of count (the
    tests' smoke runs: 1). `sentiment_inputs`: the /sentiment texts (default: bench.load's); /translate
    decodes 2 batches of sentences (at least 64)."""
    import torch

    from model import DecodeOptions, SentimentClassifier, load_checkpoint
    from model.inference import classify_ids, translate_ids
    from model.jit import compile_classifier
    from model.ngram import NgramSpec, bags
    from model.preprocess import classifier_ids, source_ids

    dtype = server_settings(settings or {}).torch_dtype(torch.device("cpu"))
    out = {}
    if sentiment:
        sm = m = load_checkpoint(
            checkpoint_dir / sentiment["model"], device, dtype=dtype
        )  # server_work's too
        model: SentimentClassifier = m.model  # type: ignore[assignment]
        inputs = sentiment_inputs or sentiment_texts(checkpoint_dir, sentiment)
        seqs = [classifier_ids(m.tokenizer, t, m.config) for t in inputs]
        # an n-gram head's hashing is input work like tokenizing (the server's, not the model's): hashed
        # here, before the clock; the encoder and the head's forward on the bags are timed together
        encoder, head = model.encoder_only(), model.ngram
        graph = compile_classifier(encoder) if server_settings(settings or {}).torchscript else None
        spec = NgramSpec.parse(m.config.ngram) if m.config.ngram else None

        def run(batches: list[range]) -> Callable[[], None]:
            hashed = [
                bags([inputs[i] for i in b], spec, m.config.ngram_buckets, device) if spec else None
                for b in batches
            ]

            def forward() -> None:
                for b, bag in zip(batches, hashed, strict=True):
                    classify_ids(encoder, [seqs[i] for i in b], batch_size, graph)
                    if head is not None and bag is not None:
                        head(*bag)

            return forward

        with torch.inference_mode():
            # sorted by length over all texts, cut into 32s
            wall, cpu = best_of(run([range(len(seqs))]), runs or 20)
            out["/sentiment"] = (len(seqs) / wall, 1000 * cpu / len(seqs))
            # the same in arrival order, 32 at a time: what a server's batches of 32 can do without HTTP
            # (the ceiling above sorts all texts first, so its batches carry almost no padding)
            arrival = [range(i, min(i + batch_size, len(seqs))) for i in range(0, len(seqs), batch_size)]
            wall, cpu = best_of(run(arrival), runs or 20)
            out[ARRIVAL] = (len(seqs) / wall, 1000 * cpu / len(seqs))
    if translate:
        m = load_checkpoint(checkpoint_dir / translate["model"], device, dtype=dtype)
        n = max(64, 2 * batch_size)
        seqs = [source_ids(m.tokenizer, t, m.config) for t in texts(FR_WORDS, n, lengths=SENTENCE_WORDS)]
        opts = DecodeOptions(beam_size=beam_size)
        run_ids: Callable[..., Any] = partial(translate_ids, m.model)
        # the server's engine (auto: CTranslate2 on a CPU where it answers as torch)
        if server_settings(settings or {}).ctranslate2_kwargs(torch.device(device), dtype) is not None:
            from engines.ct2_decode import load_ct2_decoder

            ct2 = load_ct2_decoder(
                m, compute_type=str(dtype).removeprefix("torch."), intra_threads=torch.get_num_threads()
            )
            run_ids = ct2.translate_ids

        def decode() -> None:
            run_ids(seqs, opts, translate["target_lang"], batch_size)

        wall, cpu = best_of(decode, runs or 3)  # ~1 s each: fewer runs than the classifier's
        out["/translate"] = (len(seqs) / wall, 1000 * cpu / len(seqs))
    if sentiment and device == "cpu":  # last: its worker threads set their own intra-op thread count
        out[WORKERS] = server_work(sm, inputs, settings or {}, runs or 5)
    order = ["/sentiment", ARRIVAL, WORKERS, "/translate"]  # the /sentiment references together
    return {k: out[k] for k in order if k in out}


def server_work(
    loaded: LoadedModel, inputs: list[str], settings: dict[str, str], runs: int = 5
) -> tuple[float, float]:
    """(texts/s, CPU ms per text) of the server's inference path without HTTP: as many threads as the
    server's inference workers, with its intra-op threads each (`settings`: the --set APP_* values over the
    defaults; on 2 CPU cores, 2 workers of 1 thread), run app.tasks.sentiment.SentimentHandler.run (one compiled
    graph for the encoder and the n-gram hashing and head, then the output lists) on the inputs in arrival order, 32 at a time,
    one batch per worker side by side; best of `runs` runs of every batch on every worker."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from app.tasks.sentiment import SentimentHandler

    s = server_settings(settings)
    workers, threads = s.inference_workers_count(), s.inference_threads()
    handler = SentimentHandler(loaded, s.torchscript)  # its own compiled graph: the server's exact path
    items = [handler.tokenize(t) for t in inputs]
    batches = [items[i : i + s.max_batch_size] for i in range(0, len(items), s.max_batch_size)]
    with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(threads,)) as pool:

        def run() -> None:
            for _ in pool.map(handler.run, batches * workers):  # every batch once per worker's share
                pass

        wall, cpu = best_of(run, runs)
    return len(items) * workers / wall, 1000 * cpu / (len(items) * workers)


def server_settings(settings: dict[str, str]) -> Settings:
    """The server's Settings with the --set APP_* values over the defaults."""
    from app.core.settings import Settings

    return Settings(**{k.removeprefix("APP_").lower(): v for k, v in settings.items()})


def best_of(fn: Any, runs: int = 20) -> tuple[float, float]:
    """(wall s, CPU s) of the fastest of `runs` calls after one warm-up call."""
    fn()
    best = (float("inf"), float("inf"))
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - start, time.process_time() - cpu))
    return best
