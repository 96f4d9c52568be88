"""FewCLUE as cloze: each task's example becomes a sentence with one blank, and the masked LM itself picks the
label by which label word fills the blank best, either as it comes from pretraining (`zero-shot`) or after
fine-tuning the whole MLM on train_k through the same blank (`pet`, Schick & Schütze 2021).

Patterns and label words are the FewCLUE baselines' PET ones, `baselines/models_keras/pet/pet_TASK.py` of
github.com/CLUEbenchmark/FewCLUE at 62a02c6f31cf32814cfe522f78ef088228840f8d (the commit the bundled data comes
from). Where the baselines differ from this table, on purpose:

- cluewsc: the baseline maps "true" to 错误 and "false" to 正确 (inverted); here true = 正确. Its spans are
  marked `_…_` / `[…]` as `fewclue` marks them, not "（这是实体）" / "（这是代词）".
- csldcp, iflytek: the baselines give two labels the same word five times (经济, 农业; 工具, 视频, 经营), which
  makes those labels impossible to tell apart; each label of such a pair uses its own name instead.
- csl: keywords joined with "；" (as `fewclue` joins them), not "，".

A label word is filled jointly: the blank becomes as many [MASK]s as the word has tokens, all predicted in one
pass (`evaluate.candidate_logprobs`), and words are ranked by their *mean* token log-probability
(`eval cloze --score mean`). Mean, not sum, because the words of a task differ in length (理论经济学 beside 数学)
and a sum charges every extra token a log-probability below zero, which favours the shortest word whatever the
text says; for equal-length words (CHID's idioms, most tasks here) the two rank the same. Training uses the same
score: PET's loss is the cross-entropy over these per-label scores.

The protocol is FewCLUE's (`fewclue`): the PET checkpoint is chosen on dev_k alone (best evaluation, early stop
after `patience` evaluations without gain); test_public is scored once, on the chosen state. Zero-shot chooses
nothing: dev_k is reported beside test_public.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import read_object
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.cloze import (  # _text_ids: the one tokenization of a blank's context
    ClozeItem,
    _text_ids,
    eval_cloze,
    load_mlm,
    model_batch,
    read_cloze,
    sparse_head,
)
from zh_bert.evaluation.fewclue import load_fewclue, split_names
from zh_bert.evaluation.finetune import FinetuneConfig, macro_f1, summarize, train_subset
from zh_bert.evaluation.splits import keep_apart
from zh_bert.evaluation.step import optimizer_step, precision_autocast, stepping
from zh_bert.evaluation.tasks import Example, TaskData, task_data_dir
from zh_bert.train.rundir import masked_lm_dir
from zh_bert.train.weights import init_from_config, load_pretrained

METHODS = ("zero-shot", "pet")
BLANK_SLOT = "{blank}"
MLM_ARCHITECTURES = ("ForMaskedLM", "ForPreTraining")   # config `architectures` that carry a masked-LM head


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


@dataclass(frozen=True)
class Pattern:
    """One task as cloze: `template` with {a} (text_a), {b} (text_b) and one {blank}; `words` each label's
    word. CHID: `words` None (each item brings its own seven idioms) and the pattern is the content itself,
    its #idiom# the blank."""
    template: str
    words: dict[str, str] | None


#: the patterns and verbalizers, one row per FewCLUE task (source: the module docstring)
PATTERNS: dict[str, Pattern] = {
    "eprstmt": Pattern("{blank}满意。{a}", {"Negative": "不", "Positive": "很"}),
    "csldcp": Pattern("这篇{blank}论文阐述了{a}", _distinct(_CSLDCP_WORDS)),
    "tnews": Pattern("下面报导一则{blank}新闻。{a}", _TNEWS_WORDS),
    "iflytek": Pattern("做为一款{blank}应用，{a}", _distinct(_IFLYTEK_WORDS)),
    "ocnli": Pattern("{a}？{blank},{b}", {"neutral": "并且", "entailment": "是的", "contradiction": "不是"}),
    "bustm": Pattern("{a}和{b}意思{blank}同", {"1": "相", "0": "不"}),
    "csl": Pattern("{blank}用{a}概括{b}", {"0": "不能", "1": "可以"}),
    "cluewsc": Pattern("下面句子的指代关系正确吗？{blank}。{a}", {"true": "正确", "false": "错误"}),
    "chid": Pattern("#idiom#", None),
}


def check_prompt_task(name: str, method: str = "zero-shot") -> Pattern:
    if name not in PATTERNS:
        raise ZhBertError(f"unknown FewCLUE task '{name}'{suggest(name, PATTERNS)}: one of {', '.join(PATTERNS)}")
    if method not in METHODS:
        raise ZhBertError(f"--method must be one of {', '.join(METHODS)}, got {method!r}{suggest(method, METHODS)}")
    return PATTERNS[name]


