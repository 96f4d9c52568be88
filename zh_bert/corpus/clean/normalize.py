"""Text normalisation: pure functions, each one switchable, applied in a fixed order by `Normalizer`.

Order matters: HTML goes first (entities such as &nbsp; and &#8203; decode to odd spaces and
zero-width characters), then invisible characters (they hide inside URLs and between CJK characters),
then full-width ASCII (so ＵＲＬｓ and １３８… phone numbers are caught by the PII patterns), then
OpenCC, then PII, and whitespace last (earlier steps leave gaps behind).
"""

from __future__ import annotations

import html
import re
import typing
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.text import CJK_CLASS

Conversion = Literal["t2s", "tw2s", "hk2s", "none"]  # OpenCC configs
PiiMode = Literal["mask", "drop", "keep"]
CONVERSIONS = typing.get_args(Conversion)
PII_MODES = typing.get_args(PiiMode)
# Placeholders survive BERT tokenisation as three known pieces ('<', 'url', '>') instead of [UNK]
# and cannot be produced by real Chinese text after cleaning (bare '<' + ASCII word + '>' is HTML, removed).
PII_TOKENS = {"url": "<URL>", "email": "<EMAIL>", "phone": "<PHONE>", "idcard": "<ID>"}


# --- invisible characters -------------------------------------------------------------------------
def _invisible_table() -> dict[int, int | None]:
    table: dict[int, int | None] = {}
    for cp in range(0x20):
        table[cp] = None
    table[0x7F] = None
    for cp in range(0x80, 0xA0):
        table[cp] = None
    for cp in (0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F,
               0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066,
               0x2067, 0x2068, 0x2069, 0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0x3164, 0xFEFF,
               0xFFA0, 0xFFF9, 0xFFFA, 0xFFFB):
        table[cp] = None
    table[ord("\n")] = ord("\n")
    table[ord("\t")] = ord(" ")
    table[ord("\r")] = None
    # Unicode line/paragraph separators become newlines, odd spaces become a plain space.
    table[0x2028] = table[0x2029] = table[0x85] = ord("\n")
    for cp in (0xA0, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009,
               0x200A, 0x202F, 0x205F):
        table[cp] = ord(" ")
    return table


_INVISIBLE = _invisible_table()


# str.translate with a dict walks every character in Python-level lookups (~35 MB/s); a regex search
# that finds nothing runs at memory speed, and most documents contain no such character at all.
_INVISIBLE_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in _INVISIBLE if _INVISIBLE[c] != c) + "]")


def remove_invisible(text: str) -> str:
    """Drop control, zero-width and bidi characters; tabs and odd spaces become ' ', U+2028/9 newlines."""
    return text.translate(_INVISIBLE) if _INVISIBLE_RE.search(text) else text


# --- HTML ----------------------------------------------------------------------------------------
_HTML_BLOCK_RE = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_HTML_BREAK_RE = re.compile(r"<\s*(?:br|/p|p|/div|div|/li|li|/h[1-6]|tr|/tr)\b[^<>]*>", re.I)
# Our own PII placeholders look like tags: keep them, so that cleaning cleaned text changes nothing.
_HTML_TAG_RE = re.compile(r"<!--.*?-->|<(?!(?:URL|EMAIL|PHONE|ID)>)/?[A-Za-z][A-Za-z0-9:-]*(?:\s[^<>]*)?/?>", re.S)
_HTML_ENTITY_RE = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


def strip_html(text: str) -> str:
    """Decode entities (&amp; &nbsp; &#x4e2d; &lt;br&gt;), then remove HTML tags, comments and
    <script>/<style> blocks. Entities first: web text is often escaped twice, and a tag that surfaces only
    after decoding would otherwise survive until the text is cleaned again. Block tags (<p>, <br>, <div>,
    <li>...) become newlines so paragraphs stay apart."""
    if "&" in text:
        text = _HTML_ENTITY_RE.sub(lambda m: html.unescape(m.group()), text)
    if "<" in text:
        text = _HTML_BLOCK_RE.sub("", text)
        text = _HTML_BREAK_RE.sub("\n", text)
        text = _HTML_TAG_RE.sub("", text)
    return text


# --- full-width ASCII ----------------------------------------------------------------------------
# Letters, digits, the ideographic space and the ASCII symbols that Chinese typography does not use as
# punctuation. Chinese punctuation (，。！？：；（）“”《》 and full-width ！？，：；（）) is kept as is.
_FULLWIDTH_KEEP = set("！，．：；？（）［］｛｝＂＇～")
_FULLWIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F) if chr(cp) not in _FULLWIDTH_KEEP}
_FULLWIDTH[0x3000] = ord(" ")


_FULLWIDTH_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in _FULLWIDTH) + "]+")


def fullwidth_to_halfwidth(text: str) -> str:
    """ＡＢＣ１２３ → ABC123 and the ideographic space → ' '; Chinese punctuation stays full-width."""
    return _FULLWIDTH_RE.sub(lambda m: m.group().translate(_FULLWIDTH), text)


