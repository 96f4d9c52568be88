"""The task registry: every benchmark task and suite zh-bert knows, each declared once (`task_spec.Task`,
`task_spec.Suite`), and the lookups every command makes (`task_named`, `suite_named`, `tasks_of`). No other module
names a task: `finetune --task`, `eval suite`, the board's columns, `eval contamination --suite`, `clean
--decontaminate`, the model card's model-index and `ablate`'s `suite:TASK` columns all ask these objects.

A new task is one more declaration: `declare(Task(...))` (a folder of files, a reader, a head kind; see
docs/eval.md). The bundled ones:

- FewCLUE (Xu et al. 2021, arXiv:2107.07498), suite `fewclue`: nine few-shot tasks, each with five 32-shot-per-class
  train/dev pairs (`train_k`, `dev_k`) and a labelled public test set (`test_public`). Protocol `fewclue-v3`:
  fine-tune on train_k (up to 20 epochs, early stop after 5 dev_k evaluations without gain, pooled as the
  checkpoint trained: `eval suite`'s defaults; v2 was 3 epochs on [CLS]), choose the learning rate and the epoch
  on dev_k, report test_public, mean over the five pairs; the FewCLUE score is the mean of the eight tasks other than CHID (multiple choice, reported apart).
  TNEWS also has FewCLUE's `train_few_all`/`dev_few_all`, which `zh-bert finetune --task tnews` trains and chooses
  on (the same test_public: one task, one test file).
- CMRC 2018, suite `cmrc2018`: span extraction, trained a fixed number of epochs on the official train file (or
  the bundled trial set) and reported on dev, on which nothing is chosen (protocol `cmrc2018-v1`).
- ChnSentiCorp: sentence sentiment, `zh-bert finetune` only (the ERNIE/HFL train/dev/test split).
- C-MTEB's STS sets, suite `sts` (protocol `sts-v1`): STS-B (0-5 grades; train, valid, test), LCQMC and PAWS-X
  (1/0; valid and test bundled): the checkpoint scored as it is, the cosine of its sentence vectors against the
  gold label by Spearman on test (mteb's main score), x100; `zh-bert finetune --task stsb|lcqmc|pawsx` trains an
  embedder on train (LCQMC, PAWS-X: a fixed 90% of valid, choosing on the other 10%), reported on test.
- NER, suite `ner` (protocol `ner-v1`): Resume NER (train trains, dev chooses, test reports) and MSRA NER (only
  dev and test bundled: trained on the user's train file, `--msra-train`, or else on a fixed 90% of dev and chosen
  on the other 10%; test only reports); entity-level micro F1, exact span and type, as seqeval's default. `zh-bert
  finetune MODEL --task ner --train F --dev F [--test F]` runs the user's own files (`USER_FILE_TASKS`).

Patterns and label words (zero-shot, PET) are the FewCLUE baselines' PET ones, `baselines/models_keras/pet/
pet_TASK.py` of github.com/CLUEbenchmark/FewCLUE at 62a02c6f31cf32814cfe522f78ef088228840f8d (the commit the bundled
data comes from). Where the baselines differ from this table, on purpose:

- cluewsc: the baseline maps "true" to 错误 and "false" to 正确 (inverted); here true = 正确. Its spans are
  marked `_…_` / `[…]` as its reader marks them, not "（这是实体）" / "（这是代词）".
- csldcp, iflytek: the baselines give two labels the same word five times (经济, 农业; 工具, 视频, 经营), which
  makes those labels impossible to tell apart; each label of such a pair uses its own name instead.
- csl: keywords joined with "；" (as its reader joins them), not "，".
"""

from __future__ import annotations

from collections import Counter

from zh_bert.core.errors import ZhBertError
from zh_bert.core.registry import Registry
from zh_bert.corpus.cloze_items import ClozeFile
from zh_bert.corpus.ner_files import NerFile, NerText
from zh_bert.corpus.pair_files import PairFile, PairText
from zh_bert.corpus.squad_files import SquadFile, SquadText
from zh_bert.corpus.task_files import Fields, RecordText, TsvFile, joined_field, marked_spans, text_field
from zh_bert.corpus.task_spec import (CHOICE, CLASSIFY, EMBED, SPAN, TAG, Column, Metric, Pairs, Pattern, Reference,
                                      Score, Splits, Suite, Task)

