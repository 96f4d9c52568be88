"""Head kinds, one registry: what `zh-bert finetune` and `zh-bert eval suite` train and score, by the kind a task
declaration names (`Task.head`). Each kind is one module (or folder) here, owning what differs (`base.HeadKind`
says what it is asked for): its model class, its batch and loss (the head object every kind trains on the one
loop, `loop.fit_head`), its metric, its options, how it saves, what its result rows hold.

- `classify` (`classify`): a sequence classifier; under the suite's `--method zero-shot|pet` the masked LM on the
  task's pattern (`choice.ChoiceHead`) instead.
- `choice` (`choice`): multiple choice through the masked LM (CHID); the suite trains it as PET.
- `span` (`span`): span extraction, a fixed number of epochs, nothing chosen (`--span-*`, alias `--cmrc-*`).
- `tag` (`tag/`): token tagging (NER), chosen on dev by entity F1 (`--tag-train`, alias `--msra-train`).
- `embed` (`embed/`): sentence embeddings: pooled, L2-normalised vectors compared by cosine (SimCSE, CoSENT, MNRL).

This module is the only one that maps a kind's name to its object or compares kinds (tests/test_structure.py).
"""

from __future__ import annotations

from zh_bert.core.errors import ZhBertError
from zh_bert.core.registry import Registry
from zh_bert.corpus.task_registry import USER_FILE_TASKS, task_named, tasks
from zh_bert.corpus.task_spec import Task
from zh_bert.evaluation.heads import choice, classify, span
from zh_bert.evaluation.heads.base import HeadKind
from zh_bert.evaluation.heads.embed import kind as embed
from zh_bert.evaluation.heads.tag import kind as tag

#: head kind (`Task.head`) -> what `finetune` and `eval suite` ask of it
HEAD_KINDS: Registry[HeadKind] = Registry.of("head kind", (classify.CLASSIFY_HEAD, choice.CHOICE_HEAD, span.SPAN_HEAD,
                                                           tag.TAG_HEAD, embed.EMBED_HEAD))


def kind_named(name: str) -> HeadKind:
    return HEAD_KINDS.named(name)


def head_kind(task: Task) -> HeadKind:
    """The kind of a declared task's head."""
    if task.head not in HEAD_KINDS:
        raise ZhBertError(f"task {task.name}: head kind {task.head!r} is none of {', '.join(HEAD_KINDS)}")
    return HEAD_KINDS[task.head]


def tasks_of_kind(kind: HeadKind) -> list[Task]:
    """The declared tasks whose head is `kind`."""
    return [t for t in tasks() if head_kind(t) is kind]


def finetune_specs() -> list[str]:
    """The declared tasks `finetune --task` runs (one set of train/choose/report files, a kind that fine-tunes it)."""
    return [t.name for t in tasks() if head_kind(t).finetunable(t)]


def kind_for(spec: str) -> HeadKind:
    """The kind `finetune --task SPEC` trains: a kind's prefix (tsv:, pairs:, simcse:), the user-files name of a
    kind (ner), or a declared task it fine-tunes; one line for anything else."""
    for kind in HEAD_KINDS.values():
        if kind.prefixes and spec.startswith(kind.prefixes):
            return kind
    if spec in USER_FILE_TASKS:
        return kind_named(USER_FILE_TASKS[spec])
    task = task_named(spec)
    if not head_kind(task).finetunable(task):
        raise ZhBertError(f"--task {spec}: {task.title} has no train/dev/test files to fine-tune on (it runs under its "
                          f"suite: zh-bert eval suite MODEL --only {spec}); use one of {', '.join(finetune_specs())}, "
                          f"{', '.join(p + '...' for k in HEAD_KINDS.values() for p in k.prefixes)} or "
                          f"{' | '.join(USER_FILE_TASKS)} with your files")
    return head_kind(task)


def option_classes(command: str) -> tuple[type, ...]:
    """Every kind's option dataclasses of `command` (finetune | suite), each once, in registry order."""
    found: dict[type, None] = {}
    for kind in HEAD_KINDS.values():
        found.update(dict.fromkeys(kind.finetune_options if command == "finetune" else kind.suite_options))
    return tuple(found)
