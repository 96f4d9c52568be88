"""`zh-bert download NAME_OR_ALIAS`: fetch only what inference and continued pretraining need.

Files go through the Hugging Face cache (so interrupted downloads resume and `HF_HUB_OFFLINE=1` works from
the cache), then the needed ones are copied into a clean, stock model folder in one atomic rename.
Mirrors work through `--endpoint` or `HF_ENDPOINT`. A repo that has only pickled weights is converted to
safetensors with `torch.load(weights_only=True)`, which refuses anything that is not plain tensors; a release
that is a TensorFlow 1 checkpoint or a UER-py / TencentPretrain `.bin` is converted on arrival by `zh-bert
convert`'s code, with its proof of equality (`convert.convert_checkpoint`). A repo
whose config.json or tokenizer_config.json names code of its own is refused from those two small files,
before any weights are fetched (`weights.refuse_code`, the rule every loading command applies): without its
code it is no stock model, and zh-bert never runs a repo's code.
The folder gets a marker, `.zh-bert-download.json` (where it came from, which files download wrote):
`--force` replaces only a folder whose marker proves download wrote it and that holds nothing else, never a
file, a user's folder or a training run, and never the current directory.
"""

from __future__ import annotations

import fnmatch
import glob
import http.client
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
    FINAL,
    Record,
    api_answer,
    atomic_dir,
    atomic_write,
    claim_dir,
    copy_file,
    read_json,
    save_safetensors,
    write_json,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.tokenizer_files import TOKENIZER_FILES
from zh_bert.hub.catalog import resolve
from zh_bert.hub.convert import add_tokenizer_files, convert_checkpoint
from zh_bert.hub.endpoint import (
    MAX_ANSWER,
    HubRepo,
    check_listing,
    endpoint_and_host,
    hub_errors,
    is_transient,
    local_path,
    quiet_progress_bars,
    repo_info,
    scratch_dir,
)
from zh_bert.hub.listing import repo_json, repo_texts
from zh_bert.train.weights import refuse_code, refuse_repo_code

#: files a model folder needs besides its weights
NEEDED = ("config.json",) + TOKENIZER_FILES
SAFETENSORS = ("*.safetensors", "model.safetensors.index.json")
PICKLE = ("pytorch_model.bin",)
#: a release in another format, converted on arrival by `zh-bert convert`'s code: TensorFlow 1, UER .bin
TF1_FILES = ("*.index", "*.data-?????-of-?????", "checkpoint", "*config*.json")
UER_FILES = ("*.bin", "*config*.json")
#: the files that say whether a repo names code of its own (`weights.remote_code`)
CODE_FILES = ("config.json", "tokenizer_config.json")
#: written into every downloaded folder: the proof that `--force` may replace it
MARKER = ".zh-bert-download.json"
OURS = "a model folder written by zh-bert download"


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _has_safetensors(names) -> bool:
    return any(_matches(n, SAFETENSORS[:1]) for n in names)


def _to_convert(names) -> tuple[str, ...] | None:
    """The files of a TensorFlow 1 or UER release among `names` (no Hugging Face weights), or None."""
    if any(n.endswith(".index") for n in names):
        return TF1_FILES
    if any(n.endswith(".bin") and n != "training_args.bin" for n in names):
        return UER_FILES
    return None


def weight_patterns(listing: list[str] | None, source_format: str = "hf") -> tuple[str, ...]:
    """The weight files to fetch: safetensors where the repo has them, else the pickle (converted on
    arrival), else a TensorFlow 1 or UER release (converted by `convert`); offline (the listing unknown, the
    cache answers), what the catalog says the release is."""
    if listing is None:
        return {"tf1": TF1_FILES, "uer": UER_FILES, "tencentpretrain": UER_FILES}.get(source_format,
                                                                                     SAFETENSORS + PICKLE)
    if _has_safetensors(listing):
        return SAFETENSORS
    return PICKLE if "pytorch_model.bin" in listing else (_to_convert(listing) or PICKLE)


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


def _marker(origin: dict | None):
    """The function that writes download's marker into a finished temp folder, naming every file in it."""
    def write(tmp: Path) -> None:
        names = sorted(p.name for p in tmp.iterdir())
        write_json(tmp / MARKER, {**(origin or {}), "files": names}, indent=1)
    return write


