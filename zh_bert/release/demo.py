"""`zh-bert demo [MODEL ...]`: a Gradio fill-in-the-blank (cloze) page for any BERT or ModernBERT masked LM, and a
similarity tab for a sentence embedder among the models (`similarity`).

The fill logic is pure functions over a model and tokenizer (`parse_blanks`, `fill`), testable without
Gradio; Gradio is imported only when the page is built (it costs ~2.5 s). A blank is `[MASK]`, a run of
full-width `＿` (one character each) or of `__` (two ASCII underscores per character); adjacent blanks form
one blank of N characters, filled jointly by iterative most-confident-first decoding, so a two-character
word comes out whole instead of as two independently likely characters.
"""

from __future__ import annotations

import html
import math
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core import config
from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.hub.catalog import CATALOG, resolve
from zh_bert.hub.download import default_out, download_hf
from zh_bert.release.similarity import EmbedderPool, is_embedder, similarity_tab
from zh_bert.train import rundir
from zh_bert.train.weights import check_weights, load_pretrained

MAX_CHARS = 256        # longer input is refused with a message (also bounds latency)
MAX_BLANKS = 8
MAX_BLANK_LEN = 4      # characters in one joint blank
DEFAULT_RUN = Path("runs/tiny-cpu/final")
EXAMPLES = ["北京是中国的[MASK]都。", "今天天气很[MASK]，我们去公园散步吧。", "他是一名优秀的＿＿，每天都给学生上课。",
            "长江是中国最长的__，全长约六千三百公里。", "[MASK][MASK]是中华人民共和国的首都。"]
NO_MODEL = ("no model to serve: {path} does not exist. Train the README's tiny model with "
            "`zh-bert pretrain recipes/tiny-cpu.yaml`, or fetch a released one with `zh-bert download uer-tiny` "
            "and run `zh-bert demo models/uer-tiny` (see `zh-bert models` for the catalog)")

_BLANK = re.compile(r"\[MASK\]|＿+|_{2,}")
_SURROGATE = re.compile("[\ud800-\udfff]")   # valid in a Python str, not in UTF-8 (or JSON out)


class FillError(ValueError):
    """Input the page answers with a friendly message (no blank, too many blanks, too long)."""


@dataclass
class Blank:
    start: int   # character offset in the input text
    end: int
    length: int  # characters to fill


