"""The PDF edition's text layer: give back the ideographs that Chromium's character maps turn into radicals.

Chromium (Skia) writes each font's ToUnicode CMap by looking up, for every glyph it printed, a code point that
the font maps to that glyph. Noto CJK maps many ideographs and a radical to one glyph (力 U+529B and ⼒ U+2F12
share a glyph), and the lookup returns the radical: the page shows 注意力, a search or a copy finds 注意⼒.
The same happens in other printers (wkhtmltopdf #4414, PDFBox #470; Chromium crbug.com/981259).

``fix_pdf`` rewrites, after printing, each ToUnicode CMap that names a radical (U+2E80–U+2EFF, U+2F00–U+2FDF)
so that it names the ideograph that shares the radical's glyph in the system's Noto CJK fonts (the Simplified
Chinese faces first, the page's own), or its compatibility decomposition (NFKC) where no face has one. Only the
CMap streams change, appended as an incremental update: fonts, pages and bookmarks are the printed ones.
"""

from __future__ import annotations

import functools
import glob
import re
import subprocess
import unicodedata
import zlib
from pathlib import Path

RADICAL_BLOCKS = ((0x2E80, 0x2EFF), (0x2F00, 0x2FDF))  # CJK Radicals Supplement, Kangxi Radicals
RADICALS = re.compile("[\u2e80-\u2eff\u2f00-\u2fdf]")
HEX = re.compile(rb"<([0-9A-Fa-f]*)>")


def is_radical(code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in RADICAL_BLOCKS)


def cjk_font_files() -> list[str]:
    """The Noto CJK font files fontconfig knows (fonts-noto-cjk), else those at Debian's path."""
    try:
        listed = subprocess.run(["fc-list", ":", "file"], capture_output=True, text=True, check=True).stdout
        files = sorted({line.split(":")[0].strip() for line in listed.splitlines() if "CJK" in line})
    except (OSError, subprocess.CalledProcessError):
        files = []
    return files or sorted(glob.glob("/usr/share/fonts/opentype/noto/Noto*CJK*"))


@functools.lru_cache(maxsize=None)
def _faces() -> tuple:
    """Each Noto CJK face's cmap (code point -> glyph name), the Simplified Chinese faces first."""
    from fontTools.ttLib import TTCollection, TTFont

    faces = []
    for path in cjk_font_files():
        fonts = TTCollection(path, lazy=True).fonts if path.endswith(".ttc") else [TTFont(path, lazy=True)]
        for font in fonts:
            faces.append((font["name"].getDebugName(1) or "", font))
    faces.sort(key=lambda face: " SC" not in face[0])  # stable: file order within each group
    return tuple(font for _, font in faces)


def ideographs_for(radicals: set[int]) -> dict[int, str]:
    """radical code point -> the character the page shows: the ideograph sharing its glyph, else its NFKC form.

    NFKC alone is not enough: it decomposes the Kangxi block but few of the supplement's radicals (⻓ U+2ED3
    shares a glyph with 长 and has no decomposition), and it can name another variant than the glyph shows
    (⼾ U+2F3E: NFKC 戶, the SC glyph is 户's).
    """
    found: dict[int, str] = {}
    for font in _faces():
        missing = radicals - found.keys()
        if not missing:
            break
        cmap = font.getBestCmap()
        glyphs = {cmap[r]: r for r in missing if r in cmap}
        for code, glyph in sorted(cmap.items()):
            if glyph in glyphs and not is_radical(code) and unicodedata.category(chr(code)) == "Lo":
                found.setdefault(glyphs[glyph], chr(code))
    for radical in radicals - found.keys():
        nfkc = unicodedata.normalize("NFKC", chr(radical))
        found[radical] = nfkc if nfkc != chr(radical) else chr(radical)
    return found


def _utf16(hex_text: bytes) -> str:
    return bytes.fromhex(hex_text.decode()).decode("utf-16-be", errors="surrogatepass")


def _hex(text: str) -> bytes:
    return text.encode("utf-16-be", errors="surrogatepass").hex().upper().encode()


