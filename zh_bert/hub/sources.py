"""A released checkpoint opened for conversion: which format it is (from its files, or `--from`), its shape from
its own config, its vocabulary, and its tensors by name.

Each format is an object (`Tf1Format`, `UerFormat`, `HfFormat`) asked for what differs between them: where its
files are, how its config spells the shape, which activation its "gelu" is, how its LayerNorm and segment table
work. Nothing outside this module compares format names. A pickled checkpoint is read with
`torch.load(weights_only=True)`: a pickle holding anything but tensors is refused, and nothing from it runs.
"""

from __future__ import annotations

import pickle
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_object, read_text, read_vocab_txt
from zh_bert.hub.bert_names import TF_COUNTERS, TF_SKIPPED, Dims, check_heads, other_architecture
from zh_bert.hub.tf_checkpoint import TfCheckpoint
from zh_bert.train.arch import BERT

#: config keys that only ALBERT / XLNet configs have: such a checkpoint is no BERT
_ALIEN_KEYS = {"embedding_size": "ALBERT", "num_hidden_groups": "ALBERT", "inner_group_num": "ALBERT",
               "d_model": "XLNet", "n_layer": "XLNet", "mem_len": "XLNet"}
#: UER/TencentPretrain options a BERT cannot express: (key, the value BERT needs, what the other value means)
_UER_BERT = (("encoder", ("transformer", "bert"), "another encoder"), ("layernorm_positioning", ("post",), "pre-LN"),
             ("feed_forward", ("dense",), "a gated feed-forward"), ("layernorm", ("normal",), "T5/RMS norm"),
             ("factorized_embedding_parameterization", (False,), "ALBERT's factorized embedding"),
             ("parameter_sharing", (False,), "ALBERT's shared layers"),
             ("remove_transformer_bias", (False,), "bias-free layers"),
             ("remove_embedding_layernorm", (False,), "no embedding LayerNorm"),
             ("relative_position_embedding", (False,), "relative positions"),
             ("remove_attention_scale", (False,), "unscaled attention"), ("has_residual_attention", (False,), "residual attention"))
#: the most bytes read of a pickled checkpoint (BERT-large with its heads is 1.3 GB)
MAX_PICKLE = 8 << 30


GeluCurve = Literal["erf", "tanh"]
#: the Hugging Face activation that computes each curve of a source's `gelu`
GELU_ACT: dict[str, str] = {"erf": "gelu", "tanh": "gelu_new"}
#: the day google-research/bert's modeling.py changed `gelu` from tf.erf to the tanh curve (commit "Updating GELU"):
#: checkpoints Google trained before it (Chinese BERT 2018-11-04, the multilingual models) use erf
TF1_TANH_SINCE = "2019-02-07"


@dataclass
class Source:
    """What `convert` needs of a checkpoint: tensors by name, the shape, the files it was read from."""

    fmt: Any                       # the format object
    label: str                     # tf1, uer, tencentpretrain or hf: what conversion.json records
    checkpoint: Path
    files: list[Path]              # every input file (hashed into conversion.json), the config and vocab last
    dims: Dims
    source_act: str
    hidden_act: str                # the Hugging Face activation computing the same function
    norm_eps: float
    dropout: tuple[float, float]
    vocab: Path
    names: list[str]
    get: Callable[[str], Any]      # name -> torch tensor (float32)
    skipped: Counter = field(default_factory=Counter)
    gelu: GeluCurve = "erf"        # the curve the source's own `gelu` computes


def _single(folder: Path, pattern: str, what: str) -> Path | None:
    found = sorted(p for p in folder.glob(pattern) if p.is_file())
    if len(found) > 1:
        raise ZhBertError(f"{folder}: holds {len(found)} {what} ({', '.join(p.name for p in found[:4])}); give the "
                          f"one to use")
    return found[0] if found else None


def _vocab_file(folder: Path, given: str | None) -> Path:
    path = Path(given) if given else (folder / "vocab.txt" if (folder / "vocab.txt").is_file() else
                                       _single(folder, "*vocab*.txt", "vocab files"))
    if path is None or not path.is_file():
        raise ZhBertError(f"{path if given else folder}: no vocab.txt{'' if given else ' beside the checkpoint'}: "
                          f"a checkpoint without its vocabulary cannot be converted (give --vocab FILE)")
    return path


def _hf_activation(name: str, table: dict[str, str], where: str) -> str:
    if name not in table:
        raise ZhBertError(f"{where}: hidden_act {name!r} is not one BERT of this format computes "
                          f"({', '.join(table)})")
    return table[name]


