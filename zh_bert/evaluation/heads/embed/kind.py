"""The embed head kind: `zh-bert finetune CKPT --task stsb|lcqmc|pawsx|pairs:TRAIN,DEV[,TEST]|simcse:FILE[,...]` and
the STS sets under `eval suite --suite sts`.

- `finetune` trains the encoder by a loss (`losses`): SimCSE on the user's text, CoSENT on graded pairs (the default
  for grades), MNRL on positive pairs (the default for 1/0 labels and for triplets with a hard negative). The state
  is chosen on the dev pairs by Spearman (SimCSE chooses nothing), test is scored once; beside it the character
  TF-IDF floor and the checkpoint before training. `--save DIR` writes a sentence-transformers folder (`folder`).
  SimCSE, which has no pairs of its own, is scored on the STS sets' test splits it never saw.
- `eval suite --suite sts` scores the checkpoint as it is (zero-shot, mteb's protocol): the cosine of the pooled,
  L2-normalised vectors of each pair, Spearman against the gold label on test; the TF-IDF floor and the same
  architecture's random init beside. `--seeds` changes nothing but the random init's weights (the first seed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Optional

from zh_bert.core.config import at_least, check_finite, option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.pair_files import PairFile
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_registry import tasks
from zh_bert.corpus.task_spec import FINETUNE_PROTOCOL, Task
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.heads.base import HeadKind, check_count, sha256_of
from zh_bert.evaluation.heads.embed.encoder import encode_texts, load_encoder
from zh_bert.evaluation.heads.embed.folder import card, is_st_folder, save_embedder, st_pooling, st_seq_len
from zh_bert.evaluation.heads.embed.head import EmbedHead
from zh_bert.evaluation.heads.embed.losses import LOSSES
from zh_bert.evaluation.heads.embed.pooling import Pooling, pooling_named
from zh_bert.evaluation.loop import run_seed
from zh_bert.evaluation.metrics.similarity import pair_cosines, spearman, tfidf_cosines
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.tasks.classification import files_of
from zh_bert.evaluation.tasks.pairs import (
    BINARY,
    GRADES,
    PAIRS_PREFIX,
    SIMCSE_PREFIX,
    PairTask,
    SentenceTask,
    load_declared_pairs,
    load_pairs,
    load_sentences,
    reported_sentences,
)
from zh_bert.train.rundir import model_dir

#: SimCSE's dropout (Gao et al. 2021): its two views of a sentence differ by the dropout mask alone
SIMCSE_DROPOUT = 0.1
#: the figures an embedder's result always carries (fractions; None where a split is absent)
SIMILARITY_FIGURES = ("dev_spearman", "test_spearman")


@dataclass
class EmbedOptions:
    """`finetune`'s options of the embed head (its pooling is `--pooling`, its length `--seq-len`)."""
    loss: Optional[Literal["cosent", "mnrl"]] = option(
        None, help="embedder on pairs: cosent (graded or 1/0 labels; only their order counts) or mnrl (positive "
                   "pairs, each other pair's sentence a negative; a third column of text is a hard negative); "
                   "default by the labels: cosent for grades, mnrl for 1/0 labels and triplets (simcse: tasks "
                   "train SimCSE)")
    scale: float = option(20.0, help="embedder: inverse temperature of the cosines in the loss (20 = temperature "
                                     "0.05, SimCSE's; CoSENT's lambda)")
    dropout: Optional[float] = option(None, help="embedder: the encoder's dropout while training (default: 0.1 for "
                                                 "simcse:, whose two views of a sentence differ by it alone; the "
                                                 "checkpoint's own for pairs)")
    min_sentence_chars: int = option(6, help="simcse: sentences shorter than this many characters are dropped "
                                             "(counted)")

    def __post_init__(self):
        check_finite(self)
        at_least(self, 1, "min_sentence_chars")
        if not self.scale > 0:
            raise ZhBertError(f"--scale must be > 0 (the cosines are multiplied by it), got {self.scale}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ZhBertError(f"--dropout is a probability in [0, 1), got {self.dropout}")


def pair_tasks() -> list[Task]:
    """The declared tasks read as sentence pairs (the STS sets)."""
    return [t for t in tasks() if isinstance(t.reader, PairFile)]


def checkpoint_pooling(ckpt_dir: Path, cfg) -> Pooling:
    """`--pooling`, else a sentence-transformers folder's own, else mean."""
    if cfg.pooling in (None, "auto") and is_st_folder(ckpt_dir):
        return st_pooling(ckpt_dir)
    return pooling_named(cfg.pooling)


def checkpoint_seq_len(ckpt_dir: Path, seq_len: int) -> int:
    """The length a checkpoint is encoded at as it is: a sentence-transformers folder's own max length (as
    `SentenceTransformer(DIR)` encodes it), else `--seq-len`."""
    return st_seq_len(ckpt_dir) or seq_len


def score_pairs(model, tok, pairs, pooling: Pooling, seq_len: int, precision: str) -> tuple[float, list[float], int]:
    """(Spearman of the pairs' cosines, the cosines, texts cut at `seq_len`): each distinct sentence encoded once."""
    texts = list(dict.fromkeys(t for p in pairs for t in (p.a, p.b)))
    vecs, cut = encode_texts(model, tok, texts, pooling, seq_len, precision)
    at = {t: i for i, t in enumerate(texts)}
    cos = pair_cosines(vecs[[at[p.a] for p in pairs]], vecs[[at[p.b] for p in pairs]])
    return spearman([p.label for p in pairs], cos), [round(float(c), 6) for c in cos], cut


def tfidf_spearman(pairs) -> float:
    return spearman([p.label for p in pairs], tfidf_cosines([p.a for p in pairs], [p.b for p in pairs]))


class EmbedKind(HeadKind):
    """Sentence embeddings: pooled, L2-normalised vectors compared by cosine (see the module docstring)."""
    name, what, chooses, choose_key = "embed", "a sentence embedder", False, "dev_spearman"
    finetune_options = (EmbedOptions,)
    prefixes = (PAIRS_PREFIX, SIMCSE_PREFIX)

    # --------------------------------------------------------------- finetune
    def load(self, spec: str, job, opts: dict) -> PairTask | SentenceTask:
        eo = opts[EmbedOptions]
        if spec.startswith(SIMCSE_PREFIX):
            if eo.loss:
                raise ZhBertError(f"--loss {eo.loss}: simcse: trains SimCSE on the sentences alone; --loss chooses "
                                  f"the loss of pairs (pairs:, stsb, lcqmc, pawsx)")
            data = load_sentences(spec, eo.min_sentence_chars, reported_sentences(pair_tasks()))
            data.sets = {t.name: load_declared_pairs(t).test for t in pair_tasks()}   # scored after training
            return data
        if spec.startswith(PAIRS_PREFIX):
            data = load_pairs(spec, triplets=eo.loss != "cosent")
        else:
            data = load_declared_pairs(self.declared(spec))
        data.loss = loss = eo.loss or ("cosent" if data.labels == GRADES else "mnrl")
        if loss == "mnrl" and data.labels == GRADES:
            raise ZhBertError(f"--loss mnrl: the train pairs of task {data.name} are graded; mnrl learns from "
                              f"positive pairs (1/0 labels, or triplets with a hard negative): use --loss cosent")
        return data

    def check_data(self, data, cfg) -> None:
        """One line, before any model loads, when the training items cannot fill what a contrastive batch needs:
        SimCSE one whole batch (the other sentences are each one's negatives), pairs at least two."""
        simcse = isinstance(data, SentenceTask)
        positives = not simcse and LOSSES[data.loss].positives_only
        n = len(data.sentences) if simcse else sum(1 for p in data.train if not positives or p.label is None or p.label > 0)
        need = cfg.batch_size if simcse else 2
        if n < need:
            what = "sentences" if simcse else ("positive (label 1) train pairs" if positives else "train pairs")
            raise ZhBertError(f"task {data.name}: {n} {what}, fewer than one batch needs ({need}: the other items of a "
                              f"batch are each one's negatives)")

    def header(self, data) -> tuple[str, list[str], list[str]]:
        if isinstance(data, SentenceTask):
            return f"task {data.name} (SimCSE): {len(data.sentences):,} sentences", data.notes, data.warnings
        kinds = {GRADES: "graded", BINARY: "1/0 labels"}.get(data.labels, "triplets with hard negatives")
        return (f"task {data.name}: {len(data.train):,} train / {len(data.dev or []):,} dev / "
                f"{len(data.test or []):,} test pairs ({kinds})", data.notes, data.warnings)

    def check_save(self, ckpt_dir: Path, cfg, opts: dict):
        pooling = checkpoint_pooling(ckpt_dir, cfg)
        if pooling.st_config(1) is None:
            raise ZhBertError(f"--save with --pooling {pooling.name}: sentence-transformers has no such pooling; "
                              f"train with --pooling mean or cls to save")
        return cfg

    def run(self, ckpt_dir, data, cfg, opts, seeds, log=print, tok=None, objective=None, keep=None) -> Result:
        eo = opts[EmbedOptions]
        loss = data.loss
        dropout = eo.dropout if eo.dropout is not None else (SIMCSE_DROPOUT if loss == "simcse" else None)
        pooling = checkpoint_pooling(ckpt_dir, cfg)
        tok = tok or load_tokenizer(ckpt_dir)
        head = EmbedHead(ckpt_dir, data, cfg, tok, pooling, LOSSES[loss], eo.scale, dropout)
        if head.table.cut:
            log(f"note: {head.table.cut:,} texts are longer than --seq-len {cfg.seq_len} tokens: cut there")
        log(f"embedder: {loss} loss, {pooling.name} pooling, scale {eo.scale:g}, dropout "
            f"{'as the checkpoint' if dropout is None else dropout}")
        runs, first = [], None
        for seed in seeds:
            r = run_seed(head, cfg, seed, log=log, keep=None if runs else keep)
            log(f"seed {seed}: " + ", ".join(f"{k.replace('_', ' ')} {100 * v:.2f}" for k, v in r.items()
                                            if k.endswith("spearman")) + f" ({r['train_s']} s)")
            pred = r.pop("test_pred", None)
            first = pred if first is None else first
            runs.append(r)
        facts = {"checkpoint": str(ckpt_dir), "loss": loss, "pooling": pooling.name, "scale": eo.scale,
                 "dropout": dropout, "seq_len": cfg.seq_len, "texts_cut": head.table.cut, "notes": data.notes,
                 "warnings": data.warnings, **self.floor_facts(ckpt_dir, data, cfg, tok, pooling, seeds[0])}
        return Result(data.name, cfg.random_init, seeds, runs, facts, SIMILARITY_FIGURES, first)

    def floor_facts(self, ckpt_dir, data, cfg, tok, pooling, seed: int) -> dict:
        """On the reported split (pairs with a test): the TF-IDF floor, and the model before training (the
        checkpoint, or under `--random-init` the same random weights the first seed trains from)."""
        import torch

        if isinstance(data, SentenceTask) or not data.test:
            return {}
        torch.manual_seed(seed)
        model = load_encoder(ckpt_dir, tok, cfg.seq_len, cfg.random_init)
        start, _, _ = score_pairs(model, tok, data.test, pooling, cfg.seq_len,
                                  resolve_precision(cfg.precision, model.device)[0])
        return {"tfidf_test_spearman": tfidf_spearman(data.test), "untrained_test_spearman": start}

    def save(self, model, tok, ckpt_dir: Path, out: Path, cfg, data, opts: dict, result: Result | None = None) -> None:
        pooling = checkpoint_pooling(ckpt_dir, cfg)
        summary = result.summary() if result else {}
        trained = (f"{summary.get('loss', 'trained')} on {data.name}" if summary else f"trained on {data.name}")
        rows = self.card_rows(data, summary)
        save_embedder(model, tok, ckpt_dir, out, pooling, cfg.seq_len,
                      card(out.name, str(ckpt_dir), pooling, cfg.seq_len, trained, rows))

    def card_rows(self, data, summary: dict) -> list[dict]:
        """The card's model-index rows: the test Spearman of a pair task (a declared set's MTEB names, the user's
        files as `pairs`), or SimCSE's on each set it was scored on."""
        if isinstance(data, SentenceTask):
            return [{"dataset_type": t.dataset[0], "dataset_name": t.dataset[1], "split": t.report_name,
                     "value": 100 * summary[f"{t.name}_test_spearman"]} for t in pair_tasks()
                    if summary.get(f"{t.name}_test_spearman") is not None]
        if summary.get("test_spearman") is None:
            return []
        dtype, dname = data.task.dataset if data.task else ("pairs", data.name)
        split = data.task.report_name if data.task else "test"
        return [{"dataset_type": dtype, "dataset_name": dname, "split": split, "value": 100 * summary["test_spearman"]}]

    def entries(self, result: Result, spec: str, data, opts: dict) -> list[dict]:
        """Test Spearman (x100, the metric's unit) of a pair task: a declared task's dataset, the user's
        (`pairs`) otherwise; under the fine-tuning protocol, so it never takes the zero-shot board column."""
        summary = result.summary()
        if isinstance(data, SentenceTask) or summary.get("test_spearman") is None:
            return []
        task = data.task
        n = len(result.seeds)
        name = f"Sentence similarity ({summary['loss']}, trained on {data.name}" + (
            f", mean of {n} seeds)" if n > 1 else ")")
        dtype, dname = task.dataset if task else ("pairs", data.name)
        split = task.report_name if task else "test"
        return [entry("STS", name, dtype, dname, "cosine_spearman", f"{split} cosine_spearman",
                      100 * summary["test_spearman"], protocol=FINETUNE_PROTOCOL, split=split, method="finetune",
                      trained_on=data.name)]

    # --------------------------------------------------------------- eval suite
    def method(self, method: str) -> str:
        return "zero-shot"

    def recorded_method(self, method: str) -> str:
        return "zero-shot"

    def data(self, task: Task, opts: dict) -> dict:
        test_file = files_of(task, task.splits)[-1]
        return {"test": task.reader.read(test_file), "data_sha256": sha256_of([test_file])}

    def fixed(self, ckpt, task: Task, cfg, opts: dict, data: dict, seeds: list[int], log=print) -> Result:
        """The checkpoint as it is on the test pairs (random weights of its config under `cfg.random_init`, seeded
        by the first seed); the TF-IDF floor and, for the pretrained model, the random init beside."""
        import torch

        folder = model_dir(ckpt)
        tok = load_tokenizer(folder)
        pooling = checkpoint_pooling(folder, cfg)
        cfg = replace(cfg, seq_len=checkpoint_seq_len(folder, cfg.seq_len))
        torch.manual_seed(seeds[0])
        model = load_encoder(folder, tok, cfg.seq_len, cfg.random_init)
        precision = resolve_precision(cfg.precision, model.device)[0]
        rho, cos, cut = score_pairs(model, tok, data["test"], pooling, cfg.seq_len, precision)
        facts = {"checkpoint": str(folder), "method": "zero-shot", "pooling": pooling.name, "seq_len": cfg.seq_len,
                 "texts_cut": cut, "n_test": len(data["test"]), "data_sha256": data["data_sha256"],
                 "reported_split": task.report_name, "tfidf_spearman": tfidf_spearman(data["test"])}
        if not cfg.random_init:
            torch.manual_seed(seeds[0])
            random = load_encoder(folder, tok, cfg.seq_len, True)
            facts["random_init_spearman"] = score_pairs(random, tok, data["test"], pooling, cfg.seq_len,
                                                        precision)[0]
        log(f"  {task.name}: test Spearman {100 * rho:.2f} (character TF-IDF {100 * facts['tfidf_spearman']:.2f}"
            + (f", random init {100 * facts['random_init_spearman']:.2f})" if "random_init_spearman" in facts else ")"))
        return Result(task.name, cfg.random_init, seeds[:1], [{"seed": seeds[0], "test_spearman": rho}], facts,
                      ("test_spearman",), cos)

    def ran(self, task: Task, summary: dict) -> str:
        return (f"scored as it is (no training): cosine of the {summary['pooling']}-pooled, L2-normalised vectors, "
                f"reported on {task.report_name} ({summary['n_test']:,} pairs)")

    def floors(self, task: Task) -> list[tuple[str, str]]:
        return [("character TF-IDF", "tfidf_spearman"), ("random init", "random_init_spearman")]

    def chance(self, task: Task) -> tuple[float, str]:
        return 0.0, "no correlation"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id": line number, "score": cosine} per test pair, in file order."""
        pairs = task.reader.read(task_data_dir(task.folder) / task.splits.report)
        check_count(task, predicted, pairs)
        return [{"id": i, "score": c} for i, c in enumerate(predicted)]


EMBED_HEAD = EmbedKind()