def assemble(snapshot: Path, out: Path, overwrite: bool = False, origin: dict | None = None,
             source_format: str = "hf") -> Path:
    """Copy the needed files of a downloaded snapshot into `out` (atomic), converting pickle weights, and
    write the marker (`origin` plus the file names) that lets a later `--force` replace the folder. A
    TensorFlow 1 or UER release is converted by `convert`'s code, with its proof of equality."""
    files = {p.name: p for p in snapshot.iterdir() if p.is_file()}
    if not _has_safetensors(files) and "pytorch_model.bin" not in files and _to_convert(files):
        ours = written_files(out) | {MARKER}
        convert_checkpoint(snapshot, out, forced=None if source_format == "hf" else source_format,
                           overwrite=overwrite, legacy=lambda name, is_dir: not is_dir and name in ours,
                           finish=_marker({**(origin or {}), "converted_from": source_format}))
        return out
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
            add_tokenizer_files(tmp)
            _marker(origin)(tmp)
    except FileExistsError:
        raise ZhBertError(f"{out}: already exists (choose another -o, or remove it)") from None
    except OSError as e:  # a full disk, no permission: nothing was renamed into place
        raise ZhBertError(f"{out}: cannot write ({e.strerror or e}); nothing was written") from None
    return out


def _online_info(repo_id: str, revision: str | None, endpoint: str | None, where: str) -> HubRepo | None:
    """The repo's model info with file sizes, or None when the endpoint cannot be reached (offline: the cache
    answers); a field of the wrong type in it is one line."""
    try:
        info = repo_info(endpoint, repo_id, where, revision or "main", files=True)   # 1 request
    except Exception as e:
        if not is_transient(e) and not isinstance(e, ConnectionError):
            raise
        return None
    if info.problem:
        raise ZhBertError(f"{repo_id}: {info.problem}")
    return info


def _refuse_hub_code(info: HubRepo, revision: str | None, endpoint: str | None, where: str) -> None:
    """One line when the repo's config.json or tokenizer_config.json (fetched alone, each capped, into a
    scratch cache removed right after) names code of its own: before any weights are downloaded."""
    with scratch_dir("zh-bert-code-") as cache:
        texts = repo_texts(info, CODE_FILES, endpoint, where, revision, cache)
    try:
        found = [repo_json(texts, name) for name in CODE_FILES]
    except ZhBertError as e:
        raise ZhBertError(f"{info.id} on {where}: {e}") from None
    refuse_code(*found, f"{info.id} on {where}")


def download_hf(repo_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                cache_dir: str | None = None, overwrite: bool = False, source_format: str = "hf") -> Path:
    """The files of `repo_id` a model folder needs, through the Hugging Face cache (offline: from the cache)."""
    from huggingface_hub import snapshot_download

    endpoint, where = endpoint_and_host(endpoint)
    quiet_progress_bars()
    with hub_errors(where, repo_id):
        info = _online_info(repo_id, revision, endpoint, where)
        listing = None if info is None else list(info.files or {})
        if listing is not None and not _has_safetensors(listing) and "pytorch_model.bin" not in listing \
                and not _to_convert(listing):
            raise ZhBertError(f"{repo_id}: the repo has no weights zh-bert reads (model.safetensors, "
                              f"pytorch_model.bin, a TensorFlow 1 checkpoint or a UER .bin); files: "
                              f"{', '.join(sorted(listing)[:12])}")
        # exact names from the checked listing (escaped: `[` in a name is not a pattern), so a second,
        # different listing from the server cannot add a file
        patterns = list(NEEDED + weight_patterns(None, source_format)) if listing is None else \
            [glob.escape(n) for n in wanted_files(listing, f"{repo_id} on {where}")]
        if info is not None:
            _refuse_hub_code(info, revision, endpoint, where)
        snap = snapshot_download(repo_id, revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                                 allow_patterns=patterns, local_files_only=listing is None)
    if info is None:   # from the cache: the same rule on the cached files, before anything is assembled
        refuse_code(*(read_json(Path(snap) / name, default=None) for name in CODE_FILES), f"{repo_id} (cached)")
    return assemble(Path(snap), out, overwrite=overwrite, source_format=source_format,
                    origin={"source": "hf", "repo_id": repo_id, "revision": revision, "endpoint": where})


def _modelscope_names(raw: bytes, content_type: str | None, where: str) -> list[str]:
    """The blob paths of a ModelScope file listing (its JSON read by the layer and checked for shape)."""
    listing = Record.of(api_answer(raw, content_type, where, "ModelScope's API"), where, "a file listing")
    data = listing.record("Data", None)
    files = data.records("Files", None) if data is not None else None
    if not files:
        return []
    return [f.raw("Path") for f in files if f.raw("Type", "blob") == "blob"]


