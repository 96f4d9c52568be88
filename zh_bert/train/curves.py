"""`curves.png` from `metrics.jsonl`: loss, MLM accuracy and learning rate against step.

Train lines have `loss`; validation lines have `val_mlm_loss`. Drawn with matplotlib's Agg backend so it
works on headless machines.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, atomic_write, parse_json, read_text

# fonts with the CJK glyphs of a run's name (out_dir 中文实验), the first one installed is used
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
             "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "AR PL UMing CN")


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl: each line one JSON object whose `step` is an integer ≥ 0 (a figure a skipped
    step could not give is null). The last line may have been cut by a kill -9 and is then left out; any other
    line that is not such a row is one line naming `path:line` and the field."""
    lines = read_text(path).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            try:
                obj = parse_json(line, str(path))
            except ZhBertError:
                raise ZhBertError(f"{where}: not a JSON line (each line of a metrics log is one JSON object)") from None
            row = Record.of(obj, where, "a metrics row (a JSON object)")
            row.integer("step", lo=0)
        except ZhBertError:
            if i == last:   # a line cut by kill -9
                continue
            raise
        rows.append(row.data)
    return rows


def _series(rows: list[dict], key: str, where: str) -> list[float]:
    """The figure `key` of each row, checked to be a finite number (null, a skipped step's, is drawn as a gap)."""
    return [float("nan") if v is None else v for v in (Record(r, where).number(key, None) for r in rows)]


def plot_curves(metrics_path: str | Path, out_png: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_mlm_loss" in r]
    with cjk_text():
        _draw_curves(plt, train, val, title, out_png, str(metrics_path))
    return Path(out_png)


def _draw_curves(plt, train: list[dict], val: list[dict], title: str, out_png: str | Path, where: str) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = [("loss", "val_mlm_loss", "MLM loss"), ("mlm_acc", "val_mlm_acc", "MLM accuracy"), ("lr", None, "learning rate")]
    for ax, (key, vkey, label) in zip(axes, panels):
        ax.plot([r["step"] for r in train], _series(train, key, where), lw=1, label="train")
        if vkey and val:
            ax.plot([r["step"] for r in val], _series(val, vkey, where), "o-", ms=3, label="valid")
            ax.legend()
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(out_png, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


@contextlib.contextmanager
def cjk_text():
    """Chinese in a figure's text (the run's folder name in the title, an ablation's labels): drawn with a CJK
    font where one is installed, after the default font; without one matplotlib draws boxes and warns once
    per character ('Glyph ... missing from font'), noise on every finished run, which is silenced here."""
    import matplotlib
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    cjk = [name for name in CJK_FONTS if name in installed][:1]
    family = list(matplotlib.rcParams["font.family"])
    with matplotlib.rc_context({"font.family": family + cjk}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        yield
