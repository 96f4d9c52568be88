"""How a sentence's token states become one vector: each pooling is one object (as sentence-transformers'
`models.Pooling` modes), asked for its vector and for the sentence-transformers config that reproduces it.

- `mean` (the default): the mean of the last layer over the sentence's tokens ([CLS] and [SEP] included, as
  sentence-transformers counts them). Every token of an MLM-only checkpoint was trained; [CLS] was not.
- `cls`: the last layer at [CLS] (no pooler: sentence-transformers' `cls` reads the token state, not BERT's pooler).
- `first-last-avg`: the mean over tokens of the average of the first and the last encoder layer (text2vec's and
  SimCSE's `avg_first_last`, the first layer being `hidden_states[1]`, the first block's output). It has no
  sentence-transformers equivalent, so a model pooled this way is scored but not saved as such a folder.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pooling:
    """A pooling: its name, whether it reads every layer's states, and its `1_Pooling/config.json` (None: none)."""
    name: str
    all_layers: bool = False
    st_mode: str | None = None

    def pool(self, out, mask):
        """One vector per row of `out` (a transformers encoder output) over the tokens `mask` marks, in fp32."""
        states = out.last_hidden_state
        if self.name == "cls":
            return states[:, 0].float()
        if self.all_layers:
            states = (out.hidden_states[1] + out.hidden_states[-1]) / 2
        weights = mask.unsqueeze(-1).to(states.dtype)
        return ((states * weights).sum(1) / weights.sum(1).clamp(min=1)).float()

    def st_config(self, dim: int) -> dict | None:
        """sentence-transformers' `1_Pooling/config.json` in the layout every version since 2.x reads."""
        if self.st_mode is None:
            return None
        modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
        return {"word_embedding_dimension": dim, **{f"pooling_mode_{m}": m == self.st_mode for m in modes},
                "include_prompt": True}


POOLINGS: dict[str, Pooling] = {p.name: p for p in (
    Pooling("mean", st_mode="mean_tokens"),
    Pooling("cls", st_mode="cls_token"),
    Pooling("first-last-avg", all_layers=True),
)}
#: what the embed head pools by when `--pooling` is not given
DEFAULT_POOLING = "mean"


def pooling_named(name: str | None) -> Pooling:
    return POOLINGS[DEFAULT_POOLING if name in (None, "auto") else name]


def pooling_of_st(config: dict) -> Pooling | None:
    """The pooling a sentence-transformers `1_Pooling/config.json` (either generation's keys) describes, or None."""
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return {"mean": POOLINGS["mean"], "cls": POOLINGS["cls"]}.get(mode)
    found = [p for p in POOLINGS.values() if p.st_mode and config.get(f"pooling_mode_{p.st_mode}") is True]
    others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    return found[0] if len(found) == 1 and len(others) == 1 else None
