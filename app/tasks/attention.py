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

from app.core.errors import DeadlineExceeded, invalid
from app.schemas import AttentionRequest
from app.tasks.attention_maps import AttentionHandler, AttentionItem, AttentionText, LayerSelection
from app.tasks.attention_png import PngRenderer
from app.tasks.handlers import DecodeKey, Sentence
from app.tasks.task import BatchSpec, Context, Disconnected, Job, Task
from app.tasks.translation import TranslationTask
from model.files import load_tokenizer

if TYPE_CHECKING:
    from app.registry import ModelEntry
    from model import LoadedModel


class AttentionTask(Task):
    name = "attention"
    expensive = True
    splits = True  # an HTTP process selects, tokenizes and draws; the model process computes the maps

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
        job = Job(self, entry.name, None, [item], handler.costs([item]))
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
        lang = ctx.ready_registry().target_lang(entry.name, req.target_lang)
        if req.target is not None:
            tagged = entry.config.source_prefix(lang) + item.source  # OPUS-MT ">>fra<<": what the model reads
            return AttentionItem(tagged, handler.decoder_input(req.target, lang)), None
        translation, sentence = ctx.task(TranslationTask), Sentence(item.source)
        key = DecodeKey(lang, 1)
        costs = translation.handlers[entry.name].costs([sentence], key)
        greedy = Job(translation, entry.name, key, [sentence], costs)
        [[[best]]] = await ctx.submit(
            [greedy], disconnected, deadline=deadline
        )  # like /translate with beam_size=1
        tagged = entry.config.source_prefix(lang) + item.source  # the tag is part of what the model reads
        text = translation.handlers[entry.name].detokenize(best, sentence)
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
