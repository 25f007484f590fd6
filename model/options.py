"""Decoding's plain data, without torch: the options (DecodeOptions), a finished hypothesis (Hypothesis) and
the stop signal (DecodingStopped). model.decoding runs the search; an HTTP process of the server builds
options and reads hypotheses without importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeOptions:
    """Decoding settings; the limit on generated tokens (EOS included) for a source of n tokens is
    min(max_length, ceil(max_length_ratio * n + max_length_offset))."""

    beam_size: int = 4
    max_length: int = 256
    max_length_ratio: float = 2.0
    max_length_offset: int = 10
    length_penalty: float = 0.6  # GNMT alpha; 0 ranks by the plain sum of log-probabilities
    num_hypotheses: int = 1

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if not 1 <= self.num_hypotheses <= self.beam_size:
            raise ValueError(
                f"num_hypotheses must be in 1..beam_size={self.beam_size}, got {self.num_hypotheses}"
            )
        if self.max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {self.max_length}")
        if self.length_penalty < 0:
            raise ValueError(f"length_penalty must be >= 0, got {self.length_penalty}")

    def limit(self, src_len: int) -> int:
        return max(
            1, min(self.max_length, math.ceil(self.max_length_ratio * src_len + self.max_length_offset))
        )


class DecodingStopped(Exception):
    """should_stop() returned True: nobody wants this batch's results any more."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"decoding stopped after {steps} decoder step(s)")
        self.steps = steps


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, without the start token and EOS
    score: float  # log_prob / length_penalty(len(tokens) + 1)
    log_prob: float  # sum of token log-probabilities, EOS included
    alignment: list[int] | None = None  # per token, a source position (model.unknowns)
