"""POST /attention as a task: one text (and for a translator its target, given or its greedy translation) ->
the selected attention maps of one forward pass -> JSON, or a PNG drawn in a process of its own
(app/tasks/attention_png.py). Every model with torch weights has one; Argos packages have none. Between
processes the text work (selection, tokenizing, the greedy translation's text, JSON and PNG) runs in the HTTP
process, and only the item (ids, selection) and its maps cross."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from app.core.columns import I32, U8, BadFrame, Reader, Writer, split
from app.core.errors import DeadlineExceeded, invalid
from app.schemas import AttentionRequest
from app.tasks.attention_maps import AttentionHandler, AttentionItem, AttentionText, LayerSelection, TextMaps
from app.tasks.attention_png import PngRenderer
from app.tasks.handlers import DecodeKey, Sentence
from app.tasks.task import BatchSpec, Context, Disconnected, Job, Task
from app.tasks.translation import TranslationTask
from app.tasks.translation_routes import target_lang
from app.tasks.wire import NO_LIMIT, NoKeys, Wire, read_runs, write_runs
from model.files import load_tokenizer

if TYPE_CHECKING:
    from app.registry import ModelEntry
    from model import LoadedModel


class AttentionItems:
    """/attention's items between processes: ids (source, and a translator's target) and the selection."""

    def fits(self, values: list[Any]) -> bool:
        return all(
            type(v) is AttentionItem
            and type(v.source) is list
            and (v.target is None or type(v.target) is list)
            and type(v.select) is LayerSelection
            for v in values
        )

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        items: list[AttentionItem] = [item for job in jobs for item in job]
        write_runs(w, [v.source for v in items])
        w.column([NO_LIMIT if v.target is None else len(v.target) for v in items], I32)
        w.column([t for v in items for t in v.target or ()], I32)
        for part in ("encoder", "decoder", "heads"):
            write_runs(w, [getattr(v.select, part) for v in items])

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        n = sum(sizes)
        sources = read_runs(r, n)
        lengths = r.column(I32, n)
        found = iter(split(r.column(I32), [t for t in lengths if t != NO_LIMIT]))
        targets = [None if t == NO_LIMIT else next(found) for t in lengths]
        parts = [read_runs(r, n) for _ in range(3)]  # encoder layers, decoder layers, heads
        items = [
            AttentionItem(s, t, LayerSelection(*sel))
            for s, t, *sel in zip(sources, targets, *parts, strict=True)
        ]
        return split(items, sizes)


class AttentionMaps:
    """/attention's outputs: per text its maps (TextMaps: float32 arrays, as computed)."""

    def fits(self, values: list[Any]) -> bool:
        for v in values:
            if type(v) is not TextMaps or (v.decoder is None) != (v.cross is None):
                return False
            if any(type(a) is not np.ndarray or a.dtype != np.float32 or a.ndim != 4 for a in _arrays(v)):
                return False
        return True

    def write(self, w: Writer, jobs: list[list[Any]]) -> None:
        maps: list[TextMaps] = [m for job in jobs for m in job]
        arrays = [a for m in maps for a in _arrays(m)]
        w.column([m.decoder is not None for m in maps], U8)
        w.column([d for a in arrays for d in a.shape], I32)
        w.arrays(arrays)

    def read(self, r: Reader, sizes: list[int]) -> list[list[Any]]:
        full = r.column(U8, sum(sizes))
        shapes = split(r.column(I32, 4 * (len(full) + 2 * sum(full))), [4] * (len(full) + 2 * sum(full)))
        data = r.floats32()
        counts = [int(np.prod(shape)) for shape in shapes]
        if sum(counts) != len(data) or min((d for s in shapes for d in s), default=0) < 0:
            raise BadFrame("attention maps' shapes do not match their values")
        starts = np.cumsum([0, *counts])
        arrays = iter(data[a:b].reshape(s) for a, b, s in zip(starts, starts[1:], shapes, strict=True))
        maps = [TextMaps(next(arrays), *((next(arrays), next(arrays)) if f else ())) for f in full]
        return split(maps, sizes)


def _arrays(maps: TextMaps) -> list[np.ndarray]:
    """A classifier's one stack, or a translator's three."""
    return [a for a in (maps.encoder, maps.decoder, maps.cross) if a is not None]


