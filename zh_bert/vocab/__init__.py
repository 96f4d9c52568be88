"""`zh-bert vocab`: cleaned documents -> a stock Hugging Face tokenizer dir (TOKDIR), and
`zh-bert vocab report`: compare tokenizer dirs on real text.

    zh-bert vocab CORPUS.jsonl... -o TOKDIR --kind char|wordpiece|sentencepiece|word [--size N]
    zh-bert vocab report TOKDIR TEXT... [--compare TOKDIR2]

Every TOKDIR has tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.txt (BERT-style
kinds) and zh_bert_vocab.json (kind, vocab_size, corpus, options, build seconds), and loads with
`AutoTokenizer.from_pretrained(TOKDIR)`. Heavy imports (tokenizers, transformers) happen inside the
functions, so `--help` stays fast.
"""

from __future__ import annotations

import argparse

from zh_bert.errors import ZhBertError
from zh_bert.vocab.build import DEFAULT_SIZE, KINDS, VocabOptions, build_vocab  # noqa: F401

__all__ = ["main", "build_vocab", "VocabOptions", "KINDS", "vocab_report"]


def vocab_report(*args, **kwargs):
    from zh_bert.vocab.report import vocab_report as _report

    return _report(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zh-bert vocab",
        description="Build a tokenizer dir from cleaned documents (JSONL from `zh-bert clean`, or .txt with one "
                    "document per line). `zh-bert vocab report --help` for comparing tokenizer dirs.")
    p.add_argument("corpus", nargs="+", metavar="CORPUS", help="docs.jsonl ({\"text\", \"source\"} per line) or .txt")
    p.add_argument("-o", "--output", required=True, metavar="TOKDIR", help="output tokenizer dir (must not exist)")
    p.add_argument("--kind", choices=KINDS, default="char",
                   help="char: one token per CJK character + WordPiece for Latin (bert-base-chinese style); "
                        "wordpiece: tokenizers WordPiece trainer; sentencepiece: unigram/BPE; "
                        "word: jieba words + all characters (WoBERT style). Default: char")
    p.add_argument("--size", type=int, default=None,
                   help="vocabulary size including special tokens (default: "
                        + ", ".join(f"{k} {v}" for k, v in DEFAULT_SIZE.items())
                        + "; with --base-vocab: base + every new character). char/word stop early when the "
                          "corpus has nothing more to add")
    p.add_argument("--min-frequency", type=int, default=1,
                   help="drop characters/pieces seen fewer times (word kind: words need max(2, this))")
    p.add_argument("--unused", type=int, default=99,
                   help="number of [unusedN] slots after [PAD] (default 99: Google's ids [UNK]=100 [CLS]=101 "
                        "[SEP]=102 [MASK]=103; 0 gives [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4)")
    p.add_argument("--base-vocab", metavar="vocab.txt",
                   help="char/word: start from this vocab (e.g. Google's) and append new entries; no id moves")
    p.add_argument("--model-type", choices=("unigram", "bpe"), default="unigram", help="sentencepiece model type")
    p.add_argument("--character-coverage", type=float, default=0.9995,
                   help="sentencepiece: share of character occurrences covered (rarer ones -> [UNK])")
    p.add_argument("--max-docs", type=int, default=None, help="use only the first N documents")
    p.add_argument("--force", action="store_true", help="replace TOKDIR if it exists")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def build_report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zh-bert vocab report",
        description="How a tokenizer dir encodes real text: vocab size, UNK rate, characters per token, "
                    "character coverage, top UNK characters.")
    p.add_argument("tokdir", metavar="TOKDIR", help="tokenizer dir (zh-bert vocab output, or a model dir)")
    p.add_argument("text", nargs="+", metavar="TEXT", help=".txt (one document per line) or .jsonl files")
    p.add_argument("--compare", metavar="TOKDIR2", action="append", default=[],
                   help="another tokenizer dir, printed side by side (repeat to compare more)")
    p.add_argument("--max-docs", type=int, default=None, help="use only the first N documents")
    p.add_argument("--top-unk", type=int, default=10, help="how many UNK characters to list")
    p.add_argument("--json", metavar="PATH", help="also write the report(s) as JSON")
    return p


def main(argv: list[str]) -> int:
    argv = list(argv)
    if "--max-docs" in argv and argv.index("--max-docs") + 1 < len(argv):
        value = argv[argv.index("--max-docs") + 1]
        if not value.isdigit() or int(value) < 1:
            raise ZhBertError(f"--max-docs must be a positive integer, got '{value}'")
    if argv and argv[0] == "report":
        from zh_bert.vocab.report import report_main

        return report_main(build_report_parser().parse_args(argv[1:]))
    args = build_parser().parse_args(argv)
    opts = VocabOptions(kind=args.kind, size=args.size, min_frequency=args.min_frequency, unused=args.unused,
                        base_vocab=args.base_vocab, model_type=args.model_type,
                        character_coverage=args.character_coverage)
    meta = build_vocab(args.corpus, args.output, opts, force=args.force, max_docs=args.max_docs)
    if not args.quiet:
        extra = ", ".join(f"{k.replace('_', ' ')} {meta[k]:,}" for k in ("characters", "words", "added_to_base")
                          if meta.get(k) is not None)
        print(f"zh-bert vocab: wrote {args.output} (kind {meta['kind']}, {meta['vocab_size']:,} tokens"
              f"{': ' + extra if extra else ''}; {meta['corpus_docs']:,} documents in {meta['build_seconds']:.1f} s)")
    return 0
