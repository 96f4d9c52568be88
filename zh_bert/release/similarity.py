"""The demo's similarity tab, for a sentence embedder (a sentence-transformers folder, what `finetune --task
stsb|pairs:|simcse: --save` writes): two sentences -> their cosine; a query against a few lines -> the lines,
nearest first. Its APIs (`similarity`, `search`) never raise: a problem comes back as {"error": message}.

The page and the command encode alike (`heads.embed.vectors.Encoder`): the same pooling the folder declares, the
same cut at its max length, L2-normalised vectors.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.evaluation.heads.embed.folder import is_st_folder
from zh_bert.evaluation.heads.embed.vectors import Encoder
from zh_bert.train import rundir

MAX_LINES = 200          # lines one search ranks (a page is for trying a model, `zh-bert embed --search` for files)
MAX_SENTENCE_CHARS = 512          # characters of one sentence
SEQ_LEN = 128
PAIR_EXAMPLES = [("今天天气很好，我们去公园散步吧。", "天气不错，一起去公园走走。"),
                 ("怎么申请信用卡？", "信用卡的申请流程是什么？"), ("我喜欢吃苹果。", "股票市场今天大跌。")]
SEARCH_EXAMPLE = ("如何办理护照", "护照怎么办理？\n今天的天气怎么样\n办理签证需要哪些材料\n出国旅游要带什么\n"
                                 "去哪里申请护照")


def is_embedder(name: str) -> bool:
    """A local sentence-transformers folder (a run dir's final/ included)."""
    try:
        return is_st_folder(rundir.model_dir(name))
    except (ZhBertError, OSError):
        return False


@dataclass
class EmbedderPool:
    """Embedders loaded on first use and kept, by name."""
    choices: list[str]
    loaded: dict = field(default_factory=dict)

    def get(self, name: str) -> Encoder:
        if name not in self.choices:
            raise ZhBertError(f"{name}: not one of this page's embedders ({', '.join(self.choices)})")
        if name not in self.loaded:
            self.loaded[name] = Encoder(name, None, SEQ_LEN, "fp32")
        return self.loaded[name]


def _sentence(value, what: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise ZhBertError(f"{what}: empty")
    if len(text) > MAX_SENTENCE_CHARS:
        raise ZhBertError(f"{what}: {len(text)} characters; at most {MAX_SENTENCE_CHARS}")
    return text


def _safe(fn):
    """An API answer: the result, or {"error": one line} (the page stays alive)."""
    try:
        return fn()
    except ZhBertError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - keep the page alive; the message, not a trace
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def run_similarity(pool: EmbedderPool, a: str, b: str, model: str) -> dict:
    """{"model", "a", "b", "cosine"} of two sentences."""
    def go():
        x, y = _sentence(a, "sentence A"), _sentence(b, "sentence B")
        vecs = pool.get(model).encode([x, y])
        return {"model": model, "a": x, "b": y, "cosine": round(float(vecs[0] @ vecs[1]), 4)}
    return _safe(go)


def run_search(pool: EmbedderPool, query: str, lines: str, model: str, k: int = 5) -> dict:
    """{"model", "query", "hits": [{"line", "text", "cosine"}, ...]}: the k lines nearest the query."""
    def go():
        q = _sentence(query, "query")
        texts = [t.strip() for t in (lines or "").split("\n") if t.strip()]
        if not texts:
            raise ZhBertError("lines: none to search (one sentence a line)")
        if len(texts) > MAX_LINES:
            raise ZhBertError(f"lines: {len(texts)}; at most {MAX_LINES} here (zh-bert embed --search ranks files)")
        enc = pool.get(model)
        vecs = enc.encode([q] + [t[:MAX_SENTENCE_CHARS] for t in texts])
        scores = vecs[1:] @ vecs[0]
        order = np.argsort(-scores, kind="stable")[:max(1, int(k or 5))]
        return {"model": model, "query": q, "hits": [{"line": int(i) + 1, "text": texts[i],
                                                      "cosine": round(float(scores[i]), 4)} for i in order]}
    return _safe(go)


def similarity_html(result: dict) -> str:
    if not result:
        return ""
    if "error" in result:
        return f'<div class="zh-msg">⚠️ {html.escape(result["error"])}</div>'
    if "cosine" in result:
        return (f'<div class="zh-model">{html.escape(result["model"])}</div>'
                f'<div class="zh-filled">cosine {result["cosine"]:.4f}</div>')
    rows = "".join(f'<li class="zh-cand"><span class="zh-prob">{h["cosine"]:.4f}</span> '
                   f'<span class="zh-tok">{html.escape(h["text"])}</span></li>' for h in result["hits"])
    return f'<div class="zh-model">{html.escape(result["model"])}</div><ol>{rows}</ol>'


def similarity_tab(gr, embedders: list[str], pool: EmbedderPool) -> None:
    """The tab's widgets inside the caller's Blocks (and Tab)."""
    gr.Markdown("## 句子相似度 · Sentence similarity\n两句话的余弦相似度；或在几行句子里找与查询最近的。"
                " The cosine of two sentences' vectors, or the lines nearest a query.")
    model = gr.Dropdown(embedders, value=embedders[0], label="向量模型 Embedder", elem_id="zh-embedder")
    with gr.Row():
        a = gr.Textbox(label="句子 A", value=PAIR_EXAMPLES[0][0], elem_id="zh-sim-a")
        b = gr.Textbox(label="句子 B", value=PAIR_EXAMPLES[0][1], elem_id="zh-sim-b")
    compare = gr.Button("相似度 Compare", variant="primary", elem_id="zh-sim-go")
    pair_html = gr.HTML(elem_id="zh-sim-result")
    gr.Examples([list(p) for p in PAIR_EXAMPLES], inputs=[a, b], label="例句 Examples")
    with gr.Row():
        query = gr.Textbox(label="查询 Query", value=SEARCH_EXAMPLE[0], elem_id="zh-search-query", scale=1)
        lines = gr.Textbox(label="候选句（每行一句）Lines", value=SEARCH_EXAMPLE[1], lines=6,
                           elem_id="zh-search-lines", scale=2)
    k = gr.Slider(1, 20, value=5, step=1, label="top-k")
    search = gr.Button("查找 Search", elem_id="zh-search-go")
    search_html = gr.HTML(elem_id="zh-search-result")
    pair_json, search_json = gr.JSON(visible=False), gr.JSON(visible=False)

    compare.click(lambda a_, b_, m_: run_similarity(pool, a_, b_, m_), [a, b, model], pair_json,
                  api_name="similarity").then(similarity_html, pair_json, pair_html, api_visibility="private")
    search.click(lambda q_, l_, m_, k_=5: run_search(pool, q_, l_, m_, k_), [query, lines, model, k], search_json,
                 api_name="search").then(similarity_html, search_json, search_html, api_visibility="private")