#: what `--suite` takes beside the suites' names: every suite
ALL_SUITES = "all"
FEWCLUE_SOURCE = "https://github.com/CLUEbenchmark/FewCLUE"
CMRC_SOURCES = ("https://github.com/ymcui/Chinese-BERT-wwm", "https://github.com/ymcui/LERT")


def _word_table(text: str) -> dict[str, str]:
    """'label:word label:word ...' as a dict (the two long tables below, kept compact)."""
    return dict(p.rsplit(":", 1) for p in text.split())


def _distinct(words: dict[str, str]) -> dict[str, str]:
    """Each label whose word another label shares uses its own name: a shared word cannot tell them apart."""
    shared = {w for w, n in Counter(words.values()).items() if n > 1}
    return {label: label if w in shared else w for label, w in words.items()}


_CSLDCP_WORDS = _word_table(
    "材料科学与工程:材料 作物学:作物 口腔医学:口腔 药学:药学 教育学:教育 水利工程:水利 理论经济学:经济 食品科学与工程:食品 "
    "畜牧学/兽医学:兽医 体育学:体育 核科学与技术:核能 力学:力学 园艺学:园艺 水产:水产 法学:法学 地质学/地质资源与地质工程:地质 "
    "石油与天然气工程:能源 农林经济管理:农林 信息与通信工程:通信 图书馆、情报与档案管理:情报 政治学:政治 电气工程:电气 "
    "海洋科学:海洋 民族学:民族 航空宇航科学与技术:航空 化学/化学工程与技术:化工 哲学:哲学 公共卫生与预防医学:卫生 艺术学:艺术 "
    "农业工程:农业 船舶与海洋工程:船舶 计算机科学与技术:计科 冶金工程:冶金 交通运输工程:交通 动力工程及工程热物理:动力 "
    "纺织科学与工程:纺织 建筑学:建筑 环境科学与工程:环境 公共管理:管理 数学:数学 物理学:物理 林学/林业工程:林业 心理学:心理 "
    "历史学:历史 工商管理:工商 应用经济学:经济 中医学/中药学:中医 天文学:天文 机械工程:机械 土木工程:土木 光学工程:光学 "
    "地理学:地理 农业资源利用:农业 生物学/生物科学与工程:生物 兵器科学与技术:兵器 矿业工程:矿业 大气科学:大气 "
    "基础医学/临床医学:医学 电子科学与技术:电子 测绘科学与技术:测绘 控制科学与工程:控制 军事学:军事 中国语言文学:语言 "
    "新闻传播学:新闻 社会学:社会 地球物理学:地球 植物保护:植物")
_IFLYTEK_WORDS = _word_table(
    "银行:银行 社区服务:社区 电商:电商 支付:支付 经营养成:经营 卡牌:卡牌 借贷:借贷 驾校:驾校 理财:理财 职考:职考 新闻:新闻 "
    "旅游资讯:旅游 公共交通:交通 魔幻:魔幻 医疗服务:医疗 影像剪辑:影像 动作类:动作 工具:工具 体育竞技:体育 小说:小说 运动健身:运动 "
    "相机:相机 辅助工具:工具 快递物流:快递 高等教育:教育 股票:股票 菜谱:菜谱 行车辅助:行车 仙侠:仙侠 亲子儿童:亲子 购物咨询:购物 "
    "射击游戏:射击 漫画:漫画 中小学:小学 同城服务:同城 成人教育:成人 求职:求职 电子产品:电子 艺术:艺术 薅羊毛:赚钱 约会社交:约会 "
    "经营:经营 兼职:兼职 短视频:视频 音乐:音乐 英语:英语 棋牌中心:棋牌 摄影修图:摄影 养生保健:养生 办公:办公 政务:政务 视频:视频 "
    "论坛圈子:论坛 彩票:彩票 直播:直播 其他:其他 休闲益智:休闲 策略:策略 即时通讯:通讯 汽车交易:买车 违章:违章 地图导航:地图 "
    "民航:民航 电台:电台 语言(非英语):语言 搞笑:搞笑 婚恋社交:婚恋 社区超市:超市 日常养车:养车 杂志:杂志 视频教育:在线 家政:家政 "
    "影视娱乐:影视 装修家居:装修 体育咨讯:资讯 社交工具:社交 餐饮店:餐饮 美颜:美颜 问诊挂号:挂号 飞行空战:飞行 综合预定:预定 "
    "电影票务:票务 笔记:笔记 买房:买房 外卖:外卖 母婴:母婴 打车:打车 情侣社交:情侣 日程管理:日程 租车:租车 微博博客:博客 百科:百科 "
    "绘画:绘画 铁路:铁路 生活社交:生活 租房:租房 酒店:酒店 保险:保险 问答交流:问答 收款:收款 MOBA:竞技 K歌:唱歌 技术:技术 "
    "减肥瘦身:减肥 工作社交:工作 团购:团购 记账:记账 女性:女性 公务员:公务 二手:二手 美妆美业:美妆 汽车咨询:汽车 行程管理:行程 "
    "免费WIFI:免费 教辅:教辅 成人:两性 出国:出国 婚庆:婚庆 民宿短租:民宿")
