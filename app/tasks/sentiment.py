"""POST /sentiment as a task: texts routed by language (or the request's model) -> token ids -> class
probabilities -> one result per text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.schemas import SentimentRequest, SentimentResponse
from app.tasks.groups import group_by_model, scatter
from app.tasks.handlers import SentimentHandler, SentimentText
from app.tasks.task import Context, Disconnected, Job, Task
from model.checkpoint import load_tokenizer
from model.tokenizer import Tokenizer

if TYPE_CHECKING:
    from app.registry import ModelEntry
    from model import LoadedModel


class SentimentTask(Task):
    name = "sentiment"
    splits = True  # an HTTP process tokenizes and builds the results; the model process runs the batches

    def serves(self, entry: ModelEntry) -> bool:
        return entry.task == "sentiment"

    def load(self, entry: ModelEntry, loaded: LoadedModel | None) -> SentimentHandler:
        assert loaded is not None
        assert self.settings is not None
        return SentimentHandler(loaded, self.settings.torchscript)

    def load_text(self, entry: ModelEntry) -> SentimentText:
        tokenizer = load_tokenizer(entry.path, entry.meta, entry.config)
        assert isinstance(tokenizer, Tokenizer)
        return SentimentText(entry.name, tokenizer, entry.config)

    async def answer(
        self, ctx: Context, req: SentimentRequest, disconnected: Disconnected = None, **options: Any
    ) -> SentimentResponse:
        registry, texts, field = ctx.ready_registry(), req.items, req.field
        ctx.limits.check_texts(texts, field)
        groups = group_by_model([registry.sentiment_for(text, req.model) for text in texts])
        deadline = ctx.deadline()
        jobs = [
            Job(self, name, None, [self.handlers[name].tokenize(texts[i]) for i in idxs])
            for name, idxs in groups.items()
        ]
        outputs = await ctx.submit(jobs, deadline, disconnected, field)
        results = [self.handlers[name].result(probs) for name, probs in scatter(groups, outputs)]
        return SentimentResponse.model_construct(model=",".join(groups), results=results)  # built here: valid
