"""`zh-bert models` (the command) and `--hub`: Chinese masked LMs on the Hub (or a mirror), each described from its own files.

The facts of a row are read at run time from three small text files, config.json, tokenizer_config.json and
the README's YAML front matter, because a repo's card and name say what its author hopes, while its config
says what `AutoModelForMaskedLM` will build. Nothing from a repo is ever imported or run and nothing is loaded
with trust_remote_code: the load-safety column is decided from JSON text alone, so listing a hostile repo is
as safe as reading three files, and each is refused above `FILE_CAP` before it is fetched. Every name a server
sends is checked as `download` checks it (`endpoint.check_repo_id`, `check_listing`); a repo whose files are
unreadable gets a one-line error in its row instead of ending the listing. Parameter counts come from the
architecture's formula (`train/arch`), the one `zh-bert models`, `plan` and the model card use.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from zh_bert.core import config as cli_config
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import parse_json, parse_yaml, scratch_dir
from zh_bert.hub.catalog import (
    CATALOG,
    ModelsConfig,
    catalog_json,
    community_models,
    community_text,
    format_table,
    printable,
)
from zh_bert.hub.endpoint import (
    HubRepo,
    check_listing,
    check_repo_id,
    endpoint_and_host,
    hub_errors,
    list_repos,
    quiet_progress_bars,
    repo_info,
)
from zh_bert.train.arch import ARCHITECTURES, of_config
from zh_bert.train.weights import remote_code

#: the most bytes read of each file a row is described from (a real config or card is a few KiB)
FILE_CAP = 256 * 1024
#: the files a row is described from, nothing else is fetched
FACT_FILES = ("config.json", "tokenizer_config.json", "README.md")
#: longer repo ids are refused (the Hub allows 96 characters for a name, fewer for a namespace)
MAX_REPO_ID = 160
#: --sort value -> (the Hub API's sort key, the HubRepo field ranked on)
HUB_SORTS = {"downloads": ("downloads", "downloads"), "likes": ("likes", "likes"),
             "recent": ("lastModified", "last_modified")}
REMOTE_CODE = "needs trust_remote_code"
FACT_KEYS = ("architecture", "layers", "hidden", "params", "vocab_kind", "vocab_size", "licence", "load_safety",
             "error")
#: a model_type, tokenizer class or licence id as shown: a plain identifier, never markup or control characters
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)
#: tokenizer classes that read a SentencePiece / byte-level BPE model (when the file names do not say it)
_SENTENCEPIECE_CLASSES = ("Albert", "XLNet", "T5", "XLMRoberta", "Camembert", "Llama", "Ernie")
_BPE_CLASSES = ("GPT2", "Roberta", "Bart", "Longformer", "CodeGen")


def card_metadata(card_text: str, where: str) -> dict:
    """The YAML front matter of a model card as a dict ({} when there is none); one line naming `where` when it
    is not YAML or not a mapping (the Hub would show such a card without metadata)."""
    match = _FRONT_MATTER.match(card_text)
    if match is None:
        return {}
    meta = parse_yaml(match.group(1), f"{where}: the YAML front matter")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ZhBertError(f"{where}: the YAML front matter is a {type(meta).__name__}, not a mapping")
    return meta


def _plain_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _PLAIN_NAME.fullmatch(value):
        raise ZhBertError(f"{what} is not a plain name (letters, digits, '.', '_', '+', '-')")
    return value


def load_safety(config: dict, tokenizer_config: dict | None) -> str:
    """"stock" when AutoModelForMaskedLM / AutoTokenizer load the repo without remote code, else
    "needs trust_remote_code" (`weights.remote_code`, the rule every loading command applies)."""
    return REMOTE_CODE if remote_code(config, tokenizer_config) else "stock"


def vocab_kind(tokenizer_config: dict | None, files: list[str]) -> str:
    """The tokenizer's kind from the file names and tokenizer_class: a BERT vocab.txt splits every CJK
    character before WordPiece (`tokenize_chinese_chars`, on by default), so it is char-level on Chinese."""
    tokenizer_config = tokenizer_config or {}
    cls = str(tokenizer_config.get("tokenizer_class") or "")
    names = {Path(f).name for f in files}
    if any(n.endswith(".model") for n in names) or cls.startswith(_SENTENCEPIECE_CLASSES):
        return "sentencepiece"
    if "merges.txt" in names or cls.startswith(_BPE_CLASSES):
        return "bpe"
    if "vocab.txt" in names or cls.startswith("Bert"):
        return "wordpiece" if tokenizer_config.get("tokenize_chinese_chars") is False else "char (WordPiece)"
    return "tokenizer.json" if "tokenizer.json" in names else "unknown"


def _licence(meta: dict) -> str:
    """The card's `license` ("other" with its `license_name`), else "none stated"."""
    value = meta.get("license")
    if value in (None, "", []):
        return "none stated"
    values = value if isinstance(value, list) else [value]
    shown = ", ".join(_plain_id(v, "README.md: license") for v in values)
    name = meta.get("license_name")
    if "other" in values and name not in (None, ""):
        shown += f" ({_plain_id(name, 'README.md: license_name')})"
    return shown


