"""`zh-bert publish RUN_OR_CKPT --repo-id ORG/NAME`: stage a checkpoint with its model card and upload it.

Staging copies files by an explicit allow-list (weights, config, tokenizer files, the recipe, metrics,
curves, run summary): a `.env`, optimizer states or anything else sitting in the run dir can never reach the
Hub, whatever it is called. The upload is one commit (create the repo if missing; intermediate checkpoints
go to a branch with `--revision step-10000`), retried on transient errors; a retry re-sends only files the
server does not already have. The token comes from `HF_TOKEN` or `hf auth login` and is never printed or
written: staged text files are even checked for it.
"""

from __future__ import annotations

import fnmatch
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zh_bert import config
from zh_bert.card import build_card
from zh_bert.config import option
from zh_bert.errors import ZhBertError
from zh_bert.fileio import atomic_dir
from zh_bert.hub import check_repo_id, endpoint_and_host, hub_errors, with_retries
from zh_bert.rundir import FINAL, Checkpoint, locate
from zh_bert.tokenizer_files import TOKENIZER_FILES

#: from the model folder (out_dir/final or a checkpoint or any stock BERT folder)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors",
               "model.safetensors.index.json") + TOKENIZER_FILES
MODEL_PATTERNS = ("model-*-of-*.safetensors",)
#: from the run dir
RUN_FILES = ("recipe.yaml", "metrics.jsonl", "curves.png", "run.json", "eval_results.json")
MAX_TEXT_SCAN = 64 << 20
RETRY_BACKOFF_S = 2.0   # first wait; doubles per retry


def _allowed(name: str) -> bool:
    return name in MODEL_FILES or any(fnmatch.fnmatch(name, p) for p in MODEL_PATTERNS)


def select_files(src: Checkpoint) -> tuple[dict[str, Path], list[str]]:
    """(repo path -> local file, skipped names). Only regular files (no symlinks) on the allow-list."""
    chosen: dict[str, Path] = {}
    skipped: list[str] = []
    model = src.model_dir.resolve()
    dirs = [(src.model_dir, _allowed, True)]
    if src.run_dir and src.run_dir != model:
        dirs.append((src.run_dir, lambda n: n in RUN_FILES, True))
        final = src.run_dir / FINAL
        if final.is_dir() and final != model:  # intermediate checkpoints may hold only weights
            dirs.append((final, lambda n: n in TOKENIZER_FILES, False))
    for d, ok, report in dirs:
        for p in sorted(d.iterdir()):
            if p.is_file() and not p.is_symlink() and ok(p.name) and p.name not in chosen:
                chosen[p.name] = p
            elif report and p.name not in chosen and p != model and p.name != FINAL:
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


def stage(src: Checkpoint, dest: Path, repo_id: str, license: str, token: str | None = None) -> list[str]:
    """Copy the allow-listed files and write README.md into `dest` (which must be empty/new)."""
    files, _ = select_files(src)
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        shutil.copyfile(path, dest / name)
    card = build_card(src.model_dir, src.run_dir, repo_id, license=license, files=list(files))
    (dest / "README.md").write_text(card, encoding="utf-8")
    _check_no_secret(dest, token)
    return sorted(p.name for p in dest.iterdir())


def _check_namespace(api, repo_id: str) -> None:
    """Refuse before any write when the token cannot own `repo_id` (a clearer message than the server's 403)."""
    me = api.whoami()
    name = me.get("name")
    owners = {name} | {o.get("name") for o in me.get("orgs", []) if isinstance(o, dict)}
    namespace = repo_id.split("/")[0]
    if namespace not in owners:
        orgs = ", ".join(sorted(o for o in owners if o != name)) or "none"
        raise ZhBertError(f"{repo_id}: namespace '{namespace}' is not yours: the token belongs to '{name}' "
                          f"(orgs: {orgs})")


