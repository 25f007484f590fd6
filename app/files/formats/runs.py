"""Office paragraphs (WordprocessingML w:p, DrawingML a:p) as texts: a paragraph's text is the text of its
runs' text elements (w:t / a:t, in hyperlinks and fields too), translated as one text, so a sentence whose
words sit in several runs (bold, italic, a link) is one sentence to the model.

Written back: the whole translation goes into the paragraph's first text element, and the others are emptied.
Every run stays, with its properties: the paragraph keeps its structure and the first run's style carries
the translation. (Spreading the translation over the runs by length would put a bold word's style on some
other word: the translation's word order is not the source's.) The XML is lxml's, edited in place by the
format libraries' packages (python-docx, python-pptx), which save everything else as they read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lxml import etree

from app.files.document import stripped
from app.text.passthrough import has_letters

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


class Paragraphs:
    """The paragraphs (tag `p`) with a letter among `roots`, each as its text elements (tag `t`) whose
    nearest paragraph it is (a text box's paragraphs inside a paragraph are paragraphs of their own)."""

    def __init__(self, roots: Iterable[etree._Element], p: str, t: str, preserve_space: bool) -> None:
        self.preserve_space = preserve_space  # WordprocessingML drops a w:t's edge spaces without it
        self.paragraphs: list[list[etree._Element]] = []
        self.texts: list[str] = []
        self.edges: list[
            tuple[str, str]
        ] = []  # the whitespace around each text, put back around its translation
        for root in roots:
            for para in root.iter(p):
                nodes = [n for n in para.iter(t) if next(n.iterancestors(p)) is para]
                lead, core, trail = stripped("".join(n.text or "" for n in nodes))
                if has_letters(core):
                    self.paragraphs.append(nodes)
                    self.texts.append(core)
                    self.edges.append((lead, trail))

    def write(self, translations: Sequence[str]) -> None:
        """Each paragraph's translation into its first text element; the others emptied."""
        for nodes, (lead, trail), translation in zip(self.paragraphs, self.edges, translations, strict=True):
            nodes[0].text = lead + translation + trail
            if self.preserve_space:
                nodes[0].set(XML_SPACE, "preserve")
            for node in nodes[1:]:
                node.text = ""
