"""huggingface_hub's per-file byte counts as training.progress download events (`pull --progress json`).

huggingface_hub < 1 takes no tqdm class for them: snapshot_download's `tqdm_class` counts files, not bytes.
Every byte count it shows (plain and Xet downloads) goes through one bar per file made from its public tqdm
class (`huggingface_hub.utils.tqdm`, unit "B", `initial` the bytes a resumed download holds, `total` the
size the hub announced), so while a pull runs that class's __init__ and update are wrapped, and its bars
are off. A bar's desc names its file as shown to people: the file name (or the Content-Disposition's), or
the URL ending in it, shortened to 40 characters with "(…)" before or after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from training.progress import Progress

CUT = "(…)"  # huggingface_hub's mark on a shortened desc


def file_of(desc: str, names: Sequence[str]) -> str:
    """The name in `names` a bar's desc stands for; the desc itself (unshortened) when none matches."""
    core = desc.removeprefix(CUT).removesuffix(CUT)
    cut = core != desc
    for name in names:
        if (
            core == name
            or core.endswith("/" + name)
            or (cut and (name.endswith(core) or name.startswith(core)))
        ):
            return name
    return core


@contextlib.contextmanager
def hub_progress(progress: Progress, names: Sequence[str]) -> Iterator[None]:
    """Download events for each byte bar huggingface_hub makes (`names`: the files it may fetch) while the
    context runs; its bars (and their wrapping) as they were afterwards."""
    from huggingface_hub import utils

    bar = utils.tqdm
    init, update = bar.__init__, bar.update
    was_disabled = utils.are_progress_bars_disabled()

    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        desc = kwargs.get("desc")
        self.pull_file = file_of(desc, names) if kwargs.get("unit") == "B" and desc else None
        self.pull_done, self.pull_total = kwargs.get("initial") or 0, kwargs.get("total")
        if self.pull_file:
            progress.download(self.pull_file, self.pull_done, self.pull_total)

    def counted_update(self: Any, n: float | None = 1) -> bool | None:
        if getattr(self, "pull_file", None) and n:
            self.pull_done += int(n)
            progress.download(self.pull_file, self.pull_done, self.pull_total)
        return update(self, n)

    bar.__init__, bar.update = counted_init, counted_update  # type: ignore[method-assign]
    utils.disable_progress_bars()
    try:
        yield
    finally:
        bar.__init__, bar.update = init, update  # type: ignore[method-assign]
        if not was_disabled:
            utils.enable_progress_bars()
