"""The benchmarks' test text: which files each suite reports on, and the text of every test example in them.

It lives in the corpus layer because `zh-bert clean --decontaminate` drops corpus documents that contain it, and
the corpus stage may not import zh_bert/evaluation (which reads the same files to score models). The bundled task
data is found here (`task_data_dir`) for both.

What "test text" is, written once:

- FewCLUE (`fewclue/TASK/test_public.json`, JSON lines, the split every FewCLUE figure is reported on): every
  string value of a record, found recursively through lists and objects, except under keys that name an id, a
  label, an answer, a position, a genre or a level (`_NOT_TEXT`): what a model reads, not what it is scored
  against. TNEWS's `keywords` are not text either: they are the news site's tags, which no FewCLUE task reads
  (the title is the input), and a title copied into a corpus comes without them. ChID's blank `#idiom#` is not
  text: the original passage had an idiom there.
- CMRC 2018 (`cmrc2018/cmrc2018_dev.json`, SQuAD format; dev is the split CMRC figures are reported on): one
  example per question (the unit CMRC scores), its text the paragraph's context and the question, so every
  question on a paragraph that is in a corpus counts as contaminated.

Each string value is its own segment (segments are joined by "\\n"): an n-gram never spans two fields, which
are not adjacent in any real document.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import read_json, read_text
from zh_bert.corpus.corpus_io import read_jsonl

SuiteName = Literal["fewclue", "cmrc2018", "all"]
SUITE_NAMES = typing.get_args(SuiteName)
FEWCLUE_TEST_TASKS = ("eprstmt", "csldcp", "tnews", "iflytek", "ocnli", "bustm", "chid", "csl", "cluewsc")
_TEST_FILES = {**{f"fewclue/{t}": ("fewclue/" + t, "test_public.json") for t in FEWCLUE_TEST_TASKS},
               "cmrc2018": ("cmrc2018", "cmrc2018_dev.json")}   # task -> (data folder, test file)
_SPLITS = {"test_public.json": "test_public", "cmrc2018_dev.json": "dev"}   # test file -> the split it is
#: ordinary Chinese that decides which test text is common phrasing (zh_bert.corpus.contamination): the bundled
#: sample corpus, file -> what separates its documents (5,000 zhwiki and CLUECorpusSmall documents one a line,
#: 551 more CLUECorpusSmall documents in BERT's format, a blank line between two)
REFERENCE_FILES = {"zhwiki_sampled.txt": "\n", "CLUECorpusSmall_sampled.txt": "\n",
                   "CLUECorpusSmall_5000_lines_bert.txt": "\n\n"}
_NOT_TEXT = re.compile(r"(?:id|idx|.*_id|label.*|answer.*|.*_index|genre|level|keywords)")
_CHID_BLANK = "#idiom#"


@dataclass(frozen=True)
class BenchmarkExample:
    """One test example: its task ("fewclue/tnews", "cmrc2018"), its id in that file, its text (one segment
    per field, joined by "\\n") and the split it is from ("test_public", "dev")."""
    task: str
    id: str
    text: str
    split: str = "test_public"


def task_data_dir(name: str) -> Path:
    """`corpora/tasks/NAME` from $ZH_BERT_TASK_DATA, the source checkout (zh_bert/corpus/ is two below it), or
    the current directory."""
    candidates = []
    if os.environ.get("ZH_BERT_TASK_DATA"):
        candidates.append(Path(os.environ["ZH_BERT_TASK_DATA"]) / name)
    candidates += [Path(__file__).resolve().parents[2] / "corpora" / "tasks" / name,
                   Path.cwd() / "corpora" / "tasks" / name]
    for c in candidates:
        if c.is_dir():
            return c
    raise ZhBertError(f"task data '{name}' not found (looked in {', '.join(map(str, candidates))}); it ships with "
                      f"the source checkout, not the wheel: set ZH_BERT_TASK_DATA=DIR (DIR/{name}/...) or use "
                      f"--task tsv:TRAIN,DEV[,TEST]")


def suite_tasks(suite: str, flag: str = "--suite") -> tuple[str, ...]:
    """The test sets of `suite` (fewclue: its nine tasks; cmrc2018; all: both), in report order."""
    if suite not in SUITE_NAMES:
        raise ZhBertError(f"{flag} {suite}: unknown benchmark suite{suggest(suite, SUITE_NAMES)}; choose from "
                          f"{', '.join(SUITE_NAMES)}")
    return tuple(t for t in _TEST_FILES if suite == "all" or t.split("/")[0] == suite)


def benchmark_file(task: str) -> Path:
    """The test file of `task` (one of `suite_tasks("all")`)."""
    folder, name = _TEST_FILES[task]
    return task_data_dir(folder) / name


def split_of(task: str) -> str:
    """The split the test file of `task` is: "test_public" (FewCLUE) or "dev" (CMRC 2018)."""
    return _SPLITS[_TEST_FILES[task][1]]


def reference_documents() -> Iterator[str]:
    """The documents of the reference sample of ordinary Chinese (`REFERENCE_FILES`)."""
    for path in reference_files():
        yield from (doc for doc in read_text(path).split(REFERENCE_FILES[path.name]) if doc.strip())


def reference_files() -> list[Path]:
    """The files of the reference sample (`REFERENCE_FILES` in corpora/sample/, beside the task data)."""
    roots = [task_data_dir("fewclue").parent.parent / "sample",
             Path(__file__).resolve().parents[2] / "corpora" / "sample"]
    for root in roots:
        if all((root / name).is_file() for name in REFERENCE_FILES):
            return [root / name for name in REFERENCE_FILES]
    raise ZhBertError(f"the reference sample of ordinary Chinese ({', '.join(REFERENCE_FILES)}) is not in "
                      f"{' or '.join(map(str, dict.fromkeys(roots)))}; it ships with the source checkout beside the "
                      f"task data (corpora/sample/)")


def record_segments(obj, key: str = "") -> Iterator[str]:
    """The test text of a JSON value (the rule in the module docstring), one segment per string."""
    if key and _NOT_TEXT.fullmatch(key):
        return
    if isinstance(obj, str):
        yield from (s for s in obj.split(_CHID_BLANK) if s.strip())
    elif isinstance(obj, list):
        for v in obj:
            yield from record_segments(v)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from record_segments(v, str(k))


def _jsonl_examples(task: str, path: Path) -> Iterator[BenchmarkExample]:
    seen: set[str] = set()
    for where, obj in read_jsonl(path):
        if not isinstance(obj, dict):
            raise ZhBertError(f"{where}: expected a JSON object per line")
        ident = str(obj.get("id", obj.get("idx", where.rsplit(":", 1)[1])))
        if ident in seen:   # csldcp repeats 49 ids for other records: each record is its own example
            ident = f"{ident}@line{where.rsplit(':', 1)[1]}"
        seen.add(ident)
        yield BenchmarkExample(task, ident, "\n".join(record_segments(obj)), split_of(task))


def _squad_examples(task: str, path: Path) -> Iterator[BenchmarkExample]:
    doc = read_json(path)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ZhBertError(f"{path}: no 'data' list at the top (not a SQuAD-style file)")
    for article in data:
        for para in article.get("paragraphs", []):
            context = str(para.get("context", ""))
            for qa in para.get("qas", []):
                yield BenchmarkExample(task, str(qa.get("id")), f"{context}\n{qa.get('question', '')}",
                                       split_of(task))


def iter_test_examples(suite: str) -> Iterator[BenchmarkExample]:
    """Every test example of `suite`, task by task in `suite_tasks` order, each file in its own order."""
    for task in suite_tasks(suite):
        reader = _squad_examples if task == "cmrc2018" else _jsonl_examples
        yield from reader(task, benchmark_file(task))
