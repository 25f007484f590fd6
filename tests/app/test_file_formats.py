"""app/files/formats/: each format's texts, and the file written back with their translations: every text
replaced, everything else (runs and their styles, tables, timings, markup) as it was, and the file opens again
in its own library. The translation here is a stand-in (EN + the text in capitals); tests/app/test_files.py
translates through the service."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

import docx
import pptx
import pytest
import srt
from docx.oxml.ns import qn
from lxml import etree

from app.core.settings import Settings
from app.files import document
from app.files.document import MAX_UNZIPPED_BYTES, UnreadableFile
from app.files.formats import FORMATS, format_of
from app.files.formats.runs import Paragraphs
from tests.app.sample_files import (
    HTML,
    SENTENCES,
    cut,
    encrypted,
    flipped,
    lying,
    make_docx,
    make_epub,
    make_html,
    make_odp,
    make_odt,
    make_pptx,
    make_srt,
    make_txt,
    rezipped,
)

LANGS = ("fr", "en")


def fake(text: str) -> str:
    return "EN " + text.upper()


def translated(ext: str, data: bytes, translate: Callable[[str], str] = fake) -> tuple[list[str], bytes]:
    """(the texts, the file rendered with their stand-in translations)."""
    doc = FORMATS[ext].open(data)
    return doc.texts, doc.render([translate(t) for t in doc.texts], LANGS)


def test_the_formats_are_libretranslates_and_named_by_extension() -> None:
    # LibreTranslate's list, in its order, but .pdf
    assert list(FORMATS) == [".txt", ".odt", ".odp", ".docx", ".pptx", ".epub", ".html", ".srt"]
    assert format_of("Report.DOCX") is FORMATS[".docx"]
    assert format_of("notes.pdf") is None
    assert format_of("docx") is None


def test_docx_paragraphs_translated_whole_runs_and_table_kept() -> None:
    source = make_docx()
    texts, out = translated(".docx", source)
    # the sentence over three runs (plain, bold, italic) is one text; the letterless paragraph is not sent
    assert "Le chat dort sur le lit." in texts
    assert "2024 - 42" not in texts
    before, after = docx.Document(io.BytesIO(source)), docx.Document(io.BytesIO(out))
    assert len(after.paragraphs) == len(before.paragraphs)
    for b, a in zip(before.paragraphs, after.paragraphs, strict=True):
        assert a.style.name == b.style.name
        assert len(a.runs) == len(b.runs)  # every run kept, with its properties
        for rb, ra in zip(b.runs, a.runs, strict=True):
            assert (ra.bold, ra.italic, ra.font.size) == (rb.bold, rb.italic, rb.font.size)
        assert a.text == (fake(b.text) if b.text in texts else b.text)
    runs = after.paragraphs[1].runs  # the translation in the first run, the others emptied
    assert [r.text for r in runs] == [fake("Le chat dort sur le lit."), "", ""]
    (table,) = after.tables
    assert (len(table.rows), len(table.columns)) == (2, 2)
    assert [c.text for row in table.rows for c in row.cells] == [
        fake(t) for t in ["Nom", "Ville", "Marie", "Paris est belle."]
    ]


def test_docx_edge_spaces_are_preserved() -> None:
    """A w:t's leading or trailing space survives only with xml:space="preserve": it is set."""
    doc = docx.Document()
    doc.add_paragraph().add_run(" Bonjour ")
    data = io.BytesIO()
    doc.save(data)
    _, out = translated(".docx", data.getvalue())
    assert docx.Document(io.BytesIO(out)).paragraphs[0].text == " EN BONJOUR "


