"""The model card (`README.md`) that `zh-bert publish` writes: Hub metadata + a body generated from the run.

`run.json` is written by `zh-bert pretrain`; its layout may grow, so every value is looked up by name
anywhere in it (`_find`) and a missing value is left out of the card rather than guessed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (CURVES_PNG, EVAL_RESULTS, METRICS_LOG, RUN_RECIPE, RUN_SUMMARY, Record, parse_json,
                                 parse_yaml, read_json, read_text)
from zh_bert.corpus.task_registry import tasks
from zh_bert.evaluation import eval_results
from zh_bert.leaderboard.cards import identity
from zh_bert.train.arch import of_config
from zh_bert.train.objectives import OBJECTIVES
from zh_bert.train.rundir import GENERATOR

WIDGET_TEXT = "北京是中国的{mask}都。"
#: the safetensors format caps its JSON header at 100 MB; a longer one is not a safetensors file
MAX_SAFETENSORS_HEADER = 100_000_000
#: a resolved recipe is a few KiB; a larger recipe.yaml is not read
MAX_RECIPE_BYTES = 1 << 20


def _find(d: Any, *names: str) -> Any:
    """First value stored under any of `names`, searching nested dicts breadth-first."""
    queue = [d]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, dict):
            for n in names:
                if cur.get(n) not in (None, "", {}, []):
                    return cur[n]
            queue.extend(v for v in cur.values() if isinstance(v, dict))
    return None


def count_parameters(model_dir: Path) -> int | None:
    """Parameter count from the safetensors headers (no torch import, no weight loading). The header is read
    as data: its length bounded, its JSON parsed by the reading layer, each tensor's shape a list of counts;
    anything else is one line naming the file and the tensor."""
    total, found = 0, False
    for f in sorted(model_dir.glob("*.safetensors")):
        for _, shape in _tensor_shapes(f):
            total += math.prod(shape)
            found = True
    return total if found else None


def _tensor_shapes(path: Path) -> list[tuple[str, list[int]]]:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        n = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if not 2 <= n <= MAX_SAFETENSORS_HEADER:
            raise ZhBertError(f"{path}: not a safetensors file (its header length is {n if n >= 0 else 'missing'})")
        header = parse_json(fh.read(n), str(path))
    rec = Record.of(header, str(path), "a safetensors header (a JSON object)")
    out = []
    for name, tensor in rec.items():
        if name == "__metadata__":
            continue
        shape = Record(tensor, rec.where, rec.at(name)).list("shape", max_len=64) if isinstance(tensor, dict) \
            else None
        if shape is None or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise rec.error(name, f"expected a tensor with a shape (a list of counts), got {str(tensor)[:60]!r}")
        out.append((name, shape))
    return out


def latest_eval_results(entries: list) -> list[dict]:
    """The entries the card can show (the keys `EvalResult` requires), newest per identity."""
    required = ("task_type", "dataset_type", "metric_type", "metric_value")
    return eval_results.latest([e for e in entries if isinstance(e, dict) and all(k in e for k in required)])


def _fmt_int(n) -> str:
    return f"{n:,}" if isinstance(n, (int, float)) else str(n)


def _fmt_duration(s) -> str:
    if not isinstance(s, (int, float)):
        return str(s)
    h, rem = divmod(int(s), 3600)
    if h:
        return f"{h} h {rem // 60} min"
    return f"{rem // 60} min {rem % 60} s" if rem >= 60 else f"{s:.1f} s"


def _scalars(d: Any, prefix: str = "", depth: int = 2) -> list[tuple[str, Any]]:
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, (str, int, float, bool)):
                out.append((prefix + str(k), v))
            elif isinstance(v, dict) and depth > 1:
                out += _scalars(v, f"{prefix}{k}.", depth - 1)
            elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                out.append((prefix + str(k), ", ".join(v[:8]) + (" ..." if len(v) > 8 else "")))
    return out


def _hardware(hw) -> str | None:
    if not isinstance(hw, dict):
        return hw
    parts = [str(hw.get("device_name") or hw.get("device") or "")]
    if hw.get("processes"):
        parts.append(f"{hw['processes']} process{'es' if hw['processes'] != 1 else ''}")
    if hw.get("precision"):
        req = hw.get("precision_requested")
        parts.append(f"precision {hw['precision']}" + (f" (requested {req})" if req and req != hw["precision"] else ""))
    parts = [p for p in parts if p]
    return ", ".join(parts) if parts else ", ".join(f"{k}: {v}" for k, v in _scalars(hw, depth=1))


def _name_of(src) -> str | None:
    if isinstance(src, dict):
        src = src.get("name") or src.get("path")
    if not isinstance(src, str) or not src.strip():
        return None
    path = Path(src)
    if path.suffix or "/" not in src or path.exists() or src.startswith((".", "/")):
        return path.stem if path.suffix else path.name  # a file or folder: its name
    return src  # ORG/NAME: a Hub dataset id


def read_recipe(run_dir: Path | None) -> dict:
    """The run's resolved recipe (RUN/recipe.yaml, beside final/), or {} when there is none or it is unreadable
    (not UTF-8, not YAML, a key given twice, not a mapping): the card then leaves out what only the recipe says."""
    if not run_dir or not (run_dir / RUN_RECIPE).is_file():
        return {}
    path = run_dir / RUN_RECIPE
    try:
        recipe = parse_yaml(read_text(path, max_bytes=MAX_RECIPE_BYTES), str(path)) or {}
    except (ZhBertError, OSError):
        return {}
    return recipe if isinstance(recipe, dict) else {}


def _dataset_names(run: dict, recipe: dict) -> list[str]:
    """Corpus names for the card's `datasets`: run.json's, else the recipe's `data` inputs, else shard sources."""
    found = _find(run, "datasets")
    if not found:
        found = recipe.get("data")
    if not found:
        found = _find(run, "sources", "corpora")
    if isinstance(found, (str, dict)):
        found = [found]
    names = [_name_of(s) for s in found or []]
    return list(dict.fromkeys(n for n in names if n))


