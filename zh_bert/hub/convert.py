"""`zh-bert convert SRC -o OUT`: a released BERT checkpoint -> a stock Hugging Face folder, proven equal to it.

SRC is a TensorFlow 1 checkpoint, a UER-py / TencentPretrain `.bin` (either key generation) or a Hugging Face
`pytorch_model.bin`; OUT comes with the proof that it computes what the source computed.

Much of what the Chinese community released is not in Hugging Face form (Google's and HFL's TensorFlow
checkpoints, every model trained with UER-py or TencentPretrain), and converting it is where models go silently
wrong. So the kind is detected from the files, the shape comes from the source's own config and is checked
against every tensor, every tensor is claimed by a name table or refused (`bert_names`), and the converted folder,
loaded back from disk, must reproduce the source's own forward on a probe (`equality`) before it is renamed into
place. UER's LayerNorm divides by the unbiased standard deviation, which a stock BertLayerNorm reproduces with
gamma scaled by sqrt((H-1)/H): corrected, not copied. A TensorFlow 1 checkpoint's `gelu` is erf (`gelu`) unless
`--gelu tanh` says it was trained with Google's code after 2019-02-07 (`gelu_new`): its files cannot tell.
`OUT/conversion.json` records the source, its key generation, the gelu chosen, tensors read and skipped, the
inputs' sha256 and the logit differences.
"""

from __future__ import annotations

import hashlib
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Optional

from zh_bert.core import config as cli_config
from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_dir, claim_dir, copy_file, read_vocab_txt, save_pretrained, write_bytes, write_json
from zh_bert.core.options import Shared
from zh_bert.hub.bert_names import (DECODER, NSP_HEAD, OPTIONAL, POOLER, TOKEN_TYPES, WORD, generation, is_kernel,
                                    other_architecture, table)
from zh_bert.hub.equality import max_difference, model_logits, probe, source_logits
from zh_bert.hub.sources import TF1_TANH_SINCE, GeluCurve, Source, open_source
from zh_bert.train.weights import load_pretrained

#: the record of a conversion, written into OUT
RECORD = "conversion.json"
#: the largest |Δ logit| accepted, relative to the largest logit (float32 against a float64 forward: ~1e-7 a layer)
EQUALITY_TOLERANCE = 1e-4


@dataclass
class ConvertConfig:
    checkpoint: str = option(positional=True, metavar="SRC",
                             help="folder (or checkpoint path) of a TensorFlow 1, UER-py, TencentPretrain or Hugging "
                                  "Face .bin BERT checkpoint")
    output: str = option(flags=("-o",), metavar="OUT", help="model folder to create (a stock Hugging Face folder)")
    from_format: Optional[Literal["tf1", "uer", "tencentpretrain", "hf"]] = option(
        None, flags=("--from",), help="the source format (default: detected from the files)")
    config: Optional[str] = option(None, metavar="FILE", help="the source's config JSON (default: the one in SRC: "
                                                              "bert_config.json, a UER *_config.json, config.json)")
    vocab: Optional[str] = option(None, metavar="FILE", help="the source's vocab.txt (default: the one in SRC)")
    heads: Optional[int] = option(None, bounds=(1, 4096), help="attention heads, for a UER checkpoint without its "
                                                               "config (the only size its tensors do not show)")
    gelu: Optional[GeluCurve] = option(None, help=f"the curve of a TensorFlow 1 checkpoint's gelu: erf (default: "
                                                  f"google-research/bert before {TF1_TANH_SINCE}, Google's Chinese "
                                                  f"and multilingual BERT) or tanh (trained with its code since)")
    force: bool = option_of(Shared, "force", help="replace OUT if it is an earlier output of convert")