def test_nested_paragraphs_are_their_own() -> None:
    """A text box's paragraph inside a paragraph: its text is not the outer paragraph's."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    xml = (
        f'<w:body xmlns:w="{w}"><w:p><w:r><w:t>Dehors</w:t></w:r>'
        "<w:r><w:txbxContent><w:p><w:r><w:t>Dedans</w:t></w:r></w:p></w:txbxContent></w:r></w:p></w:body>"
    )
    paragraphs = Paragraphs([etree.fromstring(xml)], qn("w:p"), qn("w:t"), preserve_space=True)
    assert paragraphs.texts == ["Dehors", "Dedans"]


def test_pptx_text_box_title_and_notes() -> None:
    source = make_pptx()
    texts, out = translated(".pptx", source)
    assert texts == ["Bonjour tout le monde", SENTENCES[0], SENTENCES[1], SENTENCES[2]]
    before, after = pptx.Presentation(io.BytesIO(source)), pptx.Presentation(io.BytesIO(out))
    for sb, sa in zip(before.slides, after.slides, strict=True):
        assert [(s.shape_type, s.left, s.top, s.width, s.height) for s in sa.shapes] == [
            (s.shape_type, s.left, s.top, s.width, s.height) for s in sb.shapes
        ]
    frame = after.slides[1].shapes[0].text_frame
    assert [p.text for p in frame.paragraphs] == [fake(SENTENCES[0]), fake(SENTENCES[1])]
    runs = frame.paragraphs[1].runs
    assert [r.text for r in runs] == [fake(SENTENCES[1]), ""]
    assert [r.font.bold for r in runs] == [None, True]  # each run's style kept
    assert after.slides[1].notes_slide.notes_text_frame.text == fake(SENTENCES[2])


def test_srt_timings_and_indices_kept() -> None:
    source = make_srt()
    texts, out = translated(".srt", source)
    assert texts == [SENTENCES[0], "Nous allons au marché demain."]  # lines joined: one sentence
    before, after = list(srt.parse(source.decode())), list(srt.parse(out.decode()))
    assert [(s.index, s.start, s.end) for s in after] == [(s.index, s.start, s.end) for s in before]
    assert [s.content for s in after] == [fake(texts[0]), fake(texts[1]), "♪ 123 ♪"]


def test_srt_blank_translation_keeps_the_source() -> None:
    """An empty content would end the subtitle early (the file would not parse as it was)."""
    _, out = translated(".srt", make_srt(), lambda t: "")
    assert [s.content for s in srt.parse(out.decode())][:2] == [
        SENTENCES[0],
        "Nous allons\nau marché demain.",
    ]


def test_html_markup_kept() -> None:
    texts, out = translated(".html", make_html(), lambda t: t)  # the identity: the file comes back as it was
    assert out == make_html()
    assert texts == ["Le chat dort.", "Le chat dort sur le lit.", "Nous allons au marché demain."]
    _, out = translated(".html", make_html())
    html = out.decode()
    for markup in ('<p class="intro">', "<b>", "</b>", '<a href="/marche">', "<!-- un commentaire -->",
                   "<script>var x = 'Bonjour';</script>", "<p>42</p>", "<style>p { color: red; }</style>"):  # fmt: skip
        assert markup in html
    assert "<title>EN LE CHAT DORT.</title>" in html
    assert "Le chat" not in html  # every text block translated
    assert "Nous allons" not in html
    assert html.count("<") == HTML.count("<")


def test_txt_layout_kept() -> None:
    source = make_txt()
    texts, out = translated(".txt", source)
    assert texts == SENTENCES
    assert out.decode("utf-8") == "\ufeff" + (
        f"{fake(SENTENCES[0])}\r\n\r\n  {fake(SENTENCES[1])}  \r\n123\r\n{fake(SENTENCES[2])}"
    )


@pytest.mark.parametrize("ext", [".docx", ".pptx"])
def test_what_is_not_the_format_is_unreadable(ext: str) -> None:
    for data in (b"not a zip", make_txt(), make_pptx() if ext == ".docx" else make_docx()):
        with pytest.raises(UnreadableFile):
            FORMATS[ext].open(data)


def test_a_zip_bomb_is_refused_before_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts that expand past MAX_UNZIPPED_BYTES (here lowered: a real bomb takes time to build)."""
    limit = 100_000
    monkeypatch.setattr(document, "MAX_UNZIPPED_BYTES", limit)
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", b"\0" * (limit + 1))
    assert len(data.getvalue()) < limit // 100
    with pytest.raises(UnreadableFile, match="expand to"):
        FORMATS[".docx"].open(data.getvalue())
    assert 50 * Settings().max_file_bytes < MAX_UNZIPPED_BYTES  # the default leaves room for real documents


ZIPPED = {".docx": make_docx, ".pptx": make_pptx, ".odt": make_odt, ".odp": make_odp, ".epub": make_epub}


@pytest.mark.parametrize("ext", list(ZIPPED))
@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (cut, "File is not a zip file"),
        (flipped, "while decompressing"),
        (lying, "Bad CRC-32"),  # read only as far as its stated 10 bytes, which do not match its CRC
        (encrypted, "is encrypted"),
    ],
)
def test_a_damaged_zip_is_unreadable(ext: str, damage: Callable[[bytes], bytes], why: str) -> None:
    with pytest.raises(UnreadableFile, match=why):
        FORMATS[ext].open(damage(ZIPPED[ext]()))


