"""NER: tag schemes, readers, the entity metric against seqeval, windows over long sentences, the token classifier
and its predictions file, on the bundled Resume and MSRA files (corpora/tasks/*_ner, SOURCE.md) and cuts of the
shared Resume copy (tests/data/ner_crlf, README.md).

seqeval is the oracle: every figure zh-bert computes is recomputed by `seqeval.metrics` (default mode, conlleval's
rules) on the same tags, and a predictions file is re-read and re-scored by it."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.ner_files import read_ner
from zh_bert.evaluation.tasks.ner import carve_choose, load_ner
from zh_bert.evaluation.metrics.entities import entity_scores
from zh_bert.evaluation.tasks.tag_schemes import SCHEMES, broken_tags, entities, scheme_named
from zh_bert.evaluation.heads.tag.tagging import best_window, convert, encode, window_starts

REPO = Path(__file__).resolve().parent.parent
RESUME = REPO / "corpora" / "tasks" / "resume_ner"
MSRA = REPO / "corpora" / "tasks" / "msra_ner"
CRLF = Path(__file__).resolve().parent / "data" / "ner_crlf"
BIO, BIOES, BMES = (SCHEMES[k] for k in ("bio", "bioes", "bmes"))

seqeval = pytest.importorskip("seqeval.metrics")


def oracle(gold, pred) -> tuple[float, float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # seqeval warns on M- tags and on a score of nothing
        return (seqeval.precision_score(gold, pred), seqeval.recall_score(gold, pred), seqeval.f1_score(gold, pred))


def ours(gold, pred, scheme) -> tuple[float, float, float]:
    s = entity_scores(gold, pred, scheme)
    return s["precision"], s["recall"], s["f1"]


HAND_CASES = {   # id: (scheme, gold sentences, predicted sentences)
    "bio": (BIO, [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]],
            [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "I-ORG"]]),
    "bmes": (BMES, [["B-ORG", "M-ORG", "E-ORG", "O", "S-NAME"]], [["B-ORG", "M-ORG", "E-ORG", "O", "B-NAME"]]),
    "single_S": (BMES, [["S-NAME", "O", "S-LOC", "S-LOC"]], [["S-NAME", "O", "S-LOC", "O"]]),
    "entity_at_sentence_end": (BIO, [["O", "O", "B-LOC", "I-LOC"]], [["O", "O", "B-LOC", "I-LOC"]]),
    "I_without_B": (BIO, [["O", "B-PER", "I-PER", "O"]], [["O", "I-PER", "I-PER", "O"]]),
    "I_after_other_type": (BIO, [["B-PER", "I-PER", "O"]], [["B-PER", "I-LOC", "O"]]),
    "adjacent_same_type": (BIO, [["B-PER", "I-PER", "B-PER", "I-PER"]], [["B-PER", "I-PER", "I-PER", "I-PER"]]),
    "adjacent_same_type_bioes": (BIOES, [["B-PER", "E-PER", "B-PER", "E-PER"]], [["B-PER", "E-PER", "S-PER", "S-PER"]]),
    "empty_prediction": (BIO, [["B-PER", "I-PER", "O"]], [["O", "O", "O"]]),
    "nothing_anywhere": (BIO, [["O", "O"]], [["O", "O"]]),
}


@pytest.mark.parametrize("case", HAND_CASES)
def test_entity_f1_equals_seqeval_on_hand_cases(case):
    """Precision, recall and F1 as seqeval's default computes them (BMES through its BIOES twin)."""
    scheme, gold, pred = HAND_CASES[case]
    twin = [[scheme.scoring_tag(t) for t in s] for s in gold], [[scheme.scoring_tag(t) for t in s] for s in pred]
    assert ours(gold, pred, scheme) == pytest.approx(oracle(*twin), abs=1e-12)


def test_entities_read_as_seqeval_reads_any_sequence():
    """On 5,000 random tag sequences of every prefix (broken ones included), the same entities as seqeval."""
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(0)
    tags = ["O", "O"] + [f"{p}-{t}" for p in "BIES" for t in ("PER", "LOC")]
    for _ in range(5000):
        seq = [rng.choice(tags) for _ in range(rng.randint(0, 12))]
        assert entities(seq) == get_entities(seq), seq


