"""Streaming readers: every input format becomes an iterator of `RawDoc(text, source)`.

Files are read line by line as bytes and decoded per line, so a stray invalid byte costs one line
(recorded as file:line in `Problems`) instead of the run; nothing reads a whole corpus into memory
except a whole-file `.json` document (SQuAD/DRCD style), which is one JSON value by definition.
Parquet files are read row group by row group (parquet.py). A JSON line is parsed by the reading layer
(`parse_json_line`: NaN and Infinity are not JSON either).
"""

from __future__ import annotations

import codecs
import io
import os
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Literal, Optional

from zh_bert.corpus.clean.parquet import check_parquet, read_parquet_docs
from zh_bert.corpus.clean.report import REPORT_SUFFIX
from zh_bert.corpus.clean.source import COMPRESSED, Problems, RawDoc, inner_name
from zh_bert.corpus.clean.wikitext import read_mediawiki
from zh_bert.core.config import option
from zh_bert.core.fileio import parse_json, parse_json_line
from zh_bert.corpus.corpus_io import (BROKEN_STREAM, Segment, bounded_lines, line_number, lone_surrogate,
                                      open_binary, segment_raw_lines, too_long)
from zh_bert.core.errors import ZhBertError

Format = Literal["auto", "text", "jsonl", "json", "parquet", "wikiextractor", "mediawiki"]
DocSep = Literal["line", "blank", "file"]
FORMATS = typing.get_args(Format)
DOC_SEPS = typing.get_args(DocSep)
# File name endings a directory walk picks up (after removing .gz/.bz2/.xz/.zst); anything else (README.md,
# SOURCE.md, scripts) is skipped and listed in the report. Files named on the command line are always read.
CORPUS_SUFFIXES = ("", ".txt", ".text", ".jsonl", ".json", ".xml", ".parquet")


@dataclass
class ReadOptions:
    """How input files are read: `zh-bert clean`'s reading options."""
    fmt: Format = option("auto", flags=("--format",), help="input format (auto: by extension/content: .jsonl, "
                         ".json, .parquet, .xml → mediawiki, <doc ...> → wikiextractor, else text)")
    doc_sep: DocSep = option("line", help="text files: one document per line, blank-line separated, or one per "
                             "file (THUCNews)")
    field_name: Optional[str] = option(None, flags=("--field",), metavar="FIELD", help="JSON field or Parquet column "
                                       "with the text (default: text; CLUE files' content/answer/context/sentence and "
                                       "a Parquet 'content' column are found automatically when --field is not given)")
    encoding: str = option("auto", help="input encoding (auto = UTF-8, or GB18030/GBK/Big5 when detected)")

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise ZhBertError(f"--format {self.fmt}: unknown format; choose one of {', '.join(FORMATS)}")
        if self.doc_sep not in DOC_SEPS:
            raise ZhBertError(f"--doc-sep must be one of {', '.join(DOC_SEPS)}, got '{self.doc_sep}'")
        if self.encoding != "auto":
            try:
                codecs.lookup(self.encoding)
            except LookupError:
                raise ZhBertError(f"--encoding {self.encoding}: unknown encoding") from None


# --- files and encodings -------------------------------------------------------------------------
def expand_inputs(inputs: list[str], output: str | None = None) -> tuple[list[Path], list[str]]:
    """Files to read, in a deterministic order (directories walked recursively, sorted), plus the files
    a directory walk skipped. A missing input is an error before anything is read or written. `output`:
    the in-process `-o` file, which a walk of its own folder skips (a rerun must not read its previous
    output as input) and which an input must not name."""
    out = Path(output).resolve() if output else None
    files, skipped = [], []
    for name in inputs:
        p = Path(name)
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for n in sorted(names):
                    f = Path(root) / n
                    if n.startswith(".") or Path(inner_name(f)).suffix not in CORPUS_SUFFIXES \
                            or n.endswith(REPORT_SUFFIX) or (out is not None and f.resolve() == out):
                        skipped.append(str(f))
                    else:
                        files.append(f)
        elif p.is_file():
            if out is not None and p.resolve() == out:
                raise ZhBertError(f"-o {output}: is also an input; write the output to another file")
            files.append(p)
        elif p.exists():
            raise ZhBertError(f"{name}: not a regular file or directory")
        else:
            raise ZhBertError(f"{name}: no such file or directory")
    return files, skipped