class AttentionTask(Task):
    name = "attention"
    expensive = True
    splits = True  # an HTTP process selects, tokenizes and draws; the model process computes the maps
    wire = Wire(AttentionItems(), NoKeys(), AttentionMaps())  # ids and a selection in, maps out

    def __init__(self) -> None:
        super().__init__()
        self.png = PngRenderer()

    def serves(self, entry: ModelEntry) -> bool:
        return entry.package is None  # torch weights to read the maps from

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> AttentionHandler:
        assert loaded is not None
        return AttentionHandler(loaded)

    def load_text(self, entry: ModelEntry) -> AttentionText:
        return AttentionText(entry.name, load_tokenizer(entry.path, entry.meta, entry.config), entry.config)

    def batching(self, model: str, key: Hashable) -> BatchSpec:
        """Attention maps are rare and take the weights path: their own queue, one item per forward."""
        label = f"{model}/attention"
        return BatchSpec(label, label, expensive=True, max_batch_size=1)

    async def answer(
        self,
        ctx: Context,
        req: AttentionRequest,
        disconnected: Disconnected = None,
        *,
        png: bool = False,
        **options: Any,
    ) -> tuple[bytes, str]:
        """The JSON body (AttentionResponse) or a PNG, with its media type."""
        if not png:
            return await self._answer(ctx, req, False, disconnected)
        with self.png.admit():  # 429 beyond a few PNG requests at once: each draws for long
            return await self._answer(ctx, req, True, disconnected)

    async def stop(self) -> None:
        await asyncio.to_thread(self.png.shutdown)

    async def _answer(
        self, ctx: Context, req: AttentionRequest, png: bool, disconnected: Disconnected
    ) -> tuple[bytes, str]:
        entry = ctx.ready_registry().get_any(req.model)
        if entry.package is not None:
            why = "run by CTranslate2 without torch weights: it has no attention maps to show"
            raise invalid(
                ("model",), f"{entry.name} is an Argos Translate package, {why}", "unsupported_model"
            )
        ctx.limits.check_texts([req.text], "text")
        if req.target is not None:
            ctx.limits.check_texts([req.target], "target")
        handler = self.handlers[entry.name]
        sel = handler.select(req.layers, req.heads)
        if png and handler.is_translator and not sel.decoder:  # its PNG shows cross-attention
            raise invalid(
                ("layers",),
                f"the PNG of a translator shows cross-attention: select a decoder layer "
                f"(0..{handler.decoder_layers - 1})",
            )
        deadline = ctx.deadline()
        item, translation = await self._item(ctx, entry, handler, req, deadline, disconnected)
        item = replace(item, select=sel)
        handler.check_size(item, sel)  # the target is known now (given or translated)
        job = Job(self, entry.name, None, [item], handler.costs([item]), entry.version)
        [[maps]] = await ctx.submit([job], disconnected, deadline=deadline)
        return await self._body(ctx, handler, item, maps, sel, translation, png, deadline)

    async def _item(
        self,
        ctx: Context,
        entry: ModelEntry,
        handler: AttentionText,
        req: AttentionRequest,
        deadline: float,
        disconnected: Disconnected,
    ) -> tuple[AttentionItem, str | None]:
        """The model inputs (for a translator without a target: its greedy translation's), and that
        translation."""
        item = handler.source(req.text)
        if not handler.is_translator:
            if req.target is not None or req.target_lang is not None:
                field = "target" if req.target is not None else "target_lang"
                raise invalid(
                    (field,), f"only translation models take a {field}; {entry.name} is a {entry.task} model"
                )
            return item, None
        lang = target_lang(entry, req.target_lang)
        if req.target is not None:
            tagged = entry.config.source_prefix(lang) + item.source  # OPUS-MT ">>fra<<": what the model reads
            return AttentionItem(tagged, handler.decoder_input(req.target, lang)), None
        translation, sentence = ctx.task(TranslationTask), Sentence(item.source)
        key = DecodeKey(lang, 1)
        text_half = translation.handlers[entry.name]  # this version's: a reload swaps translation.handlers
        costs = text_half.costs([sentence], key)
        greedy = Job(translation, entry.name, key, [sentence], costs, entry.version)
        [[[best]]] = await ctx.submit(
            [greedy], disconnected, deadline=deadline
        )  # like /translate with beam_size=1
        tagged = entry.config.source_prefix(lang) + item.source  # the tag is part of what the model reads
        text = text_half.detokenize(best, sentence)
        return AttentionItem(tagged, [entry.config.start_id(lang), *best.tokens]), text

    async def _body(
        self,
        ctx: Context,
        handler: AttentionText,
        item: AttentionItem,
        maps: Any,
        sel: LayerSelection,
        translation: str | None,
        png: bool,
        deadline: float,
    ) -> tuple[bytes, str]:
        """Megabytes of JSON (or a rendered PNG) for a long text: built off the event loop, and still
        answered 504 past the deadline."""
        if png:
            body, media = await self.png.render(handler, item, maps, sel), "image/png"
        else:
            body = await asyncio.to_thread(handler.encode_json, item, maps, sel, translation)
            media = "application/json"
        if asyncio.get_running_loop().time() > deadline:
            raise DeadlineExceeded.after(ctx.settings.request_timeout_s)
        return body, media
