"""`zh-bert download NAME_OR_ALIAS`: fetch only what inference and continued pretraining need.

Files go through the Hugging Face cache (so interrupted downloads resume and `HF_HUB_OFFLINE=1` works from
the cache), then the needed ones are copied into a clean, stock model folder in one atomic rename.
Mirrors work through `--endpoint` or `HF_ENDPOINT`. A repo that has only pickled weights is converted to
safetensors with `torch.load(weights_only=True)`, which refuses anything that is not plain tensors.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import shutil
from pathlib import Path

from zh_bert.errors import ZhBertError

#: files a model folder needs besides its weights (tokenizer files incl. vocab.txt for transformers 4.x)
NEEDED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
          "added_tokens.json", "spiece.model", "zh_bert_vocab.json")
SAFETENSORS = ("*.safetensors", "model.safetensors.index.json")
PICKLE = ("pytorch_model.bin",)


def _transport_errors() -> tuple[type, ...]:
    """Connection-level exception types of whichever HTTP client this huggingface_hub uses."""
    types: list[type] = [ConnectionError, TimeoutError]
    for mod in ("httpx2", "httpx", "requests"):
        try:
            m = __import__(mod)
        except ImportError:
            continue
        exc = getattr(m, "TransportError", None) or getattr(getattr(m, "exceptions", None), "ConnectionError", None)
        if exc is not None:
            types.append(exc)
    return tuple(types)


def _status(e) -> int | None:
    resp = getattr(e, "response", None)
    return getattr(resp, "status_code", None)


@contextlib.contextmanager
def hub_errors(where: str, repo_id: str | None = None):
    """Turn huggingface_hub / network exceptions into one-line ZhBertErrors (never echoing the token)."""
    from huggingface_hub import errors as E

    repo = f"{repo_id}: " if repo_id else ""
    try:
        yield
    except E.GatedRepoError:
        raise ZhBertError(f"{repo}gated repository on {where}: accept its terms on the website, then log in "
                          f"(HF_TOKEN or `hf auth login`)") from None
    except E.RepositoryNotFoundError:
        raise ZhBertError(f"{repo}repository not found on {where} (wrong id, or private and your token "
                          f"cannot see it)") from None
    except E.RevisionNotFoundError:
        raise ZhBertError(f"{repo}revision not found on {where}") from None
    except E.OfflineModeIsEnabled:
        raise ZhBertError(f"{repo}HF_HUB_OFFLINE=1 is set and the files are not in the local cache; unset it "
                          f"or download once while online") from None
    except E.LocalEntryNotFoundError:
        raise ZhBertError(f"{repo}cannot reach {where} and the files are not in the local cache "
                          f"(network down? try --endpoint or HF_ENDPOINT for a mirror)") from None
    except E.HfHubHTTPError as e:
        code = _status(e)
        if code == 401:
            raise ZhBertError(f"{repo}{where} rejected the token (HTTP 401): set a valid HF_TOKEN or run "
                              f"`hf auth login`") from None
        if code == 403:
            raise ZhBertError(f"{repo}permission denied by {where} (HTTP 403): the token has no write access "
                              f"to this repo or namespace") from None
        first = str(e).strip().split("\n")[0]
        raise ZhBertError(f"{repo}{where} answered HTTP {code}: {first}") from None
    except _transport_errors() as e:
        raise ZhBertError(f"{repo}cannot reach {where} ({type(e).__name__}): network down? try --endpoint or "
                          f"HF_ENDPOINT for a mirror") from None


def is_transient(e: BaseException) -> bool:
    """Worth retrying: connection trouble or a 5xx/429 answer."""
    from huggingface_hub import errors as E

    if isinstance(e, E.OfflineModeIsEnabled):
        return False
    if isinstance(e, _transport_errors()):
        return True
    return isinstance(e, E.HfHubHTTPError) and (_status(e) or 0) in (429, 500, 502, 503, 504)


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def convert_pickle(src: Path, dst: Path) -> None:
    """pytorch_model.bin -> model.safetensors, loading with weights_only (no arbitrary code runs)."""
    import pickle

    import torch
    from safetensors.torch import save_file

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
    save_file(tensors, str(dst), metadata={"format": "pt"})


def _ensure_tokenizer_files(out: Path) -> None:
    """Old repos ship only vocab.txt, which AutoTokenizer (transformers 5) cannot load: add the config files."""
    if (out / "tokenizer_config.json").exists() or not (out / "vocab.txt").exists():
        return
    from transformers import BertTokenizer

    tok = BertTokenizer(vocab=str(out / "vocab.txt"))
    vocab = (out / "vocab.txt").read_bytes()
    tok.save_pretrained(str(out))
    (out / "vocab.txt").write_bytes(vocab)  # keep the original bytes (U+2028 entries etc.)


def assemble(snapshot: Path, out: Path, overwrite: bool = False) -> Path:
    """Copy the needed files of a downloaded snapshot into `out` (atomic), converting pickle weights."""
    from zh_bert.fileio import atomic_dir

    files = {p.name: p for p in snapshot.iterdir() if p.is_file()}
    if "config.json" not in files:
        raise ZhBertError(f"{snapshot}: no config.json: not a transformers model repo")
    has_st = any(_matches(n, SAFETENSORS[:1]) for n in files)
    if not has_st and "pytorch_model.bin" not in files:
        raise ZhBertError(f"{snapshot}: no model weights (model.safetensors or pytorch_model.bin)")
    try:
        with atomic_dir(out, overwrite=overwrite) as tmp:
            for name, path in sorted(files.items()):
                if name in NEEDED or (has_st and _matches(name, SAFETENSORS)):
                    shutil.copyfile(path, tmp / name)
            if not has_st:
                convert_pickle(files["pytorch_model.bin"], tmp / "model.safetensors")
            _ensure_tokenizer_files(tmp)
    except FileExistsError:
        raise ZhBertError(f"{out}: already exists (choose another -o, or remove it)") from None
    return out


def download_hf(repo_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                cache_dir: str | None = None, overwrite: bool = False) -> Path:
    from huggingface_hub import HfApi, snapshot_download

    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None  # explicit: URL templates are fixed at import
    where = endpoint or "huggingface.co"
    with hub_errors(where, repo_id):
        try:
            info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision or "main")  # 1 request
            listing = [f.rfilename for f in info.siblings or []]
        except Exception as e:  # offline or unreachable: fall back to whatever the cache holds
            if not is_transient(e) and not isinstance(e, ConnectionError):
                raise
            listing = None
        if listing is not None and not any(_matches(f, SAFETENSORS[:1]) for f in listing) \
                and "pytorch_model.bin" not in listing:
            raise ZhBertError(f"{repo_id}: the repo has no PyTorch weights (model.safetensors or "
                              f"pytorch_model.bin); files: {', '.join(sorted(listing)[:12])}")
        if listing is None:
            weights = SAFETENSORS + PICKLE
        elif any(_matches(f, SAFETENSORS[:1]) for f in listing):
            weights = SAFETENSORS
        else:
            weights = PICKLE
        snap = snapshot_download(repo_id, revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                                 allow_patterns=list(NEEDED + weights), local_files_only=listing is None)
    return assemble(Path(snap), out, overwrite=overwrite)


def download_modelscope(model_id: str, out: Path, *, revision: str | None = None, endpoint: str | None = None,
                        overwrite: bool = False) -> Path:
    """ModelScope through its public HTTP API, with the standard library only (no `modelscope` package)."""
    import json
    import tempfile
    import urllib.error
    import urllib.parse
    import urllib.request

    ep = (endpoint or os.environ.get("MODELSCOPE_DOMAIN") or "https://www.modelscope.cn").rstrip("/")
    if not ep.startswith("http"):
        ep = "https://" + ep
    rev = revision or "master"
    base = f"{ep}/api/v1/models/{model_id}/repo"

    def get(url: str, **params):
        return urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=60)

    try:
        with get(f"{base}/files", Revision=rev, Recursive="true") as r:
            data = json.loads(r.read()).get("Data") or {}
        names = [f["Path"] for f in data.get("Files", []) if f.get("Type", "blob") == "blob"]
        if not names:
            raise ZhBertError(f"{model_id}: ModelScope ({ep}) lists no files for revision {rev}")
        has_st = any(_matches(n, SAFETENSORS[:1]) for n in names)
        wanted = [n for n in names if n in NEEDED or _matches(n, SAFETENSORS if has_st else PICKLE)]
        with tempfile.TemporaryDirectory(prefix="zh-bert-ms-") as tmp:
            for name in wanted:
                with get(base, Revision=rev, FilePath=name) as r, open(Path(tmp) / name, "wb") as f:
                    shutil.copyfileobj(r, f, 1 << 20)
            return assemble(Path(tmp), out, overwrite=overwrite)
    except urllib.error.HTTPError as e:
        what = "not found" if e.code == 404 else f"HTTP {e.code}"
        raise ZhBertError(f"{model_id}: ModelScope ({ep}) answered {what}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ZhBertError(f"{model_id}: cannot reach ModelScope at {ep} ({getattr(e, 'reason', e)}): "
                          f"network down?") from None


def default_out(name: str) -> Path:
    return Path("models") / name.replace("/", "--")


def main(argv: list[str]) -> int:
    from zh_bert.catalog import resolve

    p = argparse.ArgumentParser(prog="zh-bert download", description=__doc__.split("\n")[0])
    p.add_argument("name", metavar="NAME_OR_ALIAS", help="catalog alias (see `zh-bert models`) or ORG/NAME repo id")
    p.add_argument("-o", "--output", default=None, help="model folder to create (default: models/<name>)")
    p.add_argument("--endpoint", default=None, help="Hub endpoint or mirror (default: $HF_ENDPOINT or huggingface.co)")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main; ModelScope: master)")
    p.add_argument("--source", choices=("hf", "modelscope"), default="hf")
    p.add_argument("--cache-dir", default=None, help="Hugging Face cache dir (default: $HF_HUB_CACHE)")
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    args = p.parse_args(argv)
    repo_id, entry = resolve(args.name)
    out = Path(args.output) if args.output else default_out(entry.alias if entry else repo_id)
    if out.exists() and not args.force:
        raise ZhBertError(f"{out}: already exists (use --force to replace it, or another -o)")
    if args.source == "modelscope":
        ms_id = (entry.modelscope_id if entry and entry.modelscope_id else repo_id)
        download_modelscope(ms_id, out, revision=args.revision, endpoint=args.endpoint, overwrite=args.force)
    else:
        download_hf(repo_id, out, revision=args.revision, endpoint=args.endpoint, cache_dir=args.cache_dir,
                    overwrite=args.force)
    print(f"downloaded {repo_id} -> {out}")
    for f in sorted(out.iterdir()):
        print(f"  {f.name}  ({f.stat().st_size:,} bytes)")
    return 0
