"""The model families zh-bert trains, one `Architecture` object each (`base.py` says what they are asked for):
the recipe's `architecture` key names one, a checkpoint's config.json `model_type` finds one."""

from __future__ import annotations

from zh_bert.train.arch.base import FAMILIES, Architecture, family_of
from zh_bert.train.arch.bert import BERT
from zh_bert.train.arch.modernbert import MODERNBERT

ARCHITECTURES: dict[str, Architecture] = FAMILIES    # bert, modernbert: each registered by its module
__all__ = ["ARCHITECTURES", "BERT", "MODERNBERT", "Architecture", "get", "names", "of_config"]


def names() -> tuple[str, ...]:
    return ARCHITECTURES.names()


def get(name: str) -> Architecture:
    """The family a recipe's `architecture` value names."""
    return ARCHITECTURES.named(name)


def of_config(config) -> Architecture:
    """The family of a transformers config or a config.json dict (`base.family_of`)."""
    return family_of(config)