def _count(config: dict, key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**8:
        raise ZhBertError(f"config.json: {key} is not a count ({type(value).__name__})")
    return value


def _params(config: dict, layers, hidden, vocab) -> int | None:
    """The family's base-model formula, where the config is one zh-bert knows (or untyped: read as BERT)."""
    if config.get("model_type") not in (*ARCHITECTURES, None):
        return None
    intermediate = _count(config, "intermediate_size")
    if None in (layers, hidden, intermediate, vocab):
        return None
    extra = {arg: n for arg, key in (("positions", "max_position_embeddings"), ("type_vocab", "type_vocab_size"))
             if (n := _count(config, key)) is not None}
    return of_config(config).params(layers, hidden, intermediate, vocab, head="base", **extra)


def _facts(config, tokenizer_config, card_text, files) -> dict:
    if config is None:
        raise ZhBertError("the repo has no config.json")
    if not isinstance(config, dict):
        raise ZhBertError(f"config.json is a JSON {type(config).__name__}, not an object")
    if tokenizer_config is not None and not isinstance(tokenizer_config, dict):
        raise ZhBertError(f"tokenizer_config.json is a JSON {type(tokenizer_config).__name__}, not an object")
    kind = config.get("model_type")
    if kind is not None:
        _plain_id(kind, "config.json: model_type")
    if (tokenizer_config or {}).get("tokenizer_class") is not None:
        _plain_id(tokenizer_config["tokenizer_class"], "tokenizer_config.json: tokenizer_class")
    layers, hidden, vocab = (_count(config, k) for k in ("num_hidden_layers", "hidden_size", "vocab_size"))
    licence = "none stated" if card_text is None else _licence(card_metadata(card_text, "README.md"))
    return {"architecture": of_config(config).name if kind in (*ARCHITECTURES, None) else kind,
            "layers": layers, "hidden": hidden, "params": _params(config, layers, hidden, vocab),
            "vocab_kind": vocab_kind(tokenizer_config, files), "vocab_size": vocab, "licence": licence,
            "load_safety": load_safety(config, tokenizer_config), "error": None}


def _unreadable(error: str) -> dict:
    return {**dict.fromkeys(FACT_KEYS), "error": error}


def facts_of_files(config: dict | None, tokenizer_config: dict | None, card_text: str | None,
                   files: list[str]) -> dict:
    """A row's facts from the parsed files (the pure part: a local model folder works too); a file that is
    not what it should be gives `error` "config unreadable: <one line>" and no other facts."""
    try:
        return _facts(config, tokenizer_config, card_text, files)
    except ZhBertError as e:
        return _unreadable(f"config unreadable: {e}")


def _small_text(repo_id: str, name: str, size: int | None, revision: str | None, endpoint: str | None,
                cache: Path) -> str:
    """One of FACT_FILES as text, refused above FILE_CAP before it is fetched (asked of the server when the
    listing has no size) and again on what arrived."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    if size is None:
        size = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=revision, endpoint=endpoint)).size
    if size is not None and size > FILE_CAP:
        raise ZhBertError(f"{name} is {size:,} bytes, over the {FILE_CAP // 1024} KiB read")
    path = hf_hub_download(repo_id, name, revision=revision, endpoint=endpoint, cache_dir=cache)
    with open(path, "rb") as f:
        data = f.read(FILE_CAP + 1)
    if len(data) > FILE_CAP:
        raise ZhBertError(f"{name} is over the {FILE_CAP // 1024} KiB read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ZhBertError(f"{name} is not UTF-8 text") from None


def repo_texts(info: HubRepo, names: tuple[str, ...], endpoint: str | None, where: str, revision: str | None,
               cache: Path) -> dict[str, str]:
    """The files `names` of a repo whose model info (with file sizes) is in hand, those it has, as text, each
    refused above FILE_CAP before it is fetched: all that is read of a repo to describe it (`models --hub`) or
    to refuse it before its weights (`download`)."""
    files = info.files or {}
    with hub_errors(where, info.id):
        return {name: _small_text(info.id, name, files[name], info.sha or revision, endpoint, cache)
                for name in names if name in files}


def repo_json(texts: dict[str, str], name: str) -> Any:
    """File `name` of `repo_texts` parsed by the reading layer, or None when the repo has no such file."""
    return parse_json(texts[name], name) if name in texts else None


def _facts_of_info(info: HubRepo, endpoint: str | None, where: str, revision: str | None, cache: Path) -> dict:
    """Facts of a repo whose model info (with file sizes) is in hand."""
    if info.problem:
        return _unreadable(info.problem)
    names = check_listing(list(info.files or {}), f"{info.id} on {where}")
    try:
        texts = repo_texts(info, FACT_FILES, endpoint, where, revision, cache)
        config, tokenizer_config = (repo_json(texts, n) for n in FACT_FILES[:2])
    except ZhBertError as e:
        return _unreadable(f"config unreadable: {e}")
    return facts_of_files(config, tokenizer_config, texts.get("README.md"), names)


def _info(endpoint: str | None, repo_id: str, where: str, revision: str | None = None) -> HubRepo:
    with hub_errors(where, repo_id):
        return repo_info(endpoint, repo_id, where, revision or "main", files=True)


def _catalog_info(endpoint: str | None, repo_id: str, where: str) -> HubRepo | None:
    """A catalog repo's model info, or None when this endpoint answers that it lacks it (a mirror holding a
    few repos); a connection failure or an answer that is not the Hub API is the listing's one-line error."""
    from huggingface_hub.errors import HfHubHTTPError

    with hub_errors(where):   # the endpoint's failure, not this repo's
        try:
            return repo_info(endpoint, repo_id, where, files=True)
        except HfHubHTTPError:
            return None


