"""A SOURCE of `leaderboard build`, resolved to one `Model`: a run, a model folder, a Hub id or catalog alias, or a
verification record. Everything is read as data (JSON, YAML, the tokenizer's own files): no source's code runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import copy_file, read_text, scratch_dir
from zh_bert.evaluation import eval_results
from zh_bert.evaluation.suite_report import suite_entries
from zh_bert.hub.catalog import BY_ALIAS, resolve
from zh_bert.hub.endpoint import endpoint_and_host, hub_errors
from zh_bert.hub.listing import card_metadata, facts_of_files, repo_facts
from zh_bert.leaderboard.record import VERIFICATION_FILE, is_record, model_index_entries, read_record
from zh_bert.train.rundir import FINAL, is_model_dir, is_run_dir

CARD = "README.md"
#: `eval suite`'s report beside a run, which holds its random-init baseline
SUITE_REPORT = Path("suite") / "suite.json"
#: the small files a Hub row is built from (never weights, never code)
HUB_FILES = ("config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", "special_tokens_map.json",
             CARD, "run.json")
#: a card, run.json or config larger than this is not read (a hostile repo cannot make the build read gigabytes)
MAX_SMALL_FILE = 8 * 2**20


@dataclass
class Model:
    """What the board knows of one model before its row is made."""
    id: str                        # what records match on: the Hub repo id, or the local path as given
    name: str
    source: str
    kind: str                      # run | folder | hub
    folder: Path | None = None     # config + tokenizer files (a scratch copy for a Hub model)
    run_dir: Path | None = None
    facts: dict = field(default_factory=dict)
    claims: list[dict] = field(default_factory=list)
    run: dict | None = None
    weights_sha256: str | None = None
    records: list[tuple[str, dict]] = field(default_factory=list)   # (where, record)


def weights_sha256(folder: Path) -> str | None:
    """sha256 of model.safetensors: what ties a record to the weights it re-ran, whatever the folder is called."""
    path = folder / "model.safetensors"
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def _json_or_none(path: Path) -> dict | None:
    if not path.is_file() or path.stat().st_size > MAX_SMALL_FILE:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _card_claims(card: Path) -> tuple[list[dict], str | None]:
    """The card's model-index as entries, and its text (for the licence); a malformed index is one line."""
    if not card.is_file() or card.stat().st_size > MAX_SMALL_FILE:
        return [], None
    text = read_text(card)
    return model_index_entries(card_metadata(text, str(card)), str(card)), text


def folder_model(source: str) -> Model:
    """A run (RUN/final, RUN/eval_results.json, RUN/run.json) or a model folder (its eval_results.json, else
    its card's model-index)."""
    path = Path(source)
    run_dir = path if is_run_dir(path) and (path / FINAL).is_dir() else None   # a staged repo has run.json too
    folder = path / FINAL if run_dir else path
    claims = eval_results.load(run_dir or folder)
    card_claims, card_text = _card_claims(folder / CARD)
    claims = claims or card_claims
    config = _json_or_none(folder / "config.json")
    facts = facts_of_files(config, _json_or_none(folder / "tokenizer_config.json"), card_text,
                           sorted(p.name for p in folder.iterdir()))
    name = run_dir.name if run_dir else (path.resolve().name if path.name in ("", ".", FINAL) else path.name)
    run = _json_or_none((run_dir or folder) / "run.json")
    return Model(id=source.rstrip("/"), name=name, source=source, kind="run" if run_dir else "folder",
                 folder=folder, run_dir=run_dir, facts=facts, claims=claims, run=run,
                 weights_sha256=weights_sha256(folder))


def _fetch(repo_id: str, names: tuple[str, ...], dest: Path, endpoint: str | None, revision: str | None) -> None:
    """The small files of a repo into `dest` (missing ones skipped, oversized ones refused)."""
    from huggingface_hub import HfApi, hf_hub_download

    endpoint, where = endpoint_and_host(endpoint)
    with hub_errors(where, repo_id):
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
        sizes = {s.rfilename: s.size for s in info.siblings or []}
        for name in names:
            if name in sizes and (sizes[name] or 0) <= MAX_SMALL_FILE:
                got = hf_hub_download(repo_id, name, revision=revision, endpoint=endpoint)
                copy_file(got, dest / name)