BFCHAR = re.compile(rb"beginbfchar(.*?)endbfchar", re.S)
BFRANGE = re.compile(rb"beginbfrange(.*?)endbfrange", re.S)
PAIR = re.compile(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]*)>")
RANGE = re.compile(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*(\[[^\]]*\]|<[0-9A-Fa-f]*>)")


def parse_cmap(cmap: bytes) -> dict[bytes, str]:
    """A ToUnicode CMap's mappings: source code (hex, as written) -> the Unicode text it stands for."""
    mapping: dict[bytes, str] = {}
    for block in BFCHAR.findall(cmap):
        for src, dst in PAIR.findall(block):
            mapping[src.upper()] = _utf16(dst)
    for block in BFRANGE.findall(cmap):
        for lo, hi, dst in RANGE.findall(block):
            width, first, last = len(lo), int(lo, 16), int(hi, 16)
            if dst.startswith(b"["):
                targets = [_utf16(h) for h in HEX.findall(dst)]
            else:  # the last UTF-16 unit counts up along the range
                start = _utf16(dst[1:-1])
                targets = [start[:-1] + chr(ord(start[-1]) + i) for i in range(last - first + 1)] if start else []
            for i, target in enumerate(targets[:last - first + 1]):
                mapping[b"%0*X" % (width, first + i)] = target
    return mapping


def radicals_in_cmap(cmap: bytes) -> set[int]:
    """Radical code points that a ToUnicode CMap gives as the text of some code."""
    return {ord(c) for text in parse_cmap(cmap).values() for c in RADICALS.findall(text)}


def rewrite_cmap(cmap: bytes, ideographs: dict[int, str]) -> bytes:
    """The CMap with each radical in its texts replaced, its mappings written out as bfchar blocks."""
    mapping = parse_cmap(cmap)
    head = cmap[:cmap.index(b"endcodespacerange") + len(b"endcodespacerange")]
    tail = cmap[cmap.index(b"endcmap"):]
    lines = [b"<%s> <%s>" % (src, _hex(RADICALS.sub(lambda m: ideographs.get(ord(m.group()), m.group()), text)))
             for src, text in sorted(mapping.items(), key=lambda item: (len(item[0]), int(item[0], 16)))]
    blocks = [b"%d beginbfchar\n%s\nendbfchar" % (len(lines[i:i + 100]), b"\n".join(lines[i:i + 100]))
              for i in range(0, len(lines), 100)]  # at most 100 mappings a block (PDF reference, 5.9.2)
    return head + b"\n" + b"\n".join(blocks) + b"\n" + tail


def fix_pdf(path: Path) -> dict:
    """Rewrite the radicals in ``path``'s ToUnicode CMaps, in place; returns what it did.

    The new CMaps are appended as an incremental update (PDF reference, 3.4.5): the printed objects, fonts and
    bookmarks stay byte for byte, and a reader takes the newer CMap objects. Chromium writes a classic
    cross-reference table, which the update extends; anything else goes through pypdf's incremental writer.
    """
    import pypdf

    data = path.read_bytes()
    reader = pypdf.PdfReader(path)
    # Chromium writes the font dictionaries as plain objects: their references are in the bytes. Where they
    # are not (compressed object streams), walk the pages' fonts.
    numbers = sorted({int(n) for n in re.findall(rb"/ToUnicode\s+(\d+)\s+0\s+R", data)}) or sorted(
        {ref.idnum for page in reader.pages for font in (page.get("/Resources", {}).get("/Font", {}) or {}).values()
         for ref in [font.get_object().get("/ToUnicode")] if ref is not None})
    cmaps = {num: reader.get_object(num).get_data() for num in numbers}
    radicals = {num: radicals_in_cmap(cmap) for num, cmap in cmaps.items()}
    ideographs = ideographs_for(set().union(*radicals.values())) if cmaps else {}
    new = {num: rewrite_cmap(cmaps[num], ideographs) for num in numbers if radicals[num]}
    summary = {"cmaps": len(cmaps), "cmaps_rewritten": len(new), "radicals": len(ideographs),
               "unmapped": sorted(chr(r) for r, c in ideographs.items() if ord(c) == r)}
    if not new:
        return summary
    trailer = reader.trailer
    prev = re.findall(rb"startxref\s+(\d+)", data[-1024:])
    if not prev or not data[int(prev[-1]):].startswith(b"xref") or "/Encrypt" in trailer:
        _fix_with_pypdf(path, new)
        return summary
    out = bytearray(data if data.endswith(b"\n") else data + b"\n")
    offsets = {}
    for num, cmap in new.items():
        body = zlib.compress(cmap)
        offsets[num] = len(out)
        out += b"%d 0 obj\n<</Filter /FlateDecode\n/Length %d>> stream\n%s\nendstream\nendobj\n" % (num, len(body), body)
    xref = len(out)
    out += b"xref\n0 1\n0000000000 65535 f \n"  # the free list's head, as in the printed table
    for num in sorted(offsets):
        out += b"%d 1\n%010d 00000 n \n" % (num, offsets[num])
    keys = b"".join(b"%s %s\n" % (key.encode(), _serialize(trailer.raw_get(key)))
                    for key in trailer if key not in ("/Size", "/Prev", "/XRefStm"))  # /Root, /Info, /ID
    out += b"trailer\n<</Size %d\n%s/Prev %s>>\nstartxref\n%d\n%%%%EOF\n" % (trailer["/Size"], keys, prev[-1], xref)
    partial = path.with_suffix(".partial")
    partial.write_bytes(bytes(out))
    partial.replace(path)
    return summary


