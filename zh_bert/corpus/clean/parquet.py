"""Parquet corpora (Chinese FineWeb-Edu, the Hub's parquet conversions of SkyPile and others): one document per row
of one string column, `text` or `content` unless `--field` names another; every other column is never read.

The file is read one row group at a time and, inside it, in batches of `PARQUET_BATCH_ROWS` rows through a 1 MB
buffer, so memory follows neither the size of the file nor that of a row group. A row group is also what `clean --executor` hands to a task: the row
groups whose first byte lies in a task's byte range are that task's (`read_parquet_docs(..., segment)`), so every
row is read by exactly one task, in file order. A document's source is `FILE#ROW` (0-based over the whole file).

What the footer says is checked before any work (`parquet_text_column`): a file that is not Parquet, a missing
column (the columns there are, and the nearest one) or a column that does not hold text is one line naming the
file. A row group that cannot be read is one line naming the file and the row group. A null value, or a value that
is not UTF-8, costs its row (counted as `no_text_field` / `undecodable` at `FILE#ROW`), not the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.corpus.clean.source import Problems, RawDoc
from zh_bert.corpus.corpus_io import MAX_LINE_BYTES, Segment

#: the columns a Parquet corpus keeps its text in when `--field` names none, in the order they are looked for
PARQUET_TEXT_COLUMNS = ("text", "content")
PARQUET_BATCH_ROWS = 1024


def _arrow_problem(e: BaseException) -> str:
    """pyarrow's message on one line, bounded."""
    flat = " ".join(str(e).split())
    return flat[:200] + ("…" if len(flat) > 200 else "")


#: bytes read from the file at a time: pages are decoded as the batches need them, so a row group of 500 MB (a
#: writer's default is a million rows) costs no more memory than one of 1 MB
PARQUET_READ_BUFFER = 1 << 20


