"""What a pretraining objective is asked for, and the registry every objective's module fills.

An objective is one object (`Objective`), as a model family is one `Architecture` (`zh_bert.train.arch`): the
recipe checks, the networks it builds besides the model `final/` holds (ELECTRA's generator, a distillation
teacher), the batch it needs, its loss terms and their weights, what the log, validation and run.json show,
what checkpoints hold beyond the stock model and what a resume checks, what `plan` counts, and its model-card
rows. The loop (`training.train_step`), the run (`training_run`), `pretrain`, `plan` and the card ask the object
and never compare objective names. A new objective is one more module in this package.

Imports no torch and no model family at module level (`zh_bert.train.arch` asks this registry which objectives
exist): the torch side of each objective is its `*_net` module, imported inside the methods that need it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from zh_bert.core.errors import ZhBertError
from zh_bert.core.registry import Registry

#: name -> the objective object, filled by `add_objective` as each objective's module loads
OBJECTIVES: Registry["Objective"] = Registry("objective")


def add_objective(objective: "Objective") -> "Objective":
    return OBJECTIVES.add(objective.name, objective)


@dataclass(frozen=True)
class LossTerm:
    """One term of the loss a step backpropagates: `out[key] × weight × processes / n`, where `out` is the
    training module's dict of sums and n the global batch's count of `per` (masked tokens, sequences or real
    tokens), so accumulation and DDP give the update of one big batch."""
    key: str
    per: str        # masked | sequences | tokens
    weight: float = 1.0


@dataclass
class Networks:
    """The models one run holds: `hf` is the stock model `final/` and every checkpoint hold; `trained` are
    other stock models trained with it, each saved as a subfolder of the same name (ELECTRA's `generator/`);
    `frozen` are models that run but are neither trained nor saved (a distillation teacher)."""
    hf: Any
    trained: dict = field(default_factory=dict)
    frozen: dict = field(default_factory=dict)


class Objective:
    """One pretraining objective. Subclasses set the attributes and override what differs."""
    name = ""
    summary = ""                    # what it trains, one line
    pairs: Optional[str] = None     # the sentence pairs its shards hold (`zh-bert shard --pairs`): nsp, sop
    generator = False               # it builds ELECTRA's generator and discriminator itself (BERT-style)
    #: the sums of the training module's output that the log reports (the step also sums its loss terms)
    logged: tuple[str, ...] = ("mlm_loss_sum", "mlm_correct")
    #: the sums validation adds up over its fixed batches
    validated: tuple[str, ...] = ("mlm_loss_sum", "mlm_correct", "mlm_count")

    @property
    def model_head(self) -> str:
        """The head the stock model carries: the MLM head only, or also the sentence-pair head."""
        return "pairs" if self.pairs else "mlm"

    # ----------------------------------------------------------------------------------------- recipe
    def check_recipe(self, recipe) -> None:
        """What this objective refuses in `recipe`, named before any work (from `Recipe.__post_init__`)."""
        if recipe.teacher is not None:
            raise ZhBertError(f"'teacher' is a key of objective distill, but objective is {self.name}: remove it, "
                              f"or set objective: distill")

    def check_inputs(self, recipe) -> None:
        """Checks of the files the recipe names that this objective reads, before any data work."""

    def input_paths(self, recipe) -> list[str]:
        """Local paths the objective reads, which out_dir may neither be, hold nor lie inside."""
        return []

    def data_recipe(self, recipe):
        """The recipe whose `tokenizer` prepares and reads the data (distillation: the teacher's)."""
        return recipe

    def check_shards(self, recipe, meta: dict, where) -> None:
        """A SHARDDIR (its meta.json, `where` its path) that does not fit the objective, refused in one line."""

    def loss_terms(self, recipe) -> tuple[LossTerm, ...]:
        return (LossTerm("mlm_loss_sum", "masked"),)

    def divergence_hint(self, recipe) -> str:
        """The recipe keys, besides lr, that a run whose steps are not finite should lower."""
        return ""

    # ----------------------------------------------------------------------------------------- models
    def build(self, recipe, cfg, arch, tokenizer=None, hf=None) -> Networks:
        """The networks of a run of `recipe`: `hf` (init_from's, fitted) or a fresh model of `cfg` (seeded by
        the caller), and what the objective adds."""
        return Networks(hf if hf is not None else arch.model_class(self.name)(cfg))

    def random_networks(self, recipe, cfg, arch, config_of) -> Networks:
        """The networks at random weights, nothing read from disk (`plan --measure` times their steps);
        `config_of(model, architecture)` is the config of another `model:` value."""
        return self.build(recipe, cfg, arch)

    def module(self, nets: Networks, recipe):
        """The torch module the loop trains: forward(**batch) -> dict of sums; `.hf` is `nets.hf`."""
        raise NotImplementedError

    def place(self, nets: Networks, device, precision: str) -> None:
        """Put the frozen networks on `device` at the run's precision (Accelerate places the trained ones)."""

    def step_batches(self, micro_batches: list[dict], recipe, step: int, rank: int, world: int) -> list[dict]:
        """This process's micro-batches of optimizer step `step`, with what the objective adds to them."""
        return micro_batches

    def validation_batch(self, batch: dict, k: int, rank: int, seed: int) -> dict:
        """Validation batch `k` with what the objective adds to it (fixed across evaluations)."""
        return batch

    # ----------------------------------------------------------------------------------------- checkpoints
    def module_state(self, module) -> dict:
        """Tensors of the training module that are in no stock model but a resume needs (name -> tensor)."""
        return {}

    def load_module_state(self, module, tensors: dict, where) -> None:
        if tensors:
            raise ZhBertError(f"{where}: holds training state of another objective ({', '.join(sorted(tensors))[:80]})")

    def run_state(self, recipe) -> dict:
        """What a checkpoint records about the run's inputs beyond the recipe (trainer_state.json `objective`)."""
        return {}

    def check_resume(self, saved: dict, recipe, where) -> None:
        """Refuse a resume whose inputs changed since the checkpoint (`saved`: its `run_state`), before any work."""

    # ----------------------------------------------------------------------------------------- reporting
    def train_row(self, sums: dict, counts: dict) -> dict:
        """The objective's fields of a metrics row: `sums` of `logged` over the window (all processes),
        `counts` the masked tokens, sequences and real tokens."""
        return {}

    def progress_fields(self) -> tuple[str, ...]:
        """Fields of a metrics row that the progress line shows after loss and mlm_acc."""
        return ()

    def validation_row(self, sums: dict) -> dict:
        """The objective's fields of a validation row, from `sums` of `validated` beyond the MLM ones."""
        return {}

    def describe(self, nets: Networks) -> str:
        """What the start-of-run line says about the networks besides the trained model."""
        return ""

    def start_report(self, run) -> None:
        """What the run's first lines say of the objective once its networks and data are ready (`run.say`,
        `run.warn`): distillation, whether the teacher's soft targets carry signal at the recipe's temperature."""

    def recipe_notes(self, recipe) -> list[str]:
        """Lines `--print-recipe` and `plan` add about the objective, measured where its inputs are local."""
        return []

    def summary_fields(self, run) -> dict:
        """run.json entries of the objective (ELECTRA: `generator`; distillation: `teacher`, `distill`)."""
        return {}

    def card_rows(self, run: dict) -> list[str]:
        """Model-card table rows of the objective, from a run's run.json."""
        return []

    # ----------------------------------------------------------------------------------------- plan
    def plan_shape(self, cfg, arch, args, shapes, config_of):
        """What `plan` counts for a run of `cfg` (family `arch`; `args` has the plan's recipe keys): a
        `shapes` (plan.memory_model.ModelShape) of every network a step runs; `config_of(model, architecture)`
        is the config a run of another `model:` value trains."""
        return shapes.from_config(cfg, pairs=self.pairs is not None)

    def flops_per_token(self, cfg, arch, args, mask_rate: float, config_of) -> float:
        """Training FLOPs per input token of everything a step runs (3 × forward for what trains, 1 × forward
        for what only runs), 2 per multiply-accumulate."""
        return arch.flops_per_token(cfg, args.seq_len, mask_rate)
