"""Vocabulary build time on the bundled sample corpus, against a baseline in the same process.

Baseline: the `tokenizers` tutorial way to get a 21,128-entry BERT WordPiece vocab (BertNormalizer +
BertPreTokenizer + WordPieceTrainer, nothing written). Each zh-bert kind is timed from the same documents in
memory to the finished tokenizer object (no file writing / AutoTokenizer self-check, which add ~0.3 s once
transformers is imported). Ratio = zh-bert seconds / baseline seconds (lower is faster).

    python -m bench.vocab_build [--docs N] [--repeat R]
    python -m bench.vocab_build --quick     # every kind on 300 documents, vocab sizes 4,000 (a smoke test)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench import REPO
from bench.cli import parse
from bench.timing import machine, timed
from zh_bert.core.config import option
from zh_bert.corpus.corpus_io import read_documents
from zh_bert.corpus.vocab.build import VocabOptions, build_tokenizer
from zh_bert.corpus.vocab.tokenizer_json import bert_normalizer, special_layout

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


@dataclass
class Options:
    docs: Optional[int] = option(None, help="first N documents only")
    repeat: int = option(1, help="builds per kind (median)")
    quick: bool = option(False, help="300 documents, small vocabs: a smoke test")


def main(argv: list[str] | None = None) -> int:
    args = parse(Options, "vocab_build", __doc__, argv)
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