def upload(stage_dir: Path, repo_id: str, *, token: str, endpoint: str | None, private: bool,
           revision: str | None, message: str, retries: int = 3) -> str:
    """create repo (if missing) -> branch (if asked) -> one commit; returns the commit URL."""
    from huggingface_hub import HfApi

    endpoint, where = endpoint_and_host(endpoint)
    api = HfApi(endpoint=endpoint, token=token)

    def commit() -> str:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(folder_path=str(stage_dir), repo_id=repo_id, revision=revision,
                                 commit_message=message)
        return str(getattr(info, "commit_url", info))

    with hub_errors(where, repo_id):
        _check_namespace(api, repo_id)
        return with_retries(commit, attempts=retries, backoff_s=RETRY_BACKOFF_S,
                            log=lambda m: print(f"zh-bert publish: {m}"))


@dataclass
class PublishConfig:
    source: str = option(positional=True, metavar="RUN_OR_CKPT",
                         help="run dir (uses final/), checkpoint or model folder")
    repo_id: str = option(help="ORG/NAME on the Hub")
    private: bool = option(False, help="create the repo private")
    revision: str | None = option(None, help="branch to commit to (created from main), e.g. step-10000")
    endpoint: str | None = option(None, help="Hub endpoint (default: $HF_ENDPOINT or huggingface.co)")
    dry_run: bool = option(False, help="stage and show what would be uploaded; upload nothing")
    output: str | None = option(None, flags=("-o",), help="with --dry-run: write the staged repo folder here")
    license: str = option("apache-2.0", help="licence id for the card")
    message: str | None = option(None, flags=("-m",), help="commit message")

    def __post_init__(self):
        check_repo_id(self.repo_id, "--repo-id")
        if self.output and not self.dry_run:
            raise ZhBertError("-o/--output is for --dry-run (the staged folder); drop it or add --dry-run")


def build_parser():
    return config.build_parser("zh-bert publish", __doc__.split("\n")[0], PublishConfig)


def _token() -> str:
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ZhBertError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")
    return token


def _stage_for(cfg: PublishConfig, src: Checkpoint, token: str | None) -> tuple[Path, list[str]]:
    """(staged folder, its file names): in -o for a kept dry run, else in a temporary folder."""
    if cfg.dry_run and cfg.output:
        try:
            with atomic_dir(cfg.output) as tmp:
                names = stage(src, tmp, cfg.repo_id, cfg.license)
        except FileExistsError:
            raise ZhBertError(f"{cfg.output}: already exists; choose a new -o folder") from None
        return Path(cfg.output), names
    where = Path(tempfile.mkdtemp(prefix="zh-bert-publish-")) / cfg.repo_id.split("/")[-1]
    try:
        return where, stage(src, where, cfg.repo_id, cfg.license, token=token)
    except BaseException:  # e.g. a file holding the token: leave no copy of it behind
        shutil.rmtree(where.parent, ignore_errors=True)
        raise


def publish(cfg: PublishConfig) -> str | None:
    """Stage, show, and (unless --dry-run) upload; returns the commit URL, None for a dry run."""
    src = locate(cfg.source)
    _, skipped = select_files(src)  # fail on bad input before asking for a token
    token = None if cfg.dry_run else _token()
    where, names = _stage_for(cfg, src, token)
    total = sum((where / n).stat().st_size for n in names)
    print(f"{'would upload' if cfg.dry_run else 'uploading'} {len(names)} files ({total:,} bytes) "
          f"to {cfg.repo_id}{'@' + cfg.revision if cfg.revision else ''}:")
    for n in names:
        print(f"  {n}")
    if skipped:
        print(f"not on the allow-list, left out: {', '.join(skipped)}")
    if cfg.dry_run and cfg.output:
        print(f"staged in {where}")
        return None
    message = cfg.message or f"zh-bert publish {src.model_dir.resolve().name}"
    try:
        return None if cfg.dry_run else upload(where, cfg.repo_id, token=token, endpoint=cfg.endpoint,
                                               private=cfg.private, revision=cfg.revision, message=message)
    finally:
        shutil.rmtree(where.parent, ignore_errors=True)


def main(argv: list[str]) -> int:
    url = publish(config.config_from_args(PublishConfig, build_parser().parse_args(argv)))
    if url:
        print(f"published: {url}")
    return 0
