"""What a model family is asked for, and what every family shares (presets, config.json paths).

zh-bert trains stock Hugging Face models of more than one family. Everything that differs between them (the
config built from recipe keys, the recipe checks, positions, parameter and FLOP counts, the sparse MLM head,
token types, classifier arguments, model-card rows, the memory model's block) is a method or attribute of one
`Architecture` object, so the rest of the code asks the object instead of comparing names. Imports no torch:
`zh-bert pretrain --print-recipe` and `plan` stay fast.
"""

from __future__ import annotations

from pathlib import Path

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import Record, read_json
from zh_bert.core.registry import Registry

# name -> (layers, hidden, heads); intermediate = 4 * hidden (UER-py / Turc et al. miniatures)
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
BERT_POSITIONS = 512         # BERT's learned position table; every family's parameter budget counts it


def config_path(model: str) -> Path:
    """The config.json that a `model:` value other than a preset names (a file, or a folder holding one)."""
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ZhBertError(f"model '{model}' is neither a preset ({', '.join(PRESETS)}){suggest(model, PRESETS)} "
                          f"nor a config.json file")
    return path


def model_type(path: Path):
    """config.json's `model_type`, or None when it has none (Google's bert_config.json) or is no JSON mapping
    (the config loader then says what is wrong); a model_type that is not text is one line naming the field."""
    data = read_json(path, default=None)
    return Record(data, str(path)).text("model_type", None, max_len=100) if isinstance(data, dict) else None


def config_errors() -> tuple[type[BaseException], ...]:
    """What reading a bad config.json raises: also transformers' strict field checks ('hidden_size': "abc")."""
    import huggingface_hub.errors as hub_errors

    strict = getattr(hub_errors, "StrictDataclassError", None)
    return (OSError, ValueError, TypeError, AttributeError) + ((strict,) if strict else ())


#: model_type -> the family object, filled by `register` as each family's module loads
FAMILIES: Registry["Architecture"] = Registry("architecture")


def register(arch: "Architecture") -> "Architecture":
    return FAMILIES.add(arch.name, arch)


def family_of(config) -> "Architecture":
    """The family of a transformers config or a config.json dict, by its model_type; any other BERT-like
    model (ELECTRA, Google's configs without a model_type) is the family that reads untyped configs (BERT),
    as transformers' Bert code reads it."""
    kind = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    if kind in FAMILIES:
        return FAMILIES[kind]
    return next(a for a in FAMILIES.values() if a.untyped_configs)


