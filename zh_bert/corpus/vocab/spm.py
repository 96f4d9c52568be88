"""SentencePiece: a bounded, reproducible sample of the corpus's sentences, an spm unigram/BPE model trained
on it with a fixed thread count, and that model exported as a `tokenizers` pipeline (tokenizer.json)."""

from __future__ import annotations

import heapq
import io
import random
import re
from typing import Iterable, Iterator

from zh_bert.core.errors import ZhBertError
from zh_bert.core.text import sentence_end_offsets
from zh_bert.corpus.vocab.tokenizer_json import add_specials, bert_normalizer, post_processor

# sentencepiece splits the corpus into this many chunks and sums their statistics in float: the model depends on
# the thread count (6,000-piece unigram and BPE models differ for 1, 2, 4 and 8 threads), so it is fixed, never
# os.cpu_count(): the same corpus and options give the same spiece.model on every machine.
SPM_THREADS = 8
# sentencepiece trains on at most --sample-mb MB of sentences (a reproducible uniform sample, `sample_sentences`).
SPM_SAMPLE_MB = 50.0


def spm_normalizer():
    """NFKC + BERT-uncased cleaning: applied to the training text *and* stored in tokenizer.json, so the
    pieces were learned on exactly what the tokenizer sees (spm itself trains with the identity rule)."""
    from tokenizers import normalizers

    return normalizers.Sequence([normalizers.NFKC(), bert_normalizer(split_cjk=False)])


def _sentences_with_spaces(text: str) -> list[str]:
    """`text` cut after each sentence end, whitespace kept: spm trains on pieces exactly as the tokenizer
    will see them (a space after '。' is a '▁' it has to learn)."""
    cuts = [0, *sentence_end_offsets(text), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()]


def sample_sentences(sentences: Iterable[str], max_bytes: int, seed: int = 0) -> tuple[list[str], int]:
    """(a uniform sample of `sentences` of at most `max_bytes` UTF-8 bytes, in corpus order; how many were
    seen), in memory bounded by `max_bytes`: each sentence gets a seeded random key and those with the
    smallest keys are kept (bottom-k sampling with a byte budget), so the same corpus gives the same sample.
    When everything fits, the sample is every sentence, in order."""
    rng = random.Random(seed)
    heap: list[tuple[float, int, str, int]] = []
    total = n = 0
    for n, text in enumerate(sentences, 1):
        size = len(text.encode("utf-8"))
        heapq.heappush(heap, (-rng.random(), n, text, size))
        total += size
        while total > max_bytes:
            total -= heapq.heappop(heap)[3]
    heap.sort(key=lambda e: e[1])
    return [e[2] for e in heap], n


def _drain(items: list[str]) -> Iterator[str]:
    """`items` in order, each dropped from the list once handed over (sentencepiece copies what it reads:
    the sample is not held twice)."""
    items.reverse()
    while items:
        yield items.pop()


def train_sentencepiece(docs: Iterable[str], size: int, *, exact_size: bool, model_type: str, unused: int,
                        character_coverage: float, sample_mb: float) -> tuple[bytes, dict]:
    """spm on at most `sample_mb` MB of the corpus's sentences (`sample_sentences`, streamed: one document
    at a time), as spm's own `input_sentence_size` bounds its memory, but in bytes and reproducible. Ids:
    [PAD], `unused` [unusedN] slots, [UNK], [CLS], [SEP], [MASK], then the pieces. `exact_size` False (no
    --size given) lets a small corpus give fewer than `size` pieces instead of refusing it."""
    import sentencepiece as spm

    norm = spm_normalizer()
    sentences, seen = sample_sentences((s for d in docs for s in _sentences_with_spaces(norm.normalize_str(d))),
                                       int(sample_mb * 1e6))
    stats = {"sentences": len(sentences), "sentences_sampled_from": seen if seen > len(sentences) else None}
    unused_slots = [f"[unused{i}]" for i in range(1, unused + 1)]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_drain(sentences), model_writer=model, vocab_size=size, model_type=model_type,
            pad_id=0, pad_piece="[PAD]", unk_id=unused + 1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            user_defined_symbols=unused_slots + ["[CLS]", "[SEP]", "[MASK]"], add_dummy_prefix=False,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            character_coverage=character_coverage, max_sentence_length=1 << 16,
            num_threads=SPM_THREADS, minloglevel=2,
            hard_vocab_limit=exact_size)  # default size on a small corpus: as many pieces as it has
    except RuntimeError as e:  # spm reports "Vocabulary size is smaller than required_chars", "too high", ...
        msg = str(e).strip().splitlines()[-1]
        small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", msg)
        large = re.search(r"too high \((\d+)\)\. Please set it to a value <= (\d+)", msg)
        if small:
            raise ZhBertError(f"--size {size} is smaller than the {int(small.group(1)):,} pieces sentencepiece must "
                              f"keep ({len(unused_slots) + 5} special tokens plus the characters that cover "
                              f"{character_coverage} of the text); use --size >= {int(small.group(1)):,} or a "
                              f"lower --character-coverage") from None
        if large:
            raise ZhBertError(f"--size {size} is more pieces than this corpus supports (at most "
                              f"{int(large.group(2)):,}); use a smaller --size or a bigger corpus") from None
        raise ZhBertError(f"--size {size}: sentencepiece refused to train: {msg}") from None
    return model.getvalue(), stats


def _spm_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """BPE merges implied by an spm BPE vocab: every split of a piece into two pieces, ranked by the id
    of the result (spm ids are in merge order), as transformers' converter does."""
    merges = []
    for piece, pid in vocab.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((pid, vocab[left], vocab[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def spm_tokenizer(model_proto: bytes, model_type: str = "unigram"):
    """The spm model as a `tokenizers` Unigram/BPE with the same normaliser and whitespace handling
    (no dummy prefix: spaces become '▁' at the start of the following piece)."""
    import sentencepiece as spm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    if sp.unk_id() < 0:  # pragma: no cover - we always train with an unk piece
        raise RuntimeError("sentencepiece model without an unknown piece")
    if model_type == "bpe":
        model = models.BPE(vocab, _spm_merges(vocab), unk_token="[UNK]", fuse_unk=True, byte_fallback=False)
    else:
        model = models.Unigram(pieces, unk_id=sp.unk_id(), byte_fallback=False)
    tk = Tokenizer(model)
    tk.normalizer = spm_normalizer()
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tk.post_processor = post_processor(vocab)
    add_specials(tk)
    return tk, [p for p, _ in pieces]
