"""The benchmarks' test text: which file each suite reports on, and the text of every test example in it, as the
task declarations (`task_registry`) say: each task's reported split, read by its `test_text` (JSON-lines records:
`task_files.RecordText`; SQuAD questions: `squad_files.SquadText`).

It lives in the corpus layer because `zh-bert clean --decontaminate` drops corpus documents that contain it, and
the corpus stage may not import zh_bert/evaluation (which reads the same files to score models).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_text
from zh_bert.corpus.task_files import (  # noqa: F401 (record_segments, task_data_dir: re-exported)
    BenchmarkExample,
    record_segments,
    task_data_dir,
    task_roots,
)
from zh_bert.corpus.task_registry import tasks_of
from zh_bert.corpus.task_spec import Task

#: ordinary Chinese that decides which test text is common phrasing (zh_bert.corpus.contamination): the bundled
#: sample corpus, file -> what separates its documents (5,000 zhwiki and CLUECorpusSmall documents one a line,
#: 551 more CLUECorpusSmall documents in BERT's format, a blank line between two)
REFERENCE_FILES = {"zhwiki_sampled.txt": "\n", "CLUECorpusSmall_sampled.txt": "\n",
                   "CLUECorpusSmall_5000_lines_bert.txt": "\n\n"}


def test_set_key(task: Task) -> str:
    """How a test set is named in contamination figures: its data folder ("fewclue/tnews", "cmrc2018"), or the
    task's name when its folder is a path of the user's."""
    return task.name if Path(task.folder).is_absolute() else task.folder


def _test_sets(suite: str, flag: str = "--suite") -> dict[str, Task]:
    return {test_set_key(t): t for t in tasks_of(suite, flag) if t.test_text is not None}


def suite_tasks(suite: str, flag: str = "--suite") -> tuple[str, ...]:
    """The test sets of `suite` (a suite's name or `all`), in declaration order; an unknown suite is one line."""
    return tuple(_test_sets(suite, flag))


def benchmark_file(key: str) -> Path:
    """The test file of a test set (one of `suite_tasks("all")`)."""
    task = _test_sets("all")[key]
    return task_data_dir(task.folder) / task.layout.report


def split_of(key: str) -> str:
    """The split the test file of a test set is: "test_public" (FewCLUE) or "dev" (CMRC 2018)."""
    return _test_sets("all")[key].report_name


def reference_documents() -> Iterator[str]:
    """The documents of the reference sample of ordinary Chinese (`REFERENCE_FILES`)."""
    for path in reference_files():
        yield from (doc for doc in read_text(path).split(REFERENCE_FILES[path.name]) if doc.strip())


def reference_files() -> list[Path]:
    """The files of the reference sample (`REFERENCE_FILES` in corpora/sample/, beside the task data)."""
    roots = [root.parent / "sample" for root in task_roots()[:1]] + \
        [Path(__file__).resolve().parents[2] / "corpora" / "sample"]
    for root in roots:
        if all((root / name).is_file() for name in REFERENCE_FILES):
            return [root / name for name in REFERENCE_FILES]
    raise ZhBertError(f"the reference sample of ordinary Chinese ({', '.join(REFERENCE_FILES)}) is not in "
                      f"{' or '.join(map(str, dict.fromkeys(roots)))}; it ships with the source checkout beside the "
                      f"task data (corpora/sample/)")


def iter_test_examples(suite: str) -> Iterator[BenchmarkExample]:
    """Every test example of `suite`, test set by test set in `suite_tasks` order, each file in its own order."""
    for key, task in _test_sets(suite).items():
        yield from task.test_text.examples(key, benchmark_file(key), task.report_name)
