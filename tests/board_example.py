"""The example board in docs/example_board/: the main command's checkpoint (runs/tiny-cpu, its random-init
baseline and a real re-run), beside catalog-shaped models whose figures are planted, each kind of cell and
load safety shown once. `python tests/board_example.py [RUN]` rebuilds it; `planted_models(root)` is what the
tests use.

Planted rows are named as such. The RoBERTa-wwm-ext-shaped row carries the published FewCLUE fine-tuning row and
HFL's CMRC 2018 dev figures (self-reported, as those tables are); the other two are invented to show a mismatch
and a model that needs trust_remote_code.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOOGLE_VOCAB = ROOT / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"
TASKS = ("eprstmt", "csldcp", "tnews", "iflytek", "ocnli", "bustm", "csl", "cluewsc", "chid")


def _card(licence: str, results: list[tuple[str, str, str, float]]) -> str:
    """A card whose model-index holds (dataset type, split, metric, value) results."""
    import yaml

    index = [{"name": "m", "results": [{"task": {"type": "text-classification"},
                                        "dataset": {"type": d, "name": d, "split": s},
                                        "metrics": [{"type": m, "name": f"{s} {m}", "value": v}]}
                                       for d, s, m, v in results]}]
    return "---\n" + yaml.safe_dump({"license": licence, "language": "zh", "model-index": index},
                                    allow_unicode=True) + "---\n# planted example\n"


def _fewclue(acc: dict[str, float]) -> list[tuple[str, str, str, float]]:
    return [(f"fewclue-{t}", "test_public", "accuracy", round(acc[t] / 100, 4)) for t in TASKS]


def _folder(root: Path, name: str, config: dict, card: str, run: dict | None = None) -> Path:
    from transformers import BertTokenizerFast

    out = root / name
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    BertTokenizerFast(vocab_file=str(GOOGLE_VOCAB)).save_pretrained(str(out))
    shutil.copy(GOOGLE_VOCAB, out / "vocab.txt")
    (out / "README.md").write_text(card, encoding="utf-8")
    if run:
        (out / "run.json").write_text(json.dumps(run))
    return out


def planted_models(root: Path) -> list[Path]:
    """Three model folders (config, tokenizer, card; no weights: the board reads no weights) and a record."""
    from transformers import BertConfig, ModernBertConfig

    from zh_bert.corpus.task_registry import task_named, tasks_of

    finetuning = {t.name: t.beside("finetune").figures["accuracy"] for t in tasks_of("fewclue")}
    PUBLISHED = {"FineTuning": finetuning}   # noqa: N806 (the published table's row, as the source names it)
    base = BertConfig(vocab_size=21128).to_dict()
    em, f1 = (task_named("cmrc2018").beside("finetune").figures[m] for m in ("exact_match", "f1"))
    roberta = _folder(root, "roberta-wwm-ext-shaped (published rows)", base, _card(
        "apache-2.0", _fewclue(PUBLISHED["FineTuning"]) + [("cmrc2018", "dev", "exact_match", em),
                                                           ("cmrc2018", "dev", "f1", f1)]))
    modern_claims = {t: v + 4 for t, v in PUBLISHED["FineTuning"].items()}
    modern = _folder(root, "modernbert-zh-shaped (planted)", ModernBertConfig(
        vocab_size=21128, num_hidden_layers=12, hidden_size=768, intermediate_size=1152).to_dict(),
        _card("mit", _fewclue(modern_claims)),
        run={"tokens_seen": 20_000_000_000, "train_seconds": 8 * 36 * 3600,
             "hardware": {"device_name": "8 x planted GPU", "processes": 8},
             "batch": {"seq_len": 512}, "masking": {"mask_rate": 0.3}})
    rerun = {**modern_claims, "eprstmt": modern_claims["eprstmt"] - 9.0, "tnews": modern_claims["tnews"] - 6.0}
    from zh_bert.evaluation.eval_results import entry

    record = root / "modernbert-zh-shaped.verification.json"
    record.write_text(json.dumps({
        "schema": "zh-bert-verification/1", "model": {"id": str(modern), "source": str(modern)},
        "zh_bert_version": "0.1.0", "protocols": {"fewclue": "fewclue-v3"}, "seeds": [42],
        "hardware": "planted", "wall_s": 0.0, "date": "2026-12-02",
        "entries": [entry("text-classification", f"FewCLUE {t}", f"fewclue-{t}", f"FewCLUE {t}", "accuracy",
                          "test_public accuracy", rerun[t] / 100, split="test_public", method="finetune")
                    for t in TASKS]}))
    remote = _folder(root, "remote-code-encoder (planted)", {**base, "auto_map": {
        "AutoModelForMaskedLM": "modeling_custom.CustomForMaskedLM"}}, _card("other", _fewclue(
            {t: v + 8 for t, v in PUBLISHED["FineTuning"].items()})))
    return [roberta, modern, record, remote]


def neutral(board: dict, root: Path) -> dict:
    """The temp folder's paths in a committed board replaced by `example:` names."""
    text = json.dumps(board, ensure_ascii=False).replace(str(root) + "/", "example:")
    return json.loads(text)


def main(argv: list[str]) -> int:
    import tempfile

    from zh_bert.core.fileio import write_json, write_text
    from zh_bert.leaderboard.board import board_markdown, build_board
    from zh_bert.leaderboard.html import render_html

    run = argv[0] if argv else "runs/tiny-cpu"
    out = ROOT / "docs" / "example_board"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        board = neutral(build_board([run, *map(str, planted_models(root))]), root)
    out.mkdir(exist_ok=True)
    write_json(out / "board.json", board)
    write_text(out / "board.md", board_markdown(board))
    write_text(out / "index.html", render_html(board))
    screenshot(out / "index.html", out / "board.png")
    print(f"wrote {out}/board.json, board.md, index.html, board.png")
    return 0


def screenshot(page_file: Path, png: Path) -> None:
    """The page as docs/leaderboard.md shows it: headless Chromium, the table sorted by FewCLUE score, the first
    row's details open."""
    from playwright.sync_api import sync_playwright

    from conftest import CHROMIUM_ARGS

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                    args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        page.goto(page_file.resolve().as_uri(), wait_until="load")
        page.locator('#board thead th[data-key="fewclue"]').click()
        page.screenshot(path=str(png), full_page=True)
        browser.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