# Very frequent characters in both scripts: correctly decoded Chinese has ~20-30% of them, mojibake ~1%.
_COMMON = set("的一是不了在人有我他这個个们們中来來上大为為和国國地到以说說时時要就出会會可也你对對生能而子那得于着著下自之年过過发發后後作里裡用道行所然家种種事成方多经經么麼去法学學如都同现現当當没沒动動面起看定天分还還进進好小部其些主样樣理心她本前开開但因只从從想实實日")
SNIFF_BYTES = 1 << 16


def _common_ratio(text: str) -> float:
    n = sum(1 for c in text if not c.isspace())
    return sum(1 for c in text if c in _COMMON) / n if n else 0.0


def detect_encoding(path: Path, sample: bytes) -> str:
    """'utf-8' unless the sample is clearly not UTF-8; then the best of GB18030 (a superset of GBK and
    GB2312) and Big5 by the share of very common Chinese characters. Raises ZhBertError if neither fits."""
    if sample.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    lines = sample.split(b"\n")
    cut = len(sample) >= SNIFF_BYTES  # the sample may end mid-character: its last piece is not final
    bad = 0
    for k, line in enumerate(lines):
        try:
            codecs.getincrementaldecoder("utf-8")().decode(line, final=not (cut and k == len(lines) - 1))
        except UnicodeDecodeError:
            bad += 1
    if bad == 0 or bad <= 0.05 * len(lines):
        return "utf-8"  # a few broken lines in a UTF-8 file: drop them, keep the file
    scores = {}
    for enc in ("gb18030", "big5"):
        text = sample.decode(enc, errors="replace")
        scores[enc] = _common_ratio(text) - text.count("\ufffd") / max(1, len(text))
    enc = max(scores, key=scores.get)
    if scores[enc] < 0.05:
        raise ZhBertError(f"{path}: not UTF-8, and not recognisably GB18030/GBK or Big5 text; "
                          f"pass its encoding with --encoding (e.g. --encoding gbk)")
    return enc


def read_lines(path: Path, encoding: str, problems: Problems,
               segment: Segment | None = None) -> Iterator[tuple[int, str]]:
    """(line number, decoded line without its newline); undecodable lines are counted and skipped.
    `segment` (path, start, end): only the lines that begin in bytes [start, end) of an uncompressed file
    (`clean --executor` cuts a big file across tasks), numbered as in the whole file; the encoding is
    still detected from the file's first bytes, so every task decodes alike."""
    with open_binary(path) as f:
        head = f.read(SNIFF_BYTES) if encoding == "auto" else b""
        if encoding == "auto":
            encoding = detect_encoding(path, head)
        problems.encodings[str(path)] = encoding
        if segment is not None and segment[1] > 0:
            numbered = _numbered_segment(path, segment[1], segment[2])
        elif segment is not None:
            numbered = ((k, raw) for k, (_, raw) in enumerate(segment_raw_lines(path, 0, segment[2]), 1))
        else:
            numbered = enumerate(bounded_lines(io.BufferedReader(_Prepend(head, f))), 1)
        for i, raw in numbered:
            if isinstance(raw, int):     # past MAX_LINE_BYTES: counted while read, never decoded nor normalised
                problems.add("too_long", path, i, too_long(raw))
                continue
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError as e:
                problems.add("undecodable", path, i, f"{encoding}: {e.reason} at byte {e.start}")
                continue
            except LookupError:
                raise ZhBertError(f"--encoding {encoding}: unknown encoding") from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield i, line.rstrip("\r\n")


def _numbered_segment(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The raw lines of a segment that starts mid-file, numbered from its first line's number."""
    first = None
    for k, (pos, raw) in enumerate(segment_raw_lines(path, start, end)):
        if first is None:
            first = line_number(path, pos)
        yield first + k, raw


class _Prepend(io.RawIOBase):
    """A raw stream that replays `head` (already read for sniffing) before the rest of `f`."""

    def __init__(self, head: bytes, f: IO[bytes]):
        self.head, self.f = head, f

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.f.read(len(b))
        b[:len(data)] = data
        return len(data)


# --- format detection ----------------------------------------------------------------------------
def detect_format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    name = inner_name(path)
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".xml"):
        return "mediawiki"
    with open_binary(path) as f:
        raw = f.read(4096)
    if raw.startswith(b"PAR1"):
        return "parquet"
    head = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"<doc ") or head.startswith(b"<doc>"):
        return "wikiextractor"
    if head.startswith(b"<mediawiki"):
        return "mediawiki"
    return "text"


