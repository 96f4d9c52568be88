"""Distillation's torch side (`objectives.distill.Distill`): the teacher loaded frozen, a student started at
random or from teacher layers, and `DistillModel`, whose forward returns the sums of every loss term.

Both heads run on the masked positions only (as `model.PretrainModel`'s): the teacher's 21k-way projection at
every position would cost more than the rest of a small student's step. The teacher is not a submodule of
`DistillModel`, so nothing the run does to the trained module (the optimizer, `.train()`, Accelerate's
placement and DDP wrapping, checkpoints) reaches it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zh_bert.core.errors import ZhBertError
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