def _counts(d) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in d.items() if isinstance(v, (int, float)) and v) if isinstance(d, dict) else ""


def _corpus_lines(data: dict) -> list[str]:
    """A few readable lines from run.json's data summary (shard meta + clean report)."""
    lines = []
    clean = _find(data, "clean_report") or {}
    meta = _find(data, "shard_meta") or {}
    if isinstance(clean, dict) and isinstance(clean.get("docs_out"), int):
        kept = f"cleaning kept {clean['docs_out']:,} of {clean.get('docs_in', '?'):,} documents" \
            if isinstance(clean.get("docs_in"), int) else f"cleaning kept {clean['docs_out']:,} documents"
        if isinstance(clean.get("chars_out"), int):
            kept += f" ({clean['chars_out']:,} characters)"
        lines.append(kept)
        for key, label in (("filtered", "filtered out"), ("duplicates", "duplicates removed"), ("pii", "PII masked")):
            if _counts(clean.get(key)):
                lines.append(f"{label}: {_counts(clean.get(key))}")
    if isinstance(meta, dict) and meta:
        counts = meta.get("counts") or {}
        seqs = {k: (v.get("sequences") if isinstance(v, dict) else v) for k, v in counts.items()} \
            if isinstance(counts, dict) else {}
        seqs = {k: v for k, v in seqs.items() if isinstance(v, int)}
        if seqs:
            lines.append(", ".join(f"{v:,} {k} sequences" for k, v in seqs.items())
                         + (f" of {meta['seq_len']} tokens" if meta.get("seq_len") else ""))
        if meta.get("pairs"):
            lines.append(f"sentence pairs: {meta['pairs']}")
        if meta.get("segmenter"):
            lines.append(f"word boundaries (for whole-word masking): {meta['segmenter']}")
    return lines or [f"{k}: {v}" for k, v in _scalars(data)[:16]]


