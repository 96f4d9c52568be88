"""`zh-bert COMMAND ...`: dispatch to the stage module named after the command.

Each stage module exposes `build_parser()` (derived from its config dataclasses) and
`main(argv: list[str]) -> int`; only the named module is imported, so `zh-bert clean --help` loads the
cleaner (not torch, not gradio) and starts fast.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading

from zh_bert import __version__
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import reset_claims

# One row per command, in pipeline order: name, module, one-line help.
_TABLE = """
clean     zh_bert.corpus.clean          raw Chinese text -> cleaned, deduplicated documents (jsonl)
vocab     zh_bert.corpus.vocab          cleaned docs -> tokenizer dir (char|wordpiece|sentencepiece|word); 'vocab report'
shard     zh_bert.corpus.shard          cleaned docs + tokenizer -> packed token shards with jieba word boundaries
inspect   zh_bert.train.inspect_shards  print shard sequences with masking and word boundaries visible
pretrain  zh_bert.train.pretrain        train a masked LM from a recipe (Accelerate), with exact resume
plan      zh_bert.plan                  memory/time plan for a model on a GPU (1080ti, k80, p100, ...)
eval      zh_bert.evaluation.commands.evaluate   evaluate a checkpoint: 'eval mlm' or 'eval cloze'
finetune  zh_bert.evaluation.commands.finetune   fine-tune a checkpoint on a task: classify, tag (NER), span, embed (STS, pairs, SimCSE)
embed     zh_bert.evaluation.commands.embed   sentence vectors of a file (.npy, .parquet), or the nearest lines to a query
ablate    zh_bert.evaluation.commands.ablate     run a grid of pretraining runs that differ in one setting
leaderboard zh_bert.leaderboard        Chinese encoders side by side: 'leaderboard build|verify|serve'
publish   zh_bert.release.publish       upload a run/checkpoint to the Hugging Face Hub with a model card
download  zh_bert.hub.download      download a released Chinese checkpoint (alias or repo id)
convert   zh_bert.hub.convert       a TF1, UER-py, TencentPretrain or HF .bin BERT checkpoint -> stock folder, proven equal
models    zh_bert.hub.listing       list released Chinese masked-LM checkpoints
demo      zh_bert.release.demo          Gradio fill-in-the-blank (cloze) demo in the browser
"""
#: command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    name: (module, help_) for name, module, help_ in (row.split(None, 2) for row in _TABLE.strip().splitlines())}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"zh-bert {__version__}: Chinese BERT pretraining toolkit", "",
             "usage: zh-bert COMMAND [ARGS...]   (zh-bert COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt: the same cleanup (temp files removed, worker pools
    stopped, a checkpoint where pretrain saves one), then exit 143."""


def _raise_terminated(signum, frame):
    raise Terminated()


def _default_sigterm_in_child() -> None:
    """A process forked while the handler is in place (a worker pool, an executor's tasks) dies on SIGTERM as
    processes do: its parent stops it that way, and a worker raising Terminated would never exit."""
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:   # forked from a thread other than the main one: that thread cannot set handlers
            pass


os.register_at_fork(after_in_child=_default_sigterm_in_child)


def _terminate_like_interrupt():
    """SIGTERM as SIGINT is handled, in the main thread of a process that has not chosen its own handling; the
    handler it replaced (to put back when the command returns), or None."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"zh-bert {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"zh-bert: unknown command '{name}'{suggest(name, COMMANDS)}\n\n{_usage()}", file=sys.stderr)
        return 2

    reset_claims()   # a command owns only what it claims itself
    before = _terminate_like_interrupt()
    try:
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except ZhBertError as e:
        print(f"zh-bert {name}: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"zh-bert {name}: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"zh-bert {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `zh-bert models | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    raise SystemExit(main())