_TNEWS_WORDS = _word_table(
    "news_tech:科技 news_entertainment:娱乐 news_car:汽车 news_travel:旅游 news_finance:财经 news_edu:教育 "
    "news_world:国际 news_house:房产 news_game:电竞 news_military:军事 news_story:故事 news_culture:文化 "
    "news_sports:体育 news_agriculture:农业 news_stock:股票")


#: accuracy on test_public of the published table (README of the source, base model chinese-roberta-wwm-ext),
#: by row; the method each row stands beside
_FEWCLUE_ROWS = {
    "Human": (None, {"score": 82.49, "eprstmt": 90.0, "bustm": 88.0, "ocnli": 90.3, "csldcp": 68.0, "tnews": 71.0,
                     "cluewsc": 98.0, "iflytek": 66.0, "csl": 84.0, "chid": 87.1}),
    "FineTuning": ("finetune", {"score": 46.37, "eprstmt": 73.7, "bustm": 61.1, "ocnli": 34.0, "csldcp": 28.6,
                                "tnews": 43.6, "cluewsc": 50.2, "iflytek": 29.6, "csl": 50.1, "chid": 15.0}),
    "PET": ("pet", {"score": 54.34, "eprstmt": 78.6, "bustm": 64.0, "ocnli": 43.9, "csldcp": 56.9, "tnews": 51.2,
                    "cluewsc": 50.0, "iflytek": 35.1, "csl": 55.0, "chid": 61.3}),
    "Zero-shot": ("zero-shot", {"score": 40.07, "eprstmt": 54.8, "bustm": 50.0, "ocnli": 34.4, "csldcp": 26.23,
                                "tnews": 25.3, "cluewsc": 50.0, "iflytek": 27.7, "csl": 52.2, "chid": 57.6}),
}
FEWCLUE_ACCURACY = Metric("test_acc", "accuracy", "fraction", "share of test_public examples whose predicted label "
                          "is the gold label (CHID: whose predicted idiom is the answer), FewCLUE's scorer")
ACCURACY = Metric("test_acc", "accuracy", "fraction", "share of test examples whose predicted label is the gold "
                  "label")
MACRO_F1 = Metric("test_macro_f1", "f1", "fraction", "unweighted mean of per-class F1 over the classes in gold or "
                  "predictions (sklearn's macro average)", label="macro-F1")


def _fewclue_references(key: str) -> tuple[Reference, ...]:
    return tuple(Reference(row, {"score" if key == "score" else "accuracy": figures[key]}, FEWCLUE_SOURCE, method,
                           beside=method is not None, note="chinese-roberta-wwm-ext")
                 for row, (method, figures) in _FEWCLUE_ROWS.items())


def _fewclue(name: str, description: str, reader: Fields | ClozeFile, pattern: Pattern, **kw) -> Task:
    """A FewCLUE task: its folder, five pairs reported on test_public, protocol fewclue-v3, its board column,
    its published rows, test_public's records as test text."""
    kw.setdefault("in_score", True)
    return Task(name=name, title=name.upper(), head=kw.pop("head", CLASSIFY), reader=reader,
                folder=f"fewclue/{name}", pairs=Pairs(5), suites=("fewclue",), metrics=(FEWCLUE_ACCURACY,),
                protocol="fewclue-v3", published=_fewclue_references(name),
                columns=(Column(f"fewclue-{name}", name.upper(), "test_public"),), test_text=RecordText(),
                pattern=pattern, dataset_type=f"fewclue-{name}", dataset_name=f"FewCLUE {name}",
                description=description, **kw)


def _fields(name: str, text_a, **kw) -> Fields:
    return Fields(text_a, what=f"a FewCLUE {name} record", **kw)


