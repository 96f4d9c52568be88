"""Corpus stages: raw text -> cleaned documents (`clean`) -> tokenizer dir (`vocab`) -> packed shards (`shard`)."""