def pattern_items(name: str, examples: list[Example], labels: list[str]) -> list[ClozeItem]:
    """Task `name`'s examples as cloze items: the candidates are the words of `labels` (in that order, so the
    candidate index is the class index), the answer the gold label's word."""
    pattern = check_prompt_task(name)
    if pattern.words is None:
        raise ZhBertError(f"FewCLUE {name}: its items come with their candidates (load_chid), not label words")
    missing = [lab for lab in labels if lab not in pattern.words]
    if missing:
        raise ZhBertError(f"FewCLUE {name}: no label word for {', '.join(map(repr, missing))}")
    head, tail = pattern.template.split(BLANK_SLOT)
    cands = [pattern.words[lab] for lab in labels]
    out = []
    for i, e in enumerate(examples):
        if e.label not in pattern.words:
            raise ZhBertError(f"FewCLUE {name} example {i}: label {e.label!r} has no word")
        fill = {"a": e.text_a, "b": e.text_b or ""}
        out.append(ClozeItem(f"{name}:{i}", head.format(**fill), tail.format(**fill), cands,
                             pattern.words[e.label]))
    return out


def load_chid(k: int) -> tuple[list[ClozeItem], list[ClozeItem], list[ClozeItem]]:
    """CHID's (train_k, dev_k, test_public) as cloze items: the content with its #idiom# blank, the seven
    candidate idioms, the answer; kept apart as every FewCLUE task is (`splits.keep_apart`, on the passage)."""
    folder = task_data_dir("fewclue/chid")
    files = [folder / f"{s}.json" for s in split_names(k)]
    train, dev, test = (read_cloze(f) for f in files)
    train, dev, _ = keep_apart("fewclue-chid", (train, dev, test), files, lambda it: (it.prefix, it.suffix),
                               drop_repeats=False)
    return train, dev, test


@dataclass
class PromptData:
    """A task's three splits as cloze items, and what a predicted candidate index is called in the output
    (the label name; CHID: the index itself, as its `answer` field)."""
    train: list[ClozeItem]
    dev: list[ClozeItem]
    test: list[ClozeItem]
    labels: list[str] | None


def prompt_data(name: str, k: int) -> PromptData:
    check_prompt_task(name)
    if PATTERNS[name].words is None:
        return PromptData(*load_chid(k), None)
    task = load_fewclue(name, k)
    return PromptData(*(pattern_items(name, split, task.labels) for split in (task.train, task.dev, task.test)),
                      task.labels)


