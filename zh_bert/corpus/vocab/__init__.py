"""`zh-bert vocab`: cleaned documents -> a stock Hugging Face tokenizer dir (TOKDIR), and
`zh-bert vocab report`: compare tokenizer dirs on real text.

    zh-bert vocab CORPUS.jsonl|OUTDIR... -o TOKDIR --kind char|wordpiece|sentencepiece|word [--size N]
    zh-bert vocab report TOKDIR TEXT... [--compare TOKDIR2]

Every TOKDIR has tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.txt (BERT-style
kinds) and zh_bert_vocab.json (kind, vocab_size, corpus, options, build seconds), and loads with
`AutoTokenizer.from_pretrained(TOKDIR)`. Heavy imports (tokenizers, transformers) happen inside the
functions, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zh_bert.core.config import build_parser as _build_parser
from zh_bert.core.config import config_from_args
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import claim_file, read_json, write_json
from zh_bert.corpus.vocab.build import KINDS, META_FILE, VocabConfig, VocabOptions, build_vocab
from zh_bert.corpus.vocab.report import ReportConfig, format_reports, is_vocab_report, vocab_report, vocab_reports

__all__ = ["main", "build_vocab", "VocabConfig", "VocabOptions", "KINDS", "vocab_report", "vocab_reports",
           "ReportConfig"]


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(
        "zh-bert vocab",
        "Build a tokenizer dir from cleaned documents (JSONL from `zh-bert clean`, or .txt with one document per "
        "line). `zh-bert vocab report --help` for comparing tokenizer dirs.", VocabConfig, VocabOptions)


def build_report_parser() -> argparse.ArgumentParser:
    return _build_parser(
        "zh-bert vocab report",
        "How a tokenizer dir encodes real text: vocab size, UNK rate, characters per token, character "
        "coverage, top UNK characters.", ReportConfig)


def report_main(argv: list[str]) -> int:
    cfg = config_from_args(ReportConfig, build_report_parser().parse_args(argv))
    if cfg.json_path and Path(cfg.json_path).is_dir():  # before the work, not after it
        raise ZhBertError(f"--json {cfg.json_path}: is a directory; give a file name such as "
                          f"{Path(cfg.json_path) / 'report.json'}")
    if cfg.json_path:   # never an input (the corpus, a tokenizer's own file) nor a file of the user's
        claim_file(cfg.json_path, inputs=[cfg.tokdir, *cfg.compare, *cfg.text], ours=is_vocab_report, flag="--json",
                   what="a vocab report zh-bert wrote")
    reports = vocab_reports(cfg)
    print(format_reports(reports))
    if cfg.json_path:
        write_json(cfg.json_path, reports if cfg.compare else reports[0])
    return 0


def main(argv: list[str]) -> int:
    """`vocab report ...` is a form of its own (a TOKDIR and texts, not a corpus); anything else builds."""
    argv = list(argv)
    if argv and argv[0] == "report":
        return report_main(argv[1:])
    args = build_parser().parse_args(argv)
    cfg = config_from_args(VocabConfig, args)
    cfg.options = config_from_args(VocabOptions, args)
    out = build_vocab(cfg)
    if not cfg.quiet:
        meta = read_json(Path(out) / META_FILE)
        extra = ", ".join(f"{k.replace('_', ' ')} {meta[k]:,}" for k in ("characters", "words", "added_to_base")
                          if meta.get(k) is not None)
        print(f"zh-bert vocab: wrote {out} (kind {meta['kind']}, {meta['vocab_size']:,} tokens"
              f"{': ' + extra if extra else ''}; {meta['corpus_docs']:,} documents in {meta['build_seconds']:.1f} s)")
    return 0