@dataclass
class _Facts:
    """What the card states about the model, gathered once from the model folder and the run dir."""
    run: dict
    config: dict
    mask: str
    params: int | None
    vocab_kind: str
    vocab_size: Any
    datasets: list[str]
    evals: list[dict]
    generator: dict     # objective electra: generator/config.json (the top-level model is the discriminator)
    recipe: dict        # RUN/recipe.yaml ({} for a bare model folder)

    @classmethod
    def gather(cls, model_dir: Path, run_dir: Path | None) -> "_Facts":
        run = read_json(run_dir / RUN_SUMMARY, {}) if run_dir else {}
        run = run if isinstance(run, dict) else {}
        config = read_json(model_dir / "config.json", {}) or {}
        tok_cfg = read_json(model_dir / "tokenizer_config.json", {}) or {}
        vocab_meta = read_json(model_dir / "zh_bert_vocab.json", {}) or {}
        params = _find(run, "parameters", "n_params", "num_parameters", "param_count", "params")
        recipe = read_recipe(run_dir)
        vocab_kind = vocab_meta.get("kind") or _find(run, "vocab_kind") or (
            _find(run.get("vocab", {}), "kind") if isinstance(run.get("vocab"), dict) else None) or "unknown"
        return cls(run=run, config=config,
                   mask=tok_cfg.get("mask_token") if isinstance(tok_cfg.get("mask_token"), str) else "[MASK]",
                   params=params if isinstance(params, int) else count_parameters(model_dir),
                   vocab_kind=vocab_kind, vocab_size=config.get("vocab_size") or vocab_meta.get("vocab_size"),
                   datasets=_dataset_names(run, recipe),
                   evals=latest_eval_results(eval_results.load(run_dir) if run_dir else []),
                   generator=read_json(model_dir / GENERATOR / "config.json", {}) or {}, recipe=recipe)

    @property
    def electra(self) -> bool:
        return bool(self.generator)

    @property
    def arch(self):
        """The model family of config.json (`zh_bert.train.arch`): what the card says differently."""
        return of_config(self.config)

    @property
    def model_class(self) -> str:
        archs = self.config.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            return archs[0]
        return self.arch.mlm_class_name

    @property
    def widget_text(self) -> str:
        return WIDGET_TEXT.format(mask=self.mask)


def model_index_fields(e: dict) -> dict:
    """One model-index result of an eval_results entry, its dataset named as its task's declaration names it
    (`zh_bert.corpus.task_registry`: the dataset type and name a board reads back) with the split the figure is
    reported on; an entry of no declared task (a user's TSV, `eval mlm`) as it was recorded."""
    name = identity(e)
    task = next((t for t in tasks() if t.name == name), None)
    dtype, dname = task.dataset if task else (e["dataset_type"], e.get("dataset_name") or e["dataset_type"])
    return {"task_type": e["task_type"], "task_name": e.get("task_name"), "dataset_type": dtype, "dataset_name": dname,
            "dataset_split": e.get("split") or None, "metric_type": e["metric_type"],
            "metric_name": e.get("metric_name"), "metric_value": e["metric_value"]}


def _metadata(facts: _Facts, name: str, license: str):
    """The YAML block the Hub reads: language, licence, tags, datasets, the widget and the model-index."""
    from huggingface_hub import EvalResult, ModelCardData

    eval_results = [EvalResult(**model_index_fields(e)) for e in facts.evals]
    kind_tag = [f"vocab-{facts.vocab_kind}"] if facts.vocab_kind != "unknown" else []
    arch_tag = facts.arch.name
    # an ELECTRA discriminator fills no blanks: no fill-mask widget at the top level (the generator has one)
    return ModelCardData(
        language="zh", license=license, library_name="transformers",
        pipeline_tag=None if facts.electra else "fill-mask",
        tags=(["zh-bert", "electra", "chinese"] if facts.electra else ["zh-bert", arch_tag, "fill-mask", "chinese"])
        + kind_tag,
        datasets=facts.datasets or None, model_name=name, eval_results=eval_results or None,
        widget=None if facts.electra else [{"text": facts.widget_text}, {"text": f"今天天气很{facts.mask}。"}],
    )


def _arch(config: dict) -> str:
    ffn = of_config(config).ffn_label
    return (f"{config.get('num_hidden_layers', '?')} layers, hidden {config.get('hidden_size', '?')}, "
            f"{config.get('num_attention_heads', '?')} heads, {ffn} {config.get('intermediate_size', '?')}")


def _plain(value):
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) >= 1 else value


#: recipe keys the card shows (those the recipe has); the full file is published beside the card
RECIPE_KEYS = ("architecture", "model", "objective", "seq_len", "global_batch", "lr", "max_steps", "precision")


