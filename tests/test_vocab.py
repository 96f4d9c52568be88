"""`zh-bert vocab` / `zh-bert vocab report` on real Chinese text (corpora/sample, ChnSentiCorp, Google's vocab).

Every kind is built once per session from the 600-document sample corpus (`sample_jsonl`) and then checked
the way a user would load it: plain `AutoTokenizer.from_pretrained(TOKDIR)`.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from conftest import GOOGLE_VOCAB, REPO, TASKS
from zh_bert.cli import main as cli
from zh_bert.core.fileio import read_vocab_txt

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KIND_ARGS = {
    "char": ["--kind", "char"],
    "wordpiece": ["--kind", "wordpiece", "--size", "8000"],
    "word": ["--kind", "word", "--size", "12000"],
    "sentencepiece": ["--kind", "sentencepiece", "--size", "6000"],
    "sentencepiece-bpe": ["--kind", "sentencepiece", "--size", "6000", "--model-type", "bpe"],
}


def chnsenticorp(split: str = "test") -> list[str]:
    with open(TASKS / "chnsenticorp" / f"{split}.tsv", encoding="utf-8", newline="") as f:
        return [row["text_a"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


@pytest.fixture(scope="module")
def tokdirs(tmp_path_factory, sample_jsonl) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokdirs")
    out = {}
    for name, args in KIND_ARGS.items():
        out[name] = root / name
        assert cli(["vocab", str(sample_jsonl), "-o", str(out[name]), "-q", *args]) == 0
    return out


def auto(tokdir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokdir))


def squash(text: str) -> str:
    return "".join(text.split())


def normalised(kind: str, text: str) -> str:
    """What the tokenizer's normaliser makes of `text` (BERT uncased; sentencepiece adds NFKC)."""
    from tokenizers import normalizers

    bert = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, lowercase=True)
    if kind.startswith("sentencepiece"):
        text = unicodedata.normalize("NFKC", text)
    return squash(bert.normalize_str(text))