def _refuse_alien(config: Record) -> None:
    for key, arch in _ALIEN_KEYS.items():
        if key in config:
            raise ZhBertError(f"{config.where}: {key} is a key of {arch}'s config, an architecture zh-bert cannot "
                              f"express as BERT")


class Tf1Format:
    """Google's TensorFlow 1 BERT: bert_config.json, dense kernels [in, out], and a `gelu` whose curve the files do
    not say: google-research/bert's modeling.py computed it with tf.erf from its first release until
    `TF1_TANH_SINCE`, then with the tanh approximation. Google's Chinese BERT and the multilingual models (and
    every Hub copy of them, `hidden_act: "gelu"`) are erf, the default; `--gelu tanh` is for a checkpoint trained
    with the later code (Hugging Face's `gelu_new`)."""

    kind = "tf1"
    segment_pad_row = False
    unbiased_norm = False
    activations = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}

    def locate(self, src: Path) -> Path | None:
        """The checkpoint prefix (`.../bert_model.ckpt`) SRC names or holds, or None."""
        if src.is_file():
            for suffix in (".index",):
                if src.name.endswith(suffix):
                    return src.with_name(src.name[: -len(suffix)])
            m = re.match(r"(.*)\.data-\d{5}-of-\d{5}$", src.name)
            return src.with_name(m[1]) if m else None
        if Path(f"{src}.index").is_file():
            return src
        if not src.is_dir():
            return None
        indexes = sorted(p for p in src.glob("*.index") if p.is_file())
        if len(indexes) > 1:
            named = _named_checkpoint(src)
            if named is None:
                raise ZhBertError(f"{src}: holds {len(indexes)} TensorFlow checkpoints ({', '.join(p.name for p in indexes[:4])}) "
                                  f"and no `checkpoint` file naming one; give SRC as PREFIX.index")
            return named
        return indexes[0].with_name(indexes[0].name[: -len(".index")]) if indexes else None

    def open(self, prefix: Path, config: str | None, vocab: str | None, heads: int | None,
             gelu: GeluCurve = "erf") -> Source:
        folder = prefix.parent
        cfg_path = Path(config) if config else folder / "bert_config.json"
        if not cfg_path.is_file():
            other = _single(folder, "*config*.json", "config files")
            if other is None:
                raise ZhBertError(f"{cfg_path}: no bert_config.json beside the checkpoint (give --config FILE)")
            cfg_path = other
        cfg = read_object(cfg_path, what="a BERT config")
        _refuse_alien(cfg)
        ckpt = TfCheckpoint.open(prefix)
        arch = other_architecture(ckpt.entries)
        if arch:
            raise ZhBertError(f"{prefix}: {arch}")
        vocab_path = _vocab_file(folder, vocab)
        dims = _hf_style_dims(cfg, len(read_vocab_txt(vocab_path)), heads)
        act = cfg.text("hidden_act", "gelu", max_len=40)
        source = Source(self, self.kind, prefix, [Path(f"{prefix}.index"), *ckpt.shards, cfg_path, vocab_path], dims,
                        act, _hf_activation(act, {**self.activations, "gelu": GELU_ACT[gelu]}, f"{cfg_path}"), 1e-12,
                        _dropouts(cfg), vocab_path, [], lambda name: _tensor(ckpt.array(name)), gelu=gelu)
        for name in ckpt.entries:
            skip = next((what for suffix, what in TF_SKIPPED if name.endswith(suffix)), None)
            skip = skip or (name if name in TF_COUNTERS else None)
            if skip:
                source.skipped[skip] += 1
            else:
                source.names.append(name)
        return source


def _named_checkpoint(folder: Path) -> Path | None:
    """The prefix TensorFlow's `checkpoint` file names as the latest (`model_checkpoint_path: "..."`)."""
    text = read_text(folder / "checkpoint", max_bytes=1 << 16) if (folder / "checkpoint").is_file() else ""
    m = re.search(r'^model_checkpoint_path:\s*"([^"/\\]+)"', text, re.MULTILINE)
    return folder / m[1] if m and Path(f"{folder / m[1]}.index").is_file() else None


