"""The user-facing docs stay a landing page plus reachable pages: README short, every relative link (and its
#anchor) resolves inside the repository, every docs page is linked from README, and nothing a user reads
narrates how the project was developed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOC_PAGES = sorted((REPO / "docs").glob("*.md"))
MARKDOWN = [README, *DOC_PAGES]
# Corpus and task pages may name download sites; their links inside the repository must still resolve.
CORPUS_PAGES = [REPO / "corpora" / "README.md", REPO / "corpora" / "tasks" / "README.md",
                *sorted((REPO / "corpora" / "sources").glob("*.md"))]

# Markdown inline links and images: [text](target) / ![alt](target); code spans are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
HISTORY = re.compile(r"\bsession [0-9]+|\bsession's\b|\bthe lead\b|\.\./shared|period [0-9]", re.I)


def _prose(text: str) -> str:
    return CODE_SPAN.sub("", CODE_BLOCK.sub("", text))


def _links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = CODE_BLOCK.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6}\s+(.*)$", text, re.M)}


def broken_links(path: Path, external_ok: bool = False) -> list[str]:
    """Links of `path` that leave the repository, or whose file (or #anchor in a Markdown file) does not exist."""
    bad = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):        # http:, mailto: ... : not relative
            if not external_ok:
                bad.append(f"{target} (links outside the repository)")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if REPO not in dest.parents and dest != REPO:
            bad.append(f"{target} (outside the repository)")
        elif not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.relative_to(REPO)})")
    return bad


def test_readme_is_a_landing_page():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines; move detail to docs/"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


@pytest.mark.parametrize("path", CORPUS_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_corpus_page_links_resolve(path):
    assert broken_links(path, external_ok=True) == []


def test_every_docs_page_is_linked_from_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    assert DOC_PAGES, "docs/ has no pages"
    assert [str(p.relative_to(REPO)) for p in DOC_PAGES if p.resolve() not in linked] == []


USER_FILES = [*MARKDOWN, *CORPUS_PAGES, *sorted((REPO / "recipes").rglob("*.yaml"))]


@pytest.mark.parametrize("path", USER_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_development_history(path):
    text = path.read_text(encoding="utf-8")
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]
    assert hits == []


def test_readme_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 && pip install -e . && zh-bert pretrain recipes/tiny-cpu.yaml" in text
    assert 'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest' in text
