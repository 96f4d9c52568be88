"""Corpora as the community ships them: Parquet (Chinese FineWeb-Edu's `data/*.parquet`, the Hub's parquet
conversions; a `text` or `content` column among others) and .zst (SkyPile-style JSON-lines shards), read by
`zh-bert clean` in-process and on an executor and by `zh-bert eval contamination`.

Every file is written here by pyarrow or zstandard from the bundled real text (corpora/sample, attribution in its
SOURCE.md). What is proven: the documents read are the rows / lines written (nulls and undecodable values counted,
not fatal); clean's output is byte-identical for any --workers and the executor keeps the same documents in the
same order with the same report counts for any --tasks (a Parquet file cut across tasks by row group); a broken
file is one line naming it (and the row group or column), exit 2, nothing half-written, in both paths; a cut
.zst is refused instead of being read short; `eval contamination` finds the same test text in Parquet and .zst as
in plain text; peak memory does not grow from a 25 MB to a 200 MB Parquet corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import REPO, SAMPLE, TASKS, read_lines
from test_clean_executor import report_of

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.clean import CleanConfig, DocCleaner
from zh_bert.corpus.clean.readers import ReadOptions, detect_format, read_input
from zh_bert.corpus.clean.source import Problems, RawDoc
from zh_bert.corpus.corpus_io import iter_documents, open_binary

REPORT_COUNTS = ("docs_in", "docs_out", "chars_in", "chars_out", "bytes_in", "filtered", "duplicates", "pii",
                 "lines_removed", "unreadable")
WIKI = read_lines(SAMPLE / "zhwiki_sampled.txt")
CLUE = read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt")


def _zst_frames(data: bytes, frames: int = 2) -> bytes:
    """`data` as several zstd frames back to back (as parallel compressors and appended shards make them)."""
    cut = [len(data) * k // frames for k in range(frames + 1)]
    return b"".join(zstandard.ZstdCompressor(level=3).compress(data[a:b]) for a, b in zip(cut, cut[1:]))


def _jsonl(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t, "id": i, "meta": {"lang": "zh"}}, ensure_ascii=False) + "\n"
                   for i, t in enumerate(texts)).encode("utf-8")


def _sha(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict:
    """A folder as the community ships corpora, and what each file holds:
    - fineweb/00000.parquet: id, text, score, url; 700 zhwiki documents, a null text (row 100), an empty one and 30
      exact copies of earlier documents; 64 rows per row group (12 row groups);
    - fineweb/00001.parquet: CCI-style `content` (large_string) column, 200 CLUECorpusSmall documents;
    - skypile/2020-40_zh_head_0000.jsonl.zst: 600 CLUECorpusSmall documents as JSON lines in two zstd frames;
    - notes.txt.zst: 100 other zhwiki documents, one per line."""
    root = tmp_path_factory.mktemp("shipped") / "corpus"
    (root / "fineweb").mkdir(parents=True)
    (root / "skypile").mkdir()
    wiki = WIKI[:700]
    texts = wiki[:100] + [None] + wiki[100:] + [""] + wiki[:30]
    table = pa.table({"id": pa.array(range(len(texts)), pa.int64()), "text": pa.array(texts, pa.string()),
                      "score": pa.array([3.5] * len(texts)), "url": [f"https://zh.wikipedia.org/{i}" for i in
                                                                     range(len(texts))]})
    pq.write_table(table, root / "fineweb" / "00000.parquet", row_group_size=64)
    pq.write_table(pa.table({"content": pa.array(CLUE[:200], pa.large_string()), "meta_info": ["{}"] * 200}),
                   root / "fineweb" / "00001.parquet", row_group_size=50)
    (root / "skypile" / "2020-40_zh_head_0000.jsonl.zst").write_bytes(_zst_frames(_jsonl(CLUE[200:800])))
    (root / "notes.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(WIKI[800:900]) + "\n")
                                                                            .encode("utf-8")))
    return {"root": root, "wiki": texts, "content": CLUE[:200], "skypile": CLUE[200:800], "notes": WIKI[800:900]}


def _docs(path: Path, read: ReadOptions | None = None) -> tuple[list, Problems]:
    problems = Problems()
    return list(read_input(path, read or ReadOptions(), problems)), problems


def test_each_shipped_format_reads_as_its_documents(shipped, tmp_path):
    root = shipped["root"]
    docs, problems = _docs(root / "fineweb" / "00000.parquet")
    assert [d.text for d in docs] == [t for t in shipped["wiki"] if t is not None]
    assert docs[100].source == f"{root / 'fineweb' / '00000.parquet'}#101"   # FILE#ROW, after the null row
    assert problems.counts == {"no_text_field": 1}
    assert problems.where["no_text_field"] == [f"{root / 'fineweb' / '00000.parquet'}#100: null 'text'"]
    docs, problems = _docs(root / "fineweb" / "00001.parquet")   # no `text`: the `content` column
    assert [d.text for d in docs] == shipped["content"] and not problems.counts
    zst = root / "skypile" / "2020-40_zh_head_0000.jsonl.zst"
    docs, problems = _docs(zst)                                 # both frames, JSON lines, line numbers kept
    assert [d.text for d in docs] == shipped["skypile"] and docs[-1].source == f"{zst}:600"
    docs, _ = _docs(root / "notes.txt.zst")
    assert [d.text for d in docs] == shipped["notes"]
    bare = tmp_path / "data"                                    # no extension: Parquet by its magic bytes
    bare.write_bytes((root / "fineweb" / "00001.parquet").read_bytes())
    assert detect_format(bare, "auto") == "parquet" and [d.text for d in _docs(bare)[0]] == shipped["content"]
    pq.write_table(pa.table({"title": ["标题"] * 3, "body": CLUE[:3]}), tmp_path / "own.parquet")
    assert [d.text for d in _docs(tmp_path / "own.parquet", ReadOptions(field_name="body"))[0]] == CLUE[:3]


def _clean(*argv) -> int:
    return cli.main(["clean", *map(str, argv), "-q"])


@pytest.fixture(scope="module")
def in_process(shipped, tmp_path_factory) -> dict[int, Path]:
    d = tmp_path_factory.mktemp("inproc")
    outs = {}
    for workers in (1, 2):
        outs[workers] = d / f"w{workers}.jsonl"
        assert _clean(shipped["root"], "-o", outs[workers], "--workers", workers) == 0
    return outs


def test_clean_output_is_byte_identical_for_any_workers(in_process):
    one, two = in_process[1], in_process[2]
    assert one.read_bytes() == two.read_bytes()
    r1, r2 = report_of(one), report_of(two)
    assert {k: r1[k] for k in REPORT_COUNTS} == {k: r2[k] for k in REPORT_COUNTS}
    kept_of_copied = len(DocCleaner(CleanConfig())([RawDoc(t, "x") for t in WIKI[:30]]).kept)
    assert r1["docs_in"] == 700 + 1 + 30 + 200 + 600 + 100 and r1["duplicates"]["exact"] == kept_of_copied > 15
    assert r1["unreadable"]["counts"] == {"no_text_field": 1}


@pytest.mark.parametrize("tasks", [1, 4, 9])
def test_executor_keeps_the_in_process_documents_in_order_for_any_tasks(shipped, in_process, tmp_path, tasks):
    out = tmp_path / "out"
    assert _clean(shipped["root"], "-o", out, "--executor", "local", "--tasks", tasks, "--workers", "2") == 0
    parts = sorted(out.glob("part-*.jsonl"))
    assert b"".join(p.read_bytes() for p in parts) == in_process[2].read_bytes()   # same documents, same order
    ours, theirs = report_of(out), report_of(in_process[2])
    assert {k: ours[k] for k in REPORT_COUNTS} == {k: theirs[k] for k in REPORT_COUNTS}
    holding = {name: [p.name for p in parts if name in p.read_text(encoding="utf-8")]
               for name in ("00000.parquet", "2020-40_zh_head_0000.jsonl.zst")}
    assert len(holding["2020-40_zh_head_0000.jsonl.zst"]) == 1      # a compressed file goes whole to one task
    if tasks == 9:
        assert len(holding["00000.parquet"]) >= 3, holding           # a Parquet file is cut at row groups


# --------------------------------------------------------------------------------- broken files: one line each
def _garbage_in_row_group(src: Path, dst: Path, rg: int) -> None:
    data = bytearray(src.read_bytes())
    col = pq.ParquetFile(src).metadata.row_group(rg).column(1)
    rng = random.Random(rg)
    for k in range(col.data_page_offset + 8, col.data_page_offset + 300):
        data[k] = rng.randrange(256)
    dst.write_bytes(bytes(data))


def _broken(case: str, d: Path, shipped: dict) -> tuple[Path, list[str], str]:
    """(the broken file, extra flags, what the error line must say)."""
    fineweb = shipped["root"] / "fineweb" / "00000.parquet"
    if case == "cut-zst":
        path = d / "cut.jsonl.zst"
        whole = (shipped["root"] / "skypile" / "2020-40_zh_head_0000.jsonl.zst").read_bytes()
        path.write_bytes(whole[: len(whole) * 2 // 3])
        return path, [], f"{path}: broken or truncated compressed file (the file ends inside a frame"
    if case == "garbage-row-group":
        path = d / "bad.parquet"
        _garbage_in_row_group(fineweb, path, 3)
        return path, [], f"{path}: row group 3 (rows from 192): cannot read column 'text'"
    if case == "not-parquet":
        path = d / "fake.parquet"
        path.write_text("\n".join(WIKI[:50]) + "\n", encoding="utf-8")
        return path, [], f"{path}: not a readable Parquet file (Parquet magic bytes not found"
    if case == "no-text-column":
        path = d / "nocol.parquet"
        pq.write_table(pa.table({"id": [1, 2], "txt": WIKI[:2], "url": ["a", "b"]}), path)
        return path, [], (f"{path}: no column 'text' or 'content'; its columns are id, txt, url (did you mean "
                          f"'txt'?); name the text column with --field")
    if case == "field-typo":
        path = d / "titled.parquet"
        pq.write_table(pa.table({"title": WIKI[:2], "body": WIKI[2:4]}), path)
        return path, ["--field", "bdy"], f"{path}: no column 'bdy' (--field); its columns are title, body (did you mean 'body'?)"
    path = d / "ints.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3]}), path)
    return path, [], f"{path}: column 'text' holds int64, not text (a string column)"


CASES = ["cut-zst", "garbage-row-group", "not-parquet", "no-text-column", "field-typo", "non-string-column"]


@pytest.mark.parametrize("engine", [[], ["--executor", "local", "--tasks", "3"]], ids=["in-process", "executor"])
@pytest.mark.parametrize("case", CASES)
def test_trust_nothing_read_a_broken_shipped_file_is_one_line_naming_it(shipped, tmp_path, capsys, case, engine):
    """A good file first (its documents are cleaned before the broken one is reached), then the broken one."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = inputs / "a.jsonl.zst"
    good.write_bytes((shipped["root"] / "skypile" / "2020-40_zh_head_0000.jsonl.zst").read_bytes())
    broken, flags, says = _broken(case, inputs, shipped)
    before = _sha(inputs)
    out = tmp_path / ("out" if engine else "out.jsonl")
    capsys.readouterr()
    rc = cli.main(["clean", str(good), str(broken), "-o", str(out), *flags, *engine, "-q"])
    err = [line for line in capsys.readouterr().err.split("\n") if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("zh-bert clean: error: "), err
    assert says in err[0] and "Traceback" not in err[0], err[0]
    assert _sha(inputs) == before
    if engine:   # at most the job's own state (.zh-bert/), never a report or a part
        assert not (out / "report.json").exists() and not list(out.glob("*part-*"))
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]   # no output, no report, no temp file