def _hf_style_dims(cfg: Record, vocab_rows: int, heads: int | None) -> Dims:
    """The shape a Google / Hugging Face BERT config gives, its vocab_size checked against vocab.txt."""
    n = cfg.integer("vocab_size", vocab_rows, lo=1, hi=10_000_000)
    if n != vocab_rows:
        raise ZhBertError(f"{cfg.where}: vocab_size {n}, but the vocab file has {vocab_rows} tokens")
    dims = Dims(vocab=n, hidden=cfg.integer("hidden_size", lo=1, hi=1 << 16),
                layers=cfg.integer("num_hidden_layers", lo=1, hi=1000),
                heads=heads or cfg.integer("num_attention_heads", lo=1, hi=1 << 12),
                intermediate=cfg.integer("intermediate_size", lo=1, hi=1 << 18),
                positions=cfg.integer("max_position_embeddings", 512, lo=1, hi=1 << 20),
                type_vocab=cfg.integer("type_vocab_size", 2, lo=1, hi=1 << 10))
    check_heads(dims, cfg.where)
    return dims


def _dropouts(cfg: Record) -> tuple[float, float]:
    return (cfg.number("hidden_dropout_prob", 0.1, lo=0, hi=1), cfg.number("attention_probs_dropout_prob", 0.1, lo=0, hi=1))


def _tensor(array):
    import torch

    return torch.from_numpy(array.copy()).float()


def load_pickle(path: Path) -> dict:
    """A pickled state dict, loaded with `weights_only=True`: anything but tensors (an object whose unpickling
    would run code) is refused in one line, and nothing of it runs."""
    import torch

    if path.stat().st_size > MAX_PICKLE:
        raise ZhBertError(f"{path}: {path.stat().st_size:,} bytes, larger than any BERT checkpoint; not read")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, EOFError, ValueError, TypeError, OSError) as e:
        named = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"it would call {named[1]}" if named else (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise ZhBertError(f"{path}: refused: not a plain state dict of tensors ({what}); zh-bert never unpickles "
                          f"code, and nothing of it ran") from None
    if isinstance(state, dict) and len(state) == 1 and isinstance(next(iter(state.values())), dict):
        state = next(iter(state.values()))   # {"state_dict": {...}} or {"model": {...}}
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ZhBertError(f"{path}: refused: not a state dict of named tensors")
    if state and all(k.startswith("module.") for k in state):   # saved from a DataParallel wrapper
        state = {k[len("module."):]: v for k, v in state.items()}
    for name, tensor in state.items():
        check_tensor(name, tensor, path)
    return state


def check_tensor(name: str, tensor, path: Path) -> None:
    """A tensor of a checkpoint is dense, on the CPU, its own data (its storage holds every element: a stride-0
    `expand` of 100,000 values saying 10^10 would be materialised by the first `.float()`), and a number type;
    one line naming it otherwise, before anything is converted."""
    import torch

    problem = None
    if tensor.layout != torch.strided:
        problem = f"a {str(tensor.layout).split('.')[-1]} tensor (only dense tensors are weights)"
    elif tensor.is_meta or tensor.device.type != "cpu":
        problem = f"a tensor on the {tensor.device.type} device, without its data"
    elif not (tensor.dtype.is_floating_point or tensor.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8,
                                                                  torch.int8, torch.bool)):
        problem = f"of dtype {tensor.dtype}, not a number type"
    elif tensor.untyped_storage().nbytes() < (tensor.storage_offset() + tensor.numel()) * tensor.element_size():
        problem = (f"a view of {tensor.untyped_storage().nbytes() // max(tensor.element_size(), 1):,} stored values "
                   f"shaped {list(tensor.shape)} ({tensor.numel():,} elements): not a weight's own data")
    if problem:
        raise ZhBertError(f"{path}: {name} is {problem}; refused before anything is converted")


def pickle_kind(state: dict, path: Path) -> str:
    """`hf` or `uer` from a state dict's names; one line when they are neither."""
    arch = other_architecture(state)
    if arch:
        raise ZhBertError(f"{path}: {arch}")
    if any(k.startswith(("bert.", "cls.")) for k in state):
        return "hf"
    if any(k.startswith(("embedding.", "encoder.transformer.", "target.")) for k in state):
        return "uer"
    raise ZhBertError(f"{path}: neither Hugging Face BERT names (bert.*, cls.*) nor UER-py/TencentPretrain names "
                      f"(embedding.*, encoder.*, target.*): first names {', '.join(list(state)[:3])}")


