"""Distillation's torch side (`objectives.distill.Distill`): the teacher loaded frozen, a student started at
random or from teacher layers, and `DistillModel`, whose forward returns the sums of every loss term.

Both heads run on the masked positions only (as `model.PretrainModel`'s): the teacher's 21k-way projection at
every position would cost more than the rest of a small student's step. The teacher is not a submodule of
`DistillModel`, so nothing the run does to the trained module (the optimizer, `.train()`, Accelerate's
placement and DDP wrapping, checkpoints) reaches it.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.arch import of_config
from zh_bert.train.model import top1_correct
from zh_bert.train.objectives.base import Networks
from zh_bert.train.objectives.teacher import teacher_config, teacher_folder
from zh_bert.train.weights import LAYER_INDEX, load_pretrained

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def load_teacher(recipe, folder: Path):
    """The teacher as a stock masked LM of its family, frozen: eval mode, no gradients (eager attention when the
    attention maps are compared: SDPA returns none)."""
    family = of_config(teacher_config(folder).data)
    kw = {"attn_implementation": "eager"} if recipe.attention_weight > 0 else {}
    teacher = load_pretrained(family.model_class("mlm"), folder, "the teacher", **kw)
    teacher.eval().requires_grad_(False)
    return teacher


def build_networks(objective, recipe, cfg, arch, hf=None) -> Networks:
    """The student (init_from's, fresh, or started from teacher layers) and the frozen teacher."""
    student = hf if hf is not None else arch.model_class(objective.name)(cfg)   # first: seeded as any fresh model
    folder = teacher_folder(recipe.teacher)
    teacher = load_teacher(recipe, folder)
    if teacher.config.vocab_size < student.config.vocab_size:
        raise ZhBertError(f"vocab mismatch: teacher {folder} has {teacher.config.vocab_size} embeddings but its "
                          f"tokenizer {student.config.vocab_size} tokens")
    if recipe.attention_weight > 0:
        student.set_attn_implementation("eager")
    if recipe.student_init == "teacher-layers":
        pairs = objective.layer_pairs(recipe, student.config.num_hidden_layers, teacher.config.num_hidden_layers)
        start_from_teacher(student, teacher, dict(pairs))
    return Networks(student, frozen={"teacher": teacher})


def random_networks(objective, recipe, cfg, arch, teacher_cfg) -> Networks:
    """Student and teacher at random weights, the teacher frozen (`plan --measure`)."""
    student = arch.model_class(objective.name)(cfg)
    teacher = of_config(teacher_cfg).model_class("mlm")(teacher_cfg).eval().requires_grad_(False)
    return Networks(student, frozen={"teacher": teacher})


@torch.no_grad()
def start_from_teacher(student, teacher, layer_of: dict[int, int]) -> None:
    """Copy the teacher's embeddings, head and, for student layer i (1-based), teacher layer `layer_of[i]` into
    the student (same family and widths, checked before). A teacher table with more rows (a padded vocabulary,
    more positions) gives its first rows."""
    own = teacher.state_dict()
    for name, param in student.state_dict().items():
        m = LAYER_INDEX.search(name)
        source = (name[:m.start()] + f".{m[1]}.{layer_of[int(m[2]) + 1] - 1}." + name[m.end():]) if m else name
        value = own.get(source)
        if value is None:
            continue   # ModernBERT's layer 0 has no attention norm: nothing to copy, or to copy into
        if value.shape != param.shape:
            value = value[:param.shape[0]]
        param.copy_(value)


def place_teacher(teacher, device, precision: str) -> None:
    """On the run's device, in the run's half type under bf16/fp16 (the weights once, not cast every step)."""
    teacher.to(device=device, dtype=HALF.get(precision, torch.float32))


def _states(model, arch, input_ids, attention_mask, token_type_ids, hidden: bool, attentions: bool):
    """(hidden states: the embeddings' output then each layer's, attention maps or None) of `model`'s encoder."""
    kw = {"token_type_ids": token_type_ids} if arch.uses_token_types else {}
    out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=hidden,
                           output_attentions=attentions, **kw)
    return (out.hidden_states if hidden else (out[0],)), out.attentions


#: a teacher's soft targets whose mean entropy is above this fraction of ln V are almost uniform: the soft
#: cross-entropy, the term distillation is named after, then carries almost no signal (measured: a teacher of
#: 18% MLM accuracy at T = 8 gives 0.998, and its student agrees with it less than one trained alone)
SIGNAL_GONE = 0.95
#: the temperatures tried, highest first, when naming one that keeps signal
TEMPERATURES = (8.0, 4.0, 2.0, 1.0, 0.5)