def parse_blanks(text: str) -> tuple[list[str], list[Blank]]:
    """Split `text` into the literal pieces around blanks and the blanks (len(pieces) == len(blanks) + 1).

    Adjacent blank markers (`[MASK][MASK]`, `＿＿`, `____`) merge into one blank of that many characters.
    """
    pieces, blanks, pos = [], [], 0
    for m in _BLANK.finditer(text):
        s = m.group()
        n = 1 if s == "[MASK]" else (len(s) if s[0] == "＿" else len(s) // 2)
        if blanks and m.start() == blanks[-1].end:   # adjacent markers: one longer blank
            blanks[-1].end, blanks[-1].length = m.end(), blanks[-1].length + n
            pos = m.end()
            continue
        pieces.append(text[pos:m.start()])
        blanks.append(Blank(m.start(), m.end(), n))
        pos = m.end()
    pieces.append(text[pos:])
    return pieces, blanks


def check_input(text: str, blanks: list[Blank], max_chars: int = MAX_CHARS, max_blanks: int = MAX_BLANKS) -> None:
    if not text or not text.strip():
        raise FillError("请输入一句中文。Type a Chinese sentence with a blank, e.g. 北京是中国的[MASK]都。")
    bad = _SURROGATE.search(text)
    if bad:   # only a raw API call can send one (a browser sends UTF-8); the tokenizer would fail on it
        raise FillError(f"文本含有无效字符：第 {bad.start() + 1} 个字符是孤立的代理项 U+{ord(bad.group()):04X}。"
                        f"The text is not valid Unicode: character {bad.start() + 1} is a lone surrogate "
                        f"(U+{ord(bad.group()):04X}); send UTF-8 text.")
    if len(text) > max_chars:
        raise FillError(f"文本太长：{len(text)} 个字符，最多 {max_chars}。Text too long: {len(text)} characters "
                        f"(at most {max_chars}).")
    if not blanks:
        raise FillError("没有找到空格。No blank found: mark the gap with [MASK], ＿ (one per character) or __, "
                        "e.g. 北京是中国的[MASK]都。")
    if len(blanks) > max_blanks:
        raise FillError(f"空格太多：{len(blanks)} 个，最多 {max_blanks}。Too many blanks: {len(blanks)} "
                        f"(at most {max_blanks}).")
    for b in blanks:
        if b.length > MAX_BLANK_LEN:
            raise FillError(f"空格太长：{b.length} 个字，最多 {MAX_BLANK_LEN}。A blank of {b.length} characters is "
                            f"too long (at most {MAX_BLANK_LEN}).")


def masked_ids(tokenizer, pieces: list[str], blanks: list[Blank]) -> tuple[list[int], list[list[int]]]:
    """Token ids with [CLS]/[SEP], and for each blank the positions of its mask tokens."""
    ids, positions = [tokenizer.cls_token_id], []
    for i, piece in enumerate(pieces):
        if piece:
            ids += tokenizer(piece, add_special_tokens=False)["input_ids"]
        if i < len(blanks):
            positions.append(list(range(len(ids), len(ids) + blanks[i].length)))
            ids += [tokenizer.mask_token_id] * blanks[i].length
    ids.append(tokenizer.sep_token_id)
    return ids, positions


def _token_text(tokenizer, ids: list[int]) -> str:
    return "".join(t[2:] if t.startswith("##") else t for t in tokenizer.convert_ids_to_tokens(ids))


def fill(model, tokenizer, text: str, top_k: int = 5, max_chars: int = MAX_CHARS,
         max_blanks: int = MAX_BLANKS) -> list[dict]:
    """For each blank: {"blank": i, "length": N, "candidates": [{"text", "prob"}, ...]} ranked by probability.

    One forward pass serves every one-character blank; an N-character blank starts k beams from the top-k
    tokens at its most confident position and fills each beam's remaining positions most-confident-first
    (N - 1 more batched passes). A candidate's prob is the product of the probabilities of its choices.
    Other blanks stay masked while one is filled, so blanks are filled independently of each other.
    """
    import torch

    pieces, blanks = parse_blanks(text)
    check_input(text, blanks, max_chars, max_blanks)
    ids, positions = masked_ids(tokenizer, pieces, blanks)
    limit = getattr(model.config, "max_position_embeddings", 512)
    if len(ids) > limit:
        raise FillError(f"文本太长：{len(ids)} 个词元，模型最多 {limit}。Text too long for this model ({len(ids)} tokens).")
    banned = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    top_k = max(1, min(int(top_k), 20))
    from zh_bert.evaluation.heads.cloze import sparse_head   # BERT's token types are left at their default (zeros)

    split = sparse_head(model)

    def probs(batch: torch.Tensor, at: list[int]) -> torch.Tensor:
        """(B, len(at), V) probabilities at positions `at`. With a known MLM head, project only those
        positions onto the vocabulary (the 21k-way projection dominates a small model's cost)."""
        with torch.inference_mode():
            mask = torch.ones_like(batch)
            if split is not None:
                encoder, head = split
                logits = head(encoder(input_ids=batch, attention_mask=mask)[0][:, at]).float()
            else:
                logits = model(input_ids=batch, attention_mask=mask).logits[:, at].float()
            logits[..., banned] = -math.inf
            return logits.softmax(-1)

    base = torch.tensor([ids], dtype=torch.long)
    flat = [q for pos in positions for q in pos]
    p0 = dict(zip(flat, probs(base, flat)[0]))
    results = []
    for bi, pos in enumerate(positions):
        if len(pos) == 1:
            pr, tok = p0[pos[0]].topk(top_k)
            cands = [(_token_text(tokenizer, [t]), float(p)) for p, t in zip(pr.tolist(), tok.tolist())]
        else:
            cands = _joint(probs, base, p0, pos, top_k, tokenizer)
        results.append({"blank": bi, "length": len(pos),
                        "candidates": [{"text": t, "prob": float(f"{p:.4g}")} for t, p in cands]})
    return results


def _joint(probs, base, p0: dict, pos: list[int], top_k: int, tokenizer) -> list[tuple[str, float]]:
    first = max(pos, key=lambda q: float(p0[q].max()))
    pr, tok = p0[first].topk(top_k)
    batch = base.repeat(len(tok), 1)
    batch[:, first] = tok
    logp = pr.log()
    open_ = [[q for q in pos if q != first] for _ in range(len(tok))]
    for _ in range(len(pos) - 1):
        p = probs(batch, pos)  # (B, len(pos), V)
        for b in range(batch.shape[0]):
            best = max(open_[b], key=lambda q: float(p[b, pos.index(q)].max()))
            val, idx = p[b, pos.index(best)].max(-1)
            batch[b, best] = idx
            logp[b] += val.log()
            open_[b].remove(best)
    seen: dict[str, float] = {}
    for b in range(batch.shape[0]):
        s = _token_text(tokenizer, batch[b, pos].tolist())
        seen[s] = max(seen.get(s, 0.0), float(logp[b].exp()))
    return sorted(seen.items(), key=lambda kv: -kv[1])


def filled_text(text: str, results: list[dict]) -> str:
    """The input with each blank replaced by its best candidate."""
    pieces, blanks = parse_blanks(text)
    out = [pieces[0]]
    for r, piece in zip(results, pieces[1:]):
        out += [r["candidates"][0]["text"] if r["candidates"] else "？", piece]
    return "".join(out)


# --- models ------------------------------------------------------------------------------------------------

@dataclass
class ModelPool:
    """Loads models on first use and keeps them; names are local folders or catalog aliases / repo ids."""
    choices: list[str]
    loaded: dict = field(default_factory=dict)

    def get(self, name: str):
        if name not in self.loaded:
            self.loaded[name] = load_model(name)
        return self.loaded[name]


def load_model(name: str):
    """(model, tokenizer) from a local model folder or run dir, or a catalog alias / repo id downloaded
    into models/ on first use."""
    from transformers import AutoModelForMaskedLM

    if Path(name).exists():
        path = rundir.masked_lm_dir(name)
    else:
        repo_id, entry = resolve(name)
        path = default_out(entry.alias if entry else repo_id)
        if not rundir.is_model_dir(path):
            download_hf(repo_id, path)
    tok = load_tokenizer(path)
    model = load_pretrained(AutoModelForMaskedLM, path, "a masked-LM model").eval()
    return model, tok


def local_checkpoints(root: Path = Path("runs")) -> list[str]:
    return [str(p) for p in rundir.finished_runs(root)]


def model_choices(models: list[str]) -> list[str]:
    return list(dict.fromkeys(models + local_checkpoints() + [e.alias for e in CATALOG]))


# --- page --------------------------------------------------------------------------------------------------

def run_fill(pool: ModelPool, text: str, model_name: str, top_k: int = 5, compare: str | None = None) -> dict:
    """The `fill` API: never raises; problems come back as {"error": message}. The text is echoed with any
    lone surrogate replaced by U+FFFD, so that the answer can be encoded as JSON."""
    text = text if isinstance(text, str) else ""
    shown = _SURROGATE.sub("\ufffd", text)
    out: dict = {"text": shown}
    names = [model_name] + ([compare] if compare and compare not in ("", "(none)", model_name) else [])
    runs = []
    for name in names:
        try:
            model, tok = pool.get(name)
            blanks = fill(model, tok, text, top_k=int(top_k or 5))
            runs.append({"model": name, "blanks": blanks, "filled": filled_text(text, blanks)})
        except FillError as e:
            return {"text": shown, "error": str(e)}
        except ZhBertError as e:
            runs.append({"model": name, "error": str(e)})
        except Exception as e:  # keep the page alive; the message, not a trace
            runs.append({"model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"})
    out.update(runs[0])
    if len(runs) > 1:
        out["compare"] = runs[1]
    return out


def result_html(result: dict) -> tuple[str, str]:
    """HTML for the main result and the comparison column."""
    if not result:
        return "", ""
    if "error" in result and "blanks" not in result:
        return f'<div class="zh-msg">⚠️ {html.escape(result["error"])}</div>', ""

    def one(r: dict) -> str:
        if "error" in r:
            return f'<div class="zh-msg">⚠️ {html.escape(r["error"])}</div>'
        parts = [f'<div class="zh-model">{html.escape(r["model"])}</div>',
                 f'<div class="zh-filled">{html.escape(r["filled"])}</div>']
        for b in r["blanks"]:
            rows = "".join(
                f'<li class="zh-cand"><span class="zh-tok">{html.escape(c["text"])}</span>'
                f'<span class="zh-bar" style="width:{max(2, int(c["prob"] * 160))}px"></span>'
                f'<span class="zh-prob">{c["prob"] * 100:.1f}%</span></li>' for c in b["candidates"])
            parts.append(f'<div class="zh-blank"><b>空 {b["blank"] + 1}</b> ({b["length"]} 字)<ol>{rows}</ol></div>')
        return "".join(parts)

    return one(result), one(result["compare"]) if "compare" in result else ""


CSS = """
.zh-msg {padding: 10px; border-radius: 6px; background: #fff4e5; color: #8a4b00; font-size: 1.05em;}
.zh-model {color: #666; font-size: 0.9em;} .zh-filled {font-size: 1.4em; margin: 6px 0 10px;}
.zh-blank ol {margin: 4px 0 10px 1.2em;} .zh-cand {margin: 2px 0;}
.zh-tok {display: inline-block; min-width: 3em; font-size: 1.2em;}
.zh-bar {display: inline-block; height: 10px; background: #4f7df3; margin: 0 8px; vertical-align: middle;}
.zh-prob {color: #444; font-variant-numeric: tabular-nums;}
"""


def cloze_tab(gr, choices: list[str], pool: ModelPool) -> None:
    """The fill-in-the-blank widgets inside the caller's Blocks (and Tab); `choices[0]` selected first."""
    gr.Markdown("## zh-bert 中文填空 · Chinese fill-in-the-blank\n"
                "用 `[MASK]`、`＿`（每字一个）或 `__` 标出空格；相邻的空格按一个多字词一起填。"
                " Mark blanks with `[MASK]`, `＿` (one per character) or `__`.")
    with gr.Row():
        text = gr.Textbox(label="句子 Sentence", value=EXAMPLES[0], lines=2, elem_id="zh-text", scale=4)
        with gr.Column(scale=1):
            model = gr.Dropdown(choices, value=choices[0], label="模型 Model", elem_id="zh-model")
            compare = gr.Dropdown(["(none)"] + choices, value="(none)", label="对比 Compare with",
                                  elem_id="zh-compare")
            top_k = gr.Slider(1, 10, value=5, step=1, label="top-k")
    button = gr.Button("填空 Fill", variant="primary", elem_id="zh-fill")
    gr.Examples(EXAMPLES, inputs=[text], label="例句 Examples")
    with gr.Row():
        main_html = gr.HTML(elem_id="zh-result")
        compare_html = gr.HTML(elem_id="zh-compare-result")
    with gr.Accordion("JSON (API output)", open=False):
        result = gr.JSON(label="fill", elem_id="zh-json")

    def _fill(text_, model_, top_k_=5, compare_="(none)"):
        return run_fill(pool, text_, model_, top_k_, compare_)

    inputs = [text, model, top_k, compare]
    button.click(_fill, inputs, result, api_name="fill").then(
        result_html, result, [main_html, compare_html], api_visibility="private")
    text.submit(_fill, inputs, result, api_visibility="private").then(
        result_html, result, [main_html, compare_html], api_visibility="private")


def build_app(models: list[str], pool: ModelPool | None = None):
    """The Blocks app: the cloze page for masked LMs (`models[0]` selected first; the dropdown also offers local
    runs and the catalog), a similarity tab for sentence embedders among `models` (`similarity`), both as tabs
    when both are given."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr

    embedders = [m for m in models if is_embedder(m)]
    mlms = [m for m in models if m not in embedders]
    choices = model_choices(mlms) if mlms or not embedders else []
    pool = pool or ModelPool(choices)
    embed_pool = EmbedderPool(embedders)
    title = "zh-bert 填空 cloze demo" if choices else "zh-bert 句子相似度 similarity demo"
    with gr.Blocks(title=title, analytics_enabled=False) as app:
        if choices and embedders:
            with gr.Tab("填空 Cloze", elem_id="zh-tab-cloze"):
                cloze_tab(gr, choices, pool)
            with gr.Tab("相似度 Similarity", elem_id="zh-tab-similarity"):
                similarity_tab(gr, embedders, embed_pool)
        elif embedders:
            similarity_tab(gr, embedders, embed_pool)
        else:
            cloze_tab(gr, choices, pool)
    app.zh_pool, app.zh_embed_pool = pool, embed_pool
    return app


def serve(app, host: str = "127.0.0.1", port: int | None = 7860, share: bool = False, **kw):
    """Launch with the page CSS; analytics stay off (GRADIO_ANALYTICS_ENABLED is set before import)."""
    return app.launch(server_name=host, server_port=port, share=share, css=CSS, **kw)


def model_arg(name: str) -> str:
    """A MODEL argument as the page lists it: a local run dir becomes its final/ folder; a name that does
    not exist locally stays a catalog alias or ORG/NAME repo id, unless it can only be a path."""
    if Path(name).exists() or name.startswith((".", os.sep)) or name.count("/") > 1:
        return str(rundir.masked_lm_dir(name))
    return name


def default_models(models: list[str]) -> list[str]:
    if models:
        return [model_arg(m) for m in models]
    if rundir.is_model_dir(DEFAULT_RUN):
        return [str(DEFAULT_RUN)]
    raise ZhBertError(NO_MODEL.format(path=DEFAULT_RUN))


@dataclass
class DemoConfig:
    models: list[str] = option(default_factory=list, positional=True, metavar="MODEL",
                               help=f"model folders, run dirs, catalog aliases or ORG/NAME repo ids (default: {DEFAULT_RUN})")
    host: str = option_of(Shared, "host")
    port: int = option_of(Shared, "port", default=7860, help="port to serve on")
    share: bool = option(False, help="also open a public gradio.live link")
    threads: int = option(0, help="torch threads for inference (0: torch's default; 1 is fastest for small "
                                  "models on a busy CPU)")

    def __post_init__(self):
        if not 1 <= self.port <= 65535:
            raise ZhBertError(f"--port: must be between 1 and 65535, got {self.port}")
        if self.threads < 0:
            raise ZhBertError(f"--threads: must be >= 0 (0: torch's default), got {self.threads}")


def build_parser():
    return config.build_parser("zh-bert demo", __doc__.split("\n")[0], DemoConfig)


def check_port(host: str, port: int) -> None:
    """Bind `host:port` once (as the server will, SO_REUSEADDR) so a busy port or an unknown host is one
    line before Gradio and the models spend seconds loading."""

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise ZhBertError(f"--host {host}: cannot resolve it ({e})") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise ZhBertError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror or e}); is another "
                              f"server using it? Choose another --port") from None


def check_local_models(models: list[str]) -> None:
    """Each local MODEL folder has a readable config and weights that open, so a broken folder is one line
    at start rather than an error on the page at first use."""
    from transformers import AutoConfig

    for m in models:
        if Path(m).exists():
            folder = rundir.masked_lm_dir(m)
            load_pretrained(AutoConfig, folder, "a model config")
            weights = sorted(folder.glob("*.safetensors"))
            if not weights and not (folder / "pytorch_model.bin").is_file():
                raise ZhBertError(f"{folder}: no model weights (model.safetensors)")
            check_weights(weights)


def main(argv: list[str]) -> int:
    cfg = config.config_from_args(DemoConfig, build_parser().parse_args(argv))
    check_port(cfg.host, cfg.port)
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    models = default_models(cfg.models)
    check_local_models(models)
    app = build_app(models)
    (app.zh_embed_pool if is_embedder(models[0]) else app.zh_pool).get(models[0])  # load (or fail) before serving
    serve(app, cfg.host, cfg.port, cfg.share)
    return 0