def test_trust_nothing_read_a_cut_zst_is_refused_not_read_short(shipped, tmp_path, capsys):
    """zstandard's stream reader ends quietly where a cut file ends: a download stopped half-way would be a
    shorter corpus. Every reader (clean's, and corpus_io's for vocab, shard and eval) refuses it in one line."""
    whole = (shipped["root"] / "skypile" / "2020-40_zh_head_0000.jsonl.zst").read_bytes()
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(whole[:-7])
    with open(cut, "rb") as f:   # the cause: no error, fewer bytes
        short = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    assert 0 < len(short) < len(_jsonl(CLUE[200:800]))
    with pytest.raises(ZhBertError, match=r"cut.jsonl.zst: broken compressed file after line \d+ \(the file ends "
                                          r"inside a frame: truncated\)"):
        list(iter_documents([cut]))
    capsys.readouterr()
    rc = cli.main(["eval", "contamination", str(cut), "--suite", "fewclue"])
    err = [line for line in capsys.readouterr().err.split("\n") if line.strip()]
    assert rc == 2 and len(err) == 1 and "cut.jsonl.zst: broken or truncated compressed file" in err[0], err
    (tmp_path / "tail.zst").write_bytes(whole + b"not zstd")   # bytes after the last frame
    with pytest.raises(Exception, match="not a zstd frame"), open_binary(tmp_path / "tail.zst") as f:
        f.read()