@pytest.mark.parametrize(
    ("ext", "rels"), [(".docx", "word/_rels/document.xml.rels"), (".pptx", "ppt/_rels/presentation.xml.rels")]
)
def test_office_parts_not_as_their_library_expects_are_unreadable(ext: str, rels: str) -> None:
    """A relationships part whose root is another element (AttributeError in python-docx and python-pptx),
    and a relationship without a Type (python-pptx refuses it on reading, python-docx on writing)."""

    def damaged(part: str, change: Callable[[bytes], bytes]) -> bytes:
        return rezipped(ZIPPED[ext](), lambda info, body: change(body) if info.filename == part else body)

    renamed = damaged("_rels/.rels", lambda body: body.replace(b"Relationships", b"Relationshipz"))
    untyped = damaged(rels, lambda body: re.sub(rb' Type="[^"]*"', b"", body, count=1))
    for data in (renamed, untyped):
        with pytest.raises(UnreadableFile):
            translated(ext, data)


@pytest.mark.parametrize("ext", [".txt", ".html", ".srt"])
def test_text_formats_must_be_utf8(ext: str) -> None:
    with pytest.raises(UnreadableFile, match="not UTF-8"):
        FORMATS[ext].open("Le café est chaud.".encode("latin-1"))


def test_a_broken_srt_is_unreadable() -> None:
    with pytest.raises(UnreadableFile, match="SubRip"):
        FORMATS[".srt"].open(b"1\nnot a timing\nBonjour\n")


def odf_parts(data: bytes) -> tuple[list[tuple[str, int]], etree._Element]:
    """(the zip's entries: name and compression, in order; content.xml parsed)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, i.compress_type) for i in z.infolist()], etree.fromstring(z.read("content.xml"))


def test_odt_paragraphs_spans_table_and_note() -> None:
    source = make_odt()
    texts, out = translated(".odt", source)
    # the span and the spacing element are inside one text; the note's paragraph is its own (no citation "1")
    assert texts == ["Rapport annuel", "Le chat dort sur le lit.", "Paris est belle.", "Marie"]
    (entries, before), (after_entries, after) = odf_parts(source), odf_parts(out)
    assert after_entries == entries  # mimetype first and stored, the rest as they were
    assert [(e.tag, dict(e.attrib)) for e in after.iter()] == [(e.tag, dict(e.attrib)) for e in before.iter()]
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    paragraphs = ["".join(p.itertext()) for p in after.iter(f"{{{text}}}p", f"{{{text}}}h")]
    assert paragraphs == [fake("Rapport annuel"), fake("Le chat dort sur le lit.") + "1" + fake("Paris est belle."),
                          fake("Paris est belle."), fake("Marie"), "2024"]  # fmt: skip
    span = after.find(f".//{{{text}}}span")
    assert span.get(f"{{{text}}}style-name") == "Bold"  # the span and its style stay, emptied
    assert not span.text


def test_odp_frames_and_notes() -> None:
    texts, out = translated(".odp", make_odp())
    assert texts == [SENTENCES[0], SENTENCES[1], SENTENCES[2]]
    assert FORMATS[".odp"].open(out).texts == [fake(t) for t in texts]


@pytest.mark.parametrize("ext", [".odt", ".odp"])
def test_odf_that_is_not_is_unreadable(ext: str) -> None:
    for data in (b"not a zip", make_docx()):
        with pytest.raises(UnreadableFile):
            FORMATS[ext].open(data)


def test_epub_chapters_stay_well_formed_xhtml() -> None:
    source = make_epub()
    texts, out = translated(".epub", source)
    assert texts == ["Chapitre un", "Chapitre un", "Le chat dort sur le lit.", SENTENCES[1]]
    with zipfile.ZipFile(io.BytesIO(source)) as zs, zipfile.ZipFile(io.BytesIO(out)) as zo:
        assert [(i.filename, i.compress_type) for i in zo.infolist()] == [
            (i.filename, i.compress_type) for i in zs.infolist()
        ]
        for name in zs.namelist():  # every part but the chapter byte for byte
            if name != "OEBPS/chapter1.xhtml":
                assert zo.read(name) == zs.read(name)
        before = etree.fromstring(zs.read("OEBPS/chapter1.xhtml"))
        after = etree.fromstring(zo.read("OEBPS/chapter1.xhtml"))  # XML: it parses, so well-formed
    assert [(e.tag, dict(e.attrib)) for e in after.iter()] == [(e.tag, dict(e.attrib)) for e in before.iter()]
    assert "".join(after.itertext()).count("EN ") == 4


def test_epub_without_container_is_unreadable() -> None:
    with pytest.raises(UnreadableFile, match="container"):
        FORMATS[".epub"].open(make_odt())
