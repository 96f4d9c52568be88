"""Tag schemes of named-entity recognition (BIO, BIOES, BMES) and the entities a tag sequence holds.

A scheme is an object asked for what differs: which prefixes it has, the tags of an entity type, how a span is
written, which tag may follow which. Reading entities off tags is one function for every scheme, the rules of
`seqeval`'s default mode (a port of CoNLL's `conlleval`), so a tag that breaks its scheme (`I-LOC` after
`B-PER`, `I-` without `B-`, `M-` after `O`) is read as seqeval and conlleval read it: figures agree with theirs
to the digit. BMES (Resume NER, the Chinese word-segmentation convention) is BIOES with `M` for `I`; neither
seqeval nor conlleval knows `M`, so its tags are read, scored and written as their BIOES twins (`scoring_tag`).
"""

from __future__ import annotations

from dataclasses import dataclass

from zh_bert.core.errors import ZhBertError, suggest

OUTSIDE = "O"


@dataclass(frozen=True)
class Scheme:
    """One tag scheme: `prefixes` of entity tags; `inside` the prefix of a tag inside a span (BMES: M);
    `single` / `last` the prefixes of a one-character span and of a span's last character (None: none in BIO)."""
    name: str
    prefixes: tuple[str, ...]
    inside: str
    single: str | None = None
    last: str | None = None

    def tags(self, types) -> list[str]:
        """Every tag of the scheme for `types`, O first: the model's label set (a type's tags all exist even when
        the training file never shows, say, its single-character form)."""
        return [OUTSIDE] + [f"{p}-{t}" for t in sorted(types) for p in self.prefixes]

    def encode(self, spans, length: int) -> list[str]:
        """Tags of a sentence of `length` characters holding the entity `spans` (type, first, last)."""
        out = [OUTSIDE] * length
        for kind, first, last in spans:
            if first == last and self.single:
                out[first] = f"{self.single}-{kind}"
                continue
            out[first] = f"B-{kind}"
            for i in range(first + 1, last + 1):
                out[i] = f"{self.inside}-{kind}"
            if self.last:
                out[last] = f"{self.last}-{kind}"
        return out

    def follows(self, prev: str, tag: str) -> bool:
        """Whether `tag` may come after `prev` in this scheme (a sentence starts after O)."""
        p, pt = split_tag(prev)
        t, tt = split_tag(tag)
        open_before = p in ("B", self.inside)      # prev leaves a span open
        if t in (self.inside, self.last) and t is not None:
            return open_before and pt == tt
        if self.last is None:                      # BIO: a span ends wherever the next tag is not its I
            return True
        return not open_before                     # BIOES/BMES: an open span must end with E

    def scoring_tag(self, tag: str) -> str:
        """The tag as seqeval and conlleval read it (BMES's M is BIOES's I)."""
        return f"I{tag[1:]}" if self.inside != "I" and tag.startswith(f"{self.inside}-") else tag


SCHEMES = {s.name: s for s in (Scheme("bio", ("B", "I"), "I"),
                               Scheme("bioes", ("B", "I", "E", "S"), "I", "S", "E"),
                               Scheme("bmes", ("B", "M", "E", "S"), "M", "S", "E"))}
#: other names people give these schemes (IOB2 is BIO; IOBES and BILOU are BIOES with other letters)
SCHEME_ALIASES = {"iob2": "bio", "iobes": "bioes", "bieos": "bioes", "bmeso": "bmes"}


def scheme_named(name: str, flag: str = "--tag-scheme") -> Scheme:
    """The scheme called `name` (or an alias); one line naming the known ones otherwise."""
    key = SCHEME_ALIASES.get(name.lower(), name.lower())
    if key not in SCHEMES:
        raise ZhBertError(f"{flag} {name}: unknown tag scheme{suggest(key, SCHEMES)}; known: "
                          f"{', '.join(SCHEMES)} (auto: read from the files)")
    return SCHEMES[key]


def split_tag(tag: str) -> tuple[str | None, str | None]:
    """(prefix, type) of `B-PER`; (None, None) for O."""
    if tag == OUTSIDE:
        return None, None
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def detect_scheme(prefixes: set[str], where: str) -> Scheme:
    """The scheme of tags with these prefixes: M → BMES, E or S → BIOES, else BIO. I and M together are two
    schemes in one task, named."""
    if "M" in prefixes and "I" in prefixes:
        raise ZhBertError(f"{where}: tags of two schemes, M- (BMES) and I- (BIO/BIOES); use one scheme in all "
                          f"files")
    if "M" in prefixes:
        return SCHEMES["bmes"]
    return SCHEMES["bioes"] if prefixes & {"E", "S"} else SCHEMES["bio"]


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of each entity, read by seqeval's default rules (conlleval's): a span starts at B or
    S, at I/E that does not continue the span before it (`I-` without `B-`), or where the type changes; it ends
    after E or S, before B, S or O, or where the type changes. Tags are in scoring form (`Scheme.scoring_tag`)."""
    out = []
    prev_tag, prev_type, begin = OUTSIDE, "", 0
    for i, chunk in enumerate(tags + [OUTSIDE]):
        tag, kind = chunk[0], chunk[1:].split("-", maxsplit=1)[-1] or "_"
        if _ends(prev_tag, tag, prev_type, kind):
            out.append((prev_type, begin, i - 1))
        if _starts(prev_tag, tag, prev_type, kind):
            begin = i
        prev_tag, prev_type = tag, kind
    return out


def _ends(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    return (prev_tag in "ES" or (prev_tag in "BI" and tag in "BSO")
            or (prev_tag not in "O." and prev_type != kind))


def _starts(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    return (tag in "BS" or (prev_tag in "ESO" and tag in "EI")
            or (tag not in "O." and prev_type != kind))


def broken_tags(scheme: Scheme, sentences) -> tuple[int, str | None]:
    """(how many tags break `scheme`, the first as 'TAG after PREV'): counted once per task and said once, not
    refused (seqeval reads them by its rules)."""
    count, first = 0, None
    for tags in sentences:
        prev = OUTSIDE
        for tag in tags:
            if not scheme.follows(prev, tag):
                count += 1
                first = first or f"{tag} after {prev}"
            prev = tag
    return count, first
