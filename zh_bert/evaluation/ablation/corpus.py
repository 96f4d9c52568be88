"""An ablation's corpus: the last documents of each corpus file carved off as held-out text before any run
sees them, and the training copies of every corpus fraction."""

from __future__ import annotations

import re
from pathlib import Path

from zh_bert.corpus.corpus_io import iter_lines
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, json_copy, read_json, read_text, write_json

def _docs(path: Path, doc_sep: str) -> list[str]:
    if path.name.endswith(".gz"):   # a part of a `zh-bert clean --executor` OUTDIR: one document per line
        return [line for _, line in iter_lines(path)]
    text = read_text(path)
    if doc_sep == "blank":
        return [d.strip("\n") for d in re.split(r"\n\s*\n", text) if d.strip()]
    return [l for l in text.split("\n") if l.strip()]


def split_corpus(files: list[Path], heldout_docs: int, doc_sep: str) -> list[tuple[list[str], list[str]]]:
    """(training docs, held-out docs) per corpus file; reads only, so a dry run can check the corpus."""
    out = []
    for path in files:
        docs = _docs(path, doc_sep)
        if len(docs) <= 2 * heldout_docs:
            raise ZhBertError(f"{path}: {len(docs)} documents is too few to hold out {heldout_docs}")
        out.append((docs[:-heldout_docs], docs[-heldout_docs:]) if heldout_docs else (docs, []))
    return out


def _carve_key(files: list[Path], heldout_docs: int, doc_sep: str) -> dict:
    return {"files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files],
            "heldout_docs": heldout_docs, "doc_sep": doc_sep}


def check_carved(files: list[Path], corpus: Path, heldout_docs: int, doc_sep: str) -> None:
    """A `corpus` folder carved from other files or another heldout_docs is refused, never reused: its runs
    trained on other documents and its held-out text is another set."""
    path = corpus / "carve.json"
    if not path.is_file():
        return
    old = read_json(path, default=None)   # a broken carve.json is another carve too
    if old != json_copy(_carve_key(files, heldout_docs, doc_sep)):
        raise ZhBertError(f"{corpus} was carved from other corpus files or another heldout_docs; delete "
                          f"{corpus.parent} or use --out-dir")


def check_corpus_size(recipe, files: list[Path], heldout_docs: int, fraction: float) -> None:
    """Masking correction needs MIN_TRAIN_TOKENS train tokens in its shards; a raw corpus has no token count
    before it is sharded, so a dry run refuses what cannot reach it even at one token per byte of text (with
    room for every special token): an upper bound, never a false refusal. `prepare_correction_data`
    makes the exact check before any run trains."""
    from zh_bert.corpus.similar_words import MIN_TRAIN_TOKENS

    if recipe.masking.strategy != "correction":
        return
    docs = [d for keep, _ in split_corpus(files, heldout_docs, recipe.doc_sep)
            for d in keep[:max(1, int(len(keep) * fraction))]]
    upper = 2 * (sum(len(d.encode("utf-8")) for d in docs) + len(docs)) + 2
    if upper < MIN_TRAIN_TOKENS:
        raise ZhBertError(f"masking correction learns its similar words from the shards' train split, and this "
                          f"run's {len(docs)} training documents give at most {upper:,} tokens (needs at least "
                          f"{MIN_TRAIN_TOKENS:,}); use more text or another masking (wwm)")


def carved_paths(files: list[Path], out: Path, fractions: set[float]) -> dict[float, list[str]]:
    """Where `carve_corpus` puts each fraction's training copies: known before (and without) carving."""
    return {f: [str(out / f"train-{int(round(f * 100))}" / f"{i:02d}-{path.name.removesuffix('.gz')}")
                for i, path in enumerate(files)] for f in fractions}   # copies are written uncompressed


def carve_corpus(files: list[Path], out: Path, heldout_docs: int, fractions: set[float],
                 doc_sep: str) -> tuple[dict, Path]:
    """Training copies of the corpus without the held-out docs (per fraction) + one held-out text file."""
    sep = "\n\n" if doc_sep == "blank" else "\n"
    check_carved(files, out, heldout_docs, doc_sep)
    heldout, train = [], carved_paths(files, out, fractions)
    for i, (keep, held) in enumerate(split_corpus(files, heldout_docs, doc_sep)):
        heldout += [d.replace("\n", " ") for d in held]
        for f in fractions:
            dst = Path(train[f][i])
            if not dst.is_file():
                with atomic_write(dst) as fh:
                    fh.write(sep.join(keep[:max(1, int(len(keep) * f))]) + "\n")
    held_path = out / "heldout.txt"
    if heldout and not held_path.is_file():
        with atomic_write(held_path) as fh:
            fh.write("\n".join(heldout) + "\n")
    write_json(out / "carve.json", _carve_key(files, heldout_docs, doc_sep))   # last: the carve is complete
    return train, held_path