def test_schemes_convert_through_entities_and_count_breaks():
    """BIO -> BIOES -> BMES -> BIO keeps every entity; `I-LOC after B-PER` is counted once, not refused."""
    bio = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-ORG"]
    bmes = convert(convert(bio, BIO, BIOES), BIOES, BMES)
    assert bmes == ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC", "O", "S-ORG"]
    assert convert(bmes, BMES, BIO) == bio
    assert broken_tags(BIO, [bio]) == (0, None)
    assert broken_tags(BIO, [["B-PER", "I-LOC", "O"], ["I-PER"]]) == (2, "I-LOC after B-PER")
    assert broken_tags(BMES, [["B-ORG", "M-ORG", "O"]]) == (1, "O after M-ORG")
    assert scheme_named("IOBES") is BIOES
    with pytest.raises(ZhBertError, match="--tag-scheme bilo: unknown tag scheme .*known: bio, bioes, bmes"):
        scheme_named("bilo")


def test_readers_conll_tsv_crlf_and_the_bundled_tasks():
    """Resume (CoNLL, spaces), its shared copy (BOM, CRLF) and MSRA (UER's TSV): sentences and tags as published."""
    head = read_ner(CRLF / "resume_train_head.char.bmes")
    release = read_ner(RESUME / "train.char.bmes")[:3]
    assert [s.tokens for s in head] == [s.tokens for s in release] and len(head) == 3
    assert head[0].tokens[0] == "高" and head[0].tags[:2] == ["B-NAME", "E-NAME"]
    msra = read_ner(MSRA / "dev.tsv")
    assert len(msra) == 2318 and sum(len(s.tokens) for s in msra) == 109870
    assert msra[1].tokens[5:9] == list("青岛海牛") and msra[1].tags[5] == "B-ORG"
    task = load_ner("resume_ner", RESUME / "train.char.bmes", RESUME / "dev.char.bmes", RESUME / "test.char.bmes")
    assert task.scheme is BMES and task.types == ["CONT", "EDU", "LOC", "NAME", "ORG", "PRO", "RACE", "TITLE"]
    assert (len(task.train), len(task.dev), len(task.test)) == (3814, 462, 477)
    assert any("2 tags break the BMES scheme (first: M-ORG after O" in n for n in task.notes)