def map_tensors(source: Source) -> tuple[dict, dict]:
    """(HF name -> source tensor as stored, HF name -> source name): every HF role filled by the first of its
    source names present, every source name claimed or skipped; one line naming what is missing or left over."""
    names = set(source.names)
    found: dict[str, str] = {}
    for hf, alternatives in table(source.fmt.kind, source.dims.layers).items():
        hit = next((a for a in alternatives if a in names), None)
        if hit is not None:
            found[hf] = hit
        elif hf not in OPTIONAL:
            raise ZhBertError(f"{source.checkpoint}: no {alternatives[0] if alternatives else hf} (for {hf}) in a "
                              f"{source.dims.layers}-layer checkpoint: not a BERT masked LM, or not the config's")
    if (NSP_HEAD[0] in found) != (POOLER[0] in found):
        raise ZhBertError(f"{source.checkpoint}: a next-sentence head without its pooler (or the reverse)")
    if POOLER[0] in found and NSP_HEAD[0] not in found:   # pooler without a head to use it: BertForMaskedLM has none
        for hf in POOLER:
            source.skipped["pooler (no next-sentence head)"] += 1
            del found[hf]
    claimed = set(found.values())
    for name in source.names:
        if name in claimed:
            continue
        if name == "cls.predictions.decoder.bias" and found.get("cls.predictions.bias") == "cls.predictions.bias":
            source.skipped["decoder bias (a copy of cls.predictions.bias)"] += 1
            continue
        raise ZhBertError(f"{source.checkpoint}: " + (other_architecture([name]) or f"{name} is not a tensor of a "
                          f"{source.dims.layers}-layer BERT (do the config and the checkpoint disagree?)"))
    return {hf: source.get(name) for hf, name in found.items()}, found


def to_hf(raw: dict, found: dict, source: Source) -> dict:
    """The tensors in Hugging Face layout, each shape checked against the config: kernels transposed, UER's
    padding segment row dropped, UER's LayerNorm gammas scaled to the biased deviation BertLayerNorm uses."""
    dims, fmt = source.dims, source.fmt
    out = {}
    for hf, tensor in raw.items():
        want = dims.expected(hf)
        stored = tuple(reversed(want)) if is_kernel(found[hf]) else want
        if hf == TOKEN_TYPES and fmt.segment_pad_row:
            stored = (want[0] + 1, want[1])
        if tuple(tensor.shape) != stored:
            raise ZhBertError(f"{source.checkpoint}: {found[hf]} is {list(tensor.shape)}, but the config and vocab "
                              f"give {list(stored)} ({_config_names(source)})")
        if is_kernel(found[hf]):
            tensor = tensor.T
        if hf == TOKEN_TYPES and fmt.segment_pad_row:
            tensor = tensor[1:]
        if fmt.unbiased_norm and "LayerNorm.weight" in hf:
            tensor = tensor * math.sqrt((dims.hidden - 1) / dims.hidden)
        out[hf] = tensor.contiguous()
    return out


def _config_names(source: Source) -> str:
    return ", ".join(p.name for p in source.files[-2:] if p != source.checkpoint)


def _hf_config(source: Source, tied: bool, nsp: bool):
    from transformers import BertConfig

    d = source.dims
    vocab = read_vocab_txt(source.vocab)
    return BertConfig(vocab_size=d.vocab, hidden_size=d.hidden, num_hidden_layers=d.layers, num_attention_heads=d.heads,
                      intermediate_size=d.intermediate, hidden_act=source.hidden_act, max_position_embeddings=d.positions,
                      type_vocab_size=d.type_vocab, hidden_dropout_prob=source.dropout[0],
                      attention_probs_dropout_prob=source.dropout[1],
                      layer_norm_eps=1e-12 if source.fmt.unbiased_norm else source.norm_eps,
                      pad_token_id=vocab.index("[PAD]") if "[PAD]" in vocab else 0, tie_word_embeddings=tied,
                      architectures=["BertForPreTraining" if nsp else "BertForMaskedLM"])


