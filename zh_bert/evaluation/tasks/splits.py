"""Which split trains, which chooses, which reports, and the check, made before any model is loaded, that
nothing is trained or chosen on the split a figure is reported on.

Every figure zh-bert prints is made under three roles: the train split trains; the choosing split (dev, dev_k)
picks what is kept (the early-stop step, the best state, a grid's learning rate); the reporting split (test,
test_public; CMRC 2018's dev, on which nothing is chosen) gives the figure. A file handed in the wrong role
(`--cmrc-train cmrc2018_dev.json`, `tsv:train,dev,dev`, a renamed copy, a copy with new ids) would print a
figure that measures memory, so the splits are compared first, by content, never by name:

- span extraction (CMRC 2018): question ids and context hashes of the train file against the reported file;
  any shared one is refused, with both counts (the official train and dev files share none; trial and dev
  share none either). Contexts, and NER sentences, are compared as `eval contamination` compares text
  (`overlap_text`: NFKC, case folded, no whitespace): a copy with new ids and `，` written `,` is the same.
- sentence classification and cloze items (finetune, FewCLUE): texts. A text of a later role is dropped from
  the earlier one (from train when dev or test holds it, from dev when test holds it) and counted in the notes,
  as the published splits need (ChnSentiCorp repeats 665 train reviews in dev or test and 39 dev reviews in
  test; FewCLUE's csl dev_2 holds 2 of test_public's examples). A split left with nothing is refused, naming
  the file it copies.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Hashable, Sequence

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.overlap_hash import overlap_text

#: what each split does, as every summary names it
ROLES = {"train": "trains", "dev": "chooses", "test": "reports"}


def context_key(text: str) -> str:
    """A context's identity for overlap: the sha256 of its text as `eval contamination` compares text
    (`overlap_text`: NFKC, case folded, no whitespace), so a re-wrapped copy, or one with `，` written `,`, is
    the same context."""
    return hashlib.sha256(overlap_text(text).encode("utf-8")).hexdigest()


def text_key(text: str) -> str:
    """A sentence's identity for overlap, by the same normalisation (`overlap_text`)."""
    return overlap_text(text)


def refuse_shared_spans(train: Sequence, train_name: str, reported: Sequence, reported_name: str) -> None:
    """One line when the span-extraction train examples share any question id or context with the examples
    the figure is reported on (`.id`, `.context`): a model trained on its reporting split."""
    ids = {e.id for e in reported}
    contexts = {context_key(e.context) for e in reported}
    train_ids = {e.id for e in train}
    train_contexts = {context_key(e.context) for e in train}
    shared_ids, shared_contexts = len(train_ids & ids), len(train_contexts & contexts)
    if shared_ids or shared_contexts:
        raise ZhBertError(
            f"{train_name} shares {shared_ids:,} of its {len(train_ids):,} questions (ids) and {shared_contexts:,} "
            f"of its {len(train_contexts):,} contexts with {reported_name}, the dev file it is scored on: a model "
            f"trained on its reporting split; give CMRC 2018's train file (cmrc2018_train.json)")


def keep_apart(name: str, splits: tuple[list, list, list | None], files: Sequence, key: Callable[[object], Hashable],
               drop_repeats: bool = True) -> tuple[list, list, list[str]]:
    """(train, dev, notes): dev without the texts of test (nothing chosen on the reported split), train without
    the texts of dev or test (nothing trained on a held-out one) and, with `drop_repeats`, without its own
    repeats. `files` names each split's file for the one-line refusal of a split left empty."""
    train, dev, test = splits
    notes: list[str] = []
    reported = {key(e) for e in test or []}
    kept_dev = [e for e in dev if key(e) not in reported]
    if len(kept_dev) < len(dev):
        if not kept_dev:
            raise ZhBertError(f"{files[1]}: every one of the {len(dev):,} dev examples of task {name} is also in "
                              f"{files[2]}, the split it is reported on: nothing may be chosen on it; give a dev "
                              f"split of its own")
        notes.append(f"dev: dropped {len(dev) - len(kept_dev):,} examples whose text is also in test "
                     f"({len(kept_dev):,} left): nothing is chosen on the split it is reported on")
    held = reported | {key(e) for e in dev}
    seen: set = set()
    kept_train, n_rep, n_leak = [], 0, 0
    for e in train:
        k = key(e)
        if k in held:
            n_leak += 1
        elif drop_repeats and k in seen:
            n_rep += 1
        else:
            seen.add(k)
            kept_train.append(e)
    if not kept_train:
        copied = " and ".join(str(f) for f in files[1:] if f is not None)
        raise ZhBertError(f"{files[0]}: the train split of task {name} has no examples left after dropping {n_rep} "
                          f"repeated and {n_leak} also in dev/test ({copied}): nothing is trained on a split it is "
                          f"chosen or reported on")
    if n_rep or n_leak:
        notes.append(f"train: dropped {n_rep} repeated examples and {n_leak} whose text is also in dev/test "
                     f"({len(kept_train)} left)")
    return kept_train, kept_dev, notes


def roles_of(files: Sequence) -> dict[str, str]:
    """The file of each role; without a test file dev both chooses and reports, and says so."""
    train, dev, test = (str(f) if f is not None else None for f in files)
    return {"trains": train, "chooses": dev,
            "reports": test or f"{dev} (no test file: the figure of the split it was chosen on, optimistic)"}