def _bin_in(src: Path) -> Path | None:
    if src.is_file():
        return src if src.suffix in (".bin", ".pt", ".pth") else None
    if not src.is_dir():
        return None
    if (src / "pytorch_model.bin").is_file():
        return src / "pytorch_model.bin"
    found = sorted(p for p in src.glob("*.bin") if p.is_file() and p.name != "training_args.bin")
    if len(found) > 1:
        raise ZhBertError(f"{src}: holds {len(found)} .bin files ({', '.join(p.name for p in found[:4])}); give "
                          f"SRC as the one to convert")
    return found[0] if found else None


class PickleFormat:
    """A `.bin` state dict (Hugging Face or UER names): one reader, the names decide the format."""

    def locate(self, src: Path) -> Path | None:
        return _bin_in(src)


def _state_source(fmt, label: str, path: Path, state: dict, files: list[Path], dims: Dims, act: str,
                  table: dict[str, str], eps: float, dropout, vocab: Path, where: str) -> Source:
    return Source(fmt, label, path, files, dims, act, _hf_activation(act, table, where), eps, dropout, vocab,
                  [k for k in state if k != "bert.embeddings.position_ids"], lambda name: state[name].float(),
                  Counter({"position_ids buffer": 1} if "bert.embeddings.position_ids" in state else {}))


class UerFormat(PickleFormat):
    """UER-py and TencentPretrain (the same names): a JSON config of their own, linear weights [out, in], a
    segment table with an extra padding row 0, and a LayerNorm that divides by the *unbiased* standard deviation
    plus eps (1e-6) outside the root: `gamma * (x - mean) / (std + eps) + beta`."""

    kind = "uer"
    segment_pad_row = True
    unbiased_norm = True
    activations = {"gelu": "gelu", "gelu_fast": "gelu_new", "relu": "relu", "silu": "silu", "linear": "linear"}

    def open(self, path: Path, config: str | None, vocab: str | None, heads: int | None, state: dict,
             label: str) -> Source:
        folder = path.parent
        cfg_path = Path(config) if config else _single(folder, "*config*.json", "config files")
        if cfg_path is None and heads is None:
            raise ZhBertError(f"{folder}: no UER config JSON beside {path.name} (give --config, the "
                              f"models/bert/*_config.json it was trained with, or --heads N)")
        cfg = read_object(cfg_path, what="a UER config") if cfg_path else Record({}, f"{path} (--heads)")
        _refuse_alien(cfg)
        for key, ok, what in _UER_BERT:
            value = cfg.raw(key, ok[0])
            if value not in ok:
                raise ZhBertError(f"{cfg.where}: {key}: {value!r} means {what}, an architecture zh-bert cannot "
                                  f"express as BERT")
        emb = cfg.raw("embedding", "word_pos_seg")
        if emb not in ("word_pos_seg", ["word", "pos", "seg"]):
            raise ZhBertError(f"{cfg.where}: embedding: {emb!r}; BERT's is word + position + segment")
        vocab_path = _vocab_file(folder, vocab)
        word = state.get("embedding.word_embedding.weight", state.get("embedding.word.embedding.weight"))
        hidden = cfg.integer("hidden_size", int(word.shape[1]) if word is not None else 768, lo=1, hi=1 << 16)
        if cfg.integer("emb_size", hidden, lo=1, hi=1 << 16) != hidden:
            raise ZhBertError(f"{cfg.where}: emb_size differs from hidden_size (ALBERT's factorized embedding), "
                              f"an architecture zh-bert cannot express as BERT")
        dims = Dims(vocab=len(read_vocab_txt(vocab_path)), hidden=hidden,
                    layers=cfg.integer("layers_num", _count_layers(state), lo=1, hi=1000),
                    heads=heads or cfg.integer("heads_num", lo=1, hi=1 << 12),
                    intermediate=cfg.integer("feedforward_size", 4 * hidden, lo=1, hi=1 << 18),
                    positions=cfg.integer("max_seq_length", 512, lo=1, hi=1 << 20), type_vocab=2)
        check_heads(dims, cfg.where)
        dropout = cfg.number("dropout", 0.1, lo=0, hi=1)
        files = [path, *([cfg_path] if cfg_path else []), vocab_path]
        return _state_source(self, label, path, state, files, dims, cfg.text("hidden_act", "gelu", max_len=40),
                             self.activations, cfg.number("layernorm_eps", 1e-6, lo=0, hi=1), (dropout, dropout),
                             vocab_path, cfg.where)


def _count_layers(state: dict) -> int:
    found = {int(m[1]) for k in state if (m := re.match(r"encoder\.transformer\.(\d+)\.", k))}
    return max(found) + 1 if found else 0