def _recipe_row(recipe: dict, arch) -> list[str]:
    shown = [f"{k}: {_plain(recipe[k])}" for k in RECIPE_KEYS if isinstance(recipe.get(k), (str, int, float))]
    shown += [f"{k}: {_plain(recipe[k])}" for k in arch.card_recipe_keys if isinstance(recipe.get(k), (int, float))]
    return [f"| recipe | `recipe.yaml`: {', '.join(shown)} |"] if shown else []


def _model_section(facts: _Facts, name: str) -> list[str]:
    run, config = facts.run, facts.config
    preset = _find(run, "preset", "model_preset")
    objective = _find(run, "objective") or ("MLM + " + config["pairs"] if config.get("pairs") else None)
    masking = _find(run, "masking")
    masking = ", ".join(f"{k}={v}" for k, v in masking.items()) if isinstance(masking, dict) else masking
    arch = _arch(config)
    family = facts.arch.family
    what = (f"A Chinese ELECTRA discriminator (replaced-token detection) pretrained from scratch with zh-bert "
            f"({'preset `' + str(preset) + '`, ' if preset else ''}{arch}); its generator, a small masked LM, is "
            f"in `{GENERATOR}/`." if facts.electra else
            f"A Chinese {family} masked language model pretrained from scratch with "
            f"zh-bert ({'preset `' + str(preset) + '`, ' if preset else ''}{arch}).")
    lines = [f"# {name}", "", what, "",
             "## Model", "",
             "| | |", "|---|---|",
             f"| architecture | {facts.model_class} ({arch}) |"]
    lines += facts.arch.card_rows(config)
    lines += [f"| parameters | {_fmt_int(facts.params) if facts.params else 'unknown'} |",
              f"| vocabulary | {facts.vocab_kind}, {_fmt_int(facts.vocab_size)} entries |",
              f"| max sequence length | {config.get('max_position_embeddings', '?')} |"]
    lines += _recipe_row(facts.recipe, facts.arch)
    if facts.electra:
        gen = facts.generator
        lines += [f"| this folder | the discriminator: {config.get('architectures', ['?'])[0]}, the model to "
                  f"fine-tune |",
                  f"| `{GENERATOR}/` | the generator: {gen.get('architectures', ['ElectraForMaskedLM'])[0]} "
                  f"({_arch(gen)}), a masked LM that shares the discriminator's embeddings; fills blanks |"]
    if objective:
        lines.append(f"| objective | {objective} |")
        lines += OBJECTIVES[objective].card_rows(run) if isinstance(objective, str) and objective in OBJECTIVES else []
    if masking:
        lines.append(f"| masking | {masking} |")
    if _find(run, "attention_init") == "neighbour":
        lines.append("| initialisation | neighbour attention (layer-0 heads started on the previous/next token; "
                     "weights are stock BERT) |")
    return lines


def _training_section(run: dict) -> list[str]:
    def number(*names: str, fmt) -> str | None:
        value = _find(run, *names)
        return fmt(value) if value is not None else None

    def figure(*names: str):
        value = _find(run, *names)
        return f"{value:.4f}" if isinstance(value, (int, float)) else value

    rows = (("steps", number("steps", "global_step", "step", "max_steps", fmt=_fmt_int)),
            ("tokens seen", number("tokens_seen", "tokens", fmt=_fmt_int)),
            ("wall-clock", number("wall_clock_s", "wall_clock", "train_time_s", fmt=_fmt_duration)),
            ("hardware", _hardware(_find(run, "hardware"))),
            ("final validation MLM loss", figure("mlm_loss", "val_mlm_loss", "valid_mlm_loss")),
            ("final validation MLM accuracy", figure("mlm_acc", "val_mlm_acc", "valid_mlm_acc")))
    if _find(run, "rtd_acc") is not None:   # electra: the MLM figures are the generator's
        rows = tuple((label + " (generator)" if "MLM" in label else label, value) for label, value in rows) + (
            ("final validation RTD accuracy (discriminator)", figure("rtd_acc")),)
    return ["", "## Training", "", "| | |", "|---|---|"] + [
        f"| {label} | {value if value is not None else 'not recorded'} |" for label, value in rows]