def download_modelscope(model_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                        overwrite: bool = False, source_format: str = "hf") -> Path:
    """ModelScope through its public HTTP API, with the standard library only (no `modelscope` package)."""

    ep = (endpoint or os.environ.get("MODELSCOPE_DOMAIN") or "https://www.modelscope.cn").rstrip("/")
    if not ep.startswith("http"):
        ep = "https://" + ep
    rev = revision or "master"
    base = f"{ep}/api/v1/models/{model_id}/repo"
    where = f"{model_id} on ModelScope ({ep})"

    def get(url: str, **params):
        return urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=60)

    def fetch(names: list[str], tmp: Path) -> None:
        for name in names:
            with get(base, Revision=rev, FilePath=name) as r, atomic_write(local_path(tmp, name, where), "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)

    try:
        with get(f"{base}/files", Revision=rev, Recursive="true") as r:
            body = r.read(MAX_ANSWER + 1)
            if len(body) > MAX_ANSWER:
                raise ZhBertError(f"{where}: the file listing is over {MAX_ANSWER >> 20} MiB; not read")
            names = _modelscope_names(body, r.headers.get("Content-Type"), where)
        if not names:
            raise ZhBertError(f"{model_id}: ModelScope ({ep}) lists no files for revision {rev}")
        wanted = wanted_files(names, where)
        with scratch_dir("zh-bert-ms-") as tmp:
            fetch([n for n in wanted if n in CODE_FILES], tmp)   # the small files first: refused before weights
            refuse_code(read_json(tmp / "config.json", default=None),
                        read_json(tmp / "tokenizer_config.json", default=None), where)
            fetch([n for n in wanted if n not in CODE_FILES], tmp)
            return assemble(tmp, out, overwrite=overwrite, source_format=source_format,
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
        return download_modelscope(ms_id, out, revision=cfg.revision, endpoint=cfg.endpoint, overwrite=cfg.force,
                                   source_format=entry.source_format if entry else "hf")
    return download_hf(repo_id, out, revision=cfg.revision, endpoint=cfg.endpoint, cache_dir=cfg.cache_dir,
                       overwrite=cfg.force, source_format=entry.source_format if entry else "hf")


def build_parser():
    return config.build_parser("zh-bert download", __doc__.split("\n")[0], DownloadConfig)


def main(argv: list[str]) -> int:
    cfg = config.config_from_args(DownloadConfig, build_parser().parse_args(argv))
    out = download(cfg)
    print(f"downloaded {resolve(cfg.name)[0]} -> {out}")
    for f in sorted(out.iterdir()):
        print(f"  {f.name}  ({f.stat().st_size:,} bytes)")
    return 0


def _folder_of(path: Path) -> Path:
    """The model folder of a local MODEL: a run dir's final/, else the folder as given."""
    return path / FINAL if (path / FINAL / "config.json").is_file() else path


def refuse_model_code(name: str, endpoint: str | None = None, revision: str | None = None) -> None:
    """One line when MODEL, as `local_model` takes it, names code of its own: a local folder or run dir by its
    files, a catalog alias or Hub id (`hub:` or not) by its config.json and tokenizer_config.json alone, before
    anything else of it is fetched. The same rule (`weights.refuse_code`) every loading command applies."""
    path = Path(name)
    if path.exists():
        refuse_repo_code(_folder_of(path))
        return
    repo_id, _ = resolve(name.removeprefix("hub:"))
    endpoint, where = endpoint_and_host(endpoint)
    with hub_errors(where, repo_id):
        info = repo_info(endpoint, repo_id, where, revision or "main", files=True)
        if info.problem:
            raise ZhBertError(f"{repo_id}: {info.problem}")
        _refuse_hub_code(info, revision, endpoint, where)


def local_model(name: str, endpoint: str | None = None, revision: str | None = None, log=print) -> Path:
    """What a command that evaluates MODEL works on: a local checkpoint folder or run dir as given; else a catalog
    alias or Hub id (`hub:ORG/NAME` too), fetched by `download` into models/NAME once (a folder download wrote is
    reused). A model that names code of its own is refused first (a Hub repo from its two small JSON files,
    before any weights move).

    A name whose parent folder exists here is a mistyped path, not a repo id: one line, no network."""
    path = Path(name)
    if path.exists():
        refuse_repo_code(_folder_of(path))
        return path
    if path.parent != Path(".") and path.parent.is_dir():
        near = suggest(path.name, [p.name for p in path.parent.iterdir()])
        raise ZhBertError(f"MODEL {name}: no such folder{near}")
    name = name.removeprefix("hub:")
    repo_id, entry = resolve(name)
    out = default_out(entry.alias if entry else repo_id)
    if (out / MARKER).is_file():
        log(f"{name}: using {out} (downloaded before)")
        return out
    log(f"{name}: downloading {repo_id} -> {out}")
    return download(DownloadConfig(name=name, endpoint=endpoint, revision=revision))
