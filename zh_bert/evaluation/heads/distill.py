"""Task-specific distillation: `zh-bert finetune STUDENT --task T --teacher FINETUNED` trains the student on soft
labels of a fine-tuned teacher beside the gold ones (Hinton et al. 2015; TextBrewer, HFL's MiniRBT), and `--save
DIR` writes a fine-tuned model as the stock folder a teacher is.

The loss of a step is `alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(gold)`,
per example (classify) or per labelled first sub-token (tag); T^2 keeps the soft term's gradients on the scale of
the hard one's as T grows (Hinton). The objective is an object the head asks (`HardLabels`: no teacher;
`Distilled`), given a function that runs any model on the batch the head has just built: the loop does not know a
teacher exists. The teacher is frozen (eval mode, no gradients), runs under the step's autocast (the run's
precision) and draws no random numbers, so `--kd-alpha 0` trains bit for bit as no teacher does.

A teacher is refused in one line before any training unless it is a fine-tuned stock classifier of the head's kind
(`*ForSequenceClassification` for classify, `*ForTokenClassification` for tag) whose labels are the task's (the
same names; a different order is mapped), reading the student's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import check_finite, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, atomic_dir, claim_dir, copy_file, read_json, save_pretrained
from zh_bert.corpus.tokenizer_files import tokenizer_fingerprint
from zh_bert.train.arch import of_config
from zh_bert.train.objectives.teacher import teacher_facts, teacher_folder
from zh_bert.train.recipe_keys import ObjectiveKeys
from zh_bert.train.weights import load_pretrained


@dataclass
class TaskDistillOptions:
    """`finetune`: a fine-tuned teacher to learn from, and a fine-tuned model to keep as a stock folder."""
    teacher: Optional[str] = option_of(
        ObjectiveKeys, "teacher", help="a fine-tuned stock classifier (classify tasks) or token classifier (NER) of "
                                       "this task, e.g. one `finetune --save` wrote: the student learns its soft "
                                       "labels beside the gold ones (the student's vocabulary, the task's labels)")
    kd_temperature: float = option(8.0, help="--teacher: T of the soft labels, softmax(logits / T), > 0 (8: "
                                             "TextBrewer's task-distillation examples and HFL's MiniRBT; a high T "
                                             "shows the student the teacher's ranking of the wrong classes)")
    kd_alpha: float = option(0.5, help="--teacher: weight of the soft term (times T^2); the gold labels' "
                                       "cross-entropy gets 1 - alpha; in [0, 1] (0.5: both terms alike, so a wrong "
                                       "teacher cannot outvote the gold labels on a small train set; 1 = soft "
                                       "labels only, as TextBrewer's examples; 0 = no teacher, bit for bit)")
    save: Optional[str] = option(None, metavar="DIR", help="write the first seed's dev-chosen model to DIR as a "
                                                           "stock model folder (safetensors, config, tokenizer): "
                                                           "a teacher for --teacher, or a model to publish")

    def __post_init__(self):
        check_finite(self)
        if not self.kd_temperature > 0:
            raise ZhBertError(f"--kd-temperature must be > 0 (softmax(logits / T)), got {self.kd_temperature}")
        if not 0 <= self.kd_alpha <= 1:
            raise ZhBertError(f"--kd-alpha is the soft term's weight in [0, 1], got {self.kd_alpha}")


class HardLabels:
    """No teacher: the cross-entropy of the gold labels, summed (the head divides by its count)."""

    def loss_sum(self, student, labels, run_teacher):
        import torch

        return torch.nn.functional.cross_entropy(student, labels, reduction="sum")

    def facts(self) -> dict:
        return {}


HARD_LABELS = HardLabels()


class Distilled(HardLabels):
    """Soft labels of a frozen teacher at T beside the gold labels (the module docstring's loss), summed."""

    def __init__(self, model, facts: dict, temperature: float, alpha: float, order: list[int]):
        self.model, self._facts, self.temperature, self.alpha, self.order = model, facts, temperature, alpha, order

    def loss_sum(self, student, labels, run_teacher):
        """`student`: the logits (n, classes) the loss is taken on; `run_teacher(model)`: the same rows' logits of
        any model on the head's batch."""
        import torch

        F = torch.nn.functional
        with torch.no_grad():
            teacher = run_teacher(self.model).float()[..., self.order]
        t = self.temperature
        soft = F.kl_div(F.log_softmax(student / t, dim=-1), F.log_softmax(teacher / t, dim=-1), reduction="sum",
                        log_target=True)
        return (1 - self.alpha) * F.cross_entropy(student, labels, reduction="sum") + self.alpha * t * t * soft

    def facts(self) -> dict:
        return {**self._facts, "kd_temperature": self.temperature, "kd_alpha": self.alpha}


def _teacher_labels(config: Record, suffix: str, folder: Path) -> list[str]:
    """The teacher's label names by class index, refused unless it is a fine-tuned stock `*{suffix}`."""
    archs = [a for a in config.list("architectures", []) if isinstance(a, str)]
    if not any(a.endswith(suffix) for a in archs):
        raise ZhBertError(f"--teacher {folder}: not a fine-tuned *{suffix} ({', '.join(archs) or 'no architectures'} "
                          f"in config.json); fine-tune one first, e.g. `zh-bert finetune MODEL --task T --save DIR`")
    names = config.data.get("id2label")
    labels = [names.get(str(i)) for i in range(len(names))] if isinstance(names, dict) else []
    if not labels or any(not isinstance(x, str) for x in labels):
        raise ZhBertError(f"{folder / 'config.json'}: id2label: expected class ids 0..N-1 with label names")
    return labels


def teacher_for(opts: TaskDistillOptions, auto_class: str, labels: list[str], tok, what: str) -> HardLabels:
    """The objective of a run: `HARD_LABELS` without `--teacher`, else the teacher checked (a fine-tuned stock
    model of the head's `auto_class`, its labels against the task's `labels`, its vocabulary against the
    student's tokenizer `tok`) and loaded frozen."""
    if not opts.teacher:
        return HARD_LABELS
    import torch
    import transformers

    suffix = auto_class[len("AutoModel"):]
    folder = teacher_folder(opts.teacher)
    if not (folder / "config.json").is_file():
        raise ZhBertError(f"--teacher {folder}: no config.json: not a model folder")
    config = Record(read_json(folder / "config.json"), str(folder / "config.json"))
    have = _teacher_labels(config, suffix, folder)
    if sorted(have) != sorted(labels):
        missing, extra = sorted(set(labels) - set(have)), sorted(set(have) - set(labels))
        raise ZhBertError(f"--teacher {folder}: its {len(have)} labels are not the {len(labels)} of {what}"
                          + (f" (teacher lacks {', '.join(missing[:5])})" if missing else "")
                          + (f" (teacher has {', '.join(extra[:5])})" if extra else "")
                          + ": give a teacher fine-tuned on this task")
    if tokenizer_fingerprint(folder) != tokenizer_fingerprint(tok):
        raise ZhBertError(f"--teacher {folder}: vocab mismatch: its tokenizer is not the student's; the two must "
                          f"read the same token ids")
    model = load_pretrained(getattr(transformers, auto_class), folder, "a teacher")
    model = model.to("cuda" if torch.cuda.is_available() else "cpu").eval().requires_grad_(False)
    facts = {"teacher": str(folder.resolve()), "teacher_sha256": teacher_facts(opts.teacher)["sha256"]}
    return Distilled(model, facts, opts.kd_temperature, opts.kd_alpha, [have.index(x) for x in labels])


def claim_save(opts: TaskDistillOptions, ckpt_dir: Path) -> Path | None:
    """`--save DIR` claimed before any training: a folder of someone else's is refused."""
    if not opts.save:
        return None
    claim_dir(opts.save, inputs=(ckpt_dir,), flag="--save", what="a model folder zh-bert saved")
    return Path(opts.save)


def save_finetuned(model, tok, ckpt_dir: Path, out: Path, log=print) -> None:
    """The fine-tuned `model` as a stock folder at `out` (replaced whole): weights, config in both transformers
    majors' keys, tokenizer files and the student's own vocab.txt (a tagger's CRF, `--crf`: crf.safetensors beside,
    not in the stock weights)."""
    from zh_bert.evaluation.heads.tag.crf import without_crf

    with atomic_dir(out, overwrite=True) as tmp, without_crf(model, tmp):
        save_pretrained(model, tmp, safe_serialization=True)
        of_config(model.config).save_config(tmp)
        save_pretrained(tok, tmp)
        if (Path(ckpt_dir) / "vocab.txt").is_file():
            copy_file(Path(ckpt_dir) / "vocab.txt", tmp / "vocab.txt")
    log(f"saved the dev-chosen model to {out}")


def distilled_entries(entries: list[dict], summary: dict) -> list[dict]:
    """eval_results entries of a run that learned from a teacher: the teacher (path, sha256) and T, alpha beside
    each figure, and a task name of their own, so a distilled figure never replaces the plain one."""
    facts = {k: summary[k] for k in ("teacher", "teacher_sha256", "kd_temperature", "kd_alpha") if k in summary}
    if not facts:
        return entries
    named = [{**e, "task_name": e["task_name"].replace(" (", ", distilled from a teacher (", 1)
              if " (" in e["task_name"] else e["task_name"] + ", distilled from a teacher"} for e in entries]
    return [{**e, **facts} for e in named]
