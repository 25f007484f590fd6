"""The load benchmark's markdown tables: every measured cell, the model-only ceilings, the targets, and
with --repeats the median pass and one row per pass."""

from __future__ import annotations

import statistics

from bench.ceilings import ARRIVAL, WORKERS
from bench.load import Cell

TRANSLATE_SHARE = 0.9  # /translate HTTP texts/s as a share of its model-only ceiling


def report(
    cells: list[Cell],
    ready: dict[str, float],
    ceil: dict[str, tuple[float, float]],
    short_p50: float,
    conc: list[int],
) -> str:
    lines = [
        "| route | batching | concurrency | req/s | texts/s | p50 ms | p95 ms | p99 ms | errors | client"
        " | server CPU ms/req | of which event loop | client CPU ms/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for c in cells:
        lines.append(
            f"| {c.route} | {c.mode} | {c.concurrency} | {c.rps:.1f} | {c.rps * c.texts:.1f} | {c.p50:.1f}"
            f" | {c.p95:.1f} | {c.p99:.1f}"
            f" | {c.errors} | {c.client} | {c.server_cpu_ms:.2f} | {c.loop_cpu_ms:.2f} | {c.client_cpu_ms:.2f} |"
        )
    lines += ["", "| route | in-process ceiling (texts/s, batches of 32) | CPU ms/text |", "|---|---:|---:|"]
    lines += [f"| {route} | {v:.1f} | {cpu:.2f} |" for route, (v, cpu) in ceil.items()]
    lines += ["", "| target | measured | met |", "|---|---:|---|"]
    top = max(conc)
    at_top = {(c.route, c.mode): c for c in cells if c.concurrency == top}
    tps = {key: c.rps * c.texts for key, c in at_top.items()}  # texts/s

    def row(what: str, measured: str, met: bool | None = None) -> None:
        lines.append(f"| {what} | {measured} | {'' if met is None else 'yes' if met else 'no'} |")

    if (on := tps.get(("/sentiment", "on"))) and (off := tps.get(("/sentiment", "off"))):
        row(f"/sentiment c={top}: batching on >= 4x off", f"{on / off:.2f}x", on / off >= 4)
    if (http := tps.get(("/translate", "on"))) and "/translate" in ceil:
        share = http / ceil["/translate"][0]
        row(f"/translate c={top} HTTP >= {TRANSLATE_SHARE:.0%} of its ceiling (texts/s)", f"{share:.0%}",
            share >= TRANSLATE_SHARE)  # fmt: skip
    if (cell := at_top.get(("/sentiment", "on"))) is not None:
        # with a near-zero model (bench/make_tiny_checkpoints.py) this is the request path's own cost
        row(f"(for reference) server CPU per /sentiment request, c={top}", f"{cell.server_cpu_ms:.2f} ms")
        http = tps[("/sentiment", "on")]
        for name, what in (("/sentiment", "the ceiling"), (ARRIVAL, "the arrival-order ceiling"),
                           (WORKERS, "the server's model work")):  # fmt: skip
            if name in ceil:
                row(f"(for reference) /sentiment c={top} HTTP vs {what}", f"{http / ceil[name][0]:.0%}")
        if WORKERS in ceil and "/sentiment" in ceil:
            share = ceil[WORKERS][0] / ceil["/sentiment"][0]
            row("(for reference) the server's model work vs the ceiling, no HTTP", f"{share:.0%}")
    row("single short /sentiment p50 <= 10 ms", f"{short_p50:.1f} ms", short_p50 <= 10)
    for mode, s in ready.items():
        row(f"ready within 5 s of start (batching {mode})", f"{s:.1f} s", s <= 5)
    return "\n".join(lines)


Pass = tuple[list[Cell], dict[str, float], dict[str, tuple[float, float]], float]


def median_pass(passes: list[Pass]) -> Pass:
    """Per cell the pass with the median req/s (its latencies with it); medians of the other figures."""
    cells = []
    for i in range(len(passes[0][0])):
        ranked = sorted((p[0][i] for p in passes), key=lambda c: c.rps)
        cells.append(ranked[(len(ranked) - 1) // 2])
    ready = {m: statistics.median(p[1][m] for p in passes) for m in passes[0][1]}
    ceil = {
        r: (statistics.median(p[2][r][0] for p in passes), statistics.median(p[2][r][1] for p in passes))
        for r in passes[0][2]
    }
    return cells, ready, ceil, statistics.median(p[3] for p in passes)


def spread(passes: list[Pass], top: int) -> str:
    """One row per pass: the figures the targets compare, at concurrency `top` ("-": not measured)."""
    lines = [
        f"| pass | /sentiment on c={top} | off | on/off | server CPU ms/req | % of ceiling | % of arrival-order"
        f" ceiling | % of server's model work | /translate c={top} % of ceiling |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def share(texts_s: float | None, name: str, ceil: dict[str, tuple[float, float]]) -> str:
        return f"{texts_s / ceil[name][0]:.0%}" if texts_s and name in ceil else "-"

    def num(x: float | None, fmt: str) -> str:
        return format(x, fmt) if x else "-"

    for k, (cells, _, ceil, _) in enumerate(passes, 1):
        at_top = {(c.route, c.mode): c for c in cells if c.concurrency == top}
        tps = {key: c.rps * c.texts for key, c in at_top.items()}
        on, off = tps.get(("/sentiment", "on")), tps.get(("/sentiment", "off"))
        cpu = at_top[("/sentiment", "on")].server_cpu_ms if on else None
        lines.append(
            f"| {k} | {num(on, '.0f')} | {num(off, '.0f')} | {f'{on / off:.2f}x' if on and off else '-'}"
            f" | {num(cpu, '.2f')} | {share(on, '/sentiment', ceil)} | {share(on, ARRIVAL, ceil)}"
            f" | {share(on, WORKERS, ceil)} | {share(tps.get(('/translate', 'on')), '/translate', ceil)} |"
        )
    return "\n".join(lines)