# --- readers -------------------------------------------------------------------------------------
def read_plain_docs(path: Path, doc_sep: str, encoding: str, problems: Problems,
              segment: Segment | None = None) -> Iterator[RawDoc]:
    """Plain text: one document per line ('line'), blank-line separated ('blank'), or the whole file ('file',
    e.g. THUCNews: title line, then paragraphs)."""
    if doc_sep == "line":
        for i, line in read_lines(path, encoding, problems, segment):
            if line.strip():
                yield RawDoc(line, f"{path}:{i}")
        return
    buf: list[str] = []
    start = 1
    for i, line in read_lines(path, encoding, problems):
        if doc_sep == "blank" and not line.strip():
            if buf:
                yield RawDoc("\n".join(buf), f"{path}:{start}")
            buf = []
            continue
        if not buf:
            start = i
        buf.append(line)
    if buf:
        yield RawDoc("\n".join(buf), f"{path}:{start}" if doc_sep == "blank" else str(path))


# Fields holding the running text in common Chinese corpora (CLUECorpus2020 / nlp_chinese_corpus:
# news2016zh 'content', webtext2019zh 'content', baike2018qa 'answer', wiki2019zh 'text';
# CLUE classification 'sentence'; SQuAD/CMRC/DRCD 'context').
_TEXT_FIELDS = ("text", "content", "answer", "context", "sentence", "desc")


def record_text(obj, field_name: str, field_given: bool) -> str | None:
    """The text of one JSON record: `field_name` if present; if the user did not choose a field, the first
    known text field, with a 'title' as the first paragraph."""
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        return None
    if field_name in obj:
        v = obj[field_name]
        return v if isinstance(v, str) else None
    if field_given:
        return None
    for k in _TEXT_FIELDS:
        if isinstance(obj.get(k), str) and obj[k].strip():
            title = obj.get("title")
            if isinstance(title, str) and title.strip() and title.strip() not in obj[k][:len(title) + 5]:
                return title.strip() + "\n" + obj[k]
            return obj[k]
    return None


def _record_doc(obj, field_name: str, field_given: bool, path: Path, where: int, source: str,
                problems: Problems) -> RawDoc | None:
    """The document of one JSON record, or None (counted at file:line) when it has no text field or its
    text holds a lone surrogate (JSON's "\\ud800": like an undecodable byte it costs its document, not the
    run)."""
    text = record_text(obj, field_name, field_given)
    if text is None:
        problems.add("no_text_field", path, where, f"no string field '{field_name}'")
        return None
    bad = lone_surrogate(text)
    if bad:
        problems.add("bad_text", path, where, bad)
        return None
    return RawDoc(text, source)


def read_jsonl_docs(path: Path, field_name: str, field_given: bool, encoding: str,
               problems: Problems, segment: Segment | None = None) -> Iterator[RawDoc]:
    for i, line in read_lines(path, encoding, problems, segment):
        if not line.strip():
            continue
        try:
            obj = parse_json_line(line, path, i)
        except ZhBertError as e:
            problems.note("bad_json", str(e))
            continue
        doc = _record_doc(obj, field_name, field_given, path, i, f"{path}:{i}", problems)
        if doc:
            yield doc


def read_json_docs(path: Path, field_name: str, field_given: bool, encoding: str,
              problems: Problems) -> Iterator[RawDoc]:
    """CLUE-style `.json`: JSON lines (CLUECorpus2020, CLUE tasks), a JSON array of records, or a
    SQuAD-format document (CMRC 2018, DRCD: one document per article, its paragraphs joined by '\\n')."""
    with open_binary(path) as f:
        first = f.readline().strip()
    try:
        first_obj = parse_json_line(first.decode("utf-8-sig", errors="replace"), path, 1) if first else None
    except ZhBertError:
        first_obj = None
    if isinstance(first_obj, dict) and not isinstance(first_obj.get("data"), list):
        yield from read_jsonl_docs(path, field_name, field_given, encoding, problems)
        return
    with open_binary(path) as f:
        raw = f.read()
    try:
        data = parse_json(raw.decode("utf-8-sig" if encoding == "auto" else encoding), str(path))
    except UnicodeDecodeError as e:
        problems.add("bad_json", path, 1, str(e))
        return
    except ZhBertError as e:
        problems.note("bad_json", str(e))
        return
    if isinstance(data, dict) and isinstance(data.get("data"), list):  # SQuAD / CMRC / DRCD
        for k, article in enumerate(data["data"]):
            paras = [p.get("context", "") for p in article.get("paragraphs", []) if isinstance(p, dict)]
            doc = _record_doc("\n".join(paras), "", False, path, k, f"{path}#{article.get('id', k)}", problems)
            if paras and doc:
                yield doc
        return
    records = data if isinstance(data, list) else [data]
    for k, obj in enumerate(records):
        doc = _record_doc(obj, field_name, field_given, path, k, f"{path}#{k}", problems)
        if doc:
            yield doc


