"""The pretraining objectives, one `Objective` object each (`base.py` says what they are asked for): the recipe's
`objective` key names one. mlm, mlm+nsp, mlm+sop (`mlm.py`), electra (`electra.py`) and distill (`distill.py`),
each registered by its module; the torch side of an objective is its `*_net` module."""

from __future__ import annotations

from typing import Literal

from zh_bert.train.objectives.base import OBJECTIVES, LossTerm, Networks, Objective
from zh_bert.train.objectives.mlm import MLM, MLM_NSP, MLM_SOP   # registered in this order: the recipe's
from zh_bert.train.objectives.electra import ELECTRA  # noqa: I001  (choices read mlm | mlm+nsp | ... | distill)
from zh_bert.train.objectives.distill import DISTILL

ObjectiveName = Literal[tuple(OBJECTIVES)]   # the recipe key's type
__all__ = ["DISTILL", "ELECTRA", "MLM", "MLM_NSP", "MLM_SOP", "OBJECTIVES", "LossTerm", "Networks", "Objective",
           "ObjectiveName", "objective_named"]


def objective_named(name: str) -> Objective:
    """The objective a recipe's `objective` value (or a run.json's) names."""
    return OBJECTIVES.named(name)
