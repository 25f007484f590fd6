"""Real files of each supported format, built with the formats' own libraries, for the file translation
tests: text split across styled runs, a table, a text box, timings, markup."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from datetime import timedelta

import docx
import pptx
import srt
from docx.shared import Pt
from pptx.util import Inches

# French sentences (the shipped fr-en model reads them; the tiny random ones read anything)
SENTENCES = ["Le chat dort sur le lit.", "Nous allons au marché demain.", "Il fait beau aujourd'hui."]


def make_docx() -> bytes:
    """A heading, a paragraph whose sentence is split over plain, bold and italic runs, a 2x2 table, a letterless
    paragraph ("2024 - 42") that stays, and an empty paragraph."""
    doc = docx.Document()
    doc.add_heading("Rapport annuel", level=1)
    p = doc.add_paragraph()
    p.add_run("Le chat ")
    bold = p.add_run("dort sur")
    bold.bold = True
    italic = p.add_run(" le lit.")
    italic.italic = True
    italic.font.size = Pt(14)
    table = doc.add_table(rows=2, cols=2)
    for i, text in enumerate(["Nom", "Ville", "Marie", "Paris est belle."]):
        table.cell(i // 2, i % 2).text = text
    doc.add_paragraph("2024 - 42")
    doc.add_paragraph("")
    doc.add_paragraph(SENTENCES[1])
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def make_pptx() -> bytes:
    """A title slide and a slide with a text box of two paragraphs (one over two runs), and notes."""
    prs = pptx.Presentation()
    title = prs.slides.add_slide(prs.slide_layouts[0])
    title.shapes.title.text = "Bonjour tout le monde"
    slide = prs.slides.add_slide(prs.slide_layouts[6])  # blank
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(5), Inches(2))
    frame = box.text_frame
    frame.text = SENTENCES[0]
    para = frame.add_paragraph()
    first = para.add_run()
    first.text = "Nous allons "
    second = para.add_run()
    second.text = "au marché demain."
    second.font.bold = True
    slide.notes_slide.notes_text_frame.text = SENTENCES[2]
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def make_srt() -> bytes:
    subs = [
        srt.Subtitle(1, timedelta(seconds=1), timedelta(seconds=3, milliseconds=500), SENTENCES[0]),
        srt.Subtitle(2, timedelta(seconds=4), timedelta(seconds=6), "Nous allons\nau marché demain."),
        srt.Subtitle(3, timedelta(seconds=7, milliseconds=250), timedelta(seconds=9), "♪ 123 ♪"),
    ]
    return srt.compose(subs).encode()


HTML = (
    '<!DOCTYPE html>\n<html lang="fr"><head><title>Le chat dort.</title>'
    "<style>p { color: red; }</style></head>\n"
    '<body><p class="intro">Le chat <b>dort</b> sur le lit.</p>\n'
    '<ul><li><a href="/marche">Nous allons au marché</a> demain.</li></ul>\n'
    "<!-- un commentaire --><script>var x = 'Bonjour';</script><p>42</p></body></html>\n"
)


def make_html() -> bytes:
    return HTML.encode()


def make_txt() -> bytes:
    return ("\ufeff" + f"{SENTENCES[0]}\r\n\r\n  {SENTENCES[1]}  \r\n123\r\n{SENTENCES[2]}").encode()


# OpenDocument: zipped XML (no library here writes it; lxml and zipfile read it back in the tests)
_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
    'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
    'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" office:version="1.3"'
)
ODT_BODY = (
    '<office:text><text:h text:outline-level="1">Rapport annuel</text:h>'
    '<text:p text:style-name="P1">Le chat <text:span text:style-name="Bold">dort sur</text:span>'
    '<text:s/>le lit.<text:note text:note-class="footnote"><text:note-citation>1</text:note-citation>'
    "<text:note-body><text:p>Paris est belle.</text:p></text:note-body></text:note></text:p>"
    "<table:table><table:table-row><table:table-cell><text:p>Marie</text:p></table:table-cell>"
    "<table:table-cell><text:p>2024</text:p></table:table-cell></table:table-row></table:table>"
    "</office:text>"
)
ODP_BODY = (
    '<office:presentation><draw:page draw:name="p1"><draw:frame><draw:text-box>'
    f'<text:p>{SENTENCES[0]}</text:p><text:p>Nous allons <text:span text:style-name="B">au marché</text:span>'
    " demain.</text:p></draw:text-box></draw:frame>"
    f"<presentation:notes><draw:frame><draw:text-box><text:p>{SENTENCES[2]}</text:p></draw:text-box></draw:frame>"
    "</presentation:notes></draw:page></office:presentation>"
)
STYLES = (
    '<office:automatic-styles><style:style style:name="Bold" style:family="text">'
    '<style:text-properties fo:font-weight="bold"/></style:style></office:automatic-styles>'
)


def make_odf(mimetype: str, body: str) -> bytes:
    content = f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>{STYLES}<office:body>{body}</office:body></office:document-content>'
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
        'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">'
        f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{mimetype}"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), mimetype)  # first and stored, as ODF asks
        z.writestr("META-INF/manifest.xml", manifest, zipfile.ZIP_DEFLATED)
        z.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def make_odt() -> bytes:
    return make_odf("application/vnd.oasis.opendocument.text", ODT_BODY)


def make_odp() -> bytes:
    return make_odf("application/vnd.oasis.opendocument.presentation", ODP_BODY)


CHAPTER = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
    '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="fr"><head><title>Chapitre un</title>'
    '<link rel="stylesheet" href="style.css"/></head>\n'
    f"<body><h1>Chapitre un</h1><p>Le chat <em>dort</em> sur le lit.<br/>{SENTENCES[1]}</p>"
    '<p><img src="chat.png" alt="un chat"/></p></body></html>\n'
)


def make_epub() -> bytes:
    """mimetype, the container, the package document, a stylesheet and one XHTML chapter."""
    container = (
        '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
        '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">x</dc:identifier>'
        "<dc:title>Le chat</dc:title><dc:language>fr</dc:language></metadata>"
        '<manifest><item id="c1" href="chapter1.xhtml" media-type="application/xhtml+xml"/></manifest>'
        '<spine><itemref idref="c1"/></spine></package>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        for name, body in [("META-INF/container.xml", container), ("OEBPS/content.opf", opf),
                           ("OEBPS/style.css", "p { margin: 0; }"), ("OEBPS/chapter1.xhtml", CHAPTER)]:  # fmt: skip
            z.writestr(name, body, zipfile.ZIP_DEFLATED)
    return out.getvalue()


# Damaged zips (the zipped formats: .docx .pptx .odt .odp .epub), each a way a bad upload is not its format
def rezipped(data: bytes, change: Callable[[zipfile.ZipInfo, bytes], bytes]) -> bytes:
    """The zip written again, deflated, each part's bytes through change(info, body)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            body = change(info, src.read(info))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, body)
    return out.getvalue()


