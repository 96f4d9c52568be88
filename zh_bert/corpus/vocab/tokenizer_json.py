"""The `tokenizers` side of a TOKDIR: BERT's special tokens and normaliser, the WordPiece pipelines of the
char/wordpiece/word kinds (tokenizer.json), and the transformers config files that load them."""

from __future__ import annotations

from typing import Iterable

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MODEL_MAX_LENGTH = 512
WORD_MAX_CHARS = 512  # longest run between punctuation that `word` still matches (longer -> one [UNK])


def special_layout(unused: int) -> list[str]:
    """[PAD], [unused1..N], [UNK], [CLS], [SEP], [MASK]: with N=99 exactly Google's ids 0..103."""
    return ["[PAD]"] + [f"[unused{i}]" for i in range(1, unused + 1)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def bert_normalizer(split_cjk: bool):
    from tokenizers import normalizers

    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=split_cjk, strip_accents=None,
                                      lowercase=True)


def post_processor(token_to_id: dict[str, int]):
    from tokenizers import processors

    return processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", token_to_id["[CLS]"]), ("[SEP]", token_to_id["[SEP]"])])


def add_specials(tk) -> None:
    """Specials are matched before normalisation, so '[MASK]' in text is never lowercased into pieces."""
    from tokenizers import AddedToken

    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])


def bert_tokenizer(tokens: list[str]):
    """Exactly what transformers' BertTokenizer builds from a vocab.txt (uncased, CJK chars split)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = bert_normalizer(split_cjk=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##")
    tk.post_processor = post_processor(vocab)
    add_specials(tk)
    return tk


def char_class(chars: Iterable[str], python: bool = False) -> str:
    """A regex character-class body covering `chars` as escaped code-point ranges (compact, nothing
    to mis-escape); `\\x{..}` for the tokenizers (Oniguruma) engine, `\\U........` for Python's re."""
    esc = (lambda cp: f"\\U{cp:08X}") if python else (lambda cp: f"\\x{{{cp:X}}}")
    cps = sorted({ord(c) for c in chars})
    parts, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(esc(cps[i]) + (f"-{esc(cps[j])}" if j > i else ""))
        i = j + 1
    return "".join(parts)


def word_tokenizer(tokens: list[str]):
    """Word vocab as a stock `tokenizers` pipeline that round-trips through tokenizer.json.

    jieba cannot run inside tokenizer.json, so segmentation is greedy longest-match (forward maximum
    matching) over each run between whitespace/punctuation: a WordPiece model with an empty continuation
    prefix. Characters missing from the vocab are split off first, so one rare character costs one [UNK]
    instead of turning the whole run into [UNK] (WordPiece's all-or-nothing rule).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="",
                                    max_input_chars_per_word=WORD_MAX_CHARS))
    tk.normalizer = bert_normalizer(split_cjk=False)
    singles = [t for t in tokens if len(t) == 1 and not t.isspace()]
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(),
        pre_tokenizers.Split(Regex(f"[^{char_class(singles)}]"), behavior="isolated"),
    ])
    tk.decoder = decoders.WordPiece(prefix="##")
    tk.post_processor = post_processor(vocab)
    add_specials(tk)
    return tk


def tokenizer_config(kind: str) -> dict:
    """char/wordpiece: BertTokenizer (what every BERT user expects; transformers 5 rebuilds it from the vocab
    with these flags, 4.x reads tokenizer.json). word/sentencepiece: PreTrainedTokenizerFast, which loads
    tokenizer.json verbatim in 4.x and 5.x (BertTokenizer would re-split every CJK character)."""
    cfg = {"tokenizer_class": "BertTokenizer" if kind in ("char", "wordpiece") else "PreTrainedTokenizerFast",
           "model_max_length": MODEL_MAX_LENGTH, "clean_up_tokenization_spaces": False}
    if kind in ("char", "wordpiece"):
        cfg.update(do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None)
    cfg.update(special_tokens_map())
    cfg["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    return cfg


def special_tokens_map() -> dict:
    return {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
            "mask_token": "[MASK]"}
