"""The Markdown docs: every relative link and #anchor resolves, every APP_ setting they name exists, and the
README stays one screen long."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.core.settings import Settings

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text outside fenced code blocks (links and headings there are not Markdown)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (link targets and code backticks dropped) lowercased, punctuation
    but - and _ removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in `path`; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(CODE_SPAN.sub("", prose(path.read_text(encoding="utf-8"))))


def test_slugs_follow_githubs_rules(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# The request path's own cost\n## `APP_MAX_WORK` and [links](x.md)\n## Tried and not kept\n"
        "```\n# not a heading\n```\n### Tried and not kept\n## Tried and not kept\n## Ünïcode, too: 2× (fast)\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "the-request-paths-own-cost",
        "app_max_work-and-links",
        "tried-and-not-kept",
        "tried-and-not-kept-1",
        "tried-and-not-kept-2",
        "ünïcode-too-2-fast",
    }


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(REPO)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
    assert broken == [], broken


def test_docs_name_only_settings_that_exist() -> None:
    fields = {f"APP_{name.upper()}" for name in Settings.model_fields}
    named = {
        m for doc in DOCS for m in re.findall(r"\bAPP_[A-Z0-9_]*[A-Z0-9]\b", doc.read_text(encoding="utf-8"))
    }
    assert sorted(named - fields) == []


def test_the_readme_fits_on_one_screen() -> None:
    lines = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"
