"""Build the CJK font subset that refseg's HTML pages embed (development time only).

The claim chart and the claim-1 walkthrough show the patent's Chinese text. A reader without a
CJK font would see empty boxes, so the pages embed a subset of Noto Sans CJK SC (SIL Open Font
License 1.1) holding every CJK character of the shipped spec (``spec/*.txt``, ``*.toml``,
``*.md``): the claims, the registry's spans of them, and the readings' quotations. The page
code lists any character of a page outside the subset (``refseg/report/html.py``), and a test
holds the subset against the spec, so a spec edit that adds a character fails until this script
is run again.

Run from the checkout, with fonttools and brotli in a development venv (never a dependency of
refseg) and Debian's ``fonts-noto-cjk`` installed::

    python tools/build_cjk_font.py [--font /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc]

Writes ``refseg/report/fonts/cjk-subset.woff2``, ``cjk-subset.txt`` (the characters it holds,
one line) and ``OFL.txt`` (the font's copyright notice and the licence, as OFL clause 2 asks).
"""
from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "refseg" / "report" / "fonts"
FONT = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
COPYRIGHT = Path("/usr/share/doc/fonts-noto-cjk/copyright")
#: The face of the collection the subset is cut from.
FACE = "Noto Sans CJK SC"
#: Characters from here up are the CJK blocks (radicals, punctuation, ideographs, full-width
#: forms); below it DejaVu Sans, the pages' first font, has the glyphs.
CJK_START = 0x2E80


def spec_characters() -> str:
    """Every CJK character of the shipped spec, sorted."""
    chars = set()
    for path in sorted((ROOT / "spec").iterdir()):
        if path.suffix in (".txt", ".toml", ".md"):
            chars.update(c for c in path.read_text(encoding="utf-8") if ord(c) >= CJK_START)
    return "".join(sorted(chars))


def _face(collection: TTCollection):
    for font in collection.fonts:
        if font["name"].getDebugName(1) == FACE:
            return font
    raise SystemExit(f"{FACE!r} is not in the collection")


def _ofl_text() -> str:
    """The SIL OFL 1.1 text of Debian's copyright file, its Debian indentation removed."""
    raw = COPYRIGHT.read_bytes()
    text = gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode()
    block = text.split("License: SIL-1.1\n", 2)[2].split("\nLicense: ")[0]
    return "\n".join("" if line.strip() == "." else line[1:] for line in block.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--font", type=Path, default=FONT)
    args = parser.parse_args()
    chars = spec_characters()
    font = _face(TTCollection(str(args.font)))
    missing = [c for c in chars if ord(c) not in font.getBestCmap()]
    if missing:
        raise SystemExit(f"{FACE} lacks {''.join(missing)}")
    notice = font["name"].getDebugName(0)
    options = subset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    options.notdef_outline = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in chars])
    subsetter.subset(font)
    OUT.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff2"
    font.save(str(OUT / "cjk-subset.woff2"))
    (OUT / "cjk-subset.txt").write_text(chars + "\n", encoding="utf-8")
    licence = (f"cjk-subset.woff2 is a subset of {FACE} (Noto Sans CJK, fonts-noto-cjk), cut "
               "by refseg's tools/build_cjk_font.py to the characters of cjk-subset.txt.\n"
               f"Its copyright notice: {notice}\n\n{_ofl_text().strip()}\n")
    (OUT / "OFL.txt").write_text(re.sub(r"\n{3,}", "\n\n", licence), encoding="utf-8")
    size = (OUT / "cjk-subset.woff2").stat().st_size
    print(f"{OUT / 'cjk-subset.woff2'}: {len(chars)} characters, {size} bytes")


if __name__ == "__main__":
    main()