def _checked_id(repo_id: object) -> str:
    if not isinstance(repo_id, str) or len(repo_id) > MAX_REPO_ID:
        raise ZhBertError(f"repo id {ascii(repo_id)[:60]}: not a string of at most {MAX_REPO_ID} characters")
    try:
        return check_repo_id(repo_id, "repo id")
    except ZhBertError:
        raise ZhBertError(f"repo id {ascii(repo_id)[:60]}: expected ORG/NAME") from None


def repo_facts(repo_id: str, endpoint: str | None = None, revision: str | None = None) -> dict:
    """What a repo is, read from config.json / tokenizer_config.json / README.md on the Hub or a mirror:
    `facts_of_files`' keys plus `repo_id`; a bad id, an unreachable repo or unreadable files are `error`."""
    quiet_progress_bars()
    endpoint, where = endpoint_and_host(endpoint)
    try:
        info = _info(endpoint, _checked_id(repo_id), where, revision)
        with scratch_dir("zh-bert-listing-") as cache:
            facts = _facts_of_info(info, endpoint, where, revision, cache)
    except ZhBertError as e:
        facts = _unreadable(str(e))
    return {"repo_id": repo_id, **facts}


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def _candidates(endpoint: str | None, where: str, search: str | None, sort: str, limit: int) -> dict[str, tuple]:
    """repo id -> (listing row or model info, source): catalog first, then the zh-bert tag, then the Hub's
    Chinese fill-mask models; hostile ids and rows that are no repo are left out with a note."""
    found: dict[str, tuple] = {}
    missing = []
    for e in CATALOG:   # first: model info does not retry, so an unreachable endpoint is one quick line
        if search is None or search.lower() in e.repo_id.lower() or search.lower() in e.alias.lower():
            info = _catalog_info(endpoint, e.repo_id, where)
            if info is None:
                missing.append(e.repo_id)
            else:
                found[e.repo_id] = (info, "catalog")
    if missing:
        _note(f"{len(missing)} catalog repos are not on {where}: {', '.join(missing)}")
    query = {"sort": HUB_SORTS[sort][0], **({"search": search} if search is not None else {})}
    listed = []
    with hub_errors(where):
        for source, params in (("zh-bert tag", {"filter": "zh-bert"}),
                               ("hub", {"pipeline_tag": "fill-mask", "filter": "zh"})):
            repos, notes = list_repos(endpoint, where, {**params, **query}, limit)
            listed += [(m, source) for m in repos]
            for note in notes:
                _note(f"skipped a listed repo: {note}")
    for model, source in listed:
        try:
            found.setdefault(_checked_id(model.id), (model, source))
        except ZhBertError as e:
            _note(f"skipped a listed repo: {e}")
    return found


