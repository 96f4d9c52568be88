"""`zh-bert publish RUN_OR_CKPT --repo-id ORG/NAME`: stage a checkpoint with its model card and upload it.

Staging copies files by an explicit allow-list (weights, config, tokenizer files, the recipe, metrics,
curves, run summary): a `.env`, optimizer states or anything else sitting in the run dir can never reach the
Hub, whatever it is called. A symlink on the allow-list is staged only when it leads to an allow-listed
file in the same folder; any other (out of the folder, broken) is refused by name, never followed. The upload is one commit (create the repo if missing; intermediate checkpoints
go to a branch with `--revision step-10000`), retried on transient errors; a retry re-sends only files the
server does not already have. The token comes from `HF_TOKEN` or `hf auth login` and is never printed or
written: every file is checked for it before the first copy (a dry run too), and a staging folder never
outlives the command (removed on error, on Ctrl-C, and after a kill by the next publish). Weights must open
before anything is staged, and the run's text files are published without absolute local paths.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core import config
from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    CURVES_PNG,
    PUBLISHED_RUN_FILES,
    VERIFICATION_FILE,
    atomic_dir,
    copy_file,
    fault_point,
    refuse_overlap,
    write_text,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.tokenizer_files import TOKENIZER_FILES
from zh_bert.release.card import build_card
from zh_bert.leaderboard.record import read_record
from zh_bert.leaderboard.sources import weights_sha256
from zh_bert.hub.endpoint import (
    check_repo_id,
    endpoint_and_host,
    hub_errors,
    quiet_progress_bars,
    scratch_dir,
    with_retries,
)
from zh_bert.train.rundir import (
    FINAL,
    GENERATOR,
    Checkpoint,
    is_model_dir,
    locate,
)
from zh_bert.train.weights import check_weights

#: from the model folder (out_dir/final or a checkpoint or any stock BERT / ModernBERT folder)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors",
               "model.safetensors.index.json") + TOKENIZER_FILES
MODEL_PATTERNS = ("model-*-of-*.safetensors",)
MAX_TEXT_SCAN = 64 << 20
RETRY_BACKOFF_S = 2.0   # first wait; doubles per retry


def _allowed(name: str) -> bool:
    return name in MODEL_FILES or any(fnmatch.fnmatch(name, p) for p in MODEL_PATTERNS)


def _regular_file(p: Path, root: Path, ok) -> Path | None:
    """The file to stage for the allow-listed entry `p` of `root`: `p` when it is a regular file; for a
    symlink, the file it leads to when that is a regular file inside `root` whose own name `ok` allows
    (staged under the link's name). Any other link is refused by name, never followed out of the folder
    nor left out silently (a linked vocab.txt is a required file); None for a folder."""
    if not p.is_symlink():
        return p if p.is_file() else None
    target = p.resolve()
    if target.is_file() and target.is_relative_to(root.resolve()) and ok(target.name):
        return target
    where = ("to nothing" if not target.exists() else f"outside {root}" if not target.is_relative_to(root.resolve())
             else "not an allow-listed file")
    raise ZhBertError(f"{p}: is a symlink to {os.readlink(p)} ({where}); publish stages only allow-listed files "
                      f"inside the folder: replace the link with a copy of the file")


def select_files(src: Checkpoint) -> tuple[dict[str, Path], list[str]]:
    """(repo path -> local file, skipped names). Regular files on the allow-list; a symlink only to a file
    inside its folder (one that leads out is refused, never followed)."""
    chosen: dict[str, Path] = {}
    skipped: list[str] = []
    model = src.model_dir.resolve()
    dirs = [(src.model_dir, _allowed, True)]
    if src.run_dir and src.run_dir != model:
        dirs.append((src.run_dir, lambda n: n in PUBLISHED_RUN_FILES, True))
        final = src.run_dir / FINAL
        if final.is_dir() and final != model:  # intermediate checkpoints may hold only weights
            dirs.append((final, lambda n: n in TOKENIZER_FILES, False))
    generator = src.model_dir / GENERATOR
    electra = is_model_dir(generator)
    for d, ok, report in dirs:
        for p in sorted(d.iterdir()):
            path = _regular_file(p, d, ok) if ok(p.name) and p.name not in chosen else None
            if path is not None:
                chosen[p.name] = path
            elif report and p.name not in chosen and p != model and p.name != FINAL and not (electra and p == generator):
                skipped.append(str(p.relative_to(d)) + ("/" if p.is_dir() else ""))
    if electra:   # an ELECTRA discriminator's generator (a masked LM) goes along in generator/
        for p in sorted(generator.iterdir()):
            path = _regular_file(p, generator, _allowed) if _allowed(p.name) else None
            if path is not None:
                chosen[f"{GENERATOR}/{p.name}"] = path
    if "config.json" not in chosen:
        raise ZhBertError(f"{src.model_dir}: no config.json")
    if not any(n.endswith(".safetensors") for n in chosen):
        hint = " (it has pytorch_model.bin only; load and re-save it with safe_serialization)" \
            if (src.model_dir / "pytorch_model.bin").exists() else ""
        raise ZhBertError(f"{src.model_dir}: no safetensors weights{hint}; zh-bert publishes safetensors only")
    if not any(n in chosen for n in ("tokenizer.json", "vocab.txt", "spiece.model")):
        raise ZhBertError(f"{src.model_dir}: no tokenizer files (tokenizer.json / vocab.txt)")
    if electra and f"{GENERATOR}/model.safetensors" not in chosen:
        raise ZhBertError(f"{generator}: no safetensors weights")
    check_weights(p for n, p in chosen.items() if n.endswith(".safetensors"))
    return chosen, skipped


def _check_no_secret(files: dict[str, Path], token: str | None) -> None:
    """Refuse when any text file to publish holds the token. Run on the sources before anything is copied,
    and on the staged folder (the card) before it is renamed into place or uploaded."""
    if not token or len(token) < 8:
        return
    needle = token.encode()
    for name, p in files.items():
        if p.suffix == ".safetensors":  # tensors are numbers; the JSON header (metadata) is text
            with open(p, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                data = f.read(min(size, MAX_TEXT_SCAN))
        else:
            data = p.read_bytes() if p.stat().st_size <= MAX_TEXT_SCAN else b""
        if needle in data:
            raise ZhBertError(f"{name}: contains your Hugging Face token; refusing to stage or upload it")


#: an absolute POSIX path (or ~/...) not inside a URL or a relative path; a Windows drive path
_ABS_PATH = re.compile(r"(?<![\w.~/:-])~?/[^\s'\"`,;()\[\]{}<>|]+|(?<![\w])[A-Za-z]:[\\/][^\s'\"`,;()\[\]{}<>|]*")


def portable_text(text: str, run_dir: Path | None) -> str:
    """`text` with each absolute path made relative to the run dir, or cut to its last name when outside
    it: a published run.json, recipe or card must not show the author's home directory or disk layout."""
    roots = [str(run_dir.resolve()), str(run_dir.absolute())] if run_dir else []

    def short(m: re.Match) -> str:
        path = m.group().removeprefix("~")
        for root in roots:
            if path == root:
                return "."
            if path.startswith(root + "/"):
                return path[len(root) + 1:]
        return re.split(r"[\\/]+", path.rstrip("\\/"))[-1] or "."

    return _ABS_PATH.sub(short, text)


def _copy_portable(name: str, path: Path, target: Path, run_dir: Path | None) -> None:
    """Copy one file; the run's text files (and only they) with absolute paths made portable."""
    if name in PUBLISHED_RUN_FILES and name != CURVES_PNG:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            write_text(target, portable_text(text, run_dir))
            return
    copy_file(path, target)


def stage(src: Checkpoint, dest: Path, repo_id: str, license: str, token: str | None = None,
          shown: Path | None = None, extra: dict[str, Path] | None = None) -> list[str]:
    """Copy the allow-listed files (and `extra`: repo name -> file) and write README.md into `dest` (new or
    empty). Checks (weights open, no token) come before the first copy; a write error is one line naming
    `shown` (the folder the user sees; default `dest`)."""
    files, _ = select_files(src)
    files = {**files, **(extra or {})}
    _check_no_secret(files, token)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest
    try:
        for name, path in files.items():
            target = dest / name
            target.parent.mkdir(exist_ok=True)
            _copy_portable(name, path, target, src.run_dir)
        target = dest / "README.md"
        card = build_card(src.model_dir, dest if src.run_dir else None, repo_id, license=license,
                          files=list(files))
        write_text(target, portable_text(card, src.run_dir))
    except OSError as e:
        where = (shown or dest) / target.relative_to(dest) if target != dest else (shown or dest)
        raise ZhBertError(f"{where}: cannot write ({e.strerror or e}); nothing was staged") from None
    staged = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*") if p.is_file()}
    _check_no_secret(staged, token)
    return sorted(staged)


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
    quiet_progress_bars()

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
    revision: str | None = option_of(Shared, "revision", help="branch to commit to (created from main), e.g. step-10000")
    endpoint: str | None = option_of(Shared, "endpoint", help="Hub endpoint (default: $HF_ENDPOINT or huggingface.co)")
    dry_run: bool = option_of(Shared, "dry_run", help="stage and show what would be uploaded; upload nothing")
    output: str | None = option(None, flags=("-o",), help="with --dry-run: write the staged repo folder here")
    license: str = option("apache-2.0", help="licence id for the card")
    message: str | None = option(None, flags=("-m",), help="commit message")
    with_verification: bool = option(False, help=f"also upload the run's {VERIFICATION_FILE} (written by `zh-bert "
                                                  f"leaderboard verify`), so others can re-run its figures exactly")

    def __post_init__(self):
        check_repo_id(self.repo_id, "--repo-id")
        if self.output and not self.dry_run:
            raise ZhBertError("-o/--output is for --dry-run (the staged folder); drop it or add --dry-run")


def build_parser():
    return config.build_parser("zh-bert publish", __doc__.split("\n")[0], PublishConfig)


def _token(required: bool = True) -> str | None:
    """The Hub token; a dry run uses it (when there is one) only to check that no staged file holds it."""
    from huggingface_hub import get_token

    token = get_token()
    if not token and required:
        raise ZhBertError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")
    return token or None


@contextlib.contextmanager
def staging(cfg: PublishConfig, src: Checkpoint, token: str | None, extra: dict[str, Path]):
    """Yield (staged folder, its file names). A kept dry run (`-o`) is built under a temp name and renamed
    into place only when complete; otherwise a private temp folder that is removed on every exit
    (error, token found, Ctrl-C), and by the next publish if this process is killed."""
    if cfg.dry_run and cfg.output:
        out = Path(cfg.output)
        refuse_overlap(out, [src.model_dir], "-o")
        try:
            with atomic_dir(out) as tmp:
                names = stage(src, tmp, cfg.repo_id, cfg.license, token=token, shown=out, extra=extra)
                fault_point("after:staged")
        except FileExistsError:
            raise ZhBertError(f"{out}: already exists; choose a new -o folder") from None
        yield out, names
        return
    with scratch_dir("zh-bert-publish-") as parent:
        where = parent / cfg.repo_id.split("/")[-1]
        names = stage(src, where, cfg.repo_id, cfg.license, token=token, extra=extra)
        fault_point("after:staged")
        yield where, names


def verification_file(src: Checkpoint) -> dict[str, Path]:
    """{VERIFICATION_FILE: path} for --with-verification: the record beside the run (or model folder), checked,
    and about these very weights (its weights sha256), else one line."""
    path = (src.run_dir or src.model_dir) / VERIFICATION_FILE
    if not path.is_file():
        raise ZhBertError(f"--with-verification: {path}: no verification record; write one with `zh-bert "
                          f"leaderboard verify {src.run_dir or src.model_dir}`")
    rec = read_record(path)
    sha = weights_sha256(src.model_dir)
    if rec["model"].get("weights_sha256") != sha:
        raise ZhBertError(f"--with-verification: {path} verified other weights (sha256 "
                          f"{str(rec['model'].get('weights_sha256'))[:12]}..., these are {str(sha)[:12]}...): "
                          f"verify this checkpoint again")
    return {VERIFICATION_FILE: path}


def publish(cfg: PublishConfig) -> str | None:
    """Stage, show, and (unless --dry-run) upload; returns the commit URL, None for a dry run."""
    src = locate(cfg.source)
    _, skipped = select_files(src)  # fail on bad input before asking for a token
    extra = verification_file(src) if cfg.with_verification else {}
    skipped = [n for n in skipped if n not in extra]
    token = _token(required=not cfg.dry_run)
    with staging(cfg, src, token, extra) as (where, names):
        total = sum((where / n).stat().st_size for n in names)
        print(f"{'would upload' if cfg.dry_run else 'uploading'} {len(names)} files ({total:,} bytes) "
              f"to {cfg.repo_id}{'@' + cfg.revision if cfg.revision else ''}:")
        for n in names:
            print(f"  {n}")
        if skipped:
            print(f"not on the allow-list, left out: {', '.join(skipped)}")
        if cfg.dry_run:
            if cfg.output:
                print(f"staged in {where}")
            return None
        message = cfg.message or f"zh-bert publish {src.model_dir.resolve().name}"
        return upload(where, cfg.repo_id, token=token, endpoint=cfg.endpoint, private=cfg.private,
                      revision=cfg.revision, message=message)


def main(argv: list[str]) -> int:
    url = publish(config.config_from_args(PublishConfig, build_parser().parse_args(argv)))
    if url:
        print(f"published: {url}")
    return 0