_DOC_OPEN_RE = re.compile(r'<doc\b([^>]*)>')
_ATTR_RE = re.compile(r'(\w+)="([^"]*)"')


def read_wikiextractor(path: Path, encoding: str, problems: Problems) -> Iterator[RawDoc]:
    """WikiExtractor output: `<doc id=.. url=.. title=..>` title line, paragraphs, `</doc>`. One document
    per article; the title line (a repeat of the title attribute) is dropped."""
    attrs: dict | None = None
    buf: list[str] = []
    for i, line in read_lines(path, encoding, problems):
        m = _DOC_OPEN_RE.match(line.strip())
        if m:
            attrs, buf = dict(_ATTR_RE.findall(m.group(1))), []
            continue
        if line.strip() == "</doc>":
            if attrs is not None:
                if buf and buf[0].strip() == attrs.get("title", "").strip():
                    buf = buf[1:]
                yield RawDoc("\n".join(buf), f"{path}#{attrs.get('id', i)}")
            attrs, buf = None, []
            continue
        if attrs is not None:
            buf.append(line)


def splittable(path: Path, read: ReadOptions) -> bool:
    """Whether `clean --executor` may cut `path` across tasks by byte ranges: an uncompressed file of one document
    per line (JSON lines, or text with --doc-sep line), cut at line boundaries, or a Parquet file, cut at row
    groups. Never a compressed file (no seeking into it), a dump, a `.json` or blank-separated text."""
    if path.name.lower().endswith(COMPRESSED):
        return False
    fmt = detect_format(path, read.fmt)
    return fmt in ("jsonl", "parquet") or (fmt == "text" and read.doc_sep == "line")


def check_inputs(files: list[Path], read: ReadOptions) -> None:
    """Before any work: every Parquet input is Parquet and has its text column (footers only), so that a wrong
    `--field` or a file that only ends in .parquet is one line before the first document is cleaned."""
    for f in files:
        if read.fmt == "parquet" or (read.fmt == "auto" and inner_name(f).endswith(".parquet")):
            check_parquet(f, read.field_name)


def read_input(path: Path, read: ReadOptions, problems: Problems,
               segment: Segment | None = None) -> Iterator[RawDoc]:
    """The documents of one input file (of its `segment`, for a `splittable` file), in the format `read.fmt`
    names or detects. A compressed file that is cut short or not what its name says, or a Parquet file that
    cannot be read, is a one-line error naming it (in-process or in a task), never a traceback."""
    try:
        yield from _read_format(path, read, problems, segment)
    except BROKEN_STREAM as e:   # before OSError: BadGzipFile is one
        raise ZhBertError(f"{path}: broken or truncated compressed file ({e or 'it ends early'}); "
                          f"download or compress it again") from None
    except OSError as e:   # bz2's "Invalid data stream", or the disk
        raise ZhBertError(f"{path}: cannot read it ({e.strerror or e})") from None


def _read_format(path: Path, read: ReadOptions, problems: Problems, segment: Segment | None) -> Iterator[RawDoc]:
    fmt, field_name, given = detect_format(path, read.fmt), read.field_name or "text", read.field_name is not None
    if segment is not None and not splittable(path, read):
        raise ValueError(f"{path}: only a line-delimited or Parquet file is read by segments")
    if fmt == "text":
        yield from read_plain_docs(path, read.doc_sep, read.encoding, problems, segment)
    elif fmt == "jsonl":
        yield from read_jsonl_docs(path, field_name, given, read.encoding, problems, segment)
    elif fmt == "parquet":
        yield from read_parquet_docs(path, read.field_name, problems, segment)
    elif fmt == "json":
        yield from read_json_docs(path, field_name, given, read.encoding, problems)
    elif fmt == "wikiextractor":
        yield from read_wikiextractor(path, read.encoding, problems)
    else:
        yield from read_mediawiki(path)
