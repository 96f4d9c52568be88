"""Vocabulary build time on the bundled sample corpus, against a baseline in the same process.

Baseline: the `tokenizers` tutorial way to get a 21,128-entry BERT WordPiece vocab (BertNormalizer +
BertPreTokenizer + WordPieceTrainer, nothing written). Each zh-bert kind is timed from the same documents in
memory to the finished tokenizer object (no file writing / AutoTokenizer self-check, which add ~0.3 s once
transformers is imported). Ratio = zh-bert seconds / baseline seconds (lower is faster).

    python bench/vocab_build.py [--docs N] [--repeat R]
    python bench/vocab_build.py --quick     # every kind on 300 documents, vocab sizes 4,000 (a smoke test)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _timing import machine, timed  # noqa: E402
from zh_bert.corpus.vocab.build import VocabOptions, build_tokenizer  # noqa: E402
from zh_bert.corpus.vocab.tokenizer_json import bert_normalizer, special_layout  # noqa: E402
from zh_bert.corpus.corpus_io import read_documents  # noqa: E402

SAMPLE = REPO / "corpora" / "sample"
GOOGLE = REPO / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"


def tokenizers_wordpiece(docs: list[str], size: int) -> list[str]:
    """The baseline: the `tokenizers` WordPieceTrainer (zh-bert's own learner replaced it: not reproducible)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = bert_normalizer(split_cjk=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=size, show_progress=False, special_tokens=special_layout(99),
                                        continuing_subword_prefix="##")
    tk.train_from_iterator(docs, trainer=trainer, length=len(docs))
    return list(tk.get_vocab())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=None, help="first N documents only")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="300 documents, small vocabs: a smoke test")
    args = ap.parse_args()
    size, words = 21128, 40000
    if args.quick:
        args.docs, args.repeat, size, words = 300, 1, 4000, 4000
    docs = read_documents([SAMPLE / "zhwiki_sampled.txt", SAMPLE / "CLUECorpusSmall_sampled.txt"], args.docs)
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    print(f"corpus: {len(docs):,} documents, {mb:.1f} MB (corpora/sample zhwiki + CLUECorpusSmall); {machine()}")

    t = timed(lambda: tokenizers_wordpiece(docs, size), args.repeat)
    base_s, base_vocab = t.wall, t.result
    print(f"{f'baseline: tokenizers WordPieceTrainer, {size:,}':<52} {base_s:7.2f} s  {len(base_vocab):>6,} tokens  1.00x")
    runs = [
        (f"char --size {size}", VocabOptions(kind="char", size=size)),
        ("char --base-vocab google (append new chars)", VocabOptions(kind="char", base_vocab=str(GOOGLE))),
        (f"wordpiece --size {size}", VocabOptions(kind="wordpiece", size=size)),
        (f"word --size {words} (rjieba)", VocabOptions(kind="word", size=words)),
        (f"sentencepiece unigram --size {size}", VocabOptions(kind="sentencepiece", size=size)),
        (f"sentencepiece bpe --size {size}", VocabOptions(kind="sentencepiece", size=size, model_type="bpe")),
    ]
    for name, opts in runs:
        t = timed(lambda: build_tokenizer(docs, opts), args.repeat)
        s, (_, tokens, _, _) = t.wall, t.result
        print(f"zh-bert vocab {name:<38} {s:7.2f} s  {len(tokens):>6,} tokens  {s / base_s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
