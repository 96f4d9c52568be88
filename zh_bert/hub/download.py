"""`zh-bert download NAME_OR_ALIAS`: fetch only what inference and continued pretraining need.

Files go through the Hugging Face cache (so interrupted downloads resume and `HF_HUB_OFFLINE=1` works from
the cache), then the needed ones are copied into a clean, stock model folder in one atomic rename.
Mirrors work through `--endpoint` or `HF_ENDPOINT`. A repo that has only pickled weights is converted to
safetensors with `torch.load(weights_only=True)`, which refuses anything that is not plain tensors.
The folder gets a marker, `.zh-bert-download.json` (where it came from, which files download wrote):
`--force` replaces only a folder whose marker proves download wrote it and that holds nothing else, never a
file, a user's folder or a training run, and never the current directory.
"""

from __future__ import annotations

import fnmatch
import glob
import http.client
import json
import os
import pickle
import shutil
import socket
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zh_bert.core import config
from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import (
    atomic_dir,
    atomic_write,
    claim_dir,
    copy_file,
    read_json,
    save_pretrained,
    save_safetensors,
    write_bytes,
    write_json,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.tokenizer_files import TOKENIZER_FILES
from zh_bert.hub.catalog import resolve
from zh_bert.hub.endpoint import (
    check_listing,
    endpoint_and_host,
    hub_errors,
    is_transient,
    local_path,
    quiet_progress_bars,
    scratch_dir,
)

#: files a model folder needs besides its weights
NEEDED = ("config.json",) + TOKENIZER_FILES
SAFETENSORS = ("*.safetensors", "model.safetensors.index.json")
PICKLE = ("pytorch_model.bin",)
#: written into every downloaded folder: the proof that `--force` may replace it
MARKER = ".zh-bert-download.json"
OURS = "a model folder written by zh-bert download"


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _has_safetensors(names) -> bool:
    return any(_matches(n, SAFETENSORS[:1]) for n in names)


def weight_patterns(listing: list[str] | None) -> tuple[str, ...]:
    """The weight files to fetch: safetensors where the repo has them, else the pickle (converted on
    arrival); both when the listing is unknown (offline, answered from the cache)."""
    if listing is None:
        return SAFETENSORS + PICKLE
    return SAFETENSORS if _has_safetensors(listing) else PICKLE


def wanted_files(listing: list[str], where: str) -> list[str]:
    """The names of a remote listing to fetch (top-level config, tokenizer and weight files), after every
    name in it has been checked: a listing with `../x` or an absolute path is refused as a whole."""
    listing = check_listing(listing, where)
    weights = weight_patterns(listing)
    return [n for n in listing if "/" not in n and (n in NEEDED or _matches(n, weights))]


def convert_pickle(src: Path, dst: Path) -> None:
    """pytorch_model.bin -> model.safetensors, loading with weights_only (no arbitrary code runs)."""
    import torch

    try:
        state = torch.load(str(src), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError) as e:
        raise ZhBertError(f"{src.name}: refused to convert: it holds more than plain tensors, and zh-bert never "
                          f"unpickles untrusted code ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ZhBertError(f"{src.name}: refused to convert: not a state dict of tensors")
    seen: set[tuple[int, int]] = set()
    tensors = {}
    for k, v in state.items():  # tied weights share storage; safetensors wants them separate
        key = (v.untyped_storage().data_ptr(), v.storage_offset())
        tensors[k] = v.contiguous().clone() if key in seen else v.contiguous()
        seen.add(key)
    save_safetensors(tensors, dst, metadata={"format": "pt"})


def _ensure_tokenizer_files(out: Path) -> None:
    """Old repos ship only vocab.txt, which AutoTokenizer (transformers 5) cannot load: add the config files."""
    if (out / "tokenizer_config.json").exists() or not (out / "vocab.txt").exists():
        return
    from transformers import BertTokenizer

    tok = BertTokenizer(vocab=str(out / "vocab.txt"))
    vocab = (out / "vocab.txt").read_bytes()
    save_pretrained(tok, out)
    write_bytes(out / "vocab.txt", vocab)  # keep the original bytes (U+2028 entries etc.)


def written_files(out: Path) -> set[str]:
    """The names `out`'s marker says download wrote (empty when there is no readable marker)."""
    marker = read_json(out / MARKER, default={})
    files = marker.get("files") if isinstance(marker, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def check_output(out: Path, force: bool) -> None:
    """Before any request: `out` must be new, or (with --force) a folder this command wrote, holding only
    the files its marker lists; anything else is refused with one line naming what is in the way."""
    ours = written_files(out) | {MARKER} if out.is_dir() else set()
    claim_dir(out, legacy=lambda name, is_dir: not is_dir and name in ours, proof=lambda p: (p / MARKER).is_file(),
              force=force, need_force=True, what=OURS)


def assemble(snapshot: Path, out: Path, overwrite: bool = False, origin: dict | None = None) -> Path:
    """Copy the needed files of a downloaded snapshot into `out` (atomic), converting pickle weights, and
    write the marker (`origin` plus the file names) that lets a later `--force` replace the folder."""
    files = {p.name: p for p in snapshot.iterdir() if p.is_file()}
    if "config.json" not in files:
        raise ZhBertError(f"{snapshot}: no config.json: not a transformers model repo")
    has_st = _has_safetensors(files)
    if not has_st and "pytorch_model.bin" not in files:
        raise ZhBertError(f"{snapshot}: no model weights (model.safetensors or pytorch_model.bin)")
    try:
        ours = written_files(out) | {MARKER}
        with atomic_dir(out, overwrite=overwrite, legacy=lambda name, is_dir: not is_dir and name in ours) as tmp:
            for name, path in sorted(files.items()):
                if name in NEEDED or (has_st and _matches(name, SAFETENSORS)):
                    copy_file(path, tmp / name)
            if not has_st:
                convert_pickle(files["pytorch_model.bin"], tmp / "model.safetensors")
            _ensure_tokenizer_files(tmp)
            names = sorted(p.name for p in tmp.iterdir())
            write_json(tmp / MARKER, {**(origin or {}), "files": names}, indent=1)
    except FileExistsError:
        raise ZhBertError(f"{out}: already exists (choose another -o, or remove it)") from None
    except OSError as e:  # a full disk, no permission: nothing was renamed into place
        raise ZhBertError(f"{out}: cannot write ({e.strerror or e}); nothing was written") from None
    return out


def download_hf(repo_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                cache_dir: str | None = None, overwrite: bool = False) -> Path:
    """The files of `repo_id` a model folder needs, through the Hugging Face cache (offline: from the cache)."""
    from huggingface_hub import HfApi, snapshot_download

    endpoint, where = endpoint_and_host(endpoint)
    quiet_progress_bars()
    with hub_errors(where, repo_id):
        try:
            info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision or "main")  # 1 request
            listing = [getattr(f, "rfilename", None) for f in info.siblings or []]
        except Exception as e:  # offline or unreachable: fall back to whatever the cache holds
            if not is_transient(e) and not isinstance(e, ConnectionError):
                raise
            listing = None
        if listing is not None and not _has_safetensors(listing) and "pytorch_model.bin" not in listing:
            raise ZhBertError(f"{repo_id}: the repo has no PyTorch weights (model.safetensors or "
                              f"pytorch_model.bin); files: {', '.join(sorted(listing)[:12])}")
        # exact names from the checked listing (escaped: `[` in a name is not a pattern), so a second,
        # different listing from the server cannot add a file
        patterns = list(NEEDED + weight_patterns(None)) if listing is None else \
            [glob.escape(n) for n in wanted_files(listing, f"{repo_id} on {where}")]
        snap = snapshot_download(repo_id, revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                                 allow_patterns=patterns, local_files_only=listing is None)
    return assemble(Path(snap), out, overwrite=overwrite,
                    origin={"source": "hf", "repo_id": repo_id, "revision": revision, "endpoint": where})


def _modelscope_names(raw: bytes, where: str) -> list[str]:
    """The blob paths of a ModelScope file listing (its JSON checked for shape, not trusted)."""
    try:
        data = json.loads(raw).get("Data") or {}
        files = data.get("Files") or []
    except (ValueError, AttributeError):
        raise ZhBertError(f"{where}: the file listing is not JSON with Data.Files") from None
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise ZhBertError(f"{where}: the file listing is not a list of files")
    return [f.get("Path") for f in files if f.get("Type", "blob") == "blob"]


def download_modelscope(model_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                        overwrite: bool = False) -> Path:
    """ModelScope through its public HTTP API, with the standard library only (no `modelscope` package)."""

    ep = (endpoint or os.environ.get("MODELSCOPE_DOMAIN") or "https://www.modelscope.cn").rstrip("/")
    if not ep.startswith("http"):
        ep = "https://" + ep
    rev = revision or "master"
    base = f"{ep}/api/v1/models/{model_id}/repo"
    where = f"{model_id} on ModelScope ({ep})"

    def get(url: str, **params):
        return urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=60)

    try:
        with get(f"{base}/files", Revision=rev, Recursive="true") as r:
            names = _modelscope_names(r.read(), where)
        if not names:
            raise ZhBertError(f"{model_id}: ModelScope ({ep}) lists no files for revision {rev}")
        wanted = wanted_files(names, where)
        with scratch_dir("zh-bert-ms-") as tmp:
            for name in wanted:
                with get(base, Revision=rev, FilePath=name) as r, atomic_write(local_path(tmp, name, where), "wb") as f:
                    shutil.copyfileobj(r, f, 1 << 20)
            return assemble(tmp, out, overwrite=overwrite,
                            origin={"source": "modelscope", "repo_id": model_id, "revision": rev, "endpoint": ep})
    except urllib.error.HTTPError as e:
        what = "not found" if e.code == 404 else f"HTTP {e.code}"
        raise ZhBertError(f"{model_id}: ModelScope ({ep}) answered {what}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.gaierror, http.client.HTTPException) as e:
        raise ZhBertError(f"{model_id}: cannot reach ModelScope at {ep} ({getattr(e, 'reason', e)}): "
                          f"network down?") from None
    except OSError as e:  # local: a full disk, no permission
        raise ZhBertError(f"{e.filename or out}: cannot write ({e.strerror or e})") from None


def default_out(name: str) -> Path:
    return Path("models") / name.replace("/", "--")


@dataclass
class DownloadConfig:
    name: str = option(positional=True, metavar="NAME_OR_ALIAS",
                       help="catalog alias (see `zh-bert models`) or ORG/NAME repo id")
    output: str | None = option(None, flags=("-o",), help="model folder to create (default: models/<name>)")
    endpoint: str | None = option_of(Shared, "endpoint")
    revision: str | None = option_of(Shared, "revision")
    source: Literal["hf", "modelscope"] = option("hf", help="where to download from")
    cache_dir: str | None = option(None, help="Hugging Face cache dir (default: $HF_HUB_CACHE)")
    force: bool = option_of(Shared, "force", help="replace the output folder if it exists (only a folder zh-bert wrote)")

    def __post_init__(self):
        if self.source not in ("hf", "modelscope"):
            raise ZhBertError(f"--source: must be 'hf' or 'modelscope', got {self.source!r}")
        if not self.name or not self.name.strip():
            raise ZhBertError("NAME_OR_ALIAS: empty; give a catalog alias (see `zh-bert models`) or ORG/NAME")


def download(cfg: DownloadConfig) -> Path:
    """Resolve the name, then fetch from the Hub (or ModelScope) into the output folder; returns it."""
    repo_id, entry = resolve(cfg.name)
    out = Path(cfg.output) if cfg.output else default_out(entry.alias if entry else repo_id)
    check_output(out, cfg.force)
    if cfg.source == "modelscope":
        ms_id = entry.modelscope_id if entry and entry.modelscope_id else repo_id
        return download_modelscope(ms_id, out, revision=cfg.revision, endpoint=cfg.endpoint, overwrite=cfg.force)
    return download_hf(repo_id, out, revision=cfg.revision, endpoint=cfg.endpoint, cache_dir=cfg.cache_dir,
                       overwrite=cfg.force)


def build_parser():
    return config.build_parser("zh-bert download", __doc__.split("\n")[0], DownloadConfig)


def main(argv: list[str]) -> int:
    cfg = config.config_from_args(DownloadConfig, build_parser().parse_args(argv))
    out = download(cfg)
    print(f"downloaded {resolve(cfg.name)[0]} -> {out}")
    for f in sorted(out.iterdir()):
        print(f"  {f.name}  ({f.stat().st_size:,} bytes)")
    return 0


def local_model(name: str, endpoint: str | None = None, revision: str | None = None, log=print) -> Path:
    """What a command that evaluates MODEL works on: a local checkpoint folder or run dir as given; else a catalog
    alias or Hub id, fetched by `download` into models/NAME once (a folder download wrote is reused).

    A name whose parent folder exists here is a mistyped path, not a repo id: one line, no network."""
    path = Path(name)
    if path.exists():
        return path
    if path.parent != Path(".") and path.parent.is_dir():
        near = suggest(path.name, [p.name for p in path.parent.iterdir()])
        raise ZhBertError(f"MODEL {name}: no such folder{near}")
    repo_id, entry = resolve(name)
    out = default_out(entry.alias if entry else repo_id)
    if (out / MARKER).is_file():
        log(f"{name}: using {out} (downloaded before)")
        return out
    log(f"{name}: downloading {repo_id} -> {out}")
    return download(DownloadConfig(name=name, endpoint=endpoint, revision=revision))