def open_parquet(path: Path):
    """`pq.ParquetFile` of `path` read in a bounded buffer (no pre-buffering of whole column chunks), page checksums
    verified where the writer stored them; or one line saying it is not a Parquet file. Arrow allocates from the
    system allocator: its default (mimalloc) keeps the pages it freed, and peak memory grew by a quarter from a
    25 MB to a 200 MB corpus with it, none with this."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.set_memory_pool(pa.system_memory_pool())
    try:
        return pq.ParquetFile(path, page_checksum_verification=True, pre_buffer=False,
                              buffer_size=PARQUET_READ_BUFFER)
    except (pa.ArrowException, OSError) as e:
        raise ZhBertError(f"{path}: not a readable Parquet file ({_arrow_problem(e)})") from None


def parquet_text_column(pf, path: Path, field_name: str | None) -> str:
    """The column holding the text: `field_name` when given, else the first of PARQUET_TEXT_COLUMNS the file has;
    it must hold strings. Otherwise one line naming the file, the columns it has and the nearest one."""
    import pyarrow as pa

    schema = pf.schema_arrow
    names = schema.names
    wanted = [field_name] if field_name else list(PARQUET_TEXT_COLUMNS)
    column = next((c for c in wanted if c in names), None)
    if column is None:
        what = f"'{field_name}' (--field)" if field_name else " or ".join(f"'{c}'" for c in wanted)
        near = next(filter(None, (suggest(c, names) for c in wanted)), "")
        raise ZhBertError(f"{path}: no column {what}; its columns are {', '.join(names) or 'none'}{near}; name the "
                          f"text column with --field")
    kind = schema.field(column).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise ZhBertError(f"{path}: column '{column}' holds {kind}, not text (a string column); name the text column "
                          f"with --field")
    return column


def check_parquet(path: Path, field_name: str | None) -> None:
    """Before any work: `path` is Parquet and has a text column (its footer only is read)."""
    with open_parquet(path) as pf:
        parquet_text_column(pf, path, field_name)


def row_group_starts(metadata) -> list[int]:
    """The first byte of each row group (its first column chunk's dictionary or data page): where `clean --executor`
    places it among the tasks' byte ranges."""
    starts = []
    for i in range(metadata.num_row_groups):
        rg = metadata.row_group(i)
        offsets = [c.dictionary_page_offset if c.has_dictionary_page and c.dictionary_page_offset else
                   c.data_page_offset for c in (rg.column(j) for j in range(rg.num_columns))]
        starts.append(min(offsets, default=0))
    return starts


def read_parquet_docs(path: Path, field_name: str | None, problems: Problems,
                      segment: Segment | None = None) -> Iterator[RawDoc]:
    """One document per row of the text column; with `segment` (path, start, end) only the row groups that start in
    bytes [start, end) (a row group starting outside the file counts at its nearest end, so none is lost)."""
    with open_parquet(path) as pf:
        column = parquet_text_column(pf, path, field_name)
        problems.encodings[str(path)] = "utf-8"
        meta, size = pf.metadata, path.stat().st_size
        first = 0
        for rg, start in enumerate(row_group_starts(meta)):
            rows = meta.row_group(rg).num_rows
            if segment is None or segment[1] <= min(max(start, 0), size - 1) < segment[2]:
                yield from _row_group_docs(pf, path, rg, column, first, problems)
            first += rows


def _row_group_docs(pf, path: Path, rg: int, column: str, first: int, problems: Problems) -> Iterator[RawDoc]:
    import pyarrow as pa

    row = first
    group = pf.metadata.row_group(rg)
    chunk = next((group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == column), None)
    if chunk is not None and chunk.total_uncompressed_size > MAX_LINE_BYTES * max(group.num_rows, 1):
        # its values average more than a line may hold: reading it would hold such a value whole (a 20 KB file
        # can unpack to a 2 GB string), so its rows are counted, unread
        problems.note("too_long", f"{path}#{first}: row group {rg}, {group.num_rows:,} rows holding "
                                  f"{chunk.total_uncompressed_size:,} bytes of text: values over the "
                                  f"{MAX_LINE_BYTES:,} read of one; not read")
        return
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[rg], columns=[column],
                                     use_threads=False):
            values, over = _short_values(batch.column(0), path, row, problems)
            for k, text in enumerate(_batch_texts(values, path, row, problems)):
                if k in over:
                    pass          # counted too_long by _short_values
                elif text is None:
                    problems.note("no_text_field", f"{path}#{row}: null '{column}'")
                elif text is not _UNDECODABLE:
                    yield RawDoc(text, f"{path}#{row}")
                row += 1
    except (pa.ArrowException, OSError) as e:
        raise ZhBertError(f"{path}: row group {rg} (rows from {first}): cannot read column '{column}' "
                          f"({_arrow_problem(e)}); the file is damaged: download it again") from None


_UNDECODABLE = object()   # a value whose bytes are not UTF-8 (Parquet writers need not check)


def _short_values(values, path: Path, row: int, problems: Problems) -> tuple:
    """(the batch with each value over `MAX_LINE_BYTES` made null, their indexes): such a value is counted
    `too_long` and never turned into a Python string nor normalised."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    lengths = pc.binary_length(values)
    over = pc.fill_null(pc.greater(lengths, MAX_LINE_BYTES), False)
    if not pc.any(over).as_py():
        return values, set()
    found = pc.indices_nonzero(over).to_pylist()
    for k in found:
        problems.note("too_long", f"{path}#{row + k}: a value of {lengths[k].as_py():,} bytes, over the "
                                  f"{MAX_LINE_BYTES:,} read of one")
    return pc.if_else(over, pa.scalar(None, values.type), values), set(found)


def _batch_texts(values, path: Path, row: int, problems: Problems) -> list:
    """The batch's strings (None for a null); a value that is not UTF-8 is _UNDECODABLE, counted as undecodable."""
    import pyarrow as pa

    try:
        return values.to_pylist()
    except UnicodeDecodeError:
        pass
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    out = []
    for k, b in enumerate(values.cast(pa.large_binary()).to_pylist()):
        try:
            out.append(None if b is None else b.decode("utf-8"))
        except UnicodeDecodeError as e:
            problems.note("undecodable", f"{path}#{row + k}: utf-8: {e.reason} at byte {e.start}")
            out.append(_UNDECODABLE)
    return out