@torch.no_grad()
def soft_target_entropy(teacher, batches, temperatures, vocab: int | None = None) -> dict[float, float]:
    """{T: the mean entropy of softmax(teacher logits / T) over the masked positions of `batches`, as a fraction
    of ln V} (V: `vocab`, the student's, else the teacher's). Why a fraction: 1.0 is the uniform distribution
    whatever the vocabulary, so one bound (`SIGNAL_GONE`) serves every teacher."""
    arch = of_config(teacher.config)
    device = next(teacher.parameters()).device
    rows = []
    for batch in batches:
        ids = batch["input_ids"].to(device)
        mask = batch.get("attention_mask")
        types = batch.get("token_type_ids")
        states, _ = _states(teacher, arch, ids, None if mask is None else mask.to(device),
                            None if types is None else types.to(device), False, False)
        pos = (batch["labels"].reshape(-1) != -100).nonzero(as_tuple=True)[0].to(device)
        last = states[-1]
        rows.append(arch.mlm_logits(teacher, last.reshape(-1, last.shape[-1]).index_select(0, pos)).float())
    logits = torch.cat(rows)[:, :vocab] if rows else torch.zeros(0, vocab or teacher.config.vocab_size)
    if not len(logits):
        return {}
    top = math.log(logits.shape[-1])
    out = {}
    for t in temperatures:
        logp = torch.log_softmax(logits / t, dim=-1)
        out[float(t)] = float(-(logp.exp() * logp).sum(-1).mean()) / top
    return out


def signal_temperature(entropy: dict[float, float]) -> float | None:
    """The highest temperature whose soft targets keep signal (entropy below `SIGNAL_GONE`), None if none does."""
    return next((t for t in sorted(entropy, reverse=True) if entropy[t] < SIGNAL_GONE), None)


def entropy_lines(entropy: dict[float, float], temperature: float, vocab: int, where: str) -> tuple[str, str | None]:
    """(the line that states the soft targets' entropy at `temperature`, the warning when it is above
    `SIGNAL_GONE` or None): one wording for the run's first lines, `--print-recipe` and `plan`."""
    h = entropy[float(temperature)]
    line = (f"teacher soft targets at temperature {temperature:g}: entropy {h:.3f} of ln V (V = {vocab:,}; 1 = "
            f"uniform) on {where}")
    if h <= SIGNAL_GONE:
        return line, None
    keep = signal_temperature(entropy)
    fix = (f"temperature: {keep:g} keeps signal (entropy {entropy[keep]:.3f})" if keep is not None else
           f"no temperature down to {min(entropy):g} keeps it: this teacher's top-1 is barely above chance")
    return line, (f"warning: at temperature {temperature:g} the teacher's soft targets are almost uniform "
                  f"(entropy {h:.3f} of ln V > {SIGNAL_GONE}): kd_weight's term carries almost no signal; {fix}")


def first_batches(run, n: int = 2) -> list[dict]:
    """The run's first `n` micro-batches as its loader masks them, from a loader of their own (the run's loader,
    and so a resume, is untouched)."""
    from zh_bert.train.data import ShardLoader

    r = run.recipe
    return list(itertools.islice(iter(ShardLoader(run.train_ds, r.micro_batch, r.masking, r.seed)), n))


def text_batches(tokenizer, texts: list[str], mask_rate: float = 0.15, seq_len: int = 128, seed: int = 0) -> list[dict]:
    """`texts` tokenised (cut at `seq_len`), `mask_rate` of their tokens masked at random with `seed`: what the
    entropy is measured on where no run has batches yet (`--print-recipe`, `plan`)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(0, len(texts), 16):
        enc = tokenizer(texts[i:i + 16], truncation=True, max_length=seq_len, padding=True, return_tensors="pt")
        ids, labels = enc["input_ids"].clone(), torch.full_like(enc["input_ids"], -100)
        special = torch.isin(ids, torch.tensor(sorted(tokenizer.all_special_ids)))
        pick = (torch.rand(ids.shape, generator=g) < mask_rate) & enc["attention_mask"].bool() & ~special
        labels[pick], ids[pick] = ids[pick], tokenizer.mask_token_id
        out.append({"input_ids": ids, "attention_mask": enc["attention_mask"], "labels": labels})
    return out


def entropy_on_text(recipe, folder: Path, texts: list[str], where: str) -> tuple[str, str | None]:
    """`entropy_lines` of the teacher in `folder` at the recipe's temperature (and the ladder below it) on `texts`."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    teacher = load_pretrained(of_config(teacher_config(folder).data).model_class("mlm"), folder, "the teacher").eval()
    tok = load_tokenizer(folder)
    masking = getattr(recipe, "masking", None)      # a recipe's; `plan` gives mask_rate itself
    batches = text_batches(tok, texts, masking.mask_rate if masking is not None else recipe.mask_rate)
    temps = sorted({float(recipe.temperature), *TEMPERATURES}, reverse=True)
    return entropy_lines(soft_target_entropy(teacher, batches, temps, len(tok)), recipe.temperature, len(tok), where)