DOUBLED = re.compile(r"^(?P<num>(?:\d+\.)+\s+)?(?P=num)?(?P<text>.{2,}?)\s*(?P=text)$", re.S)
DOUBLED_NUMBER = re.compile(r"^(?P<num>(?:\d+\.)+\s+)(?P=num)")


def undoubled(title: str) -> str:
    """'1.7. 1.7. 练习练习' -> '1.7. 练习', '怎样读怎样读' -> '怎样读': a bookmark title written twice, once.

    Chromium writes some bookmarks with the heading's text twice (30 of 301 in one print, not only headings with
    a label anchor); the number and the words each come twice, one after the other."""
    m = DOUBLED.match(title)
    if m and not (m["num"] and not title.startswith(m["num"] * 2)):
        return f"{m['num'] or ''}{m['text']}"
    n = DOUBLED_NUMBER.match(title)
    if not n:
        return title
    # the number twice and only the words before the last "→ 矩阵乘" twice: "4.2. 4.2. AAB" -> "4.2. AB"
    rest = title[n.end():]
    for k in range(len(rest) // 2, 1, -1):
        if rest[k:].lstrip().startswith(rest[:k]):
            return n["num"] + rest[:k] + rest[k:].lstrip()[k:]
    return n["num"] + rest


def fix_outline(path: Path) -> int:
    """Rewrite doubled bookmark titles in place (an incremental update); returns how many were rewritten."""
    import pypdf
    from pypdf.generic import NameObject, TextStringObject

    reader = pypdf.PdfReader(path)
    root, doubled = reader.trailer["/Root"], []
    outlines = root["/Outlines"] if "/Outlines" in root else {}
    stack = [outlines.raw_get("/First")] if "/First" in outlines else []
    while stack:   # every bookmark: depth first over /First and /Next (indirect references)
        ref = stack.pop()
        node = ref.get_object()
        if undoubled(str(node.get("/Title", ""))) != str(node.get("/Title", "")):
            doubled.append(ref.idnum)
        stack += [node.raw_get(k) for k in ("/Next", "/First") if k in node]
    if not doubled:
        return 0
    writer = pypdf.PdfWriter(str(path), incremental=True)
    for num in doubled:
        node = writer.get_object(num)
        node[NameObject("/Title")] = TextStringObject(undoubled(str(node["/Title"])))
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as f:
        writer.write(f)
    partial.replace(path)
    return len(doubled)


def _serialize(obj) -> bytes:
    import io

    out = io.BytesIO()
    obj.write_to_stream(out)
    return out.getvalue()


def _fix_with_pypdf(path: Path, new: dict[int, bytes]) -> None:
    import pypdf

    writer = pypdf.PdfWriter(str(path), incremental=True)
    for num, cmap in new.items():
        writer.get_object(num).set_data(cmap)
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as f:
        writer.write(f)
    partial.replace(path)