FLAT_SOURCE = "Li et al., FLAT: Chinese NER Using Flat-Lattice Transformer, ACL 2020 (BERT-base Chinese, full train split)"
ENTITY_METRICS = tuple(Metric(f"test_{key}", key, "percent", f"entity-level micro {what}: an entity counts when "
                              f"its span and type are both exact (seqeval's default mode, conlleval's rules)",
                              label=f"entity {label}")
                       for key, what, label in (("f1", "F1", "F1"), ("precision", "precision", "P"),
                                                ("recall", "recall", "R")))


def _ner(name: str, title: str, splits: Splits, column: str, bert: float, description: str) -> Task:
    """A NER task of the `ner` suite: its folder, entity F1 in percent, its board column, BERT's published row."""
    return Task(name=name, title=title, head=TAG, reader=NerFile(), folder=name, splits=splits, suites=("ner",),
                aliases=(name,), metrics=ENTITY_METRICS[:1], protocol="ner-v1",   # the suite reports F1
                published=(Reference("BERT", {"f1": bert}, FLAT_SOURCE, note="BERT-base Chinese, FLAT paper"),),
                columns=(Column(f"{name}-f1", column, "test", "f1"),), test_text=NerText(),
                task_type="token-classification", headline="f1", description=description)



C_MTEB_SOURCE = "https://github.com/FlagOpen/FlagEmbedding/tree/master/research/C_MTEB (C-MTEB leaderboard)"
TEXT2VEC_SOURCE = "https://github.com/shibing624/text2vec (README: in-domain CoSENT and SBERT on bert-base-chinese)"
COSINE_SPEARMAN = Metric("test_spearman", "cosine_spearman", "percent", "Spearman rank correlation of the cosine "
                         "similarity of the two sentences' vectors with the gold label, x100 (mteb's STS main score; "
                         "scipy.stats.spearmanr)", label="Spearman")
#: published Spearman x100 on test (zero-shot: C-MTEB; in-domain: trained on the set's own train split), by row
_STS_ROWS = {
    "text2vec-base-chinese": ("zero-shot", C_MTEB_SOURCE, (79.30, 70.16, 17.21)),
    "bge-small-zh-v1.5": ("zero-shot", C_MTEB_SOURCE, (76.73, 72.19, 9.26)),
    "m3e-base": ("zero-shot", C_MTEB_SOURCE, (76.97, 74.88, 12.19)),
    "CoSENT bert-base-chinese (in-domain)": ("finetune", TEXT2VEC_SOURCE, (79.27, 78.69, 60.00)),
}


def _sts(name: str, title: str, mteb: str, splits: Splits, reader: PairFile, column: int, description: str) -> Task:
    """A C-MTEB STS set of the `sts` suite: its folder, cosine Spearman x100 on test, MTEB's dataset names (what
    embedding models' cards write), its board column, the published rows."""
    published = tuple(Reference(row, {"cosine_spearman": figures[column]}, source, method,
                                beside=row == "text2vec-base-chinese", note="C-MTEB's table and text2vec's README")
                      for row, (method, source, figures) in _STS_ROWS.items())
    return Task(name=name, title=title, head=EMBED, reader=reader, folder="sts", splits=splits, suites=("sts",),
                aliases=(name, mteb.lower(), f"mteb {mteb.lower()}"), metrics=(COSINE_SPEARMAN,), protocol="sts-v1",
                published=published, columns=(Column(f"{name}-spearman", f"{title} Spearman", "test", "cosine_spearman",
                                                     method="zero-shot"),),
                test_text=PairText(), task_type="STS", dataset_type=f"C-MTEB/{mteb}", dataset_name=f"MTEB {mteb}",
                description=description)


_TNEWS_ALL = Splits("train_few_all.json", "dev_few_all.json", "test_public.json",
                    names=("train_few_all", "dev_few_all", "test_public"))
