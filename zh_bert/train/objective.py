"""The pretraining objectives, as data: what each trains besides the masked-LM loss, so the loop, the planner
and the recipe checks read an attribute instead of comparing names. Imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass(frozen=True)
class Objective:
    name: str
    pairs: Optional[str] = None     # the sentence pairs its shards hold (`zh-bert shard --pairs`): nsp, sop
    generator: bool = False         # ELECTRA: a generator fills the blanks, the discriminator detects replacements
    summary: str = ""

    @property
    def model_head(self) -> str:
        """The head the stock model carries: the MLM head only, or also the sentence-pair head."""
        return "pairs" if self.pairs else "mlm"


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (
    Objective("mlm", summary="masked-LM loss only"),
    Objective("mlm+nsp", pairs="nsp", summary="+ next-sentence prediction (BERT 2018)"),
    Objective("mlm+sop", pairs="sop", summary="+ sentence-order prediction (ALBERT)"),
    Objective("electra", generator=True, summary="replaced-token detection by a discriminator (ELECTRA)"),
)}
ObjectiveName = Literal[tuple(OBJECTIVES)]   # the recipe key's type