class HfFormat(PickleFormat):
    """A Hugging Face `pytorch_model.bin` of BERT (what `download` met before this command): its config.json,
    names as transformers writes them, or as pytorch-pretrained-bert did (LayerNorm gamma/beta)."""

    kind = "hf"
    segment_pad_row = False
    unbiased_norm = False
    activations = {a: a for a in ("gelu", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "relu", "tanh", "silu",
                                  "swish", "linear", "quick_gelu", "gelu_fast", "mish")}

    def open(self, path: Path, config: str | None, vocab: str | None, heads: int | None, state: dict,
             label: str) -> Source:
        folder = path.parent
        cfg_path = Path(config) if config else folder / "config.json"
        if not cfg_path.is_file():
            raise ZhBertError(f"{cfg_path}: no config.json beside {path.name} (give --config FILE)")
        cfg = read_object(cfg_path, what="a model config")
        _refuse_alien(cfg)
        kind = cfg.text("model_type", BERT.name, max_len=60)
        if kind != BERT.name:
            raise ZhBertError(f"{cfg_path}: model_type {kind!r}: an architecture zh-bert cannot convert as BERT")
        if cfg.text("position_embedding_type", "absolute", max_len=40) != "absolute":
            raise ZhBertError(f"{cfg_path}: position_embedding_type {cfg.raw('position_embedding_type')!r}; only "
                              f"BERT's absolute positions are converted")
        vocab_path = _vocab_file(folder, vocab)
        dims = _hf_style_dims(cfg, len(read_vocab_txt(vocab_path)), heads)
        return _state_source(self, label, path, state, [path, cfg_path, vocab_path], dims,
                             cfg.text("hidden_act", "gelu", max_len=40), self.activations,
                             cfg.number("layer_norm_eps", 1e-12, lo=0, hi=1), _dropouts(cfg), vocab_path, str(cfg_path))


TF1, UER, HF = Tf1Format(), UerFormat(), HfFormat()
#: --from value -> (format, the label conversion.json records); UER-py and TencentPretrain share one format
SOURCE_FORMATS = {"tf1": (TF1, "tf1"), "uer": (UER, "uer"), "tencentpretrain": (UER, "tencentpretrain"), "hf": (HF, "hf")}


def open_source(src: Path, forced: str | None, config: str | None, vocab: str | None, heads: int | None,
                gelu: GeluCurve | None = None) -> Source:
    """SRC (a folder, a checkpoint prefix, a `.index`, a `.bin`) opened as the format its files show, or the
    one `--from` forces; one line when it holds none, or two that `--from` must choose between. `gelu`: the curve
    of a TensorFlow 1 checkpoint's `gelu` (default erf); the other formats name their curve, and refuse it."""
    if not src.exists() and not Path(f"{src}.index").is_file():
        raise ZhBertError(f"{src}: no such file or folder")
    prefix = TF1.locate(src) if forced in (None, "tf1") else None
    binary = PickleFormat().locate(src) if forced != "tf1" else None
    if prefix and binary and forced is None:
        raise ZhBertError(f"{src}: holds both a TensorFlow checkpoint ({prefix.name}) and {binary.name}; give "
                          f"--from tf1 or --from {'hf' if binary.name == 'pytorch_model.bin' else 'uer'}")
    if prefix:
        return TF1.open(prefix, config, vocab, heads, gelu or "erf")
    if gelu is not None:
        raise ZhBertError(f"--gelu {gelu}: only a TensorFlow 1 checkpoint leaves its gelu's curve unsaid; "
                          f"{src} is not one (its format names the curve)")
    if binary is None:
        if src.is_dir() and any(src.glob("*.safetensors")):
            raise ZhBertError(f"{src}: already a Hugging Face safetensors folder; nothing to convert")
        want = {"tf1": "TensorFlow 1 checkpoint (PREFIX.index + PREFIX.data-*)"}.get(
            forced, "checkpoint zh-bert converts (a TensorFlow PREFIX.index, pytorch_model.bin, a UER .bin)")
        raise ZhBertError(f"{src}: holds no {want}")
    state = load_pickle(binary)
    kind = pickle_kind(state, binary)
    fmt, label = SOURCE_FORMATS[forced] if forced else SOURCE_FORMATS[kind]
    if fmt.kind != kind:
        raise ZhBertError(f"{binary}: --from {forced}, but its tensors have {kind} names ({next(iter(state))}, ...)")
    return fmt.open(binary, config, vocab, heads, state, label)
