"""A linear-chain CRF over a token classifier's emissions (`finetune --task ner --crf`, `eval suite --suite ner
--crf`): start, transition and end scores learned with the classifier, the negative log-likelihood of the gold
tags instead of per-character cross-entropy, Viterbi decoding instead of a per-character argmax.

Why: a softmax per character cannot see its neighbours' tags, so it writes spans its own scheme forbids (`O I-X`,
`B-X E-Y`), which the entity reader then cuts or splits. On Resume with the main command's checkpoint the CRF
decoded freely raised test entity F1 from 77.66 to 82.04, and kept to the scheme's transitions to 92.09 (what
`--crf` does); the stock head's own logits under the same constraint give 92.06 (`bench/ner_crf.py`,
docs/results.md): the constraint carries the gain.

The chain runs over the labelled positions only (the first sub-token of each character, `tagging.encode`), taken
from the classifier's logits and left-aligned, with a mask of real positions: in training one chain per row (a
window of a long sentence is its own chain), in prediction one chain per sentence, each character's emission taken
from the window it is predicted from. Decoding may forbid what the tag scheme forbids (`Scheme.follows`: `O` →
`I-X`, `B-X` → `I-Y`, a BIOES span left open at the end); `scheme_constraint` builds those masks.

Saved beside a stock `*ForTokenClassification` folder as `crf.safetensors` (three tensors, `start` [C],
`transitions` [C, C] from-row to-column, `end` [C], C the folder's `num_labels`, in its `id2label` order): the
folder itself stays stock (its argmax still gives tags without the CRF), and `load_crf` reads the file back as
tensors only, every name and shape checked, anything else one line naming the file.

The same decoding serves the stock head (`--decode constrained`, `scheme_tags`): a CRF of zero scores, constrained,
over the softmax log-probabilities, so the best path the scheme allows by the head's own per-character
probabilities, with no parameter added and one Viterbi for both.

This is the torch side; `ner_finetune` imports it when a run asks for the CRF or constrained decoding.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import save_safetensors
from zh_bert.evaluation.length_groups import length_groups
from zh_bert.evaluation.tasks.tag_schemes import OUTSIDE, Scheme, detect_scheme, split_tag
from zh_bert.evaluation.step import precision_autocast
from zh_bert.evaluation.heads.tag.tagging import IGNORED, Windows, collate_rows

CRF_FILE = "crf.safetensors"
CRF_ATTR = "crf"          # the CRF rides on the classifier as this submodule: one optimizer, one snapshot
#: the score a forbidden transition gets in constrained decoding: finite (no inf - inf), far below any path's score
FORBIDDEN = -1e4
#: a crf.safetensors holds three small tensors; a larger file is not one
MAX_CRF_BYTES = 64 << 20


class LinearChainCRF(nn.Module):
    """Start, transition and end scores over `n_tags` tags. Every method takes emissions `em` [B, L, C] and a
    mask [B, L] of real positions, left-aligned, each row with at least one."""

    def __init__(self, n_tags: int):
        super().__init__()
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))
        for name, shape in (("banned_start", (n_tags,)), ("banned_transitions", (n_tags, n_tags)),
                            ("banned_end", (n_tags,))):      # 0 or FORBIDDEN; not saved: the scheme rebuilds them
            self.register_buffer(name, torch.zeros(shape), persistent=False)

    @property
    def n_tags(self) -> int:
        return self.start.shape[0]

    def constrain(self, masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> "LinearChainCRF":
        """Forbid in decoding what `masks` (`scheme_constraint`: allowed start, transition, end) forbid; None
        lifts the constraint."""
        for buf, allowed in zip((self.banned_start, self.banned_transitions, self.banned_end), masks or (None,) * 3):
            buf.copy_(torch.zeros_like(buf) if allowed is None else
                      torch.where(allowed.to(buf.device), 0.0, FORBIDDEN).to(buf.dtype))
        return self

    def log_partition(self, em: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Σ over all tag paths of exp(score), per row [B] (the forward algorithm)."""
        alpha = self.start + em[:, 0]
        for t in range(1, em.shape[1]):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + em[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t].unsqueeze(1).bool(), nxt, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def path_score(self, em: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The score of the tag path `tags` [B, L] (values at masked positions ignored), per row [B]."""
        m = mask.to(em.dtype)
        tags = tags * mask.long()
        emitted = em.gather(2, tags.unsqueeze(2)).squeeze(2)
        score = self.start[tags[:, 0]] + (emitted * m).sum(1)
        score = score + (self.transitions[tags[:, :-1], tags[:, 1:]] * m[:, 1:]).sum(1)
        last = tags.gather(1, (mask.long().sum(1) - 1).unsqueeze(1)).squeeze(1)
        return score + self.end[last]

    def nll(self, em: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood of the gold paths, summed over rows."""
        return (self.log_partition(em, mask) - self.path_score(em, tags, mask)).sum()

    def decode(self, em: torch.Tensor, mask: torch.Tensor, constrained: bool = True) -> list[list[int]]:
        """Each row's best tag path (Viterbi) over its real positions; `constrained`: forbidden transitions
        (`constrain`) are never taken."""
        start, trans, end = self.start, self.transitions, self.end
        if constrained:
            start, trans, end = start + self.banned_start, trans + self.banned_transitions, end + self.banned_end
        score, back = start + em[:, 0], []
        for t in range(1, em.shape[1]):
            best, idx = (score.unsqueeze(2) + trans).max(1)
            back.append(idx)
            score = torch.where(mask[:, t].unsqueeze(1).bool(), best + em[:, t], score)
        lengths = mask.long().sum(1)
        cur = (score + end).argmax(1)
        path = torch.zeros(mask.shape, dtype=torch.long, device=em.device)
        for t in range(em.shape[1] - 1, -1, -1):
            real = t < lengths
            path[:, t] = torch.where(real, cur, 0)
            if t:
                cur = torch.where(real, back[t - 1].gather(1, cur.unsqueeze(1)).squeeze(1), cur)
        return [row[:n].tolist() for row, n in zip(path.cpu(), lengths.tolist())]


def scheme_constraint(labels: list[str], scheme: Scheme) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(allowed start [C], allowed transition [C, C] from-row to-column, allowed end [C]) of `labels` under
    `scheme`: a sentence starts and ends as if after and before O (`Scheme.follows`)."""
    start = torch.tensor([scheme.follows(OUTSIDE, t) for t in labels])
    trans = torch.tensor([[scheme.follows(a, b) for b in labels] for a in labels])
    end = torch.tensor([scheme.follows(t, OUTSIDE) for t in labels])
    return start, trans, end


def attach_crf(model, n_tags: int) -> LinearChainCRF:
    """A fresh CRF as the classifier's submodule `CRF_ATTR`, on its device: the loop's optimizer, schedule,
    snapshot and restore of the best dev state then cover both."""
    crf = LinearChainCRF(n_tags).to(model.device)
    model.add_module(CRF_ATTR, crf)
    return crf


def crf_of(model) -> LinearChainCRF | None:
    return getattr(model, CRF_ATTR, None)


def gather_labelled(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(emissions [R, W, C], gold [R, W], mask [R, W]) at the labelled positions of each row of `logits`
    [B, T, C] / `labels` [B, T] (IGNORED elsewhere), left-aligned; rows without a labelled position dropped."""
    keep = labels != IGNORED
    counts = keep.sum(1)
    rows = counts > 0
    keep, labels, logits, counts = keep[rows], labels[rows], logits[rows], counts[rows]
    width = int(counts.max()) if len(counts) else 0
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :width]   # labelled positions first
    mask = torch.arange(width, device=labels.device).unsqueeze(0) < counts.unsqueeze(1)
    em = logits.gather(1, order.unsqueeze(2).expand(-1, -1, logits.shape[-1]))
    gold = torch.where(mask, labels.gather(1, order), 0)
    return em, gold, mask