def _rank(model: HubRepo, sort: str) -> float:
    """The sort value (the HubRepo field of the Hub's sort key), unknown values (or a bad field) last."""
    value = getattr(model, HUB_SORTS[sort][1])
    if value is None:
        return -1.0
    return float(value) if isinstance(value, int) else value.timestamp()


def hub_models(endpoint: str | None = None, search: str | None = None, sort: str = "downloads",
               limit: int = 50) -> list[dict]:
    """Chinese masked LMs on the Hub or a mirror (pipeline tag fill-mask, language zh), the catalog's repos
    and those tagged zh-bert: the first `limit` by `sort`, each with `repo_facts`' keys plus downloads, likes,
    last_modified and source ("hub", "catalog" or "zh-bert tag"). An unreachable endpoint is one line."""
    if sort not in HUB_SORTS:
        raise ZhBertError(f"--sort must be one of {', '.join(HUB_SORTS)}, got {sort!r}{suggest(sort, HUB_SORTS)}")
    if limit < 1:
        raise ZhBertError(f"--limit must be at least 1, got {limit}")
    quiet_progress_bars()
    endpoint, where = endpoint_and_host(endpoint)
    found = _candidates(endpoint, where, search, sort, limit)
    ranked = sorted(found.items(), key=lambda kv: _rank(kv[1][0], sort), reverse=True)[:limit]
    rows = []
    with scratch_dir("zh-bert-listing-") as cache:
        for repo_id, (model, source) in ranked:
            try:
                info = model if model.files is not None or model.problem else _info(endpoint, repo_id, where)
                facts = _facts_of_info(info, endpoint, where, None, cache)
            except ZhBertError as e:
                facts = _unreadable(str(e))
            rows.append({"repo_id": repo_id, **facts, "downloads": model.downloads, "likes": model.likes,
                         "last_modified": model.last_modified.isoformat() if model.last_modified else None,
                         "source": source})
    return rows


def _shown(value) -> str:
    """A cell: None as '-', anything a server sent with its unprintable characters replaced."""
    return printable("-" if value is None else str(value))


def hub_table(rows: list[dict]) -> str:
    """The --hub listing as a plain table; a row that could not be read shows its one-line error."""
    head = ("repo id", "source", "arch", "L/H", "params", "vocab", "licence", "load", "downloads", "likes",
            "modified")
    table = [head]
    errors = []
    for r in rows:
        if r["error"]:
            errors.append(f"  {_shown(r['repo_id'])}: {_shown(r['error'])}")
            continue
        params = f"{r['params'] / 1e6:.1f}M" if r["params"] is not None else "?"
        table.append((r["repo_id"], r["source"], r["architecture"], f"L{_shown(r['layers'])}/H{_shown(r['hidden'])}",
                      params, f"{r['vocab_kind']} {_shown(r['vocab_size'])}", r["licence"], r["load_safety"],
                      r["downloads"], r["likes"], (r["last_modified"] or "-")[:10]))
    table = [tuple(_shown(c) for c in row) for row in table]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if errors:
        lines += ["", "not readable:", *errors]
    return "\n".join(lines)


def build_parser():
    return cli_config.build_parser("zh-bert models", "list released Chinese masked-LM checkpoints "
                                   "(the catalog; --community, --hub: from the Hub)", ModelsConfig)


def main(argv: list[str]) -> int:
    cfg = cli_config.config_from_args(ModelsConfig, build_parser().parse_args(argv))
    community = community_models(cfg.endpoint, cfg.limit) if cfg.community else None
    hub = hub_models(cfg.endpoint, cfg.search, cfg.sort or "downloads", cfg.limit) if cfg.hub else None
    if cfg.json:
        print(json.dumps(catalog_json(community, hub), ensure_ascii=False, indent=2))
        return 0
    print(hub_table(hub) if hub is not None else format_table())
    if community is not None:
        print("\n" + community_text(community))
    return 0