def test_trust_nothing_read_null_and_non_utf8_parquet_values_cost_their_row(tmp_path):
    raw = [t.encode("utf-8") for t in WIKI[10:15]]
    raw[1], raw[3] = None, "半个字".encode("utf-8")[:-1]   # a null, and a value cut inside a character
    table = pa.table({"text": pa.array(raw, pa.binary()).view(pa.string())})   # writers need not check UTF-8
    path = tmp_path / "values.parquet"
    pq.write_table(table, path)
    out = tmp_path / "out.jsonl"
    assert _clean(path, "-o", out, "--min-chars", "1") == 0
    report = report_of(out)
    assert report["unreadable"]["counts"] == {"no_text_field": 1, "undecodable": 1}
    assert report["unreadable"]["where"]["undecodable"] == [f"{path}#3: utf-8: unexpected end of data at byte 6"]
    assert [json.loads(line)["source"] for line in out.read_text(encoding="utf-8").split("\n") if line] == \
        [f"{path}#{i}" for i in (0, 2, 4)]


def test_trust_nothing_read_a_nan_in_a_jsonl_record_costs_its_line(tmp_path):
    """Python's json accepts NaN, JSON does not: the reading layer refuses the line, clean counts it."""
    lines = [json.dumps({"text": t, "score": 1.0}, ensure_ascii=False) for t in WIKI[:4]]
    lines[1] = lines[1].replace("1.0", "NaN")
    path = tmp_path / "scores.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode("utf-8")))
    docs, problems = _docs(path)
    assert [d.text for d in docs] == [WIKI[0], WIKI[2], WIKI[3]]
    assert problems.where["bad_json"] == [f"{path}:2: not JSON (NaN is not a JSON number)"]