def crf_loss(model, batch: dict, denominator: int) -> torch.Tensor:
    """The CRF's negative log-likelihood of `batch`'s rows (one chain per row over its labelled positions), summed
    and divided by `denominator` (the labelled positions of the whole step, as `tagging.tag_loss` divides its
    cross-entropy)."""
    labels = batch.pop("labels")
    em, gold, mask = gather_labelled(model(**batch).logits.float(), labels)
    if not len(em):
        return em.sum()
    return crf_of(model).nll(em, gold, mask) / max(denominator, 1)


def row_logits(model, rows: Windows, batch_size: int, pad_id: int, precision: str,
               log_probs: bool = False) -> list[torch.Tensor]:
    """Every row's logits [length, C] (fp32, on the CPU; `log_probs`: their log-softmax), windows run in groups of
    similar length."""
    out: list[torch.Tensor] = [torch.zeros(0)] * len(rows.input_ids)
    with torch.inference_mode(), precision_autocast(model.device, precision):
        for idx in length_groups(rows.lengths, batch_size):
            batch = collate_rows(rows, idx, pad_id)
            batch.pop("labels")
            logits = model(**{k: v.to(model.device) for k, v in batch.items()}).logits.float().cpu()
            logits = torch.log_softmax(logits, dim=-1) if log_probs else logits
            for r, i in enumerate(idx):
                out[i] = logits[r, :rows.lengths[i]]
    return out