@pytest.mark.parametrize("kind", list(KIND_ARGS))
def test_every_kind_is_a_stock_tokenizer_dir(tokdirs, kind):
    d = tokdirs[kind]
    names = {p.name for p in d.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "zh_bert_vocab.json"} <= names
    assert ("vocab.txt" in names) == (not kind.startswith("sentencepiece"))
    assert not [n for n in d.parent.iterdir() if n.name.startswith(".")], "temp dirs left behind"
    meta = json.loads((d / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    assert meta["kind"] == kind.split("-")[0] and meta["build_seconds"] > 0 and meta["corpus_docs"] == 600
    assert set(meta["options"]) >= {"size", "min_frequency", "unused", "base_vocab"}
    tok = auto(d)
    assert len(tok) == meta["vocab_size"] > 1000
    # Google's special ids (99 [unused] slots by default), both as tokens and as the tokenizer's attributes.
    assert [tok.convert_tokens_to_ids(s) for s in SPECIALS] == [0, 100, 101, 102, 103]
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (
        0, 100, 101, 102, 103)
    # a known character maps to the id the files give it (not [UNK]: transformers 5 can silently ignore a vocab)
    model = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    file_id = dict(model)["的"] if isinstance(model, dict) else [p for p, _ in model].index("的")
    assert tok.convert_tokens_to_ids("的") == file_id > 103
    assert tok("的", add_special_tokens=False)["input_ids"] == [file_id]
    enc = tok("今天天气很好[MASK]。", "我们去北京。")
    assert enc["input_ids"][0] == 101 and enc["input_ids"].count(102) == 2 and 103 in enc["input_ids"]
    assert set(enc["token_type_ids"]) == {0, 1}
    from zh_bert.corpus.tokenizer_files import load_tokenizer, tokenizer_fingerprint

    assert len(tokenizer_fingerprint(load_tokenizer(d))) == 16


@pytest.mark.parametrize("kind", list(KIND_ARGS))
def test_round_trip_on_chnsenticorp(tokdirs, kind):
    """decode(encode(x)) == x modulo the normaliser and spaces, for every review without an [UNK]."""
    tok = auto(tokdirs[kind])
    texts = chnsenticorp()[:300]
    ok = 0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if tok.unk_token_id in ids:
            continue
        ok += 1
        assert squash(tok.decode(ids)) == normalised(kind, text), text
    assert ok >= 0.6 * len(texts), f"only {ok} of {len(texts)} reviews encode without [UNK]"


@pytest.mark.slow
def test_every_kind_builds_byte_identical_files_in_a_fresh_process(tokdirs, sample_jsonl, tmp_path):
    """Same corpus + same flags -> same TOKDIR bytes. Built again in another Python process, because the
    `tokenizers` WordPieceTrainer's ties followed Rust HashMap order, which is random per process (the
    char and wordpiece vocabs came out with reordered '##xx' pieces and a different piece at the cut-off);
    sentencepiece depends on its thread count, which is fixed rather than taken from the machine."""
    code = ("import sys; from zh_bert.cli import main; sys.exit(max(main(['vocab', sys.argv[1], '-o', sys.argv[2] + '/'"
            " + name, '-q', *args]) for name, args in __import__('json').loads(sys.argv[3]).items()))")
    subprocess.run([sys.executable, "-c", code, str(sample_jsonl), str(tmp_path), json.dumps(KIND_ARGS)],
                   cwd=REPO, check=True, capture_output=True)
    for kind in KIND_ARGS:
        names = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
        names += ["spiece.model"] if kind.startswith("sentencepiece") else ["vocab.txt"]
        for name in names:
            assert (tmp_path / kind / name).read_bytes() == (tokdirs[kind] / name).read_bytes(), (kind, name)
        meta = [json.loads((d / "zh_bert_vocab.json").read_text(encoding="utf-8")) for d in (tmp_path / kind,
                                                                                              tokdirs[kind])]
        for m in meta:
            del m["build_seconds"]
        assert meta[0] == meta[1], kind


def test_wordpiece_learner_is_the_trainer_algorithm_with_reproducible_ties(sample_docs):
    """Our learner replaces the `tokenizers` WordPieceTrainer: same greedy merges on the same counts, so
    the pieces agree with the trainer's except among equal counts at the cut-off."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from zh_bert.corpus.vocab.tokenizer_json import bert_normalizer, special_layout
    from zh_bert.corpus.vocab.wordpiece import train_wordpieces

    ours = train_wordpieces(sample_docs, 4000, 1, special_layout(99))
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = bert_normalizer(split_cjk=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.train_from_iterator(sample_docs, trainer=trainers.WordPieceTrainer(
        vocab_size=4000, show_progress=False, special_tokens=special_layout(99), continuing_subword_prefix="##"))
    theirs = tk.get_vocab()
    assert len(ours) == len(theirs) == 4000 and ours[:104] == special_layout(99)
    assert len(set(ours) - set(theirs)) < 0.02 * len(ours)
    # the first merges (clear winners by count) are the trainer's; only ties may come in another order
    merged = [t for t in ours[104:] if len(t.removeprefix("##")) > 1]
    trainer = [t for t in sorted(theirs, key=theirs.__getitem__)[104:] if len(t.removeprefix("##")) > 1]
    assert merged[:5] == trainer[:5] == ["20", "19", "201", "##00", "200"]
    assert set(merged[:10]) == set(trainer[:10]) and set(merged[:30]) <= set(trainer[:40])


def most_common_chars(docs, n):
    import collections

    return [c for c, _ in collections.Counter(c for d in docs for c in d.lower() if not c.isspace()).most_common(n)]


def test_char_ids_are_frequency_ordered_and_known(tokdirs, sample_docs):
    tok = auto(tokdirs["char"])
    # Ids follow corpus frequency: in Chinese text '，' and '的' come first, right after the 104 specials.
    first = most_common_chars(sample_docs, 3)
    assert set(first[:2]) == {"，", "的"}
    assert [tok.convert_tokens_to_ids(c) for c in first] == [104, 105, 106]
    assert tok(first[1], add_special_tokens=False)["input_ids"] == [105]
    vocab = read_vocab_txt(tokdirs["char"] / "vocab.txt")
    meta = json.loads((tokdirs["char"] / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    # 600 documents run out of characters and Latin pieces before the default 21,128: the vocab says so
    assert len(vocab) == meta["vocab_size"] > 5000 and len(set(vocab)) == len(vocab)
    # every CJK character is a single token; Latin words get WordPiece pieces ('##' continuations exist)
    assert tok.tokenize("北京大学") == ["北", "京", "大", "学"]
    assert any(t.startswith("##") for t in vocab) and "the" in vocab
    assert tok.unk_token_id not in tok("BERT模型在GPU上训练", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("kind", ["char", "wordpiece", "word"])
def test_vocab_txt_matches_tokenizer_json(tokdirs, kind):
    """transformers 4.x reads vocab.txt: same token -> id mapping as tokenizer.json, split on '\\n' only,
    and BertTokenizer(vocab=vocab.txt) reproduces the ids (for `word`: of the single characters)."""
    from transformers import BertTokenizer

    d = tokdirs[kind]
    vocab = read_vocab_txt(d / "vocab.txt")
    model = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert vocab == [t for t, _ in sorted(model.items(), key=lambda kv: kv[1])]
    assert (d / "vocab.txt").read_bytes().count(b"\n") == len(vocab)
    slow = BertTokenizer(vocab=str(d / "vocab.txt"))
    assert len(slow) == len(vocab) and slow.convert_tokens_to_ids("的") == vocab.index("的")
    texts = chnsenticorp()[:100]
    if kind == "word":
        tok = auto(d)
        assert slow.convert_tokens_to_ids(list("北京大学")) == tok.convert_tokens_to_ids(list("北京大学"))
    else:
        assert slow(texts)["input_ids"] == auto(d)(texts)["input_ids"]


def test_word_kind_segments_words_and_isolates_unknown_chars(tokdirs):
    tok = auto(tokdirs["word"])
    meta = json.loads((tokdirs["word"] / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    assert meta["words"] > 1000 and tok.convert_tokens_to_ids("的") == 105  # characters first, by frequency
    tokens = tok.tokenize("我们的研究")
    assert any(len(t) > 1 for t in tokens) and "".join(tokens) == "我们的研究"
    # One character outside the vocab costs one [UNK], not the whole run (WordPiece is all-or-nothing).
    ids = tok("我们的😀研究", add_special_tokens=False)["input_ids"]
    assert ids.count(tok.unk_token_id) == 1 and len(ids) >= 3
    # fewer tokens than characters on real reviews: that is the point of a word vocabulary
    texts = chnsenticorp()[:200]
    n_tokens = sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"])
    assert n_tokens < 0.85 * sum(len(squash(t)) for t in texts)


@pytest.mark.parametrize("kind", ["sentencepiece", "sentencepiece-bpe"])
def test_sentencepiece_ids_equal_the_spm_model(tokdirs, kind):
    """tokenizer.json is a faithful export of spiece.model: same ids as sentencepiece itself on
    normalised text, and '的' maps to the same known id in both."""
    import sentencepiece as spm

    from zh_bert.corpus.vocab.spm import spm_normalizer

    d = tokdirs[kind]
    sp = spm.SentencePieceProcessor(model_file=str(d / "spiece.model"))
    tok = auto(d)
    assert tok.convert_tokens_to_ids("的") == sp.piece_to_id("的") > 103
    assert [sp.id_to_piece(i) for i in (0, 100, 101, 102, 103)] == SPECIALS
    norm = spm_normalizer()
    texts = chnsenticorp()[:100]
    same = sum(tok(t, add_special_tokens=False)["input_ids"] == sp.encode(norm.normalize_str(t)) for t in texts)
    assert same >= 0.97 * len(texts)


def test_base_vocab_google_encodes_chnsenticorp_exactly_like_bert_tokenizer(tmp_path, sample_jsonl):
    from transformers import BertTokenizer

    out = tmp_path / "g"
    assert cli(["vocab", str(sample_jsonl), "-o", str(out), "--base-vocab", str(GOOGLE_VOCAB),
                "--size", "21128", "-q"]) == 0
    assert read_vocab_txt(out / "vocab.txt") == read_vocab_txt(GOOGLE_VOCAB)
    tok, google = auto(out), BertTokenizer(vocab=str(GOOGLE_VOCAB))
    assert tok.convert_tokens_to_ids("中") == google.convert_tokens_to_ids("中") == 704
    texts = chnsenticorp("test")
    assert len(texts) == 1200
    assert tok(texts)["input_ids"] == google(texts)["input_ids"]


def test_base_vocab_appends_without_moving_any_id(tmp_path, sample_jsonl):
    from transformers import BertTokenizer

    out = tmp_path / "g+"
    assert cli(["vocab", str(sample_jsonl), "-o", str(out), "--base-vocab", str(GOOGLE_VOCAB), "-q"]) == 0
    google = read_vocab_txt(GOOGLE_VOCAB)
    vocab = read_vocab_txt(out / "vocab.txt")
    assert vocab[:len(google)] == google and len(vocab) > len(google)
    meta = json.loads((out / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    assert meta["added_to_base"] == len(vocab) - len(google) and meta["vocab_size"] == len(vocab)
    new = vocab[len(google):]
    # bert-base-chinese famously maps Chinese quotation marks to [UNK]; the adapted vocab learns them.
    assert "“" in new and "”" in new
    tok, old = auto(out), BertTokenizer(vocab=str(GOOGLE_VOCAB))
    assert tok.convert_tokens_to_ids("“") >= len(google) and old.convert_tokens_to_ids("“") == 100
    texts = chnsenticorp()[:300]
    gset = set(google)
    known = [t for t in texts if all(c in gset or c.isspace() for c in t.lower())]
    assert known and tok(known)["input_ids"] == old(known)["input_ids"]
    # a larger --size appends Latin/digit pieces after the new characters, still without moving anything
    out2 = tmp_path / "g++"
    assert cli(["vocab", str(sample_jsonl), "-o", str(out2), "--base-vocab", str(GOOGLE_VOCAB), "--size", "22000",
                "-q"]) == 0
    vocab2 = read_vocab_txt(out2 / "vocab.txt")
    assert len(vocab2) == 22000 and vocab2[:len(vocab)] == vocab


def test_report_and_compare(tokdirs, tmp_path, capsys):
    from zh_bert.corpus.vocab.report import vocab_report

    text = tmp_path / "reviews.txt"
    text.write_text("\n".join(chnsenticorp()[:400]) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert cli(["vocab", "report", str(tokdirs["char"]), str(text), "--compare", str(tokdirs["word"]),
                "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for label in ("vocab size", "UNK rate", "chars/token", "char coverage", "top UNK chars"):
        assert label in printed
    assert str(tokdirs["char"]) in printed and str(tokdirs["word"]) in printed
    char, word = json.loads(out.read_text(encoding="utf-8"))
    assert (char["kind"], word["kind"]) == ("char", "word") and char["docs"] == word["docs"] == 400
    assert char["vocab_size"] == len(auto(tokdirs["char"])) and word["vocab_size"] == len(auto(tokdirs["word"]))
    assert 0.95 < char["chars_per_token"] < 1.3 < word["chars_per_token"]
    assert 0 <= char["unk_rate"] < 0.01 and char["char_coverage"] > 0.99
    # Google's vocab on the same reviews: its [UNK]s are dominated by Chinese quotation marks
    google = vocab_report(_google_dir(tmp_path), chnsenticorp()[:400])
    assert google["unk_rate"] > 0 and google["top_unk_chars"][0][0] in "“”"
    assert google["kind"] == "BertTokenizer"  # no zh_bert_vocab.json: kind falls back to the class name


def _google_dir(tmp_path) -> Path:
    from transformers import BertTokenizer

    d = tmp_path / "google"
    BertTokenizer(vocab=str(GOOGLE_VOCAB)).save_pretrained(str(d))
    return d


# ------------------------------------------------------------------------------------------ bad input


def run_cli(args, capsys) -> tuple[int, str]:
    rc = cli(args)
    err = capsys.readouterr().err.strip()
    return rc, err


def test_bad_inputs_give_one_line_errors_and_write_nothing(tmp_path, sample_jsonl, capsys):
    out = tmp_path / "tok"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    badjson = tmp_path / "bad.jsonl"
    badjson.write_text('{"text": "中文", "source": "a"}\n{"text": 3}\n', encoding="utf-8")
    dup = tmp_path / "dup_vocab.txt"
    google = read_vocab_txt(GOOGLE_VOCAB)
    dup.write_text("\n".join(google + ["的"]) + "\n", encoding="utf-8")
    nospecial = tmp_path / "nomask_vocab.txt"
    nospecial.write_text("\n".join(t for t in google if t != "[MASK]") + "\n", encoding="utf-8")
    cases = [
        (["vocab", str(empty), "-o", str(out)], "empty corpus"),
        (["vocab", str(tmp_path / "missing.jsonl"), "-o", str(out)], "no such file"),
        (["vocab", str(badjson), "-o", str(out)], "bad.jsonl:2"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--size", "300"], "--size 300 is smaller than the 104 special"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--kind", "word", "--size", "300"], "--size 300 is smaller"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--kind", "wordpiece", "--size", "300"], "alphabet"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--kind", "sentencepiece", "--size", "300"], "--size >="),
        (["vocab", str(sample_jsonl), "-o", str(out), "--base-vocab", str(dup)], "duplicate entry '的' at lines"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--base-vocab", str(nospecial)], "missing special token(s) [MASK]"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--base-vocab", str(GOOGLE_VOCAB), "--size", "100"],
         "smaller than --base-vocab's 21128 entries"),
        (["vocab", str(sample_jsonl), "-o", str(out), "--kind", "wordpiece", "--base-vocab", str(GOOGLE_VOCAB)],
         "--base-vocab works with --kind char or word"),
        (["vocab", "report", str(tmp_path / "nodir"), str(sample_jsonl)], "tokenizer directory not found"),
        (["vocab", "report", str(REPO / "tests" / "data" / "chnsenticorp"), str(empty)], "empty corpus"),
    ]
    for args, expected in cases:
        rc, err = run_cli(args, capsys)
        assert rc == 2, (args, err)
        assert expected in err and len(err.splitlines()) == 1 and "Traceback" not in err, (args, err)
        assert not out.exists(), args
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["empty.jsonl", "bad.jsonl", "dup_vocab.txt", "nomask_vocab.txt"]), "half-written output left behind"


def test_existing_output_refused_unless_force(tmp_path, sample_jsonl, capsys):
    out = tmp_path / "tok"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    rc, err = run_cli(["vocab", str(sample_jsonl), "-o", str(out), "--max-docs", "50", "--size", "6000"], capsys)
    assert rc == 2 and "exists; pass --force" in err and (out / "keep.txt").exists()
    # --force replaces only a TOKDIR this command wrote, never a folder holding anything else
    rc, err = run_cli(["vocab", str(sample_jsonl), "-o", str(out), "--max-docs", "50", "--force", "-q"], capsys)
    assert rc == 2 and "refusing to overwrite" in err and "keep.txt" in err and (out / "keep.txt").exists()
    (out / "keep.txt").unlink()
    assert cli(["vocab", str(sample_jsonl), "-o", str(out), "--max-docs", "60", "--force", "-q"]) == 0  # empty: no loss
    assert cli(["vocab", str(sample_jsonl), "-o", str(out), "--max-docs", "50", "--force", "-q"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["tok"] and (out / "tokenizer.json").exists()
    assert json.loads((out / "zh_bert_vocab.json").read_text(encoding="utf-8"))["corpus_docs"] == 50


def test_txt_corpus_and_unused_slots(tmp_path, sample_docs):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(sample_docs[:100]) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    assert cli(["vocab", str(corpus), "-o", str(out), "--unused", "0", "--min-frequency", "2", "-q"]) == 0
    tok = auto(out)
    assert [tok.convert_tokens_to_ids(s) for s in SPECIALS] == [0, 1, 2, 3, 4]
    assert [tok.convert_tokens_to_ids(c) for c in most_common_chars(sample_docs[:100], 2)] == [5, 6]


def test_help_does_not_import_heavy_libraries():
    code = ("import sys; from zh_bert.corpus.vocab import build_parser, build_report_parser; build_parser(); "
            "build_report_parser(); print(sorted(m for m in ('tokenizers', 'transformers', 'torch', 'sentencepiece')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_word_on_google_vocab_is_the_wobert_recipe(tmp_path, sample_jsonl):
    """WoBERT = Google's vocab + jieba words: every Google id kept, words appended and used by the tokenizer."""
    out = tmp_path / "wobert"
    assert cli(["vocab", str(sample_jsonl), "-o", str(out), "--kind", "word", "--base-vocab", str(GOOGLE_VOCAB),
                "--size", "23000", "-q"]) == 0
    google = read_vocab_txt(GOOGLE_VOCAB)
    vocab = read_vocab_txt(out / "vocab.txt")
    assert len(vocab) == 23000 and vocab[:len(google)] == google
    tok = auto(out)
    assert tok.convert_tokens_to_ids("中") == 704 and tok.convert_tokens_to_ids("[MASK]") == 103
    ids = tok("我们的研究", add_special_tokens=False)["input_ids"]
    assert any(i >= len(google) for i in ids) and squash(tok.decode(ids)) == "我们的研究"


def test_sentencepiece_default_size_fits_a_small_corpus(tmp_path, sample_docs, capsys):
    corpus = tmp_path / "few.txt"
    corpus.write_text("\n".join(sample_docs[:20]) + "\n", encoding="utf-8")
    out = tmp_path / "spm"
    # no --size: as many pieces as 20 documents support; an explicit --size that is too big is an error
    assert cli(["vocab", str(corpus), "-o", str(out), "--kind", "sentencepiece", "-q"]) == 0
    meta = json.loads((out / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    assert 500 < meta["vocab_size"] < 21128 and len(auto(out)) == meta["vocab_size"]
    rc, err = run_cli(["vocab", str(corpus), "-o", str(tmp_path / "x"), "--kind", "sentencepiece",
                       "--size", "21128"], capsys)
    assert rc == 2 and "more pieces than this corpus supports" in err and not (tmp_path / "x").exists()


def test_python_api_is_the_cli(tmp_path, sample_jsonl):
    """`build_vocab(VocabConfig(...))` is what `zh-bert vocab` runs: same validation, same TOKDIR."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.corpus.vocab import ReportConfig, VocabConfig, VocabOptions, build_vocab

    for make, msg in ((lambda: VocabOptions(kind="chars"), "--kind must be one of"),
                      (lambda: VocabOptions(kind="wordpiece", base_vocab="v.txt"), "--base-vocab works with"),
                      (lambda: VocabConfig(corpus=["x"], output="o", max_docs=0), "--max-docs must be a positive"),
                      (lambda: ReportConfig(tokdir="t", text=["x"], top_unk=-1), "--top-unk")):
        with pytest.raises(ZhBertError, match=msg):
            make()
    out = build_vocab(VocabConfig(corpus=[str(sample_jsonl)], output=str(tmp_path / "api"), max_docs=50,
                                  options=VocabOptions(size=6000)))
    assert cli(["vocab", str(sample_jsonl), "-o", str(tmp_path / "cli"), "--max-docs", "50", "--size", "6000",
                "-q"]) == 0
    assert out == tmp_path / "api"
    for name in ("vocab.txt", "tokenizer.json"):
        assert (out / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