_NLI = {"neutral": "并且", "entailment": "是的", "contradiction": "不是"}
BUNDLED_TASKS: tuple[Task, ...] = (
    _fewclue("eprstmt", "e-commerce review sentiment", _fields("eprstmt", text_field("sentence")),
             Pattern("{blank}满意。{a}", {"Negative": "不", "Positive": "很"})),
    _fewclue("csldcp", "scientific discipline of an abstract, 67 classes", _fields("csldcp", text_field("content")),
             Pattern("这篇{blank}论文阐述了{a}", _distinct(_CSLDCP_WORDS))),
    _fewclue("tnews", "news title topic, 15 classes", _fields("tnews", text_field("sentence"), label="label_desc"),
             Pattern("下面报导一则{blank}新闻。{a}", _TNEWS_WORDS), splits=_TNEWS_ALL),
    _fewclue("iflytek", "app description topic, 119 classes",
             _fields("iflytek", text_field("sentence"), label="label_des"),
             Pattern("做为一款{blank}应用，{a}", _distinct(_IFLYTEK_WORDS))),
    _fewclue("ocnli", "natural language inference",
             _fields("ocnli", text_field("sentence1"), text_b=text_field("sentence2")),
             Pattern("{a}？{blank},{b}", _NLI)),
    _fewclue("bustm", "dialogue short-text matching",
             _fields("bustm", text_field("sentence1"), text_b=text_field("sentence2")),
             Pattern("{a}和{b}意思{blank}同", {"1": "相", "0": "不"})),
    _fewclue("csl", "keywords true to the abstract",
             _fields("csl", joined_field("keyword", "；"), text_b=text_field("abst")),
             Pattern("{blank}用{a}概括{b}", {"0": "不能", "1": "可以"})),
    _fewclue("cluewsc", "pronoun coreference", _fields("cluewsc", marked_spans),
             Pattern("下面句子的指代关系正确吗？{blank}。{a}", {"true": "正确", "false": "错误"})),
    _fewclue("chid", "multiple choice: an idiom cloze over 7 candidates", ClozeFile(), Pattern("#idiom#", None),
             head=CHOICE, in_score=False),
    Task(name="cmrc2018", title="CMRC 2018", head=SPAN, reader=SquadFile(), folder="cmrc2018",
         splits=Splits("cmrc2018_trial.json", None, "cmrc2018_dev.json", names=("trial", None, "dev"),
                       official_train=("cmrc2018_train.json", "train.json")),
         suites=("cmrc2018",), aliases=("cmrc2018", "hfl/cmrc2018", "cluecmrc2018"),
         metrics=(Metric("em", "exact_match", "percent", "1 when the answer equals a reference once both lose the "
                         "official punctuation and case, max over references, unanswered 0 (cmrc2018_evaluate.py v5)",
                         label="EM"),
                  Metric("f1", "f1", "percent", "F1 of the longest common run of tokens (a Chinese character is a "
                         "token), max over references, unanswered 0 (cmrc2018_evaluate.py v5)", label="F1")),
         protocol="cmrc2018-v1", published=tuple(
             Reference(row, {"exact_match": em, "f1": f1}, ", ".join(CMRC_SOURCES), beside=row == "RoBERTa-wwm-ext",
                       note="HFL, trained on train, mean of ten runs")
             for row, (em, f1) in {"BERT (google)": (64.4, 84.0), "BERT-wwm": (65.0, 84.7),
                                   "BERT-wwm-ext": (65.6, 85.0), "RoBERTa-wwm-ext": (66.5, 86.5),
                                   "MacBERT-base": (67.3, 87.1), "RoBERTa-wwm-ext-large": (67.6, 87.9)}.items()),
         columns=(Column("cmrc2018-em", "CMRC 2018 EM", "dev", "exact_match"),
                  Column("cmrc2018-f1", "CMRC 2018 F1", "dev", "f1")),
         test_text=SquadText(), task_type="question-answering", headline="f1",
         description="span extraction from a passage"),
    Task(name="chnsenticorp", title="ChnSentiCorp", head=CLASSIFY, reader=TsvFile("label,text_a"),
         folder="chnsenticorp", splits=Splits("train.tsv", "dev.tsv", "test.tsv"), aliases=("chnsenticorp",),
         metrics=(ACCURACY, MACRO_F1), columns=(Column("chnsenticorp", "ChnSentiCorp", "test"),),
         dataset_type="seamew/ChnSentiCorp", description="hotel, book and product review sentiment"),
    _ner("resume_ner", "Resume NER", Splits("train.char.bmes", "dev.char.bmes", "test.char.bmes"), "Resume F1", 95.53,
         "résumé NER, 8 types, BMES"),
    _sts("stsb", "STS-B", "STSB", Splits("STS-B.train.data", "STS-B.valid.data", "STS-B.test.data",
                                         names=("train", "valid", "test")),
         PairFile(grades=(0, 5)), 0, "sentence similarity graded 0-5 (a Chinese translation of the STS Benchmark)"),
    _sts("lcqmc", "LCQMC", "LCQMC", Splits("LCQMC.valid.data", "LCQMC.valid.data", "LCQMC.test.data",
                                           names=("valid (90%)", "valid (10%)", "test")),
         PairFile(binary=True), 1, "question pairs of the same intent or not, 1/0"),
    _sts("pawsx", "PAWS-X", "PAWSX", Splits("PAWSX.valid.data", "PAWSX.valid.data", "PAWSX.test.data",
                                            names=("valid (90%)", "valid (10%)", "test")),
         PairFile(binary=True), 2, "paraphrase or not, 1/0, adversarial word-order swaps"),
    # MSRA's train split is not bundled: train and choose name the same file, which the tag kind cuts into a fixed
    # 90% to train on and 10% to choose on (`ner_data.carve_choose`); `--msra-train` gives the official one
    _ner("msra_ner", "MSRA NER", Splits("dev.tsv", "dev.tsv", "test.tsv", names=("dev (90%)", "dev (10%)", "test"),
                                        official_train=("train.tsv", "msra_train.tsv")), "MSRA F1", 94.95,
         "news NER, PER/LOC/ORG, BIO"),
)
BUNDLED_SUITES: tuple[Suite, ...] = (
    Suite("fewclue", "FewCLUE", "fewclue-v3", "trained on train_k, learning rate and epoch chosen on dev_k, reported "
          "on test_public", aliases=("fewclue",),
          score=Score(Column("fewclue", "FewCLUE score", "test_public", "score"),
                      "the mean test_public accuracy of the eight tasks other than CHID",
                      _fewclue_references("score"))),
    Suite("cmrc2018", "CMRC 2018", "cmrc2018-v1", "fine-tuned a fixed number of epochs on train (or the trial set), "
          "reported on dev, nothing chosen on dev"),
    Suite("sts", "C-MTEB STS", "sts-v1", "the checkpoint as it is (no training): cosine of the pooled, L2-normalised "
          "sentence vectors, Spearman x100 against the gold label on test"),
    Suite("ner", "NER", "ner-v1", "a token classifier trained on train (MSRA without --msra-train: a fixed 90% of "
          "dev), the learning rate and epoch chosen on dev (MSRA: the other 10%), entity F1 reported on test"),
)
#: what `finetune --task NAME --train F --dev F [--test F]` takes for the user's own files, and their head kind
USER_FILE_TASKS = {"ner": TAG}