def crf_tags(model, rows: Windows, labels: list[str], batch_size: int, pad_id: int, precision: str,
             constrained: bool = True, crf: LinearChainCRF | None = None,
             log_probs: bool = False) -> list[list[str]]:
    """Each sentence's tags by Viterbi of `crf` (default: the model's own) over its characters' emissions, the
    logits or (`log_probs`) their log-softmax, each from the window it is predicted from; a character without a
    token is O and outside the chain."""
    was_training = model.training
    model.eval()
    logits = row_logits(model, rows, batch_size, pad_id, precision, log_probs)
    model.train(was_training)
    flat = torch.cat(logits) if logits else torch.zeros(0, len(labels))
    offsets = np.concatenate(([0], np.cumsum(rows.lengths)[:-1])).astype(np.int64)
    crf, out = crf if crf is not None else crf_of(model), [[OUTSIDE] * len(where) for where in rows.where]
    chains = [(s, np.flatnonzero(where[:, 0] >= 0)) for s, where in enumerate(rows.where)]
    chains = sorted(((s, chars) for s, chars in chains if len(chars)), key=lambda c: len(c[1]))
    with torch.inference_mode():
        for b in range(0, len(chains), batch_size):
            part = chains[b:b + batch_size]
            at = np.zeros((len(part), len(part[-1][1])), dtype=np.int64)   # row of `flat` of each character
            mask = torch.zeros(at.shape, dtype=torch.bool)
            for r, (s, chars) in enumerate(part):
                where = rows.where[s][chars]
                at[r, :len(chars)] = offsets[where[:, 0]] + where[:, 1]
                mask[r, :len(chars)] = True
            em = flat[torch.from_numpy(at)].to(crf.start.device)
            for (s, chars), path in zip(part, crf.decode(em, mask.to(em.device), constrained)):
                for c, tag in zip(chars, path):
                    out[s][c] = labels[tag]
    return out


def scheme_tags(model, rows: Windows, labels: list[str], scheme: Scheme, batch_size: int, pad_id: int,
                precision: str) -> list[list[str]]:
    """The stock head's tags decoded kept to `scheme` (`--decode constrained`): each sentence's best path by the
    sum of its characters' softmax log-probabilities among the paths the scheme allows, a zero-score CRF's
    constrained Viterbi. Where the per-character argmax already follows the scheme it is that path."""
    crf = LinearChainCRF(len(labels)).requires_grad_(False).constrain(scheme_constraint(labels, scheme))
    return crf_tags(model, rows, labels, batch_size, pad_id, precision, crf=crf, log_probs=True)


def save_crf(crf: LinearChainCRF, folder: str | Path) -> None:
    """`folder/crf.safetensors`: start, transitions and end, fp32, beside the stock classifier's files."""
    tensors = {name: getattr(crf, name).detach().float().cpu().contiguous() for name in ("start", "transitions", "end")}
    save_safetensors(tensors, Path(folder) / CRF_FILE, metadata={"format": "pt"})


@contextmanager
def without_crf(model, folder: str | Path) -> Iterator[None]:
    """While a fine-tuned tagger is saved (`finetune --save`): the model without its CRF, so its folder is a stock
    `*ForTokenClassification`, and on success the CRF written beside it (`save_crf`); a model without one as is."""
    crf = crf_of(model)
    if crf is None:
        yield
        return
    delattr(model, CRF_ATTR)
    try:
        yield
    finally:
        model.add_module(CRF_ATTR, crf)
    save_crf(crf, folder)


def load_crf(folder: str | Path, n_tags: int, labels: list[str] | None = None) -> LinearChainCRF:
    """The CRF saved beside a classifier of `n_tags` labels (`save_crf`), read as tensors only: exactly
    `start` [C], `transitions` [C, C], `end` [C], finite; anything else is one line naming the file. With the
    classifier's `labels` (its id2label in order), decoding is kept to their scheme, as in training."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(folder) / CRF_FILE
    if not path.is_file():
        raise ZhBertError(f"{path}: no CRF beside this model (a folder fine-tuned with --crf has one)")
    if path.stat().st_size > MAX_CRF_BYTES:
        raise ZhBertError(f"{path}: {path.stat().st_size:,} bytes, more than a CRF's three tensors")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ZhBertError(f"{path}: not a safetensors file ({str(e).splitlines()[0][:120] if str(e) else e!r})") \
            from None
    crf = LinearChainCRF(n_tags)
    want = {name: tuple(p.shape) for name, p in crf.named_parameters()}
    if set(tensors) != set(want):
        raise ZhBertError(f"{path}: expected the tensors {sorted(want)}, found {sorted(tensors)[:8]} (missing "
                          f"{sorted(set(want) - set(tensors))}, extra {sorted(set(tensors) - set(want))[:4]})")
    for name, shape in want.items():
        t = tensors[name]
        if tuple(t.shape) != shape or not t.is_floating_point():
            raise ZhBertError(f"{path}: tensor {name!r} is {t.dtype} {list(t.shape)}, expected a float tensor of "
                              f"shape {list(shape)} ({n_tags} tags)")
        if not torch.isfinite(t).all():
            raise ZhBertError(f"{path}: tensor {name!r} holds non-finite values")
    with torch.no_grad():
        for name, p in crf.named_parameters():
            p.copy_(tensors[name].float())
    if labels is not None:
        if len(labels) != n_tags:
            raise ZhBertError(f"{path}: {len(labels)} labels for a CRF of {n_tags} tags")
        prefixes = {split_tag(t)[0] for t in labels if t != OUTSIDE}
        crf.constrain(scheme_constraint(labels, detect_scheme(prefixes, str(path))))
    return crf
