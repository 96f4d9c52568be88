"""Reading corpora: cleaned JSONL (`{"text", "source"}` per line, as `zh-bert clean` writes) or plain text
(one document per line), as files or as a directory of parts (`*.jsonl`, `*.jsonl.gz`: what
`zh-bert clean --executor` writes; .gz, .bz2, .xz and .zst are read transparently).

One line reader and one JSONL-line parser for every stage (vocab, shard, eval), so a broken corpus is
reported the same way everywhere: `path:line: what is wrong`. Files are streamed line by line; nothing
here holds a corpus in memory unless the caller asks for a list.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import parse_json_line

JSONL_SUFFIXES = (".jsonl", ".json")
#: the endings open_binary decompresses; no seeking into these: on an executor such a file goes whole to one task
COMPRESSED = (".gz", ".bz2", ".xz", ".zst")


class BrokenZstd(Exception):
    """A .zst file that zstandard cannot decode, or that ends inside a frame (zstandard's own error, or
    `_ZstdFrames`'), under a name this module can catch without importing zstandard."""


#: what a broken or cut compressed stream raises (gzip: BadGzipFile, zlib.error or EOFError; xz: LZMAError; zstd:
#: BrokenZstd, a cut file included); bz2's "Invalid data stream" is an OSError
BROKEN_STREAM = (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError, BrokenZstd)
PART_SUFFIXES = tuple(base + z for base in (".jsonl", ".txt") for z in ("",) + COMPRESSED)   # read by open_binary
CLEAN_REPORT = "report.json"       # written last by `zh-bert clean --executor`: the directory is complete
JOB_MARKER = ".zh-bert/job.json"   # written first by `zh-bert clean/shard --executor`: a job owns the directory
REPORT_NAMES = (CLEAN_REPORT, ".report.json")   # clean's reports (OUTDIR's, or OUT.report.json): never parts
_EXPECTED = 'expected `zh-bert clean` output: {"text": ..., "source": ...} per line'


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """What is wrong with the first lone surrogate in `text` (JSON's "\\ud800" decodes to one: it is not a
    Unicode character and cannot be written as UTF-8), or None when there is none."""
    m = _SURROGATE_RE.search(text)
    if m is None:
        return None
    return f"lone surrogate \\u{ord(m.group()):04x} at character {m.start() + 1} (not a Unicode character)"


def corpus_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files behind corpus arguments: a file is itself; a directory is its parts (`*.jsonl`,
    `*.jsonl.gz`, ... sorted by name; hidden entries and clean's reports skipped). A directory whose
    `zh-bert clean` job has not finished (a job marker but no report.json) is refused: its parts are not
    the whole corpus."""
    files: list[Path] = []
    for arg in paths:
        path = Path(arg)
        if not path.is_dir():
            files.append(path)
            continue
        if (path / JOB_MARKER).is_file() and not (path / CLEAN_REPORT).is_file():
            raise ZhBertError(f"{path}: unfinished `zh-bert clean` job (no {CLEAN_REPORT} yet); rerun the same "
                              f"clean command to finish it")
        parts = sorted(p for p in path.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.name.endswith(PART_SUFFIXES)
                       and not p.name.endswith(REPORT_NAMES))
        if not parts:
            raise ZhBertError(f"{path}: directory holds no corpus parts (*.jsonl, *.jsonl.gz, *.txt)")
        files.extend(parts)
    return files


def open_binary(path: Path) -> IO[bytes]:
    """`path` opened for reading bytes, decompressed on the fly when it ends in .gz, .bz2, .xz or .zst (every
    frame of a .zst, in bounded steps: a file of a few KB cannot make this read gigabytes at once)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")
    if name.endswith(".xz"):
        return lzma.open(path, "rb")
    if name.endswith(".zst"):
        return io.BufferedReader(_ZstdStream(path), buffer_size=1 << 17)
    return open(path, "rb")


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A5   # the top 28 bits of a skippable frame's magic number


class _ZstdFrames:
    """The frame layout of a .zst file (RFC 8878: frame header, block headers, checksum; skippable frames), followed
    over its bytes as they are read, without decompressing anything: whether the file ended between two frames.
    zstandard's stream reader ends quietly where a cut file ends (a download stopped half-way would look like a
    shorter corpus); gzip and xz raise, and so does this."""

    def __init__(self):
        self.need, self.step, self.buf, self.skip, self.checksum = 4, self._magic, b"", 0, 0

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                k = min(self.skip, n - i)
                self.skip, i = self.skip - k, i + k
                continue
            k = min(self.need - len(self.buf), n - i)
            self.buf, i = self.buf + data[i:i + k], i + k
            if len(self.buf) == self.need:
                field, self.buf = self.buf, b""
                self.step(field)

    def between_frames(self) -> bool:
        return self.step == self._magic and not self.buf and not self.skip

    def _magic(self, field: bytes) -> None:
        magic = int.from_bytes(field, "little")
        if magic == _ZSTD_MAGIC:
            self.need, self.step = 1, self._descriptor
        elif magic >> 4 == _SKIPPABLE_MAGIC:
            self.need, self.step = 4, self._skippable
        else:
            raise BrokenZstd("not a zstd frame where one should start")

    def _descriptor(self, field: bytes) -> None:
        fhd = field[0]
        single = bool(fhd & 0x20)
        content_size = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        self.skip = (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + content_size   # window, dictionary id, size
        self.checksum = 4 if fhd & 4 else 0
        self.need, self.step = 3, self._block

    def _block(self, field: bytes) -> None:
        header = int.from_bytes(field, "little")
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 3:
            raise BrokenZstd("a block of the reserved type")
        self.skip = 1 if kind == 1 else size   # an RLE block holds one byte
        if header & 1:   # the frame's last block
            self.skip += self.checksum
            self.need, self.step = 4, self._magic

    def _skippable(self, field: bytes) -> None:
        self.skip = int.from_bytes(field, "little")
        self.need, self.step = 4, self._magic


class _CheckedZstd:
    """The compressed bytes of a .zst file as zstandard's stream reader asks for them, checked by `_ZstdFrames`:
    the end of the file inside a frame raises BrokenZstd instead of ending the text early."""

    def __init__(self, f: IO[bytes]):
        self.f, self.frames = f, _ZstdFrames()

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        if data:
            self.frames.feed(data)
        elif not self.frames.between_frames():
            raise BrokenZstd("the file ends inside a frame: truncated")
        return data

    def close(self) -> None:
        self.f.close()


class _ZstdStream(io.RawIOBase):
    """Every frame of a .zst file, decompressed in the steps its reader asks for (bounded memory); zstandard's
    errors come out as BrokenZstd."""

    def __init__(self, path: Path):
        import zstandard

        self._error = zstandard.ZstdError
        self._reader = zstandard.ZstdDecompressor().stream_reader(_CheckedZstd(open(path, "rb")),
                                                                  read_across_frames=True, closefd=True)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self._reader.readinto(b)
        except self._error as e:
            raise BrokenZstd(str(e)) from None

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()


#: the longest line read (bytes): a cleaned document is at most `clean --max-chars` (500,000) characters, 2 MB of
#: UTF-8, 3 MB as JSON escapes; a longer line is counted or refused after this many bytes, never held whole
MAX_LINE_BYTES = 32 << 20


def bounded_lines(f: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[bytes | int]:
    """Each line of the binary stream `f` with its newline, or, for a line longer than `limit` bytes, its length
    (an int): read in pieces past the limit and dropped, so memory is bounded by `limit`, not by the file."""
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw
            continue
        n = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            if not raw:
                break
            n += len(raw)
        yield n


def too_long(n: int) -> str:
    """What a message says of a line `bounded_lines` dropped."""
    return f"a line of {n:,} bytes, over the {MAX_LINE_BYTES:,} read of one line"


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for the non-blank lines of a UTF-8 file (gzip by suffix).
    Decoded line by line, so a missing file, a byte that is not UTF-8 or a broken gzip stream is a one-line
    error naming the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    n = 0
    try:
        with open_binary(path) as f:
            for n, raw in enumerate(bounded_lines(f), 1):
                if isinstance(raw, int):
                    raise ZhBertError(f"{path}:{n}: {too_long(raw)}; no document is that long")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ZhBertError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
                if n == 1:
                    line = line.removeprefix("\ufeff")
                if line.strip():
                    yield n, line.rstrip("\n")
    except BROKEN_STREAM as e:
        raise ZhBertError(f"{path}: broken compressed file after line {n} ({e or 'truncated'})") from None
    except OSError as e:  # bz2's "Invalid data stream", or the disk
        raise ZhBertError(f"{path}: cannot read after line {n} ({e.strerror or e})") from None


def _json(line: str, path: str | os.PathLike, lineno: int, hint: str = "") -> Any:
    try:
        return parse_json_line(line, path, lineno)
    except ZhBertError as e:
        raise ZhBertError(f"{e}{hint}") from None


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[str, Any]]:
    """("file:line", parsed value) for each non-blank line of any JSON-lines file (task data, cloze items)."""
    for n, line in iter_lines(path):
        yield f"{path}:{n}", _json(line, path, n)


def document_text(line: str, path: str | os.PathLike, lineno: int) -> str:
    """The "text" of one cleaned-JSONL line; anything else is a ZhBertError `path:line: ...`."""
    obj = _json(line, path, lineno, f"; {_EXPECTED}")
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise ZhBertError(f'{path}:{lineno}: no "text" string; {_EXPECTED}')
    bad = lone_surrogate(obj["text"])
    if bad:
        raise ZhBertError(f"{path}:{lineno}: {bad} in \"text\"")
    return obj["text"]


def is_jsonl(path: str | os.PathLike) -> bool:
    """A `.jsonl`/`.json` file, or any file whose first non-blank line is a JSON object."""
    path = Path(path)
    name = path.name.lower()
    if name.removesuffix(next((z for z in COMPRESSED if name.endswith(z)), "")).endswith(JSONL_SUFFIXES):
        return True
    first = next(iter_lines(path), (0, ""))[1]
    return first.lstrip().startswith("{")


def iter_documents(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    """The documents of every file (directories: their parts), stripped, blank ones skipped: cleaned JSONL
    or one document per line."""
    for path in corpus_files(paths):
        jsonl = is_jsonl(path)
        for n, line in iter_lines(path):
            text = (document_text(line, path, n) if jsonl else line).strip()
            if text:
                yield text


def read_documents(paths: Iterable[str | os.PathLike], max_docs: int | None = None) -> list[str]:
    """All documents of `paths` (the first `max_docs` if given); an empty corpus is an error naming the files."""
    paths = list(paths)
    docs = []
    for doc in iter_documents(paths):
        docs.append(doc)
        if max_docs and len(docs) >= max_docs:
            break
    if not docs:
        raise ZhBertError(f"{', '.join(map(str, paths))}: empty corpus (no text to evaluate or learn from)")
    return docs


# ---------------------------------------------------------------------------------------------------
# cutting inputs across tasks (`clean --executor`, `shard --executor`)
# ---------------------------------------------------------------------------------------------------
Segment = tuple[str, int, int]    # (path, first byte, end byte); end -1: the whole file


def plan_shares(paths: list[Path], tasks: int, whole=None) -> list[list[Segment]]:
    """Task r's segments: the bytes [r*B/N, (r+1)*B/N) of the inputs laid end to end (B bytes in all),
    in input order, so task order then position within a task is input order. A file that cannot be
    cut (compressed, or `whole(path)` true: not one record per line) goes whole to the task that holds
    its middle byte."""
    sizes = [p.stat().st_size for p in paths]
    total = max(sum(sizes), 1)
    shares: list[list[Segment]] = [[] for _ in range(tasks)]
    at = 0
    for path, size in zip(paths, sizes):
        if path.name.lower().endswith(COMPRESSED) or (whole is not None and whole(path)):
            shares[min(tasks - 1, (at + size // 2) * tasks // total)].append((str(path), 0, -1))
        else:
            for r in range(tasks):
                lo, hi = max(at, r * total // tasks), min(at + size, (r + 1) * total // tasks)
                if hi > lo:
                    shares[r].append((str(path), lo - at, hi - at))
        at += size
    return shares


def segment_raw_lines(path: str | os.PathLike, start: int, end: int) -> Iterator[tuple[int, bytes | int]]:
    """(byte offset, raw line with its newline, or its length when over `MAX_LINE_BYTES`: `bounded_lines`) for
    every line that begins in bytes [start, end) of an
    uncompressed file: a line cut by `start` belongs to the previous segment's reader, so the segments
    of `plan_shares` read every line exactly once."""
    with open(path, "rb") as f:
        if start:
            f.seek(start - 1)
            f.readline()   # the rest of a line that began before `start`
        pos = f.tell()
        lines = bounded_lines(f)
        while pos < end:
            raw = next(lines, None)
            if raw is None:
                break
            yield pos, raw
            pos += raw if isinstance(raw, int) else len(raw)


def line_number(path: str | os.PathLike, offset: int) -> int:
    """The 1-based number of the line that starts at byte `offset` (newlines before it, counted in
    16 MB blocks: a reader that starts mid-file learns its first line's number)."""
    count, left = 0, offset
    with open(path, "rb") as f:
        while left > 0:
            block = f.read(min(left, 1 << 24))
            if not block:
                break
            count, left = count + block.count(b"\n"), left - len(block)
    return count + 1