def _corpus_section(facts: _Facts, files: list[str]) -> list[str]:
    lines = ["", "## Corpus and cleaning", ""]
    data = _find(facts.run, "data", "data_summary", "corpus")
    summary = _corpus_lines(data) if isinstance(data, dict) else []
    if facts.datasets:
        lines += [f"Sources: {', '.join(facts.datasets)}.", ""]
    if summary:
        lines += [f"- {line}" for line in summary]
    elif not facts.datasets:
        lines.append("No data summary was recorded with this checkpoint.")
    extra = [f for f in (RUN_RECIPE, METRICS_LOG, CURVES_PNG, RUN_SUMMARY, EVAL_RESULTS) if f in files]
    if extra:
        lines += ["", "The files " + ", ".join(f"`{f}`" for f in extra) +
                  " in this repo record the exact recipe, the training curves and the run summary."]
    if CURVES_PNG in files:
        lines += ["", f"![training curves]({CURVES_PNG})"]
    return lines


def _evaluation_section(evals: list[dict]) -> list[str]:
    if not evals:
        return []
    return ["", "## Evaluation", "", "| task | dataset | metric | value |", "|---|---|---|---|"] + [
        f"| {e.get('task_name') or e['task_type']} | {e.get('dataset_name') or e['dataset_type']} | "
        f"{e.get('metric_name') or e['metric_type']} | {e['metric_value']} |" for e in evals]


def _electra_usage(facts: _Facts, repo_id: str) -> list[str]:
    return ["", "## How to use", "", "```python",
            "from transformers import (AutoModelForMaskedLM, AutoModelForPreTraining,",
            "                          AutoModelForSequenceClassification, AutoTokenizer, pipeline)", "",
            f'discriminator = AutoModelForPreTraining.from_pretrained("{repo_id}")   # replaced-token detection',
            f'classifier = AutoModelForSequenceClassification.from_pretrained("{repo_id}", num_labels=2)  # fine-tune this',
            f'generator = AutoModelForMaskedLM.from_pretrained("{repo_id}", subfolder="{GENERATOR}")',
            f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")',
            'fill = pipeline("fill-mask", model=generator, tokenizer=tokenizer)',
            f'print(fill("{facts.widget_text}"))', "```", "",
            f"Stock `ElectraForPreTraining` (this folder) and `ElectraForMaskedLM` (`{GENERATOR}/`) folders "
            "(safetensors, `tokenizer.json` and `vocab.txt` in each): they load in transformers 4.x and 5.x. "
            "Fine-tune the discriminator; the generator is small by design (it only has to propose plausible "
            "replacements), so its fill-mask answers are weaker than a BERT of the discriminator's size.", ""]


def _usage_and_limits(facts: _Facts, repo_id: str) -> list[str]:
    small = (facts.params or 0) < 50_000_000
    if facts.electra:
        return _electra_usage(facts, repo_id) + _limits(small, electra=True)
    return ["", "## How to use", ""] + facts.arch.card_usage(facts.model_class, facts.widget_text, repo_id,
                                                            facts.config) + [""] + _limits(small)


def _limits(small: bool, electra: bool = False) -> list[str]:
    return ["## Limitations", "",
            "- Trained on the corpus above only: it reflects that text's topics, register and biases, and knows "
            "nothing after it was collected.",
            ("- A pretrained encoder for fine-tuning (its generator fills blanks); it does not generate free text."
             if electra else
             "- A masked LM: it fills blanks and provides features for fine-tuning; it does not generate free text."),
            f"- {'Small model and short training: expect far lower accuracy than released base-size models. ' if small else ''}"
            "Evaluate it on your task before relying on it.",
            "- Simplified Chinese; traditional characters are handled only as far as the corpus contained them.", ""]


def build_card(model_dir: Path, run_dir: Path | None, repo_id: str, license: str = "apache-2.0",
               files: list[str] | None = None) -> str:
    """The full README.md text: YAML metadata block + Markdown body, one section per function."""
    from huggingface_hub import ModelCard

    facts = _Facts.gather(model_dir, run_dir)
    name = repo_id.split("/")[-1]
    body = (_model_section(facts, name) + _training_section(facts.run) + _corpus_section(facts, files or [])
            + _evaluation_section(facts.evals) + _usage_and_limits(facts, repo_id))
    return ModelCard(f"---\n{_metadata(facts, name, license).to_yaml()}\n---\n\n" + "\n".join(body)).content