def hub_model(source: str, scratch: Path, endpoint: str | None = None, revision: str | None = None) -> Model:
    """A Hub repo (ORG/NAME, hub:ORG/NAME or a catalog alias): its config, tokenizer, card and run.json only."""
    repo_id, _ = resolve(source.removeprefix("hub:"))
    facts = repo_facts(repo_id, endpoint=endpoint, revision=revision)
    folder = scratch / repo_id.replace("/", "--")
    folder.mkdir(parents=True)
    _fetch(repo_id, HUB_FILES, folder, endpoint, revision)
    claims, _ = _card_claims(folder / CARD)
    return Model(id=repo_id, name=repo_id, source=f"hub:{repo_id}", kind="hub", folder=folder, facts=facts,
                 claims=claims, run=_json_or_none(folder / "run.json"))


def baseline_of(m: Model) -> Model | None:
    """The same architecture from random weights, as the run's own suite report measured it (`eval suite
    --baselines`): the row every score stands beside. No pretraining, so no compute and no weights of its own."""
    report = m.run_dir / SUITE_REPORT if m.run_dir else None
    res = _json_or_none(report) if report else None
    if not res or not res.get("random_init"):
        return None
    claims = suite_entries({**res, "pretrained": res["random_init"]})
    return Model(id=f"{m.id}#random-init", name=f"{m.name} (random init)", source=m.source, kind="baseline",
                 folder=m.folder, facts=m.facts, claims=claims)


def kind_of(source: str) -> str:
    """run | folder | record | hub, or one line saying what SOURCE may be."""
    path = Path(source)
    if path.exists():
        if is_record(path):
            return "record"
        if is_run_dir(path):
            return "run"
        if path.is_dir() and (is_model_dir(path) or (path / "config.json").is_file()):
            return "folder"
        raise ZhBertError(f"SOURCE {source}: neither a run, a model folder (config.json) nor a verification "
                          f"record ({VERIFICATION_FILE})")
    if source.startswith("hub:") or source in BY_ALIAS or "/" in source.strip("/") and not path.parent.is_dir():
        return "hub"
    raise ZhBertError(f"SOURCE {source}: no such file or folder, and not a catalog alias or ORG/NAME Hub id "
                      f"(see `zh-bert models`)")


def records_of(model: Model) -> list[tuple[str, dict]]:
    """The records beside a local model (RUN/verification.json)."""
    where = (model.run_dir or model.folder or Path("/nonexistent")) / VERIFICATION_FILE
    return [(str(where), read_record(where))] if model.kind != "hub" and where.is_file() else []


@contextlib.contextmanager
def gather(sources: list[str], endpoint: str | None = None, log=print):
    """Every SOURCE resolved (checked first, all of them, before any network call), records attached to the
    model they name (by weights sha256, else by id); a record of a model no other SOURCE names adds its row.
    Yields the models inside a scratch folder that holds the Hub files while the board is built."""
    kinds = [(s, kind_of(s)) for s in sources]
    records = [(s, read_record(s)) for s, k in kinds if k == "record"]
    with scratch_dir("zh-bert-board-") as scratch:
        models: list[Model] = []
        for s, k in kinds:
            if k == "record":
                continue
            log(f"reading {s}")
            models.append(folder_model(s) if k != "hub" else hub_model(s, scratch, endpoint))
            models[-1].records += records_of(models[-1])
            baseline = baseline_of(models[-1])
            if baseline:
                models.append(baseline)
        for where, rec in records:
            target = _match(models, rec)
            if target is None:
                src = rec["model"].get("source") or rec["model"]["id"]
                k = kind_of(src)
                target = folder_model(src) if k != "hub" else hub_model(src, scratch, endpoint)
                models.append(target)
            if all(w != where for w, _ in target.records):
                target.records.append((where, rec))
        yield models


def _match(models: list[Model], rec: dict) -> Model | None:
    sha, mid = rec["model"].get("weights_sha256"), rec["model"]["id"]
    for m in models:
        if (sha and m.weights_sha256 == sha) or m.id == mid or m.id == f"hub:{mid}":
            return m
    return None
