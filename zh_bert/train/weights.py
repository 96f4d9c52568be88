"""Loading a model folder with one-line errors, and never with the folder's own code.

A user's folder can be broken in many ways that transformers reports as a deep traceback: a truncated or
corrupt `model.safetensors` (a killed copy, a full disk), a `config.json` with a non-numeric size, weights whose
shapes disagree with the config, missing weights. A downloaded repo may also name code of its own (`auto_map`),
which transformers would load as a stock class by another name, or refuse with a traceback. Every command that
loads a model goes through `load_pretrained` / `init_from_config`, so each of these is one line naming the folder,
and a real bug elsewhere still keeps its traceback.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json


def _load_errors() -> tuple[type[BaseException], ...]:
    from safetensors import SafetensorError

    return (OSError, ValueError, TypeError, KeyError, AttributeError, json.JSONDecodeError, SafetensorError)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: a row of transformers 5.x's load report; the key may be a pattern with spaces (`layer.{0, 1}.output.dense.weight`)
_MISMATCH_ROW = re.compile(r"^\s*(\S.*?)\s*\|\s*MISMATCH\s*\|.*?ckpt:\s*torch\.Size\((\[[^\]]*\])\)\s*vs\s*model:\s*"
                           r"torch\.Size\((\[[^\]]*\])\)", re.MULTILINE)
#: the logger transformers 5.x writes its load report to (the one `from_pretrained` passes it)
_REPORT_LOGGER = "transformers.modeling_utils"


@contextmanager
def _one_line(path: str | Path, what: str) -> Iterator[None]:
    """Any of the ways a model folder can be broken, as a ZhBertError naming the folder. Weights whose shapes
    disagree with config.json are a RuntimeError in transformers (5.x logs a table of them first and raises "You
    set `ignore_mismatched_sizes` to `False`", 4.x lists them in the message): the first tensor is named. 5.x's
    table is read even when a command turned transformers' warnings off, and kept off the terminal; any other
    record is shown exactly when it would have been."""
    report: list[str] = []
    source = logging.getLogger(_REPORT_LOGGER)
    shown_from, own_level = source.getEffectiveLevel(), source.level

    def keep(record: logging.LogRecord) -> bool:
        text = _ANSI.sub("", record.getMessage())
        if "MISMATCH" in text:
            report.append(text)
            return False
        return record.levelno >= shown_from

    source.setLevel(min(shown_from, logging.WARNING))
    source.addFilter(keep)
    try:
        yield
    except _load_errors() as e:
        raise ZhBertError(f"{path}: cannot load {what}: {_reason(e)}") from None
    except RuntimeError as e:
        if not report and "size mismatch" not in str(e) and "ignore_mismatched_sizes" not in str(e):
            raise
        row = _MISMATCH_ROW.search("\n".join(report))
        detail = (f"{row[1]} is {row[2]} in the weights, {row[3]} by config.json" if row else
                  next((line.strip() for line in str(e).splitlines() if "size mismatch" in line), _reason(e)))
        raise ZhBertError(f"{path}: cannot load {what}: the weights disagree with config.json ({detail[:240]}); "
                          f"a config.json edited or taken from another model?") from None
    finally:
        source.removeFilter(keep)
        source.setLevel(own_level)


def _reason(e: BaseException) -> str:
    return (str(e).strip().split("\n")[0] or type(e).__name__)[:300]


def _shipped_tokenizer_classes() -> set[str]:
    """Tokenizer class names this transformers ships (4.x maps to (slow, fast) pairs, 5.x to one name)."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    names = {"PreTrainedTokenizer", "PreTrainedTokenizerFast", "TokenizersBackend"}
    for value in TOKENIZER_MAPPING_NAMES.values():
        names.update(n for n in (value if isinstance(value, tuple) else (value,)) if n)
    return names | {f"{n}Fast" for n in names} | {n.removesuffix("Fast") for n in names}


def remote_code(config: dict, tokenizer_config: dict | None) -> str | None:
    """Why loading a repo would need its own code (`trust_remote_code`), or None for a stock one: an `auto_map`
    (the repo's own classes), a model_type transformers does not know or a tokenizer class it does not ship.
    Decided from the JSON alone; nothing is imported from the repo. A config without model_type (Google's
    bert_config.json) names no code either: zh-bert reads it as BERT."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    tokenizer_config = tokenizer_config if isinstance(tokenizer_config, dict) else {}
    kind, cls = config.get("model_type"), tokenizer_config.get("tokenizer_class")
    if "auto_map" in config or "auto_map" in tokenizer_config:
        where = "config.json" if "auto_map" in config else "tokenizer_config.json"
        return f"its {where} has an auto_map (classes of the repo's own code)"
    if kind is not None and kind not in CONFIG_MAPPING_NAMES:
        return f"its model_type {str(kind)[:40]!r} is not one transformers ships"
    if cls is not None and cls not in _shipped_tokenizer_classes():
        return f"its tokenizer_class {str(cls)[:40]!r} is not one transformers ships"
    return None


def refuse_code(config: object, tokenizer_config: object, where: str) -> None:
    """The one refusal of a model that names code of its own (`remote_code`), for a folder and a Hub repo
    alike: zh-bert never runs a repo's code, and loading it as a stock class would give a wrong model or a
    size-mismatch traceback. No config (or one that is not an object) names no code: loading it says what is
    wrong with it."""
    if not isinstance(config, dict):
        return
    reason = remote_code(config, tokenizer_config if isinstance(tokenizer_config, dict) else None)
    if reason:
        raise ZhBertError(f"{where}: needs trust_remote_code: {reason}; zh-bert never runs a repo's code "
                          f"(use a stock checkpoint, see `zh-bert models --hub`)")


def refuse_repo_code(path: str | Path) -> None:
    """`refuse_code` of a local folder, before anything of it is loaded."""
    folder = Path(path)
    refuse_code(read_json(folder / "config.json", default=None),
                read_json(folder / "tokenizer_config.json", default=None), str(folder))


def load_pretrained(cls: Any, path: str | Path, what: str = "a model", **kwargs: Any) -> Any:
    """`cls.from_pretrained(path, **kwargs)` (a model or config class); a broken folder is a ZhBertError."""
    refuse_repo_code(path)
    if not any(part in cls.__name__ for part in ("Config", "Tokenizer")):
        check_layers(path, what)
    with _one_line(path, what):
        return cls.from_pretrained(str(path), **kwargs)


#: a transformer layer's index in a weight's name (group 2): BERT's `encoder.layer.3.`, ModernBERT's `layers.3.`
LAYER_INDEX = re.compile(r"(?:^|\.)(layer|layers)\.(\d+)\.")


def weight_names(folder: Path) -> list[str] | None:
    """The tensor names of a folder's safetensors weights, from their headers (or the shards' index) alone;
    None when the folder has none (transformers then says what it lacks)."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        index_data = read_json(index)
        weight_map = index_data.get("weight_map") if isinstance(index_data, dict) else None
        return list(weight_map) if isinstance(weight_map, dict) else None
    single = folder / "model.safetensors"
    if not single.is_file():
        return None
    try:
        with safe_open(str(single), framework="numpy") as f:
            return list(f.keys())
    except _load_errors():
        return None      # a damaged file: the load itself says so, in its one line


