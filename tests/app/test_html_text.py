"""app/text/html.py: the text blocks of an HTML document (inline elements inside), and the
document rebuilt around their translations with every tag put back."""

from __future__ import annotations

import random
import re

import pytest

from app.text.html import HtmlDocument


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
        ("<p>Bonjour <b>le</b> monde &amp; <a href='/a'>amis</a> !</p>", ["Bonjour le monde & amis !"]),
        ("<p><i>Le <b>chat</b> noir</i> dort. Il <em>rêve</em>.</p>", ["Le chat noir dort. Il rêve."]),
    ],
)  # fmt: skip
def test_html_document_keeps_all_but_the_text(src: str, texts: list[str]) -> None:
    """Each block is a span of the source: given back its own text, the document is the same bytes."""
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
    with pytest.raises(ValueError, match="3 text blocks, 1 translations"):
        doc.render(["x"])


def test_inline_tags_are_inside_the_sentence_and_put_back() -> None:
    doc = HtmlDocument("<p>Bonjour <b>le</b> monde &amp; amis</p>")
    assert doc.texts == ["Bonjour le monde & amis"]  # one text, not "Bonjour", "le", "monde & amis"
    assert doc.render(["Hello world & friends"]) == "<p>Hello <b>world</b> &amp; friends</p>"
    # an element whose text comes back verbatim wraps it; the others go to the nearest word boundary
    doc = HtmlDocument('<p>Le billet coûte <b>15 €</b> et le <a href="/t">train</a> part à <i>19:30</i>.</p>')
    assert doc.render(["The ticket costs 15 € and the train leaves at 19:30."]) == (
        '<p>The ticket costs <b>15 €</b> and the <a href="/t">train</a> leaves at <i>19:30</i>.</p>'
    )
    # with as many sentences in the translation, each tag is placed within its own sentence
    doc = HtmlDocument(
        "<p>Le chat <b>dort</b> sur le <a href='/c'>canapé</a>. Il fait <i>beau</i> aujourd'hui.</p>"
    )
    assert doc.render(["The cat is sleeping on the couch. It's fine today."], ("fr", "en")) == (
        "<p>The cat is <b>sleeping</b> on <a href='/c'>the couch</a>. It's <i>fine</i> today.</p>"
    )
    # a closing tag at a word's end goes before its punctuation
    assert (
        HtmlDocument("<p>Le chat <b>dort</b>.</p>").render(["The cat sleeps."])
        == "<p>The cat <b>sleeps</b>.</p>"
    )


TAG = re.compile(r"<[^>]*>")


@pytest.mark.parametrize("seed", range(20))
def test_tags_and_entities_outside_the_text_are_kept_whatever_the_translation(seed: int) -> None:
    """Whatever comes back (words dropped, reordered, nothing, the anchors missing), the output has the
    source's tags in the source's order, byte for byte: balance kept, none lost."""
    rng = random.Random(seed)
    words = ["Le", "chat", "dort", "sur", "le", "canapé", "15", "€", "et", "rêve", "&amp;", "l'été"]
    inline = ["b", "i", "em", 'a href="/x?a=1&amp;b=2"', "span class='k'", "code", "sub"]

    def fragment(depth: int) -> str:
        parts = []
        for _ in range(rng.randint(1, 4)):
            if depth < 3 and rng.random() < 0.4:
                tag = rng.choice(inline)
                parts.append(f"<{tag}>{fragment(depth + 1)}</{tag.split()[0]}>")
            else:
                parts.append(" ".join(rng.choices(words, k=rng.randint(1, 3))))
        return rng.choice([" ", "", "\n  "]).join(parts)

    src = "".join(f"<p title='a &amp; b'>{fragment(0)}</p><!-- c --><br>" for _ in range(rng.randint(1, 3)))
    doc = HtmlDocument(src)
    vocab = ["The", "cat", "sleeps", "15", "€", "dream", "&", "<x>", "summer.", ""]
    translations = [" ".join(rng.choices(vocab, k=rng.randint(0, 8))).strip() for _ in doc.texts]
    out = doc.render(translations)
    # every tag, attributes and their entities included, in order (the text's "<x>" comes back as &lt;x&gt;)
    assert TAG.findall(out) == TAG.findall(src)
    assert out.count("title='a &amp; b'") == src.count("title='a &amp; b'")


def test_a_block_without_letters_is_not_translated() -> None:
    doc = HtmlDocument("<p><b>12</b> € — 19:30</p><p>Oui <i>42</i></p>")
    assert doc.texts == ["Oui 42"]
    assert doc.render(["Yes 42"]) == "<p><b>12</b> € — 19:30</p><p>Yes <i>42</i></p>"
