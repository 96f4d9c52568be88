"""zh-bert: a Chinese BERT pretraining toolkit.

Pipeline (one artifact per stage, all on disk):
raw text -> clean -> vocab -> shard -> pretrain -> publish / demo / eval.
Each stage lives in a module named after it; `zh_bert.cli` only dispatches.
"""

__version__ = "0.1.0"