class Architecture:
    """One model family. Subclasses set the attributes and implement the methods that raise here."""
    name = ""                 # the recipe's `architecture` value and config.json's model_type
    family = ""               # how people write it: BERT, ModernBERT
    paper = ""                # key of hub.catalog.PAPERS
    max_positions = 0         # positions of a preset model
    objectives: tuple[str, ...] = ()          # the recipe objectives it can train
    attention_inits: tuple[str, ...] = ("stock",)   # the attention_init values it can apply; [0] is auto's
    uses_token_types = True   # the forward takes token_type_ids
    block = ""                # the memory model's name for the layer's activation layout
    ffn_label = "FFN"         # the MLP width's name in a model card
    card_recipe_keys: tuple[str, ...] = ()    # recipe keys the card shows beside the common ones
    untyped_configs = False   # a config.json without model_type is this family's (Google's bert_config.json)

    # ----------------------------------------------------------------------------------------- recipe
    def check_recipe(self, recipe) -> None:
        """What this family cannot do with `recipe`, named before any data work."""
        if recipe.objective not in self.objectives:
            raise ZhBertError(self.objective_refusal(recipe.objective))
        if recipe.attention_init not in ("auto", *self.attention_inits):
            raise ZhBertError(self.attention_init_refusal(recipe.attention_init))
        if (recipe.seq_len > self.max_positions and recipe.init_from is None
                and not str(recipe.model).endswith(".json")):
            raise ZhBertError(f"seq_len {recipe.seq_len} exceeds the {self.name} presets' {self.max_positions} "
                              f"positions")

    def objective_refusal(self, objective: str) -> str:
        return f"objective {objective} is not one of {self.name}'s: {', '.join(self.objectives)}"

    def attention_init_refusal(self, value: str) -> str:
        return f"attention_init {value} is not one of {self.name}'s: auto, {', '.join(self.attention_inits)}"

    def attention_init(self, recipe) -> str:
        """The attention_init a run applies: `auto` is the family's first (a continued model keeps its own)."""
        if recipe.attention_init != "auto":
            return recipe.attention_init
        return "stock" if recipe.init_from else self.attention_inits[0]

    # ----------------------------------------------------------------------------------------- config
    def config(self, recipe, vocab_size: int, special_ids: dict[str, int] | None = None):
        """The stock transformers config a run of `recipe` trains (a preset, or its config.json)."""
        raise NotImplementedError

    def check_config_kind(self, path: Path, kind) -> None:
        """A config.json of another family is refused in one line, naming the recipe key that would fit
        (transformers would read any config.json, and the model then fail mid-run)."""
        if kind == self.name or (kind is None and self.untyped_configs):
            return
        fits = family_of({"model_type": kind}).name
        raise ZhBertError(f"{path}: model_type {kind!r}, but architecture is {self.name}: give a config.json with "
                          f"model_type: {self.name}" + (f", or set architecture: {fits}" if fits != self.name else ""))

    def check_init(self, init_from) -> None:
        """`init_from` must hold this family: continuing a BERT as a ModernBERT (or the reverse) would load
        nothing that fits."""
        cfg = Path(init_from) / "config.json"
        if not cfg.is_file():
            return   # load_init names the missing file
        try:
            kind = read_json(cfg).get("model_type")
        except (ZhBertError, AttributeError):
            return   # load_init names what is wrong with it
        have = family_of({"model_type": kind}).name
        if have != self.name:
            raise ZhBertError(f"init_from {init_from} is a {kind} checkpoint, but the recipe says architecture: "
                              f"{self.name}; set architecture: {have}")

    def init_values(self, config: dict) -> dict:
        """The recipe keys an init_from checkpoint's config.json fixes, as it holds them."""
        raise NotImplementedError

    def save_config(self, folder: Path) -> None:
        """Rewrite `folder/config.json` (just saved by save_pretrained) so both transformers majors read it."""

    # ----------------------------------------------------------------------------------------- counts
    def params(self, layers: int, hidden: int, intermediate: int, vocab: int, *, head: str = "mlm",
               positions: int = BERT_POSITIONS, type_vocab: int = 2) -> int:
        """Parameters of the base model (`head="base"`, what model cards quote), the masked LM (`"mlm"`, tied
        decoder) or the pretraining model with the sentence-pair head (`"pairs"`)."""
        raise NotImplementedError

    def config_params(self, cfg, head: str = "mlm") -> int:
        """`params` of a transformers config of this family."""
        raise NotImplementedError

    def flops_per_token(self, cfg, seq_len: int, mask_rate: float) -> float:
        """Training FLOPs per input token (3 × forward, 2 per MAC), the MLM head at masked positions only."""
        raise NotImplementedError

    def local_layers(self, cfg) -> tuple[int, int]:
        """(layers attending in a sliding window, the window in tokens); (0, 0) for full attention."""
        return 0, 0

    def dropouts(self, cfg) -> tuple[float, float]:
        """(hidden dropout, attention dropout) of a transformers config of this family."""
        raise NotImplementedError

    def dropout_kwargs(self, hidden: float, attention: float) -> dict:
        """The config keys that set the family's hidden and attention dropout (`from_pretrained` overrides)."""
        raise NotImplementedError

    def shape_label(self, shape) -> str:
        """How `plan` names a model shape (`plan.memory_model.ModelShape`)."""
        return f"L{shape.layers}/H{shape.hidden}/A{shape.heads}"

    # ----------------------------------------------------------------------------------------- model
    def model_class(self, objective: str):
        raise NotImplementedError

    def encode(self, hf, input_ids, attention_mask, token_type_ids):
        """(hidden states, pooled output or None) of the stock encoder of `hf`."""
        raise NotImplementedError

    def mlm_logits(self, hf, hidden):
        """The stock MLM head of `hf` on the rows `hidden` (masked positions only)."""
        raise NotImplementedError

    def sparse_head(self, model):
        """(encoder, head) of a stock masked LM whose head can run on chosen positions only, else None."""
        raise NotImplementedError

    def classifier_kwargs(self, pooling: str) -> dict:
        """Extra config arguments of the family's *ForSequenceClassification for `pooling`."""
        return {}

    def pools_itself(self) -> bool:
        """Whether the classifier pools by its own config (so `pooling` needs no code of ours)."""
        return False

    # ----------------------------------------------------------------------------------------- card
    mlm_class_name = ""       # the masked-LM class a config.json without `architectures` is

    def card_rows(self, config: dict) -> list[str]:
        """Model-card rows that say what makes a checkpoint this family."""
        return []

    def card_usage(self, model_class: str, widget_text: str, repo_id: str, config: dict) -> list[str]:
        """The model card's 'How to use' lines: code that loads the checkpoint, and what it is."""
        raise NotImplementedError