def check_layers(path: str | Path, what: str = "a model") -> None:
    """config.json's `num_hidden_layers` against the layers the weight files hold, before a model is built: a
    config saying 3 where the weights hold 2 would build layer 3 at random and run (transformers only logs it),
    and one saying 20,000 would allocate them all first. One line naming both counts."""
    folder = Path(path)
    config = read_json(folder / "config.json", default=None) if folder.is_dir() else None
    declared = config.get("num_hidden_layers") if isinstance(config, dict) else None
    if type(declared) is not int:
        return
    names = weight_names(folder)
    held = {int(m[2]) for n in names or () if (m := LAYER_INDEX.search(n))}
    if names is None or not held or held == set(range(declared)):
        return
    missing = sorted(set(range(min(declared, max(held) + 1))) - held)
    raise ZhBertError(f"{folder / 'config.json'}: num_hidden_layers {declared:,}, but the weights hold {len(held):,} "
                      f"layer{'s' * (len(held) != 1)}" + (f" (layer {missing[0]} missing)" if missing else "")
                      + f": not {what} whose config and weights agree (missing or extra weights)")


def init_from_config(cls: Any, path: str | Path, what: str = "a model", **kwargs: Any) -> Any:
    """`cls.from_config(config of path)`: random weights of the folder's architecture. A config that loads
    but cannot build a model (hidden size not divisible by the heads...) is the same one-line error."""
    from transformers import AutoConfig

    config = load_pretrained(AutoConfig, path, "a config", **kwargs)
    with _one_line(path, what):
        return cls.from_config(config)


def load_for_rows(cls: Any, path: str | Path, what: str, tok: Any, random_init: bool = False,
                  seq_len: int | None = None, **kwargs: Any) -> Any:
    """A stock head model (its trained weights, or random ones of the same config for a baseline), refused in one
    line when the tokenizer outgrows its vocabulary or a row of `seq_len` tokens its positions: either would
    index past an embedding table mid-run."""
    model = (init_from_config if random_init else load_pretrained)(cls, path, what, **kwargs)
    if model.config.vocab_size < len(tok):
        raise ZhBertError(f"{path}: tokenizer has {len(tok)} tokens but the model's vocab_size is "
                          f"{model.config.vocab_size}")
    positions = getattr(model.config, "max_position_embeddings", seq_len)
    if seq_len is not None and seq_len > positions:
        raise ZhBertError(f"--seq-len {seq_len} exceeds the {positions} positions of {path}")
    return model


def check_weights(files: Iterable[str | Path]) -> None:
    """Each safetensors file opens (its header parses and the file is as long as the header says): a copy
    cut short by a kill or a full disk is one line naming it, before any command relies on it."""
    from safetensors import safe_open

    for path in files:
        try:
            with safe_open(str(path), framework="numpy"):
                pass
        except _load_errors() as e:
            raise ZhBertError(f"{path}: cannot open the weights ({_reason(e)}); truncated or corrupt?") from None
