"""app/api/libretranslate/html_text.py: the text nodes of an HTML document, and the document rebuilt around their translations."""

from __future__ import annotations

import pytest

from app.api.libretranslate.html_text import HtmlDocument


@pytest.mark.parametrize(
    ("src", "texts"),
    [
        ('<!DOCTYPE html>\n<html lang="fr"><head><meta charset=utf-8><title>Un titre</title></head>', ["Un titre"]),
        ("<p title=\"a > b\" data-x='<i>'>Le texte</p>", ["Le texte"]),
        ("<!-- <p>Pas traduit</p> --><!--[if IE]><p>Vieux</p><![endif]--><p>Oui</p>", ["Oui"]),
        ('<![CDATA[ rien ]]><?xml version="1.0"?><root>Mot</root>', ["Mot"]),
        ('<SCRIPT type="text/javascript">if (a < b) { x = "</p>"; }</SCRIPT><style>/* <b>x</b> */</style>Fin', ["Fin"]),
        ("<ul><li>Un<li>Deux</ul><p>Texte sans fin", ["Un", "Deux", "Texte sans fin"]),
        ("Avant<br>Après<br/>Fin", ["Avant", "Après", "Fin"]),
        ('<a href="/x?a=1&amp;b=2">Lien</a> <p>Un &lt; deux &amp; trois</p>', ["Lien", "Un < deux & trois"]),
    ],
)  # fmt: skip
def test_html_document_keeps_all_but_the_text(src: str, texts: list[str]) -> None:
    """Each text node is a span of the source: given back its own text, the document is the same bytes."""
    doc = HtmlDocument(src)
    assert doc.texts == texts
    assert doc.render(doc.texts) == src


def test_html_document_spans() -> None:
    src = "<P  CLASS=x>\n  Le  chat\n dort.  </P><pre> a\n  b </pre>a < b </> c<b>&eacute;t&eacute;</b>"
    doc = HtmlDocument(src)
    # whitespace runs are one space outside <pre>; "a < b </> c" holds markup the parser drops: kept as is
    assert doc.texts == ["Le chat dort.", "a\n  b", "été"]
    out = doc.render(["The cat sleeps & <dreams>", "x", "summer\xa0!"])
    assert out == (
        "<P  CLASS=x>\n  The cat sleeps &amp; &lt;dreams&gt;  </P><pre> x </pre>a < b </> c<b>summer&nbsp;!</b>"
    )
    assert HtmlDocument("").texts == HtmlDocument("<p> 12 </p>").texts == []
    with pytest.raises(ValueError, match="3 text nodes, 1 translations"):
        doc.render(["x"])
