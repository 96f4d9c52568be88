"""`zh-bert publish RUN_OR_CKPT --repo-id ORG/NAME`: stage a checkpoint with its model card and upload it.

Staging copies files by an explicit allow-list (weights, config, tokenizer files, the recipe, metrics,
curves, run summary): a `.env`, optimizer states or anything else sitting in the run dir can never reach the
Hub, whatever it is called. The upload is one commit (create the repo if missing; intermediate checkpoints
go to a branch with `--revision step-10000`), retried on transient errors; a retry re-sends only files the
server does not already have. The token comes from `HF_TOKEN` or `hf auth login` and is never printed or
written: staged text files are even checked for it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from zh_bert.errors import ZhBertError

#: from the model folder (out_dir/final or a checkpoint or any stock BERT folder)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "added_tokens.json", "spiece.model", "zh_bert_vocab.json")
MODEL_PATTERNS = ("model-*-of-*.safetensors",)
#: from the run dir (contract 4)
RUN_FILES = ("recipe.yaml", "metrics.jsonl", "curves.png", "run.json", "eval_results.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "added_tokens.json", "spiece.model", "zh_bert_vocab.json")
MAX_TEXT_SCAN = 64 << 20
RETRY_BACKOFF_S = 2.0   # first wait; doubles per retry


@dataclass
class Source:
    model_dir: Path
    run_dir: Path | None


def locate(path: str | Path) -> Source:
    """A run dir (has final/), a checkpoint inside one, or a bare model folder."""
    path = Path(path)
    if not path.exists():
        raise ZhBertError(f"{path}: no such run dir or checkpoint")
    if (path / "final" / "config.json").is_file():
        return Source(path / "final", path)
    if (path / "config.json").is_file():
        for up in (path.parent, path.parent.parent):  # run/final, run/checkpoints/step-N
            if (up / "run.json").is_file() or (up / "recipe.yaml").is_file():
                return Source(path, up)
        return Source(path, None)
    if (path / "run.json").is_file():
        raise ZhBertError(f"{path}: run dir has no final/ checkpoint yet; publish one of "
                          f"{path / 'checkpoints'}/step-* instead")
    raise ZhBertError(f"{path}: not a run dir or model folder (no final/config.json or config.json)")


def _allowed(name: str) -> bool:
    import fnmatch

    return name in MODEL_FILES or any(fnmatch.fnmatch(name, p) for p in MODEL_PATTERNS)


def select_files(src: Source) -> tuple[dict[str, Path], list[str]]:
    """(repo path -> local file, skipped names). Only regular files (no symlinks) on the allow-list."""
    chosen: dict[str, Path] = {}
    skipped: list[str] = []
    dirs = [(src.model_dir, _allowed, True)]
    if src.run_dir and src.run_dir != src.model_dir:
        dirs.append((src.run_dir, lambda n: n in RUN_FILES, True))
        final = src.run_dir / "final"
        if final.is_dir() and final != src.model_dir:  # intermediate checkpoints may hold only weights
            dirs.append((final, lambda n: n in TOKENIZER_FILES, False))
    for d, ok, report in dirs:
        for p in sorted(d.iterdir()):
            if p.is_file() and not p.is_symlink() and ok(p.name) and p.name not in chosen:
                chosen[p.name] = p
            elif report and p.name not in chosen and p != src.model_dir and p.name != "final":
                skipped.append(str(p.relative_to(d)) + ("/" if p.is_dir() else ""))
    if "config.json" not in chosen:
        raise ZhBertError(f"{src.model_dir}: no config.json")
    if not any(n.endswith(".safetensors") for n in chosen):
        hint = " (it has pytorch_model.bin only; load and re-save it with safe_serialization)" \
            if (src.model_dir / "pytorch_model.bin").exists() else ""
        raise ZhBertError(f"{src.model_dir}: no safetensors weights{hint}; zh-bert publishes safetensors only")
    if not any(n in chosen for n in ("tokenizer.json", "vocab.txt", "spiece.model")):
        raise ZhBertError(f"{src.model_dir}: no tokenizer files (tokenizer.json / vocab.txt)")
    return chosen, skipped


def _check_no_secret(stage: Path, token: str | None) -> None:
    if not token or len(token) < 8:
        return
    needle = token.encode()
    for p in stage.iterdir():
        if p.suffix != ".safetensors" and p.stat().st_size <= MAX_TEXT_SCAN and needle in p.read_bytes():
            raise ZhBertError(f"{p.name}: contains your Hugging Face token; refusing to upload it")


def stage(src: Source, dest: Path, repo_id: str, license: str, token: str | None = None) -> list[str]:
    """Copy the allow-listed files and write README.md into `dest` (which must be empty/new)."""
    from zh_bert.card import build_card

    files, _ = select_files(src)
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        shutil.copyfile(path, dest / name)
    card = build_card(src.model_dir, src.run_dir, repo_id, license=license, files=list(files))
    (dest / "README.md").write_text(card, encoding="utf-8")
    _check_no_secret(dest, token)
    return sorted(p.name for p in dest.iterdir())


def _check_repo_id(repo_id: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", repo_id) or ".." in repo_id or repo_id.endswith("."):
        raise ZhBertError(f"--repo-id '{repo_id}': expected ORG/NAME (letters, digits, '-', '_', '.')")


def upload(stage_dir: Path, repo_id: str, *, token: str, endpoint: str | None, private: bool,
           revision: str | None, message: str, retries: int = 3) -> str:
    """create repo (if missing) -> branch (if asked) -> one commit; returns the commit URL."""
    from huggingface_hub import HfApi

    from zh_bert.download import hub_errors, is_transient

    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    where = endpoint or "huggingface.co"
    api = HfApi(endpoint=endpoint, token=token)
    with hub_errors(where, repo_id):
        me = api.whoami()
        owners = {me.get("name")} | {o.get("name") for o in me.get("orgs", []) if isinstance(o, dict)}
        namespace = repo_id.split("/")[0]
        if namespace not in owners:
            raise ZhBertError(f"{repo_id}: namespace '{namespace}' is not yours: the token belongs to "
                              f"'{me.get('name')}' (orgs: {', '.join(sorted(o for o in owners if o != me.get('name'))) or 'none'})")
        for attempt in range(retries):
            try:
                api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
                if revision and revision != "main":
                    api.create_branch(repo_id, branch=revision, exist_ok=True)
                info = api.upload_folder(folder_path=str(stage_dir), repo_id=repo_id, revision=revision,
                                         commit_message=message)
                return str(getattr(info, "commit_url", info))
            except Exception as e:
                if attempt + 1 < retries and is_transient(e):
                    wait = RETRY_BACKOFF_S * 2 ** attempt
                    print(f"zh-bert publish: transient error ({type(e).__name__}), retrying in {wait} s")
                    time.sleep(wait)
                    continue
                raise
    raise AssertionError("unreachable")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="zh-bert publish", description=__doc__.split("\n")[0])
    p.add_argument("source", metavar="RUN_OR_CKPT", help="run dir (uses final/), checkpoint or model folder")
    p.add_argument("--repo-id", required=True, help="ORG/NAME on the Hub")
    p.add_argument("--private", action="store_true", help="create the repo private")
    p.add_argument("--revision", default=None, help="branch to commit to (created from main), e.g. step-10000")
    p.add_argument("--endpoint", default=None, help="Hub endpoint (default: $HF_ENDPOINT or huggingface.co)")
    p.add_argument("--dry-run", action="store_true", help="stage and show what would be uploaded; upload nothing")
    p.add_argument("-o", "--output", default=None, help="with --dry-run: write the staged repo folder here")
    p.add_argument("--license", default="apache-2.0", help="licence id for the card (default apache-2.0)")
    p.add_argument("-m", "--message", default=None, help="commit message")
    args = p.parse_args(argv)
    _check_repo_id(args.repo_id)
    if args.output and not args.dry_run:
        raise ZhBertError("-o/--output is for --dry-run (the staged folder); drop it or add --dry-run")
    src = locate(args.source)
    select_files(src)  # fail on bad input before asking for a token

    token = None
    if not args.dry_run:
        from huggingface_hub import get_token

        token = get_token()
        if not token:
            raise ZhBertError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")

    from zh_bert.fileio import atomic_dir

    if args.dry_run and args.output:
        try:
            with atomic_dir(args.output) as tmp:
                names = stage(src, tmp, args.repo_id, args.license)
        except FileExistsError:
            raise ZhBertError(f"{args.output}: already exists; choose a new -o folder") from None
        where = Path(args.output)
    else:
        tmp_root = Path(tempfile.mkdtemp(prefix="zh-bert-publish-"))
        where = tmp_root / args.repo_id.split("/")[-1]
        names = stage(src, where, args.repo_id, args.license, token=token)
    _, skipped = select_files(src)
    total = sum((where / n).stat().st_size for n in names)
    print(f"{'would upload' if args.dry_run else 'uploading'} {len(names)} files ({total:,} bytes) "
          f"to {args.repo_id}{'@' + args.revision if args.revision else ''}:")
    for n in names:
        print(f"  {n}")
    if skipped:
        print(f"not on the allow-list, left out: {', '.join(skipped)}")
    if args.dry_run:
        if args.output:
            print(f"staged in {where}")
        else:
            shutil.rmtree(where.parent, ignore_errors=True)
        return 0
    try:
        url = upload(where, args.repo_id, token=token, endpoint=args.endpoint, private=args.private,
                     revision=args.revision, message=args.message or f"zh-bert publish {src.model_dir.name}")
    finally:
        shutil.rmtree(where.parent, ignore_errors=True)
    print(f"published: {url}")
    return 0
