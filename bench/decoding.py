"""Decoding speed: KV-cached greedy/beam (`model.decoding`) vs recomputing the whole decoder prefix each step.

Every row generates exactly `out_len` tokens (EOS is banned until then and forced at the limit), so both paths
do the same number of steps. Throughput counts the output tokens of each example (EOS included), not beam
candidates. Run from the repo root: `python -m bench.decoding [--quick] [--repeats N] [--threads N] [--trace]`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bench.tiny import tiny_translation_config
from model import Decodable, DecodeOptions, Hypothesis, Translator, beam_search, greedy_decode
from model.jit import trace_translator
from model.layers import make_causal_mask

# the shipped translators' architecture (training/config.py _TRANSLATE), random weights
CONFIG = tiny_translation_config(8000, d_model=256, n_heads=4, n_layers=4, n_decoder_layers=3, d_ff=1024)
SRC_LEN = 20
BEAM = 4


class FixedLength:
    """A decoder (model.decoding.Decodable) that never ends before `out_len` outputs: EOS is banned until the
    last step. Wraps the cached Translator, its traced graphs or `Recompute`."""

    def __init__(self, inner: Decodable[Any]) -> None:
        self.inner, self.cfg, self.out_len = inner, inner.cfg, 1

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor, Any]:
        return self.inner.encode(src)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> Any:
        return self.inner.init_state(memory, memory_mask)

    def decode_step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]:
        log_probs, state = self.inner.decode_step(tokens, state)
        if state.step < self.out_len:
            log_probs[:, self.cfg.eos_id] = float("-inf")
        return log_probs, state


@dataclass
class PrefixState:
    """The recomputing decoder's state: the memory and every decoder input so far, reorderable like the cache."""

    memory: Tensor  # (B, S, D)
    memory_mask: Tensor  # (B, 1, 1, S)
    prefix: Tensor  # (B, t) decoder inputs
    step: int = 0

    def select(self, index: Tensor, examples: Tensor | None = None) -> PrefixState:
        """Rows by `index`; the memory is kept per row here, so `examples` is not needed."""
        return PrefixState(
            *(t.index_select(0, index) for t in (self.memory, self.memory_mask, self.prefix)), self.step
        )


class Recompute:
    """A Translator's decoder for the same search (`beam_search` bookkeeping), re-run over the whole prefix
    each step."""

    def __init__(self, model: Translator) -> None:
        self.model, self.cfg = model, model.cfg

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        return self.model.encode(src)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> PrefixState:
        return PrefixState(memory, memory_mask, memory.new_zeros(memory.size(0), 0, dtype=torch.long))

    def decode_step(self, tokens: Tensor, state: PrefixState) -> tuple[Tensor, PrefixState]:
        prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (B, t + 1)
        causal = make_causal_mask(prefix.size(1), prefix.device)
        m = self.model
        hidden, _, _ = m.decoder(m.tgt_embed(prefix), state.memory, causal, state.memory_mask)
        logits = m.generator(hidden[:, -1]).float()
        logits[:, m.banned] = float("-inf")
        return logits.log_softmax(-1), PrefixState(state.memory, state.memory_mask, prefix, state.step + 1)


@torch.inference_mode()
def notebook_greedy(model: Translator, src: Tensor, out_len: int) -> Tensor:
    """annotated-transformer's greedy decode: encode once, re-run the decoder over `ys` every step."""
    memory, memory_mask, _ = model.encode(src)
    ys = torch.full((src.size(0), 1), model.cfg.bos_id, dtype=torch.long)
    for i in range(out_len):
        causal = make_causal_mask(ys.size(1), ys.device)
        hidden, _, _ = model.decoder(model.tgt_embed(ys), memory, causal, memory_mask)
        logits = model.generator(hidden[:, -1]).float()  # (B, V)
        logits[:, model.banned] = float("-inf")
        if i + 1 < out_len:
            logits[:, model.cfg.eos_id] = float("-inf")
            next_token = logits.argmax(-1)
        else:
            next_token = torch.full_like(ys[:, 0], model.cfg.eos_id)  # the length limit forces EOS
        ys = torch.cat([ys, next_token[:, None]], dim=1)
    return ys[:, 1:-1]  # without BOS and EOS


def first_tokens(results: list[list[Hypothesis]]) -> list[list[int]]:
    return [hyps[0].tokens for hyps in results]