def test_conll_tab_separated_and_a_test_file_without_tags(tmp_path):
    """Tabs read like spaces; a test file of characters only is predicted, not scored, and said so."""
    (tmp_path / "train.txt").write_text("北\tB-LOC\n京\tI-LOC\n好\tO\n\n张\tB-PER\n三\tI-PER\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("上\tB-LOC\n海\tI-LOC\n", encoding="utf-8")
    (tmp_path / "test.txt").write_text("李\n四\n\n广\n州\n", encoding="utf-8")
    task = load_ner("mine", *(tmp_path / f"{s}.txt" for s in ("train", "dev", "test")))
    assert task.scheme is BIO and task.types == ["LOC", "PER"] and not task.scored
    assert [s.tokens for s in task.test] == [["李", "四"], ["广", "州"]]
    assert any("test.txt: no tags: test is predicted, not scored" in n for n in task.notes)


def _files(tmp_path, train: str, dev: str = "上 B-LOC\n海 I-LOC\n", test: str | None = None) -> list:
    paths = []
    for name, text in (("train", train), ("dev", dev), ("test", test)):
        if text is not None:
            (tmp_path / f"{name}.txt").write_text(text, encoding="utf-8")
            paths.append(tmp_path / f"{name}.txt")
    return paths + [None] * (3 - len(paths))


@pytest.mark.parametrize("train, dev, test, says", [
    ("北 B-LOC\n京 I-LOC x\n", None, None, r"train\.txt:2: 3 fields, expected 2"),
    ("北 B-LOC\n京\n", None, None, r"train\.txt:2: 1 field, expected 2"),
    ("北\n京\n", None, None, r"train\.txt: no tags \(one field per line\): the train file needs a tag"),
    ("北 B-LOC\n京 LOC\n", None, None, r"train\.txt:2: tag 'LOC' belongs to no known tag scheme"),
    ("北 B-LOC\n京 M-LOC\n", "上 B-LOC\n海 I-LOC\n", None, r"tags of two schemes, M- \(BMES\) and I-"),
    ("北 O\n京 O\n", None, None, r"no entity in the train split of task t: nothing to learn"),
    ("text_a\tlabel\n北 京\tB-LOC I-LOC\n上 海\t\n", None, None, r"train\.txt:3: a sentence without tags"),
    ("北 京 市\tB-LOC I-LOC\n", None, None, r"train\.txt:1: 3 characters but 2 tags"),
])
def test_bad_ner_files_are_one_line_naming_file_and_line(tmp_path, train, dev, test, says):
    paths = _files(tmp_path, train, dev or "上 B-LOC\n海 I-LOC\n", test)
    with pytest.raises(ZhBertError, match=says):
        load_ner("t", *paths)


def test_the_shared_resume_copys_one_field_line_is_named():
    with pytest.raises(ZhBertError, match=r"resume_train_one_field\.char\.bmes:18: 1 field, expected 2"):
        read_ner(CRLF / "resume_train_one_field.char.bmes")


def test_unseen_test_types_are_named_and_a_forced_scheme_must_fit(tmp_path):
    paths = _files(tmp_path, "北 B-LOC\n京 I-LOC\n", test="张 B-PER\n三 I-PER\n\n李 B-PER\n")
    task = load_ner("t", *paths)
    assert task.warnings == ["test entity types that train never saw: PER (2); the model can only miss them"]
    with pytest.raises(ZhBertError, match=r"train\.txt:1: the sentence starting here has tag prefix I-, not one of the BMES scheme"):
        load_ner("t", *paths, scheme="bmes")


def test_msra_without_train_carves_a_fixed_tenth_of_dev_and_never_reads_test_into_it():
    task = load_ner("msra_ner", None, MSRA / "dev.tsv", MSRA / "test.tsv")
    assert (len(task.train), len(task.dev)) == (2086, 232) and task.scored
    assert task.notes[0].startswith("no train file: trains on 2,086 sentences of") and "(a fixed 90%)" in task.notes[0]
    test_texts = {s.text for s in task.test}
    assert not test_texts & {s.text for s in task.train + task.dev}
    again = carve_choose(list(reversed(read_ner(MSRA / "dev.tsv"))))
    assert {s.text for s in again[1]} == {s.text for s in task.dev}      # fixed whatever the file's order


def test_windows_cover_a_long_sentence_once_each_from_its_most_context(google_tokdir):
    """seq_len 16 over a 120-character MSRA sentence: never cut, each character labelled in exactly one window,
    the one where its nearer edge is farthest; a word of several sub-tokens labelled on its first only."""
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.corpus.ner_files import Sentence

    tok = load_tokenizer(google_tokdir)
    assert window_starts(10, 4, 1) == [0, 3, 6]
    assert best_window(4, [0, 3, 6], 4, 10) == (1, 1)
    long = next(s for s in read_ner(MSRA / "dev.tsv") if len(s.tokens) >= 120)
    words = Sentence(["微软", "在", "北京市"], ["B-ORG", "O", "B-LOC"], "x")   # words: 2, 1 and 3 sub-tokens
    index = {t: i for i, t in enumerate(BIO.tags(["LOC", "ORG", "PER"]))}
    rows = encode(tok, [long, words], index, 16, 4)
    n_long = sum(1 for w in rows.where[0] if w[0] >= 0)
    labelled = sum(int((lab != -100).sum()) for lab in rows.labels)
    assert rows.windowed == 1 and n_long == len(long.tokens) and labelled == len(long.tokens) + 3
    assert max(rows.lengths) == 16
    (w0, p0), _, (w2, p2) = rows.where[1]     # each word labelled on its first sub-token only
    assert tok.convert_ids_to_tokens(rows.input_ids[w0].tolist()) == ["[CLS]", "微", "软", "在", "北", "京", "市", "[SEP]"]
    assert (p0, p2) == (1, 4) and rows.labels[w0].tolist() == [-100, index["B-ORG"], -100, 0, index["B-LOC"], -100,
                                                               -100, -100]


def rescore_file(path: Path) -> tuple[float, float, float]:
    """seqeval's scores of a predictions file, read as conlleval reads one (token gold predicted)."""
    gold, pred, g, p = [], [], [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line:
            if g:
                gold.append(g)
                pred.append(p)
            g, p = [], []
            continue
        _, gt, pt = line.split(" ")
        g.append(gt)
        p.append(pt)
    return oracle(gold, pred)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_a_stock_token_classifier_trains_and_its_predictions_rescore_with_seqeval(family, request, tmp_path):
    """BERT and ModernBERT `*ForTokenClassification` on 64 Resume sentences with 32-token rows (long ones
    windowed): the predictions file has every test character once, and seqeval re-scores it to the digit."""
    from dataclasses import replace

    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.heads.tag.head import TaggingConfig, train_tagger
    from zh_bert.evaluation.heads.tag.tagging import write_tag_predictions

    ckpt = request.getfixturevalue("tiny_model_dir" if family == "bert" else "tiny_modernbert_dir")
    task = load_ner("resume_ner", RESUME / "train.char.bmes", RESUME / "dev.char.bmes", RESUME / "test.char.bmes")
    task = replace(task, train=task.train[:64], dev=task.dev[:24], test=task.test[:40])
    cfg = FinetuneConfig(epochs=1, lr=1e-3, seq_len=32, batch_size=16)
    r = train_tagger(ckpt, task, cfg, TaggingConfig(window_stride=8), 0, log=lambda m: None)
    assert r["steps"] > 4 and 0 <= r["dev_f1"] <= 1     # 64 sentences, more rows: the long ones windowed
    write_tag_predictions(tmp_path / "test.conll", task.test, r["test_pred"], task.scheme)
    lines = [x for x in (tmp_path / "test.conll").read_text(encoding="utf-8").split("\n") if x]
    assert len(lines) == sum(len(s.tokens) for s in task.test) and any(len(s.tokens) > 30 for s in task.test)
    assert list(rescore_file(tmp_path / "test.conll")) == pytest.approx(
        [r["test_precision"], r["test_recall"], r["test_f1"]], abs=1e-9)


def bioes_conll(rows: list[list[str]], path: Path) -> None:
    """MSRA sentences (UER TSV rows) rewritten as a user's CoNLL file in another tag set: BIOES, tab-separated,
    CRLF line ends (a conversion of its own, not zh-bert's)."""
    out = []
    for text, label in rows:
        tags = label.split(" ")
        for i, (c, t) in enumerate(zip(text.split(" "), tags)):
            nxt = tags[i + 1] if i + 1 < len(tags) else "O"
            if t != "O":
                kind, goes_on = t[2:], nxt == f"I-{t[2:]}"
                t = ("B-" if goes_on else "S-") + kind if t[0] == "B" else ("I-" if goes_on else "E-") + kind
            out.append(f"{c}\t{t}\r\n")
        out.append("\r\n")
    path.write_bytes("".join(out).encode("utf-8"))


def test_finetune_task_ner_trains_and_scores_a_users_conll_files_in_another_tag_set(tiny_model_dir, tmp_path, capsys):
    """`zh-bert finetune MODEL --task ner --train --dev --test` on BIOES CoNLL files (MSRA sentences, tab, CRLF):
    scheme and types read from the files, test scored, the predictions file re-scored by seqeval to the digit, and
    an untagged test file predicted but not scored."""
    import json

    from zh_bert.evaluation.commands.finetune import main

    rows = [line.split("\t") for line in (MSRA / "dev.tsv").read_text(encoding="utf-8").split("\n")[1:] if line]
    for name, part in (("train", rows[:96]), ("dev", rows[96:120]), ("test", rows[120:150])):
        bioes_conll(part, tmp_path / f"{name}.txt")
    common = ["--task", "ner", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt"),
              "--epochs", "1", "--lr", "1e-3", "--seq-len", "64", "--no-record"]
    assert main([str(tiny_model_dir), *common, "--test", str(tmp_path / "test.txt"),
                 "--predictions", str(tmp_path / "preds")]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert "BIOES tags, 3 entity types (LOC, ORG, PER)" in out and summary["scheme"] == "bioes"
    assert [100 * x for x in rescore_file(tmp_path / "preds" / f"{tmp_path.name}.conll")] == pytest.approx(
        [summary["test_precision"], summary["test_recall"], summary["test_f1"]], abs=1e-9)
    (tmp_path / "bare.txt").write_text("".join(f"{c}\n" for c in "张三在北京") + "\n", encoding="utf-8")
    assert main([str(tiny_model_dir), *common, "--test", str(tmp_path / "bare.txt"),
                 "--predictions", str(tmp_path / "bare_preds")]) == 0
    out = capsys.readouterr().out
    assert "bare.txt: no tags: test is predicted, not scored" in out
    assert json.loads(out.strip().splitlines()[-1])["test_f1"] is None
    lines = (tmp_path / "bare_preds" / f"{tmp_path.name}.conll").read_text(encoding="utf-8").split("\n")
    assert [x.split(" ")[0] for x in lines[:5]] == list("张三在北京") and len(lines[0].split(" ")) == 2


def test_the_ner_suite_is_declared_once_and_msra_takes_a_users_train_file(tmp_path):
    """`--suite ner` and `all` run Resume and MSRA; each has its board column and BERT's published row; MSRA trains
    on a fixed 90% of dev unless the official train file is given, which then trains and dev chooses whole."""
    from zh_bert.corpus.task_registry import tasks_of
    from zh_bert.evaluation.heads.tag.kind import load_declared, with_train

    ner = tasks_of("ner")
    assert [t.name for t in ner] == ["resume_ner", "msra_ner"]
    assert {"resume_ner", "msra_ner"} <= {t.name for t in tasks_of("all")}
    assert [(t.columns[0].label, t.beside("finetune").figures["f1"]) for t in ner] == [("Resume F1", 95.53),
                                                                                        ("MSRA F1", 94.95)]
    msra = ner[1]
    carved = load_declared(msra)
    assert (len(carved.train), len(carved.dev)) == (2086, 232) and "a fixed 90%" in carved.notes[0]
    (tmp_path / "train.tsv").write_text("text_a\tlabel\n张 三 在 北 京\tB-PER I-PER O B-LOC I-LOC\n", encoding="utf-8")
    given = load_declared(with_train(msra, str(tmp_path)))
    assert (len(given.train), len(given.dev)) == (1, 2318) and not any("90%" in n for n in given.notes)
    with pytest.raises(ZhBertError, match=r"no train\.tsv or msra_train\.tsv in this folder"):
        with_train(msra, str(MSRA.parent / "resume_ner"))


@pytest.mark.slow
def test_eval_suite_ner_runs_resume_and_msra_with_random_init_beside(tiny_model_dir, tmp_path, capsys):
    """`eval suite --suite ner --baselines`: both tasks, both inits, entity F1 in percent, MSRA's carve said in the
    report, and each CoNLL predictions file re-scored by seqeval to the suite's figure (one seed)."""
    import json

    from zh_bert.evaluation.commands.evaluate import main

    assert main(["suite", str(tiny_model_dir), "--suite", "ner", "--baselines", "--lr", "1e-3", "--epochs", "1",
                 "--max-train", "48", "--seq-len", "64", "--predictions", str(tmp_path / "preds"),
                 "--report", str(tmp_path / "report"), "--no-record"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name in ("resume_ner", "msra_ner"):
        r = res["pretrained"][name]
        assert 0 <= r["test_f1"] <= 100 and "test_f1" in res["random_init"][name] and r["majority_test_acc"] == 0
        rescored = rescore_file(tmp_path / "preds" / "ner" / f"{name}.conll")
        assert 100 * rescored[2] == pytest.approx(r["test_f1"], abs=1e-9)
    assert "a fixed 90% of dev" in (tmp_path / "report" / "suite.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_ablate_takes_a_ner_task_as_a_column_in_its_own_metric(tiny_model_dir):
    """`finetune: [suite:resume_ner]` in an ablation spec: the suite's protocol (train, choose on dev, report test),
    its entity F1 stored as a fraction like every other column, and the column titled by the task's metric."""
    from zh_bert.corpus.task_registry import task_named
    from zh_bert.evaluation.ablation.results import figure
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.suite.protocol import suite_summary

    s = suite_summary(tiny_model_dir, task_named("resume_ner"), FinetuneConfig(epochs=1, max_train=16, seq_len=64,
                                                                             lr=1e-3), [42])
    assert 0 <= s["test_acc"] <= 1 and 0 <= s["dev_acc"] <= 1 and s["protocol"] == "ner-v1"
    assert (figure("suite:resume_ner"), figure("suite:eprstmt"), figure("chnsenticorp")) == ("entity F1", "accuracy",
                                                                                              "acc")