_TASKS: Registry[Task] = Registry("task")
_SUITES: Registry[Suite] = Registry("benchmark suite", also=(ALL_SUITES,))


def declare(task: Task) -> Task:
    """Add a task to the registry (a name already declared is refused); what every command then knows."""
    if task.name == ALL_SUITES:
        raise ZhBertError(f"task {task.name}: already registered")
    if (task.splits or task.pairs) is None:
        raise ZhBertError(f"task {task.name}: declares no files (splits or pairs)")
    return _TASKS.add(task.name, task)


def declare_suite(suite: Suite) -> Suite:
    return _SUITES.add(suite.name, suite)


def forget(name: str) -> None:
    """Remove a declared task or suite (what a test declared)."""
    _TASKS.pop(name, None)
    _SUITES.pop(name, None)


def tasks() -> list[Task]:
    return list(_TASKS.values())


def suites() -> list[Suite]:
    return list(_SUITES.values())


def suite_names() -> tuple[str, ...]:
    """What `--suite` takes: every suite's name, then `all`."""
    return _SUITES.names()


def task_named(name: str, flag: str = "--task") -> Task:
    return _TASKS.named(name, flag)


def suite_named(name: str, flag: str = "--suite") -> Suite:
    return _SUITES.named(name, flag)


def suites_of(name: str, flag: str = "--suite") -> list[Suite]:
    """The suites `--suite NAME` asks for: one, or every suite for `all`."""
    return suites() if name == ALL_SUITES else [suite_named(name, flag)]


def tasks_of(suite: str | Suite, flag: str = "--suite") -> list[Task]:
    """The tasks of a suite (`all`: of every suite), in declaration order."""
    names = {s.name for s in suites_of(suite, flag)} if isinstance(suite, str) else {suite.name}
    return [t for t in _TASKS.values() if names & set(t.suites)]


def user_file_head(spec: str) -> str | None:
    """The head kind of `finetune --task SPEC` on the user's own --train/--dev/--test files (`ner`: tagging); None
    when SPEC is not such a name."""
    return USER_FILE_TASKS.get(spec)


def scored(suite: Suite) -> list[Task]:
    """The tasks whose figures make the suite's score."""
    return [t for t in tasks_of(suite) if t.in_score]


for _task in BUNDLED_TASKS:
    declare(_task)
for _suite in BUNDLED_SUITES:
    declare_suite(_suite)
