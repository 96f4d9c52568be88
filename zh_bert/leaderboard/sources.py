"""A SOURCE of `leaderboard build`, resolved to one `Model`: a run, a model folder, a Hub id or catalog alias, or a
verification record. Everything is read as data (JSON, YAML, the tokenizer's own files): no source's code runs.

Two kinds of files, two rules. The files zh-bert's own commands wrote into a local run or model folder
(`eval_results.json`, a verification record, `suite/suite.json`, `run.json`) are read strictly: a wrong field
is one line naming the file and the field, before the board is written (they are the user's to fix). What a
model's author wrote (its card, its config) and anything fetched from the Hub is a stranger's: a part the board
cannot read becomes a note on the row, with the reason, and the rest of the row is built.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import RUN_SUMMARY, SUITE_DIR, VERIFICATION_FILE, Record, copy_file, read_json, read_text, scratch_dir
from zh_bert.evaluation import eval_results
from zh_bert.corpus.task_registry import task_named, tasks_of
from zh_bert.evaluation.heads import head_kind
from zh_bert.evaluation.result import FIGURE_UNIT
from zh_bert.evaluation.suite.report import suite_entries
from zh_bert.hub.catalog import BY_ALIAS, resolve
from zh_bert.hub.endpoint import endpoint_and_host, hub_errors, repo_info
from zh_bert.hub.listing import card_metadata, facts_of_files, repo_facts
from zh_bert.leaderboard.cards import model_index_entries
from zh_bert.leaderboard.record import is_record, read_record
from zh_bert.train.rundir import FINAL, is_model_dir, is_run_dir

CARD = "README.md"
#: `eval suite`'s report beside a run, which holds its random-init baseline
SUITE_REPORT = Path(SUITE_DIR) / "suite.json"
#: the small files a Hub row is built from (never weights, never code)
HUB_FILES = ("config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", "special_tokens_map.json",
             CARD, RUN_SUMMARY)
#: a card, run.json or config larger than this is not read (a hostile repo cannot make the build read gigabytes)
MAX_SMALL_FILE = 8 * 2**20


@dataclass
class Model:
    """What the board knows of one model before its row is made."""
    id: str                        # what records match on: the Hub repo id, or the local path as given
    name: str
    source: str
    kind: str                      # run | folder | hub | baseline
    folder: Path | None = None     # config + tokenizer files (a scratch copy for a Hub model)
    run_dir: Path | None = None
    facts: dict = field(default_factory=dict)
    claims: list[dict] = field(default_factory=list)
    claims_from: str = ""          # the file the claims were read from (README.md, eval_results.json, ...)
    run: dict | None = None
    run_where: str = RUN_SUMMARY
    weights_sha256: str | None = None
    records: list[tuple[str, dict]] = field(default_factory=list)   # (where, record)
    notes: list[dict] = field(default_factory=list)                  # {source, reason, claim}: what was not read


def note(source: str, reason: str, claim: str = "") -> dict:
    return {"source": source, "reason": reason, "claim": claim}


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


def _object(path: Path) -> Record:
    """A small JSON file that must hold one object, as a Record (one line naming the file otherwise)."""
    return Record.of(read_json(path, max_bytes=MAX_SMALL_FILE), str(path))


def _json_or_none(path: Path, notes: list[dict]) -> dict | None:
    """A stranger's small JSON object (a config, a Hub repo's run.json), or None: missing; or unreadable,
    oversized or not an object, which is noted on the row with the reason."""
    if not path.is_file():
        return None
    try:
        return _object(path).data
    except ZhBertError as e:
        notes.append(note(path.name, f"not read: {str(e).removeprefix(str(path) + ': ')}"))
        return None


def _card_claims(card: Path, notes: list[dict]) -> tuple[list[dict], str | None]:
    """The card's model-index as entries, and its text (for the licence); what cannot be read of it is noted."""
    if not card.is_file():
        return [], None
    try:
        text = read_text(card, max_bytes=MAX_SMALL_FILE)
        meta = card_metadata(text, CARD)
    except ZhBertError as e:
        notes.append(note(CARD, f"not read: {str(e).removeprefix(str(card) + ': ')}"))
        return [], None
    entries, unread = model_index_entries(meta, CARD)
    notes += unread
    return entries, text


def _folder_facts(folder: Path, card_text: str | None, notes: list[dict]) -> dict:
    facts = facts_of_files(_json_or_none(folder / "config.json", notes),
                           _json_or_none(folder / "tokenizer_config.json", notes), card_text,
                           sorted(p.name for p in folder.iterdir()))
    if facts.get("error"):
        notes.append(note("config.json", facts["error"]))
    return facts


def folder_model(source: str) -> Model:
    """A run (RUN/final, RUN/eval_results.json, RUN/run.json) or a model folder (its eval_results.json, else
    its card's model-index)."""
    path = Path(source)
    run_dir = path if is_run_dir(path) and (path / FINAL).is_dir() else None   # a staged repo has run.json too
    folder = path / FINAL if run_dir else path
    notes: list[dict] = []
    claims = eval_results.load(run_dir or folder)
    card_claims, card_text = _card_claims(folder / CARD, notes)
    if claims and card_claims:
        notes.append(note(CARD, f"the card's model-index ({len(card_claims)} claims) is not read: "
                                f"{eval_results.FILENAME} holds this model's figures"))
    claims_from = eval_results.FILENAME if claims else CARD
    claims = claims or card_claims
    facts = _folder_facts(folder, card_text, notes)
    name = run_dir.name if run_dir else (path.resolve().name if path.name in ("", ".", FINAL) else path.name)
    run_path = (run_dir or folder) / RUN_SUMMARY
    run = _object(run_path).data if run_path.is_file() else None
    return Model(id=source.rstrip("/"), name=name, source=source, kind="run" if run_dir else "folder",
                 folder=folder, run_dir=run_dir, facts=facts, claims=claims, claims_from=claims_from, run=run,
                 run_where=str(run_path), weights_sha256=weights_sha256(folder), notes=notes)