def write_model(folder: Path, source: Source, state: dict) -> tuple[str, bool]:
    """config.json + model.safetensors of the stock class (BertForPreTraining when the source has the NSP head);
    returns (class name, whether the decoder is tied to the word embeddings)."""
    import torch
    from transformers import BertForMaskedLM, BertForPreTraining

    tied = DECODER not in state or torch.equal(state[DECODER], state[WORD])
    nsp = NSP_HEAD[0] in state
    model = (BertForPreTraining if nsp else BertForMaskedLM)(_hf_config(source, tied, nsp))
    state = {**state, DECODER: state.get(DECODER, state[WORD]), "cls.predictions.decoder.bias": state["cls.predictions.bias"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.endswith("position_ids")]:
        raise ZhBertError(f"{source.checkpoint}: the converted tensors do not fill {type(model).__name__} "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    save_pretrained(model, folder)
    return type(model).__name__, tied


def add_tokenizer_files(folder: Path) -> None:
    """vocab.txt alone is not enough for transformers 5's AutoTokenizer: write tokenizer_config.json and
    tokenizer.json beside it, keeping vocab.txt's own bytes (U+2028 entries and all)."""
    if (folder / "tokenizer_config.json").exists() or not (folder / "vocab.txt").exists():
        return
    from transformers import BertTokenizer

    vocab = (folder / "vocab.txt").read_bytes()
    save_pretrained(BertTokenizer(vocab=str(folder / "vocab.txt")), folder)
    write_bytes(folder / "vocab.txt", vocab)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def prove(folder: Path, cls_name: str, raw: dict, found: dict, source: Source, state: dict, tied: bool) -> dict:
    """The converted folder loaded back from disk against the source's own forward on the probe; also the plain
    rename (what a converter that copies tensors by name gives), where the format needs more than renaming."""
    import transformers

    from transformers import BertForMaskedLM, BertForPreTraining

    cls = BertForPreTraining if cls_name == "BertForPreTraining" else BertForMaskedLM
    batch = probe(read_vocab_txt(source.vocab), source.dims.positions, source.dims.type_vocab)
    reference = source_logits(raw, found, source, batch)
    result = {"probe": batch, **max_difference(model_logits(load_pretrained(cls, folder, "the converted model"), batch),
                                               reference, batch)}
    naive = _rename_only(raw, found, source, state, tied, cls)
    if naive is not None:
        result["rename_only"] = max_difference(model_logits(naive, batch), reference, batch)
    result["tolerance"] = EQUALITY_TOLERANCE
    result["versions"] = {"transformers": transformers.__version__, "torch": __import__("torch").__version__}
    scale = max(1.0, result["mlm_max_abs_logit"])
    worst = max(result["mlm_max_abs_diff"], result.get("nsp_max_abs_diff", 0.0))
    if not worst <= EQUALITY_TOLERANCE * scale:
        raise ZhBertError(f"{source.checkpoint}: the converted model does not compute what the source does (max "
                          f"|Δ logit| {worst:.3g}, allowed {EQUALITY_TOLERANCE * scale:.3g}); nothing was written")
    return result


def _rename_only(raw, found, source: Source, state: dict, tied: bool, cls):
    """The model a name-for-name copy gives (no gamma scaling, `gelu` taken literally), or None when that is
    the conversion itself."""
    act = "gelu" if source.hidden_act == "gelu_new" and source.source_act == "gelu" else source.hidden_act
    if not source.fmt.unbiased_norm and act == source.hidden_act:
        return None
    config = _hf_config(source, tied, NSP_HEAD[0] in state)
    config.hidden_act = act
    plain = {hf: (raw[hf].T if is_kernel(found[hf]) else raw[hf][1:] if hf == TOKEN_TYPES and source.fmt.segment_pad_row
                  else raw[hf]) for hf in state}
    model = cls(config)
    model.load_state_dict({**plain, DECODER: plain.get(DECODER, plain[WORD]),
                           "cls.predictions.decoder.bias": plain["cls.predictions.bias"]}, strict=False)
    return model


def convert_checkpoint(src: Path, out: Path, *, forced: str | None = None, config: str | None = None,
                       vocab: str | None = None, heads: int | None = None, gelu: GeluCurve | None = None,
                       overwrite: bool = False, legacy=None, finish: Callable[[Path], None] | None = None) -> dict:
    """SRC -> OUT (atomic: nothing is left in OUT unless the proof passed); returns the conversion record.
    `finish(tmp)` adds files before the rename (download's marker)."""
    source = open_source(src, forced, config, vocab, heads, gelu)
    raw, found = map_tensors(source)
    state = to_hf(raw, found, source)
    try:
        with _transformers_silenced(), atomic_dir(out, overwrite=overwrite, legacy=legacy) as tmp:
            cls_name, tied = write_model(tmp, source, state)
            copy_file(source.vocab, tmp / "vocab.txt")
            add_tokenizer_files(tmp)
            record = _record(source, found, state, cls_name, tied)
            record["equality"] = prove(tmp, cls_name, raw, found, source, state, tied)
            write_json(tmp / RECORD, record, indent=1)
            if finish is not None:
                finish(tmp)
    except FileExistsError:
        raise ZhBertError(f"{out}: already exists (choose another -o, or --force for an earlier convert output)") from None
    return record


@contextmanager
def _transformers_silenced() -> Iterator[None]:
    """transformers' progress bars and load reports off while the model is written and read back: the command's
    own lines say what happened (a size mismatch is still read by `weights.load_pretrained`)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


#: what conversion.json says of a TensorFlow 1 checkpoint's gelu, by the curve chosen
_GELU_NOTE = {"erf": f"gelu taken as erf (google-research/bert before {TF1_TANH_SINCE}: Google's Chinese and "
                     f"multilingual BERT); --gelu tanh for a checkpoint trained with its code since",
              "tanh": f"gelu taken as the tanh curve (--gelu tanh: google-research/bert since {TF1_TANH_SINCE})"}


def _record(source: Source, found: dict, state: dict, cls_name: str, tied: bool) -> dict:
    fmt = source.fmt
    adjustments = [a for a, applies in (
        ("dense kernels transposed ([in, out] -> [out, in])", any(is_kernel(n) for n in found.values())),
        ("segment table: UER's padding row 0 dropped", fmt.segment_pad_row),
        (f"LayerNorm gamma x sqrt((H-1)/H): the source divides by the unbiased deviation + {source.norm_eps:g}",
         fmt.unbiased_norm),
        (f"hidden_act {source.source_act} -> {source.hidden_act}", source.source_act != source.hidden_act),
        (_GELU_NOTE[source.gelu], fmt.kind == "tf1" and source.source_act == "gelu"),
        ("decoder restored as the word embeddings (tied)", DECODER not in found)) if applies]
    return {"source": {"kind": source.label, "path": str(source.checkpoint),
                       "key_generation": generation(found) if fmt.kind == "uer" else None,
                       "gelu": source.gelu if fmt.kind == "tf1" else None,
                       "files": {p.name: _sha256(p) for p in source.files}},
            "model": {"class": cls_name, "predicts": ["mlm"] + (["nsp"] if NSP_HEAD[0] in state else []),
                      "tied_decoder": tied, "hidden_act": source.hidden_act, **vars(source.dims)},
            "tensors": {"read": len(found), "written": len(state), "skipped": dict(sorted(source.skipped.items()))},
            "adjustments": adjustments}


def build_parser():
    return cli_config.build_parser("zh-bert convert", __doc__.split("\n")[0], ConvertConfig)


def main(argv: list[str]) -> int:
    cfg = cli_config.config_from_args(ConvertConfig, build_parser().parse_args(argv))
    src, out = Path(cfg.checkpoint), Path(cfg.output)
    claim_dir(out, inputs=[str(src)], force=cfg.force, need_force=True, what="an earlier output of zh-bert convert")
    record = convert_checkpoint(src, out, forced=cfg.from_format, config=cfg.config, vocab=cfg.vocab,
                                heads=cfg.heads, gelu=cfg.gelu, overwrite=cfg.force)
    eq, src_info = record["equality"], record["source"]
    skipped = ", ".join(f"{n} {k}" for k, n in record["tensors"]["skipped"].items()) or "none"
    print(f"converted {src} ({src_info['kind']}" + (f", {src_info['key_generation']} keys" if src_info["key_generation"]
                                                    else "") + f") -> {out} ({record['model']['class']})")
    print(f"  tensors: {record['tensors']['read']} read, skipped: {skipped}")
    print(f"  equal to the source's forward: max |Δ| MLM {eq['mlm_max_abs_diff']:.2e}"
          + (f", NSP {eq['nsp_max_abs_diff']:.2e}" if "nsp_max_abs_diff" in eq else "")
          + (f" (a plain rename: {eq['rename_only']['mlm_max_abs_diff']:.2e})" if "rename_only" in eq else ""))
    for line in record["adjustments"]:
        print(f"  {line}")
    print(f"  record: {out / RECORD}", file=sys.stdout)
    return 0
