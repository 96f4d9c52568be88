"""`zh-bert models`: a built-in catalog of released Chinese masked-LM checkpoints.

Every entry is stock BERT or ModernBERT (AutoModelForMaskedLM loads it once downloaded: an entry whose repo
ships a TensorFlow 1 or UER checkpoint, its `source_format`, is converted on arrival), so `zh-bert download ALIAS`,
`zh-bert demo ALIAS`, `eval` and continued pretraining all accept the alias. Parameter counts are computed
from the architecture numbers (BertModel incl. pooler; ModernBertModel, which has neither position
embeddings nor pooler), not copied from marketing pages, so they stay consistent. Facts (repo ids,
licences, papers) were checked against the models' Hub cards.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Literal

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.options import Shared
from zh_bert.hub.endpoint import check_repo_id, endpoint_and_host, hub_errors, list_repos
from zh_bert.hub.sources import SOURCE_FORMATS
from zh_bert.train.arch import ARCHITECTURES
from zh_bert.train.arch import get as get_architecture

PAPERS = {
    "bert": "Devlin et al. 2019, BERT (arXiv:1810.04805)",
    "wwm": "Cui et al. 2021, Pre-Training with Whole Word Masking for Chinese BERT (arXiv:1906.08101)",
    "macbert": "Cui et al. 2020, Revisiting Pre-Trained Models for Chinese NLP (arXiv:2004.13922)",
    "uer": "Zhao et al. 2019, UER: An Open-Source Toolkit for Pre-training Models (arXiv:1909.05658); "
           "sizes after Turc et al. 2019 (arXiv:1908.08962)",
    "modernbert": "Warner et al. 2024, Smarter, Better, Faster, Longer: A Modern Bidirectional Encoder "
                  "(ModernBERT, arXiv:2412.13663)",
}

@dataclass(frozen=True)
class CatalogEntry:
    alias: str
    repo_id: str
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab_size: int
    vocab: str          # vocab kind and origin
    licence: str
    paper: str          # key of PAPERS
    note: str = ""
    modelscope_id: str | None = None  # only where verified to exist
    architecture: str = "bert"        # a zh_bert.train.arch family; its parameter formula counts the size
    source_format: str = "hf"         # what the repo ships: hf, or a release download converts on arrival

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES:
            raise ZhBertError(f"catalog entry {self.alias}: architecture must be one of "
                              f"{', '.join(ARCHITECTURES)}, got {self.architecture!r}")
        if self.source_format not in SOURCE_FORMATS:
            raise ZhBertError(f"catalog entry {self.alias}: source_format must be one of "
                              f"{', '.join(SOURCE_FORMATS)}, got {self.source_format!r}")

    @property
    def params(self) -> int:
        """Parameters of the base model (BertModel or ModernBertModel), computed from the shape."""
        return get_architecture(self.architecture).params(self.layers, self.hidden, self.intermediate,
                                                          self.vocab_size, head="base")

    @property
    def size(self) -> str:
        return f"L{self.layers}/H{self.hidden}, {self.params / 1e6:.0f}M"


_GOOGLE = "char, Google's bert-base-chinese vocab (21,128)"


def _uer(layers: int, hidden: int, name: str) -> CatalogEntry:
    return CatalogEntry(f"uer-{name}", f"uer/chinese_roberta_L-{layers}_H-{hidden}", layers, hidden,
                        max(hidden // 64, 2), 4 * hidden, 21128, _GOOGLE, "not stated on the card", "uer",
                        "UER-py RoBERTa miniature, MLM on CLUECorpusSmall")


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry("bert-base-chinese", "google-bert/bert-base-chinese", 12, 768, 12, 3072, 21128, _GOOGLE,
                 "apache-2.0", "bert", "Google's original, zh Wikipedia, MLM+NSP"),
    CatalogEntry("bert-wwm", "hfl/chinese-bert-wwm", 12, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0", "wwm",
                 "whole word masking, zh Wikipedia"),
    CatalogEntry("bert-wwm-ext", "hfl/chinese-bert-wwm-ext", 12, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0",
                 "wwm", "whole word masking, 5.4B-word EXT corpus"),
    CatalogEntry("roberta-wwm-ext", "hfl/chinese-roberta-wwm-ext", 12, 768, 12, 3072, 21128, _GOOGLE,
                 "apache-2.0", "wwm", "BERT architecture (load with Bert*), RoBERTa-style training, no NSP"),
    CatalogEntry("roberta-wwm-ext-large", "hfl/chinese-roberta-wwm-ext-large", 24, 1024, 16, 4096, 21128,
                 _GOOGLE, "apache-2.0", "wwm", "large; load with Bert*"),
    CatalogEntry("macbert-base", "hfl/chinese-macbert-base", 12, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0",
                 "macbert", "MLM-as-correction + SOP"),
    CatalogEntry("macbert-large", "hfl/chinese-macbert-large", 24, 1024, 16, 4096, 21128, _GOOGLE,
                 "apache-2.0", "macbert", "MLM-as-correction + SOP"),
    CatalogEntry("rbt3", "hfl/rbt3", 3, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0", "wwm",
                 "3-layer RoBERTa-wwm-ext"),
    CatalogEntry("rbt4", "hfl/rbt4", 4, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0", "macbert",
                 "4-layer RoBERTa-wwm-ext"),
    CatalogEntry("rbt6", "hfl/rbt6", 6, 768, 12, 3072, 21128, _GOOGLE, "apache-2.0", "wwm",
                 "6-layer RoBERTa-wwm-ext"),
    CatalogEntry("rbtl3", "hfl/rbtl3", 3, 1024, 16, 4096, 21128, _GOOGLE, "apache-2.0", "wwm",
                 "3-layer RoBERTa-wwm-ext-large"),
    _uer(2, 128, "tiny"),
    _uer(4, 256, "mini"),
    _uer(4, 512, "small"),
    _uer(8, 512, "medium"),
    _uer(12, 768, "base"),
)

BY_ALIAS = {e.alias: e for e in CATALOG}


def resolve(name: str) -> tuple[str, CatalogEntry | None]:
    """Alias or repo id -> (repo id, catalog entry or None). A bare name that is not an alias is an error."""
    if name in BY_ALIAS:
        return BY_ALIAS[name].repo_id, BY_ALIAS[name]
    for e in CATALOG:
        if e.repo_id == name:
            return name, e
    if "/" in name.strip("/"):
        return check_repo_id(name, "repo id"), None
    raise ZhBertError(f"'{name}' is neither a catalog alias nor an ORG/NAME repo id{suggest(name, BY_ALIAS)}; "
                      f"see `zh-bert models`")


def format_table(entries=CATALOG) -> str:
    rows = [("alias", "repo id", "arch", "format", "size", "vocab", "licence", "paper")]
    rows += [(e.alias, e.repo_id, e.architecture, e.source_format, e.size, e.vocab, e.licence,
              PAPERS[e.paper].split(",")[0]) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    papers = sorted({e.paper for e in entries})
    return "\n".join(lines + ["", "papers:"] + [f"  {PAPERS[p]}" for p in papers])


def community_models(endpoint: str | None = None, limit: int = 50) -> list[dict]:
    """Hub models tagged `zh-bert` (the tag `zh-bert publish` puts on every card); a row with a bad field keeps
    its repo id and says what is wrong in `problem`."""
    endpoint, where = endpoint_and_host(endpoint)
    with hub_errors(where):
        repos, notes = list_repos(endpoint, where, {"filter": "zh-bert", "sort": "downloads"}, limit)
    for note in notes:
        print(f"note: skipped a listed repo: {note}", file=sys.stderr)
    return [{"repo_id": m.id, "downloads": m.downloads, "likes": m.likes,
             "last_modified": m.last_modified.isoformat() if m.last_modified else "",
             **({"problem": m.problem} if m.problem else {})} for m in repos]


@dataclass
class ModelsConfig:
    community: bool = option(False, help="also list Hub models tagged 'zh-bert'")
    hub: bool = option(False, help="list Chinese fill-mask models on the Hub (or --endpoint), the catalog's and "
                                   "zh-bert-tagged repos, described from their config.json and card")
    search: str | None = option(None, help="with --hub: only repos whose id contains TEXT", metavar="TEXT")
    sort: Literal["downloads", "likes", "recent"] | None = option(
        None, help="with --hub: order by downloads (default), likes or most recently modified")
    limit: int = option(50, help="how many Hub repos to list (--hub, --community)", bounds=(1, 1000))
    endpoint: str | None = option_of(Shared, "endpoint")
    json: bool = option_of(Shared, "json")

    def __post_init__(self):
        given = [flag for flag, value in (("--search", self.search), ("--sort", self.sort)) if value is not None]
        if given and not self.hub:
            raise ZhBertError(f"{' and '.join(given)} {'need' if len(given) > 1 else 'needs'} --hub "
                              f"(it filters and orders the Hub listing)")


def catalog_json(community: list[dict] | None, hub: list[dict] | None = None) -> dict:
    out: dict = {"catalog": [{"alias": e.alias, "repo_id": e.repo_id, "architecture": e.architecture,
                              "source_format": e.source_format, "params": e.params, "layers": e.layers,
                              "hidden": e.hidden, "vocab": e.vocab, "licence": e.licence,
                              "paper": PAPERS[e.paper], "note": e.note} for e in CATALOG]}
    if community is not None:
        out["community"] = community
    if hub is not None:
        out["hub"] = hub
    return out


def _as_json(community: list[dict] | None) -> str:
    return json.dumps(catalog_json(community), ensure_ascii=False, indent=2)


def community_text(community: list[dict]) -> str:
    lines = ["community models tagged 'zh-bert':"]
    lines += [f"  {printable(m['repo_id'])}  (downloads {m['downloads']}, likes {m['likes']})"
              + (f"  {printable(m['problem'])}" if m.get("problem") else "") for m in community]
    return "\n".join(lines + ([] if community else ["  (none)"]))


def printable(text: str) -> str:
    """What a server sent, with its unprintable characters (escape sequences, newlines) shown as '?'."""
    return "".join(c if c.isprintable() else "?" for c in text)