@contextmanager
def _quiet_transformers():
    """transformers' load report (missing/unexpected keys) is what check_mlm_head turns into one line."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def check_mlm_head(ckpt) -> Path:
    """The masked-LM folder of `ckpt`, refused in one line when it has no trained masked-LM head:
    `load_pretrained` would build one from random weights without a word (transformers only warns of missing
    keys), and a random head scores every pattern as noise. A fine-tuned classifier folder names its class in
    `architectures`; a folder whose weights lack any head tensor shows in the loading report."""
    from transformers import AutoModelForMaskedLM

    ckpt_dir = masked_lm_dir(ckpt)
    config = read_object(Path(ckpt_dir) / "config.json", default=None)
    archs = config.texts("architectures", default=[]) if config is not None else []
    if archs and not any(a.endswith(MLM_ARCHITECTURES) for a in archs):
        raise ZhBertError(f"{ckpt_dir}: a {archs[0]} has no masked-LM head; prompt scoring needs a pretrained "
                          f"masked LM (a pretrain run or its final/), not a fine-tuned model")
    with _quiet_transformers():
        _, info = load_pretrained(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model", output_loading_info=True)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ZhBertError(f"{ckpt_dir}: no masked-LM head: its weights lack {', '.join(missing[:3])}"
                          f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}; prompt scoring needs the "
                          f"pretrained head")
    return ckpt_dir


# --------------------------------------------------------------------------- scoring

def predict_items(model, tok, items: list[ClozeItem], seq_len: int, batch_size: int,
                  precision: str = "fp32") -> tuple[float, np.ndarray]:
    """(accuracy, predicted candidate index per item) under `eval cloze --score mean`, the model in eval mode
    for the call."""
    was_training = model.training
    model.eval()
    with precision_autocast(model.device, precision):
        res, preds = eval_cloze(model, tok, items, "mean", _fit(model, seq_len), batch_size)
    model.train(was_training)
    return res["accuracy"], np.array([it.candidates.index(p["prediction"]) for it, p in zip(items, preds)])


def _fit(model, seq_len: int) -> int:
    return min(seq_len, getattr(model.config, "max_position_embeddings", seq_len))


def _rows(tok, item: ClozeItem, seq_len: int) -> list[tuple[list[int], int, list[int], list[list[int]]]]:
    """One input per candidate length, windowed on the blank as `candidate_logprobs` windows it:
    (ids, mask start, candidate indices, their token ids)."""
    pre, suf = _text_ids(tok, item.prefix), _text_ids(tok, item.suffix)
    by_len: dict[int, list[int]] = {}
    cand_ids = [_text_ids(tok, c) for c in item.candidates]
    for j, c in enumerate(cand_ids):
        by_len.setdefault(len(c), []).append(j)
    rows = []
    for k, js in by_len.items():
        room = seq_len - 2 - k
        if k == 0 or room < 0:
            raise ZhBertError(f"{item.where}: candidate {item.candidates[js[0]]!r} has {k} tokens (seq_len {seq_len})")
        keep_pre = min(len(pre), max(room // 2, room - len(suf)))
        p = pre[len(pre) - keep_pre:]
        ids = [tok.cls_token_id] + p + [tok.mask_token_id] * k + suf[:room - keep_pre] + [tok.sep_token_id]
        rows.append((ids, 1 + len(p), js, [cand_ids[j] for j in js]))
    return rows


def candidate_scores(model, tok, items: list[ClozeItem], seq_len: int):
    """(B, C) mean token log-probability of every candidate, with gradients: the scores `predict_items` ranks
    by, as PET trains them. Items of one batch have the same number of candidates."""
    import torch

    rows = [(i, r) for i, it in enumerate(items) for r in _rows(tok, it, _fit(model, seq_len))]
    width = max(len(r[0]) for _, r in rows)
    inp = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.bool)
    for n, (_, (ids, start, _, cids)) in enumerate(rows):
        inp[n, :len(ids)] = torch.tensor(ids)
        pos[n, start:start + len(cids[0])] = True
    batch = {k: v.to(model.device) for k, v in model_batch(model, inp, (inp != tok.pad_token_id).long()).items()}
    pos = pos.to(model.device)
    split = sparse_head(model)
    hidden = split[1](split[0](**batch)[0][pos]) if split is not None else model(**batch).logits[pos]
    logp = torch.log_softmax(hidden.float(), dim=-1)    # rows in (input, position) order
    scores = torch.full((len(items), len(items[0].candidates)), float("-inf"), device=logp.device)
    at = 0
    for i, (_, _, js, cids) in rows:
        t = torch.tensor(cids, device=logp.device)            # (n, k)
        k = t.shape[1]
        scores[i, js] = logp[at:at + k][torch.arange(k, device=logp.device), t].mean(-1)
        at += k
    return scores


# --------------------------------------------------------------------------- the two methods

def _model(ckpt_dir: Path, random_init: bool):
    """The masked LM on the best device; random_init: the same architecture from random weights (the
    baseline pretraining must beat)."""
    if not random_init:
        return load_mlm(ckpt_dir)[:2]
    import torch
    from transformers import AutoModelForMaskedLM

    model = init_from_config(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model")
    return model.to("cuda" if torch.cuda.is_available() else "cpu").eval(), load_tokenizer(ckpt_dir)


def _figures(model, tok, items, cfg, precision) -> tuple[float, float, np.ndarray]:
    acc, pred = predict_items(model, tok, items, cfg.seq_len, cfg.batch_size, precision)
    gold = np.array([it.candidates.index(it.answer) for it in items])
    return acc, macro_f1(gold, pred), pred


def zero_shot(ckpt_dir: Path, data: PromptData, cfg: FinetuneConfig, seed: int, log=print) -> dict:
    """The raw MLM on the pattern: nothing is trained or chosen; dev_k is reported beside test_public."""
    import torch

    torch.manual_seed(seed)                      # only a random_init model draws anything
    t0 = time.perf_counter()
    model, tok = _model(ckpt_dir, cfg.random_init)
    precision = resolve_precision(cfg.precision, model.device)[0]
    dev_acc, dev_f1, _ = _figures(model, tok, data.dev, cfg, precision)
    test_acc, test_f1, pred = _figures(model, tok, data.test, cfg, precision)
    log(f"  zero-shot: dev acc {dev_acc:.4f} | test acc {test_acc:.4f}")
    return {"seed": seed, "dev_acc": dev_acc, "dev_macro_f1": dev_f1, "test_acc": test_acc, "test_macro_f1": test_f1,
            "steps": 0, "train_s": round(time.perf_counter() - t0, 1), "_pred": pred}


def pet(ckpt_dir: Path, data: PromptData, cfg: FinetuneConfig, seed: int, log=print) -> dict:
    """Fine-tune the whole MLM on train_k through the pattern (cross-entropy over the label words' scores),
    AdamW + linear warmup/decay as `finetune`; the state with the best dev_k accuracy is scored on test_public."""
    import torch

    rng = np.random.default_rng(seed)
    train = train_subset(TaskData("pet", data.train, data.dev, data.test, []), cfg, rng)
    torch.manual_seed(seed)
    model, tok = _model(ckpt_dir, cfg.random_init)
    model.train()
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    opt, scaler, sched, precision = stepping(model, cfg, total)
    eval_every = cfg.eval_every or steps_per_epoch
    best, best_state, bad, step, t0 = {"dev_acc": -1.0}, None, 0, 0, time.perf_counter()
    stop = False
    for epoch in range(cfg.epochs):
        if stop:
            break
        order = rng.permutation(len(train))
        for s in range(0, len(order), cfg.batch_size):
            batch = [train[i] for i in order[s:s + cfg.batch_size]]
            gold = torch.tensor([it.candidates.index(it.answer) for it in batch], device=model.device)
            with precision_autocast(model.device, precision):
                loss = torch.nn.functional.cross_entropy(candidate_scores(model, tok, batch, cfg.seq_len), gold)
            optimizer_step(loss, model, opt, scaler, sched)
            step += 1
            if step % eval_every and step != total:
                continue
            acc, f1, _ = _figures(model, tok, data.dev, cfg, precision)   # dev_k only: the choice
            log(f"  seed {seed} step {step}/{total} epoch {epoch + 1} loss {loss.item():.4f} dev acc {acc:.4f}")
            if acc > best["dev_acc"]:
                best, bad = {"dev_acc": acc, "dev_macro_f1": f1, "best_step": step}, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                continue
            bad += 1
            if bad >= cfg.patience:
                log(f"  seed {seed}: early stop at step {step} (no dev gain for {bad} evaluations)")
                stop = True
                break
    train_s = round(time.perf_counter() - t0, 1)
    model.load_state_dict(best_state)
    test_acc, test_f1, pred = _figures(model, tok, data.test, cfg, precision)
    return {"seed": seed, **best, "test_acc": test_acc, "test_macro_f1": test_f1, "steps": step, "train_s": train_s,
            "_pred": pred}


def run_prompt_task(ckpt, name: str, k: int, method: str, cfg: FinetuneConfig, seeds: list[int],
                    log=print) -> dict:
    """FewCLUE task `name` on pair k by `method` (zero-shot | pet), in the shape of `finetune.run`'s summary,
    plus `test_predictions` (the first seed's label per test_public example; CHID: the candidate index).
    Zero-shot is deterministic: it runs the first seed only and says so in `note`."""
    check_prompt_task(name, method)
    if not seeds:
        raise ZhBertError("run_prompt_task: no seeds")
    ckpt_dir = masked_lm_dir(ckpt) if cfg.random_init else check_mlm_head(ckpt)
    data = prompt_data(name, k)
    used = seeds[:1] if method == "zero-shot" else list(seeds)
    one = zero_shot if method == "zero-shot" else pet
    runs = []
    for seed in used:
        r = one(ckpt_dir, data, cfg, seed, log=log)
        log(f"{name} pair {k} {method} seed {seed}: dev acc {r['dev_acc']:.4f} | test acc {r['test_acc']:.4f}"
            + (f" (best step {r['best_step']}, {r['train_s']} s)" if "best_step" in r else f" ({r['train_s']} s)"))
        runs.append(r)
    pred = runs[0].pop("_pred")
    for r in runs[1:]:
        r.pop("_pred")
    gold = Counter(it.candidates.index(it.answer) for it in data.dev)
    out = {"task": f"fewclue-{name}", "checkpoint": str(ckpt_dir), "method": method, "pair": k,
           "init": "random" if cfg.random_init else "pretrained", "seeds": used, **summarize(runs),
           "majority_dev_acc": max(gold.values()) / len(data.dev), "n_train": len(data.train),
           "n_dev": len(data.dev), "n_test": len(data.test), "config": asdict(cfg),
           "pattern": PATTERNS[name].template, "chosen_on": f"dev_{k}" if method == "pet" else None,
           "per_seed": [{key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()} for r in runs],
           "test_predictions": [int(p) for p in pred] if data.labels is None else [data.labels[p] for p in pred]}
    if len(used) < len(seeds):
        out["note"] = (f"zero-shot trains nothing and draws nothing: seeds {seeds[1:]} would repeat seed "
                       f"{seeds[0]}'s figures, so only seed {seeds[0]} ran")
    return out
