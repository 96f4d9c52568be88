"""Big corpora made from the bundled real text, for measuring `zh-bert vocab`'s memory (tests and by hand).

corpora/sample/ has ~4.6 MB of real Chinese documents; repeating them would be dishonest, because every
count table (characters, jieba words, Latin words) would saturate after the first copy and any table that
grows with the corpus would go unnoticed. So every copy after the first is relabelled: a seeded permutation
of a fifth of the CJK characters (among CJK characters), of the ASCII letters (among letters) and of the
digits (among digits). Each copy keeps the real text's structure (sentence and document lengths, character
frequencies, punctuation, spacing) but spells many words anew, so the distinct-word tables keep growing
about linearly with the corpus, faster than in real text (Heaps' law): a stricter test than real text.

    python tests/_vocab_corpus.py OUT.txt MB
"""

from __future__ import annotations

import random
import string
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "corpora" / "sample"
SOURCES = ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt", "CLUECorpusSmall_5000_lines_bert.txt")


def _is_cjk(c: str) -> bool:
    return "\u4e00" <= c <= "\u9fff"


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """Write about `megabytes` MB (UTF-8) of one-document-per-line text to `path`; returns the bytes written."""
    text = "".join((SAMPLE / name).read_text(encoding="utf-8") for name in SOURCES)
    classes = [sorted(c for c in set(text) if _is_cjk(c)), list(string.ascii_letters), list(string.digits)]
    rng = random.Random(seed)
    target, written, copy = int(megabytes * 1e6), 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            table: dict[int, str] = {}
            for members in classes if copy else ():
                moved = rng.sample(members, max(2, len(members) // 5))
                table.update((ord(a), b) for a, b in zip(moved, rng.sample(moved, len(moved))))
            block = text.translate(table)
            if written + len(block.encode("utf-8")) > target:  # the last copy: whole lines up to the size
                cut = block.encode("utf-8")[:target - written]
                block = cut[:cut.rfind(b"\n") + 1].decode("utf-8")
                target = 0
            f.write(block)
            written += len(block.encode("utf-8"))
            copy += 1
    return written


if __name__ == "__main__":
    print(write_corpus(Path(sys.argv[1]), float(sys.argv[2])))