def cut(data: bytes) -> bytes:
    """The first half: the central directory (at the end) is gone."""
    return data[: len(data) // 2]


def flipped(data: bytes) -> bytes:
    """Bytes of the largest part's deflated stream flipped; the directory intact."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)  # after its local header
    damaged = bytearray(data)
    for i in range(start + 4, start + min(info.compress_size, 40)):
        damaged[i] ^= 0x55
    return bytes(damaged)


def _patched(data: bytes, signature: bytes, offset: int, value: Callable[[bytes], bytes]) -> bytes:
    """Every header starting with `signature` with the 4 bytes at `offset` into it rewritten by value(them)."""
    out, at = bytearray(data), 0
    while (at := out.find(signature, at)) != -1:
        field = slice(at + offset, at + offset + 4)
        out[field] = value(bytes(out[field]))
        at += len(signature)
    return bytes(out)


def lying(data: bytes) -> bytes:
    """A bomb's trick: a 10 MB part of zeros (10 kB deflated) added, and every part stated to be 10 bytes."""
    out = io.BytesIO(rezipped(data, lambda info, body: body))
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.xml", bytes(10_000_000))
    ten = (10).to_bytes(4, "little")
    sizes = _patched(out.getvalue(), b"PK\x01\x02", 24, lambda _: ten)  # the directory's uncompressed size
    return _patched(sizes, b"PK\x03\x04", 22, lambda _: ten)  # each local header's


def encrypted(data: bytes) -> bytes:
    """Every part flagged as encrypted (bit 0 of its flags, in the directory)."""
    return _patched(data, b"PK\x01\x02", 8, lambda f: bytes([f[0] | 1]) + f[1:])


def bomb(size: int) -> bytes:
    """A zip whose one part is `size` zero bytes (deflate packs them about 1,000 to 1)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", bytes(size))
    return out.getvalue()
