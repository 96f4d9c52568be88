"""Distillation defaults, measured: a student distilled from the main command's checkpoint against the same student
trained alone on the same tokens, at a short and a longer budget, several seeds, held-out text in and out of the
training domain.

The run is `recipes/distill-tiny-cpu.yaml` (teacher `runs/tiny-cpu`, student L2/H64, the bundled corpus) with
`max_steps` and `seed` set, and each variant's keys on top; "scratch" is the same recipe as `objective: mlm`
without the teacher (the recipe's own comparison). Each final student is scored on
  - in-domain: the held-out split of the shards the run trained on (its own masking, the teacher's recipe, 25%),
  - out-of-domain: the articles of PRC laws in tests/data/zh_law_articles (15% of the tokens masked at random
    with a fixed seed, each article cut at 128 tokens),
by top-1 agreement with the teacher and masked-LM accuracy on the true tokens, at the same masked positions for
every student. The teacher's soft-target entropy at each variant's temperature is printed beside (a fraction of
ln V: 1.0 is uniform).

    python -m bench.distill_defaults                                   # 400 steps, 3 seeds, every variant
    python -m bench.distill_defaults --steps 2000 --variants defaults --variants scratch
    python -m bench.distill_defaults --quick     # a random teacher, 8 steps on 5,000 lines: a smoke test
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import at_least, option
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import atomic_dir, copy_file, parse_json_line, read_text, save_pretrained

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "distill-tiny-cpu.yaml"
TEACHER = REPO / "runs" / "tiny-cpu" / "final"
LAW = REPO / "tests" / "data" / "zh_law_articles" / "articles.jsonl"
#: what each variant sets on the recipe (defaults: the recipe keys' defaults)
VARIANTS = {
    "defaults": [],
    "minirbt-t8": ["temperature=8", "mlm_weight=0"],
    "t1-kd-only": ["temperature=1", "mlm_weight=0"],
    "t1-mlm1": ["temperature=1", "mlm_weight=1"],
    "t1-mlm0.4": ["temperature=1", "mlm_weight=0.4"],
    "t2-mlm1": ["temperature=2", "mlm_weight=1"],
    "scratch": ["objective=mlm", "teacher=null", f"tokenizer={TEACHER}"],
}


QUICK_DATA = REPO / "corpora" / "sample" / "CLUECorpusSmall_5000_lines_bert.txt"
VOCAB = REPO / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"


@dataclass
class Options:
    steps: list[int] = option(default_factory=list, action="append", help="max_steps per run (default 400)")
    seeds: int = option(3, help="seeds 1..N")
    variants: list[str] = option(default_factory=list, action="append",
                                 help=f"of {', '.join(VARIANTS)} (default: all)")
    out: str = option("/tmp/distill_defaults", help="where the runs go (a run already there is scored, not rerun)")
    quick: bool = option(False, help="a random tiny teacher with Google's vocab, 8 steps of the defaults and scratch "
                                     "on 5,000 lines, one seed: a smoke test whose figures mean nothing")

    def __post_init__(self):
        at_least(self, 1, "seeds")
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ZhBertError(f"--variants {unknown[0]}: not a variant{suggest(unknown[0], VARIANTS)}; one of "
                              f"{', '.join(VARIANTS)}")
        if self.quick:
            self.steps, self.seeds, self.variants = [8], 1, ["defaults", "scratch"]


def train(variant: str, steps: int, seed: int, root: Path, teacher: Path, extra: list[str]) -> Path:
    out = root / f"{variant}-{steps}-{seed}"
    if not (out / "final" / "model.safetensors").exists():
        keys = [k.replace(str(TEACHER), str(teacher)) for k in VARIANTS[variant]]
        sets = [f"out_dir={out}", f"max_steps={steps}", f"seed={seed}", "save_every=0", "eval_every=0",
                f"log_every={max(steps // 4, 1)}", *extra, *keys]
        cmd = [sys.executable, "-m", "zh_bert.cli", "pretrain", str(RECIPE)] + [a for s in sets for a in ("--set", s)]
        subprocess.run(cmd, check=True, cwd=REPO)
    return out / "final"


def held_out_batches(tok, data: Path) -> dict[str, list[dict]]:
    """The masked batches every student is scored on: in-domain (the shards' valid split) and the law articles."""
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig
    from zh_bert.train.objectives.distill_net import text_batches

    ds = ShardDataset(data, "valid")
    loader = ShardLoader(ds, 16, MaskingConfig(strategy="wwm", mask_rate=0.25), seed=1234, shuffle=False)
    n = (len(ds) + 15) // 16
    inside = list(itertools.islice(iter(loader), n))
    texts = [parse_json_line(line, LAW, i + 1)["text"] for i, line in enumerate(read_text(LAW).splitlines())]
    outside = text_batches(tok, texts, mask_rate=0.15, seq_len=128, seed=1234)
    return {"in-domain": inside, "law (out-of-domain)": outside}


@torch.no_grad()
def top1(model, batches) -> list[torch.Tensor]:
    out = []
    for b in batches:
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        out.append(logits[b["labels"] != -100].argmax(-1))
    return out


def score(student_dir: Path, teacher_top: dict, batches: dict) -> dict[str, tuple[float, float]]:
    """{domain: (agreement with the teacher's top-1, accuracy on the true tokens)}."""
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(student_dir).eval()
    res = {}
    for domain, bs in batches.items():
        picks = top1(model, bs)
        truth = [b["labels"][b["labels"] != -100] for b in bs]
        n = sum(len(t) for t in truth)
        res[domain] = (sum(int((p == t).sum()) for p, t in zip(picks, teacher_top[domain])) / n,
                       sum(int((p == t).sum()) for p, t in zip(picks, truth)) / n)
    return res


def main(argv=None) -> int:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from zh_bert.train.objectives.distill_net import soft_target_entropy

    args = parse(Options, "distill_defaults", __doc__, argv)
    steps, variants = args.steps or [400], args.variants or list(VARIANTS)
    root = Path(args.out) / ("quick" if args.quick else "")
    root.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    where, extra = (random_teacher(root), [f"data={QUICK_DATA}", "seq_len=64", "valid_docs=20"]) if args.quick \
        else (TEACHER, [])
    extra += [f"teacher={where}"] if args.quick else []
    tok = AutoTokenizer.from_pretrained(where)
    teacher = AutoModelForMaskedLM.from_pretrained(where).eval()
    first = train(variants[0], steps[0], 1, root, where, extra)
    data = next(first.parent.glob("data/*/shards")) if args.quick else next((REPO / "runs" / "tiny-cpu" / "data").glob("*/shards"))
    batches = held_out_batches(tok, data)
    teacher_top = {d: top1(teacher, bs) for d, bs in batches.items()}
    temps = {v: float(dict(s.split("=") for s in VARIANTS[v] if s.startswith("temperature")).get("temperature", 0)
                       or _default_t()) for v in variants if v != "scratch"}
    entropy = soft_target_entropy(teacher, batches["in-domain"], sorted(set(temps.values())))
    print(f"# {time.strftime('%Y-%m-%d')}, {machine()}; teacher {TEACHER}; in-domain "
          f"{sum(int((b['labels'] != -100).sum()) for b in batches['in-domain']):,} masked positions, law "
          f"{sum(int((b['labels'] != -100).sum()) for b in batches['law (out-of-domain)']):,}")
    rows = []
    for s, v in itertools.product(steps, variants):
        got = [score(train(v, s, seed, root, where, extra), teacher_top, batches) for seed in range(1, args.seeds + 1)]
        cells = []
        for d in batches:
            agree, acc = np.array([g[d][0] for g in got]), np.array([g[d][1] for g in got])
            cells += [f"{agree.mean():.3f} ± {agree.std():.3f}", f"{acc.mean():.3f} ± {acc.std():.3f}"]
        h = f"{entropy[temps[v]]:.3f} (T = {temps[v]:g})" if v in temps else "–"
        rows.append(f"| {v} | {s} | {h} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    print("\n| variant | steps | teacher entropy / ln V | agreement in-domain | MLM acc in-domain | agreement law | "
          "MLM acc law |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    return 0


def random_teacher(root: Path) -> Path:
    """A random tiny BERT with Google's vocab (the quick run's teacher: no trained checkpoint needed)."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    out = root / "teacher"
    if not (out / "model.safetensors").exists():
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=21128, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=256))
        with atomic_dir(out) as tmp:
            save_pretrained(model, tmp)
            save_pretrained(BertTokenizer(vocab=str(VOCAB)), tmp)
            copy_file(VOCAB, tmp / "vocab.txt")
    return out


def _default_t() -> float:
    from zh_bert.train.recipe_keys import ObjectiveKeys

    return ObjectiveKeys().temperature


if __name__ == "__main__":
    raise SystemExit(main())