# --- PII -----------------------------------------------------------------------------------------
_URL_RE = re.compile(r"(?:https?://|ftp://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+", re.I)
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
# Mainland mobile numbers: 1[3-9]x xxxx xxxx, optional +86/0086, optional '-' or ' ' groups (3-4-4).
_PHONE_RE = re.compile(r"(?<![0-9A-Za-z])(?:(?:\+|00)86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}(?![0-9A-Za-z])")
# 18-digit resident ID: 6-digit region, birth date 18xx-20xx, 3 digits, check digit/X. The checksum is
# verified so that long digit runs (order numbers, ISBNs) are not masked by accident.
_IDCARD_RE = re.compile(r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
                        r"\d{3}[\dXx](?![0-9A-Za-z])")
_DIGITS_RE = re.compile(r"1[3-9]\d[ -]?\d{4}|\d{17}")  # cheap pre-check for the two patterns below
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def idcard_checksum_ok(number: str) -> bool:
    """GB 11643-1999 check digit of an 18-digit resident ID."""
    total = sum(int(d) * w for d, w in zip(number[:17], _ID_WEIGHTS))
    return "10X98765432"[total % 11] == number[17].upper()


def mask_pii(text: str, mode: str, counts: Counter | None = None) -> str:
    """Replace URLs, e-mails, mainland mobile numbers and resident ID numbers by `PII_TOKENS` ('mask'),
    by nothing ('drop'), or leave them ('keep'). `counts` (if given) is incremented per kind found."""
    if mode == "keep":
        return text

    def sub(kind, pattern, text, check=None):
        def repl(m):
            if check and not check(m.group()):
                return m.group()
            if counts is not None:
                counts[kind] += 1
            return PII_TOKENS[kind] if mode == "mask" else ""
        return pattern.sub(repl, text)

    if "@" in text:
        text = sub("email", _EMAIL_RE, text)
    if "://" in text or "www." in text or "WWW." in text:
        text = sub("url", _URL_RE, text)
    if _DIGITS_RE.search(text):
        text = sub("idcard", _IDCARD_RE, text, idcard_checksum_ok)
        text = sub("phone", _PHONE_RE, text)
    return text


# --- whitespace ----------------------------------------------------------------------------------
_CJK_OR_PUNCT = f"[{CJK_CLASS}\u3000-\u303f\uff00-\uffef\u2014\u2018\u2019\u201c\u201d\u2026]"
_SPACE_BETWEEN_CJK_RE = re.compile(f"(?<={_CJK_OR_PUNCT}) +(?={_CJK_OR_PUNCT})")
_SPACES_RE = re.compile(r" {2,}")


def collapse_whitespace(text: str) -> str:
    """Runs of spaces → one space; spaces between two CJK characters (or CJK punctuation) removed;
    lines stripped; blank lines removed, so paragraphs are separated by exactly one '\\n'."""
    lines = []
    for line in text.split("\n"):
        if "  " in line:
            line = _SPACES_RE.sub(" ", line)
        line = line.strip()
        if " " in line:
            line = _SPACE_BETWEEN_CJK_RE.sub("", line)
        if line:
            lines.append(line)
    return "\n".join(lines)


# --- the pipeline --------------------------------------------------------------------------------
@dataclass
class NormalizeConfig:
    """Each step on by default; the fields are `zh-bert clean`'s normalisation options."""
    convert: Conversion = option("t2s", help="OpenCC traditional→simplified conversion")
    pii: PiiMode = option("mask", help="URLs, e-mails, mainland mobile numbers, resident ID numbers: replace by "
                          "<URL> <EMAIL> <PHONE> <ID>, delete, or keep")
    fullwidth: bool = option(True, help="full-width ASCII letters/digits/space → half-width")
    invisible: bool = option(True, flags=("--control",), help="remove control and zero-width characters")
    html: bool = option(True, help="remove HTML tags, decode entities")
    whitespace: bool = option(True, help="collapse whitespace, remove spaces between CJK characters")
    nfc: bool = True                # Unicode NFC (composes decomposed accents; leaves CJK punctuation alone)

    def __post_init__(self):
        if self.convert not in CONVERSIONS:
            raise ZhBertError(f"--convert must be one of {', '.join(CONVERSIONS)}, got '{self.convert}'")
        if self.pii not in PII_MODES:
            raise ZhBertError(f"--pii must be one of {', '.join(PII_MODES)}, got '{self.pii}'")


class Normalizer:
    """Applies the enabled steps of a NormalizeConfig; holds the OpenCC converter (built once per process)."""

    def __init__(self, cfg: NormalizeConfig):
        self.cfg = cfg
        self._opencc = None
        if cfg.convert != "none":
            import opencc

            self._opencc = opencc.OpenCC(cfg.convert)

    def __call__(self, text: str, pii_counts: Counter | None = None) -> str:
        cfg = self.cfg
        if cfg.html:
            text = strip_html(text)
        if cfg.invisible:
            text = remove_invisible(text)
        if cfg.nfc and not text.isascii():
            text = unicodedata.normalize("NFC", text)
        if cfg.fullwidth:
            text = fullwidth_to_halfwidth(text)
        if self._opencc is not None:
            text = self._opencc.convert(text)
        text = mask_pii(text, cfg.pii, pii_counts)
        if cfg.whitespace:
            text = collapse_whitespace(text)
        return text
