"""MediaWiki XML dumps (`zhwiki-*-pages-articles*.xml[.bz2]`): streamed with mwxml, wikitext turned into
plain text with mwparserfromhell. Only articles (namespace 0, not redirects) are kept.

mwparserfromhell's strip_code() keeps the visible text of links and drops templates, tags and tables'
markup; what it does not know about is removed here: file/category/interlanguage links (whose
"thumb|caption" and "Category:X" would leak into the text), headings, <ref> contents, and zhwiki's
-{zh-hans:...;zh-hant:...}- language-conversion markup (the simplified variant is kept).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

from zh_bert.corpus.clean.source import RawDoc
from zh_bert.corpus.corpus_io import open_binary
from zh_bert.core.errors import ZhBertError

# Namespaces whose links are not text: English names and their zhwiki aliases.
_NON_TEXT_LINK = re.compile(r"^\s*:?\s*(file|image|media|category|文件|檔案|档案|图像|圖像|分类|分類|"
                            r"[a-z]{2,3}(-[a-z]+)?)\s*:", re.I)
_LANG_CONV = re.compile(r"-\{(.*?)\}-", re.S)
_VARIANTS = ("zh-hans", "zh-cn", "zh-sg", "zh", "zh-hant", "zh-tw", "zh-hk", "zh-mo")


def _lang_conversion(m: re.Match) -> str:
    """-{zh-hans:计算机; zh-hant:電腦;}- → 计算机; -{H|...}- (a page-wide rule) → ''; -{X}- → X."""
    body = m.group(1)
    flag, sep, rest = body.partition("|")
    if sep and len(flag) <= 3:
        if "H" in flag or "-" in flag:
            return ""
        body = rest
    variants = {}
    for part in body.split(";"):
        key, colon, value = part.partition(":")
        if colon and key.strip().lower() in _VARIANTS:
            variants[key.strip().lower()] = value.strip()
    if not variants:
        return body
    return next(variants[v] for v in _VARIANTS if v in variants)


def wikitext_to_text(wikitext: str) -> str:
    """Plain text of an article's wikitext; paragraphs separated by newlines."""
    import mwparserfromhell

    code = mwparserfromhell.parse(_LANG_CONV.sub(_lang_conversion, wikitext))
    for node in code.filter(recursive=False):
        if isinstance(node, mwparserfromhell.nodes.Heading):
            code.remove(node)
    for link in code.filter_wikilinks():
        if _NON_TEXT_LINK.match(str(link.title)):
            try:
                code.remove(link)
            except ValueError:
                pass
    for tag in code.filter_tags():
        if str(tag.tag).lower() in ("ref", "gallery", "math", "timeline", "score", "syntaxhighlight"):
            try:
                code.remove(tag)
            except ValueError:
                pass
    text = code.strip_code(normalize=True, collapse=True, keep_template_params=False)
    lines = [l.strip().lstrip("*#:;").strip() for l in text.split("\n")]
    return "\n".join(l for l in lines if l)


def read_mediawiki(path: Path) -> Iterator[RawDoc]:
    """Articles of a MediaWiki XML dump; a file that is not one (or is cut short) is a ZhBertError naming
    it, raised before or after the articles that could be read."""
    import mwxml

    with open_binary(path) as f:
        try:
            dump = mwxml.Dump.from_file(f)
            for page in dump:
                if page.namespace != 0 or page.redirect:
                    for _ in page:
                        pass
                    continue
                text = None
                for rev in page:  # pages-articles holds one revision; a history dump: keep the last
                    text = rev.text
                if text:
                    yield RawDoc(text, f"{path}#{page.id}", markup="wikitext")
        except (ET.ParseError, AssertionError, mwxml.errors.MalformedXML, EOFError, OSError) as e:
            detail = str(e) or "the root element is not <mediawiki>"
            raise ZhBertError(f"{path}: not a complete MediaWiki XML dump ({detail}); "
                              f"use --format to read it as another format") from None