# --------------------------------------------------------------------------------- eval contamination
def _planted() -> list[str]:
    """200 real documents, two of them holding a whole FewCLUE test example (TNEWS #304's title, EPRSTMT #35)."""
    rows = {task: [json.loads(line) for line in (TASKS / "fewclue" / task / "test_public.json")
                   .read_text(encoding="utf-8").split("\n") if line.strip()] for task in ("tnews", "eprstmt")}
    docs = list(CLUE[:200])
    docs[20] += rows["tnews"][7]["sentence"]
    docs[150] = rows["eprstmt"][2]["sentence"] + docs[150]
    return docs


def test_eval_contamination_reads_parquet_and_zst_as_it_reads_text(tmp_path, capsys):
    docs = _planted()
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    pq.write_table(pa.table({"id": list(range(len(docs))), "text": docs}), tmp_path / "docs.parquet",
                   row_group_size=32)
    (tmp_path / "docs.jsonl.zst").write_bytes(_zst_frames(_jsonl(docs), 3))
    results = {}
    for name in ("docs.txt", "docs.parquet", "docs.jsonl.zst"):
        capsys.readouterr()
        assert cli.main(["eval", "contamination", str(tmp_path / name), "--suite", "fewclue"]) == 0
        res = json.loads(capsys.readouterr().out.strip().split("\n")[-1])
        results[name] = ({t: r["ids"] for t, r in res["tasks"].items()}, res["documents"], res["characters"],
                         res["documents_with_test_text"])
    assert results["docs.parquet"] == results["docs.txt"] == results["docs.jsonl.zst"]
    ids, n_docs, _, with_text = results["docs.parquet"]
    assert n_docs == 200 and with_text == 2
    assert ids["fewclue/tnews"] == ["304"] and ids["fewclue/eprstmt"] == ["35"]


# --------------------------------------------------------------------------------- memory
_PEAK = ("import resource, sys\nfrom zh_bert.cli import main\nrc = main(sys.argv[1:])\n"
         "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)\n")


def _peak_rss_mb(*argv) -> float:
    """Peak RSS of `zh-bert ARGV` in a fresh process (the main process: it reads every document)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _PEAK, *map(str, argv)], env=env, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stderr.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024


def _parquet_folder(folder: Path, mb_per_file: float, files: int) -> None:
    """`files` Parquet files of about `mb_per_file` MB of text each (relabelled copies of the bundled real text,
    tests/_vocab_corpus.py), 1,000 rows per row group as datatrove's and the Hub's writers make them."""
    from _vocab_corpus import write_corpus

    folder.mkdir()
    for k in range(files):
        txt = folder.parent / f"{folder.name}-{k}.txt"
        write_corpus(txt, mb_per_file, seed=k)
        lines = [line for line in txt.read_text(encoding="utf-8").split("\n") if line.strip()]
        txt.unlink()
        pq.write_table(pa.table({"id": pa.array(range(len(lines)), pa.int64()), "text": lines}),
                       folder / f"{k:05d}.parquet", row_group_size=1000)


@pytest.mark.slow
def test_clean_peak_rss_is_flat_from_25_to_200_mb_of_parquet(tmp_path):
    """--dedup none: the exact-dedup index grows by design (~100 bytes per kept document, docs/clean.md); this
    measures what reading Parquet costs. 25 MB in one file against 200 MB in four files of 50 MB."""
    _parquet_folder(tmp_path / "p25", 25, 1)
    _parquet_folder(tmp_path / "p200", 50, 4)
    peak = {mb: _peak_rss_mb("clean", tmp_path / f"p{mb}", "-o", tmp_path / f"out{mb}.jsonl", "--dedup", "none",
                             "--workers", "2", "-q") for mb in (25, 200)}
    assert report_of(tmp_path / "out200.jsonl")["bytes_in"] > 7.5 * report_of(tmp_path / "out25.jsonl")["bytes_in"]
    assert peak[200] <= 1.15 * peak[25], peak