def _fetch(repo_id: str, names: tuple[str, ...], dest: Path, endpoint: str | None, revision: str | None) -> None:
    """The small files of a repo into `dest` (missing ones skipped, oversized ones refused)."""
    from huggingface_hub import hf_hub_download

    endpoint, where = endpoint_and_host(endpoint)
    with hub_errors(where, repo_id):
        info = repo_info(endpoint, repo_id, where, revision, files=True)
        if info.problem:
            raise ZhBertError(info.problem)
        sizes = info.files or {}
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
    notes: list[dict] = []
    claims, _ = _card_claims(folder / CARD, notes)
    if facts.get("error"):
        notes.append(note("config.json", facts["error"]))
    return Model(id=repo_id, name=repo_id, source=f"hub:{repo_id}", kind="hub", folder=folder, facts=facts,
                 claims=claims, claims_from=CARD, run=_json_or_none(folder / RUN_SUMMARY, notes), notes=notes)


def _suite_result(name: str, r: Record, fractions: bool) -> None:
    """One task of a suite report's random-init run, typed as `suite_entries` reads it (the task's metrics as
    fractions, or in their own units in a report written before results held fractions; its pairs or what it
    trained on)."""
    every = [t.name for t in tasks_of("all")]
    if name not in every:
        raise ZhBertError(f"{r.where}: {r.path}: not a task of a suite ({', '.join(every)})")
    seeds = r.list("seeds", max_len=10_000)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise r.error("seeds", f"expected a list of integer seeds, got {str(seeds)[:40]!r}")
    r.raw("data_sha256")
    task = task_named(name)
    if head_kind(task).chooses:
        r.integer("pairs", lo=1, hi=1000)
    elif "trained_on" in r:
        r.text("trained_on", max_len=100)
    for m in task.metrics:
        hi = 1 if fractions or m.unit == "fraction" else 100
        r.number(m.key, lo=-hi if (eval_results.metric_range(m.type)[0] or 0) < 0 else 0, hi=hi)


def baseline_of(m: Model) -> Model | None:
    """The same architecture from random weights, as the run's own suite report measured it (`eval suite
    --baselines`): the row every score stands beside. No pretraining, so no compute and no weights of its own.
    The report is zh-bert's own file, so a wrong field in it is one line naming it."""
    path = m.run_dir / SUITE_REPORT if m.run_dir else None
    if path is None or not path.is_file():
        return None
    rec = _object(path)
    if not rec.raw("random_init"):
        return None
    for key in ("zh_bert_version", "method"):
        rec.text(key, max_len=100)
    protocols = rec.record("protocols")
    for key, _ in protocols.items():
        protocols.text(key, max_len=100)
    runs = dict(rec.records_in("random_init"))
    for name, r in runs.items():
        _suite_result(name, r, rec.data.get("figures") == FIGURE_UNIT)
    claims = eval_results.checked_entries(suite_entries({**rec.data, "pretrained": rec.data["random_init"]}),
                                          str(path))
    return Model(id=f"{m.id}#random-init", name=f"{m.name} (random init)", source=m.source, kind="baseline",
                 folder=m.folder, facts=m.facts, claims=claims, claims_from=str(SUITE_REPORT))


def kind_of(source: str) -> str:
    """run | folder | record | hub, or one line saying what SOURCE may be."""
    if not isinstance(source, str) or not source or "\0" in source:
        raise ZhBertError(f"SOURCE {source!r}: not a path, a catalog alias or an ORG/NAME Hub id")
    path = Path(source)
    if os.path.islink(source) and not path.exists():
        raise ZhBertError(f"SOURCE {source}: a symbolic link that leads nowhere (or to itself)")
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


def _model_of_record(where: str, rec: dict, scratch: Path, endpoint: str | None) -> Model:
    """The model a record names when no SOURCE does: its `model.source` (else its id), which must be a run, a
    model folder or a Hub id, never a record (a record naming a record, or itself, would loop)."""
    src = rec["model"].get("source") or rec["model"]["id"]
    try:
        kind = kind_of(src)
    except ZhBertError as e:
        raise ZhBertError(f"{where}: model.source: {str(e).removeprefix('SOURCE ')}") from None
    if kind == "record":
        raise ZhBertError(f"{where}: model.source: {src} is a verification record, not a model (a record "
                          f"names the run, model folder or Hub id it verified)")
    return folder_model(src) if kind != "hub" else hub_model(src, scratch, endpoint)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


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
                target = _model_of_record(where, rec, scratch, endpoint)
                target.records += [r for r in records_of(target) if not _same_file(r[0], where)]
                models.append(target)
            if all(not _same_file(w, where) for w, _ in target.records):
                target.records.append((where, rec))
        yield models


def _match(models: list[Model], rec: dict) -> Model | None:
    sha, mid = rec["model"].get("weights_sha256"), rec["model"]["id"]
    for m in models:
        if (sha and m.weights_sha256 == sha) or m.id == mid or m.id == f"hub:{mid}":
            return m
    return None