class DistillModel(nn.Module):
    """Student (`hf`, trained) + teacher (frozen, not a submodule) + one linear projection per hidden-state pair.
    forward returns sums, normalised by the caller over the global batch: `mlm_loss_sum` (the student's
    cross-entropy on the true tokens), `kd_loss_sum` (soft cross-entropy at T, per masked token), `kd_agree`
    (masked positions where the student's top-1 is the teacher's), `hidden_loss_sum` (squared error over the
    teacher's width / that width, per real token, over the pairs), `attention_loss_sum` (squared error summed
    over keys, averaged over heads, per real query token, over the pairs past the embeddings)."""

    def __init__(self, student, teacher, pairs: list[tuple[int, int]], recipe):
        super().__init__()
        self.hf = student
        self.arch, self.teacher_arch = of_config(student.config), of_config(teacher.config)
        object.__setattr__(self, "teacher", teacher)   # not registered: never trained, saved or moved with us
        self.pairs = pairs if recipe.hidden_weight > 0 else []
        self.attention_pairs = [(s, t) for s, t in pairs if s and t] if recipe.attention_weight > 0 else []
        hs, ht = student.config.hidden_size, teacher.config.hidden_size
        linear = recipe.projection == "linear"
        self.projection = nn.ModuleList(nn.Linear(hs, ht) if linear else nn.Identity() for _ in self.pairs)
        self.temperature = recipe.temperature

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                next_sentence_label=None) -> dict[str, torch.Tensor]:
        hidden, attend = bool(self.pairs), bool(self.attention_pairs)
        s_states, s_maps = _states(self.hf, self.arch, input_ids, attention_mask, token_type_ids, hidden, attend)
        flat = labels.reshape(-1)
        pos = (flat != -100).nonzero(as_tuple=True)[0]
        target = flat.index_select(0, pos)
        last = s_states[-1]
        logits = self.arch.mlm_logits(self.hf, last.reshape(-1, last.shape[-1]).index_select(0, pos)).float()
        with torch.no_grad():
            t_states, t_maps = _states(self.teacher, self.teacher_arch, input_ids, attention_mask, token_type_ids,
                                       hidden, attend)
            t_last = t_states[-1]
            t_rows = t_last.reshape(-1, t_last.shape[-1]).index_select(0, pos)
            t_logits = self.teacher_arch.mlm_logits(self.teacher, t_rows).float()[:, :logits.shape[-1]]
            soft = torch.softmax(t_logits / self.temperature, dim=-1)
            t_top = t_logits.argmax(-1)
        real = attention_mask.to(logits.dtype) if attention_mask is not None else None
        return {
            "mlm_loss_sum": F.cross_entropy(logits, target, reduction="sum"),
            "mlm_correct": top1_correct(logits, target),
            "mlm_count": torch.full((), target.numel(), device=logits.device),
            "kd_loss_sum": F.cross_entropy(logits / self.temperature, soft, reduction="sum"),
            "kd_agree": top1_correct(logits, t_top),
            "hidden_loss_sum": self._hidden_loss(s_states, t_states, real, logits),
            "attention_loss_sum": self._attention_loss(s_maps, t_maps, real, logits),
        }

    def _hidden_loss(self, s_states, t_states, real, like):
        total = torch.zeros((), device=like.device)
        for (s, t), project in zip(self.pairs, self.projection):
            want = t_states[t].float()
            err = (project(s_states[s]).float() - want).pow(2).sum(-1) / want.shape[-1]   # (B, L)
            total = total + (err * real).sum() if real is not None else total + err.sum()
        return total

    def _attention_loss(self, s_maps, t_maps, real, like):
        total = torch.zeros((), device=like.device)
        for s, t in self.attention_pairs:
            err = (s_maps[s - 1].float() - t_maps[t - 1].float()).pow(2).sum(-1).mean(1)   # (B, L): keys, heads
            total = total + (err * real).sum() if real is not None else total + err.sum()
        return total