def measure(
    model: Translator,
    cached: FixedLength,
    recompute: FixedLength,
    src: Tensor,
    beam_size: int,
    out_len: int,
    repeats: int,
) -> tuple[float, float, list[list[int]], list[list[int]]]:
    """`cached` and `recompute` wrap `model` (greedy recomputes as notebook_greedy(model) does).
    Best-of-`repeats` seconds per batch (cache, recompute; interleaved, so both see the same machine load)
    and the best hypothesis' tokens of each path."""
    cached.out_len = recompute.out_len = out_len
    opts = DecodeOptions(
        beam_size=beam_size, max_length=out_len, max_length_ratio=0.0, max_length_offset=out_len
    )
    if beam_size == 1:
        paths = (
            lambda: first_tokens(greedy_decode(cached, src, opts)),
            lambda: notebook_greedy(model, src, out_len).tolist(),
        )
    else:
        paths = (
            lambda: first_tokens(beam_search(cached, src, opts)),
            lambda: first_tokens(beam_search(recompute, src, opts)),
        )
    times: tuple[list[float], list[float]] = ([], [])
    tokens: list[list[list[int]]] = [[], []]
    for _ in range(repeats):
        for i, path in enumerate(paths):
            start = time.perf_counter()
            tokens[i] = path()
            times[i].append(time.perf_counter() - start)
    return min(times[0]), min(times[1]), tokens[0], tokens[1]


def run(quick: bool, repeats: int, trace: bool) -> None:
    """Print the markdown table; a warm-up at out_len 2 precedes each (dtype, mode, batch) group."""
    dtypes = {"fp32": torch.float32} if quick else {"fp32": torch.float32, "bf16": torch.bfloat16}
    batches = [1, 32]
    lengths = [10, 40] if quick else [10, 20, 40]
    torch.manual_seed(0)
    model = Translator(CONFIG).eval()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads;"
        f" d_model {CONFIG.d_model}, {CONFIG.n_heads} heads, {CONFIG.n_layers}+{CONFIG.n_decoder_layers} layers,"
        f" d_ff {CONFIG.d_ff}, vocab {CONFIG.vocab_size}, source length {SRC_LEN}; best of {repeats} runs;"
        f" cached path {'traced' if trace else 'eager'}\n"
    )
    print("| mode | dtype | batch | out_len | cache tok/s | recompute tok/s | speedup |")
    print("|---|---|---:|---:|---:|---:|---:|")
    differ = []
    for dtype_name, dtype in dtypes.items():
        model.to(dtype)
        # the cached path as served: encode, cross K/V and the step as TorchScript graphs
        cached = FixedLength(trace_translator(model) if trace else model)
        recompute = FixedLength(Recompute(model))
        for beam_size in (1, BEAM):
            mode = "greedy" if beam_size == 1 else f"beam {beam_size}"
            for batch in batches:
                g = torch.Generator().manual_seed(batch)
                src = torch.randint(4, CONFIG.vocab_size, (batch, SRC_LEN), generator=g)
                measure(model, cached, recompute, src, beam_size, 2, 1)
                for out_len in lengths:
                    t_cache, t_re, got, ref = measure(
                        model, cached, recompute, src, beam_size, out_len, repeats
                    )
                    assert all(len(t) == out_len - 1 for t in got + ref), "each row must make out_len tokens"
                    same = sum(a == b for a, b in zip(got, ref, strict=True))
                    if same < batch:
                        differ.append(f"{mode} {dtype_name} batch {batch} out_len {out_len}: {same}/{batch}")
                    n = batch * out_len
                    print(
                        f"| {mode} | {dtype_name} | {batch} | {out_len} | {n / t_cache:,.0f} | {n / t_re:,.0f}"
                        f" | {t_re / t_cache:.1f}x |",
                        flush=True,
                    )
    if differ:
        print("\nRows where cached and recomputed tokens agree, where not all do: " + "; ".join(differ))
    else:
        print("\nCached and recomputed decoding gave the same tokens on every row.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fp32 only, out_len 10 and 40")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per cell; the fastest is kept")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--trace", action="store_true", help="the cached path traced (model.jit.trace_translator)"
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    run(args.quick, args.repeats, args.trace)


if __name__ == "__main__":
    main()
