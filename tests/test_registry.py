"""One `Registry` for every kind of named variant: architectures, objectives, tasks, suites and head kinds are
each one, a second registration of a name is refused, a miss is one line with the nearest name, and the names
list in registration order (what `--help` shows)."""

from __future__ import annotations

import pytest

from zh_bert.core.errors import ZhBertError
from zh_bert.core.registry import Registry


def test_every_kind_of_variant_is_held_by_the_one_registry():
    from zh_bert.corpus import task_registry
    from zh_bert.evaluation.heads import HEAD_KINDS
    from zh_bert.train.arch import ARCHITECTURES
    from zh_bert.train.objectives import OBJECTIVES

    held = (ARCHITECTURES, OBJECTIVES, task_registry._TASKS, task_registry._SUITES, HEAD_KINDS)
    assert all(isinstance(r, Registry) for r in held)
    assert list(OBJECTIVES) == ["mlm", "mlm+nsp", "mlm+sop", "electra", "distill"]
    assert task_registry.suite_names()[-1] == "all"


@pytest.mark.parametrize("lookup, says", [
    (lambda: __import__("zh_bert.train.arch", fromlist=["get"]).get("modernbet"),
     "unknown architecture 'modernbet' (did you mean 'modernbert'?): one of bert, modernbert"),
    (lambda: __import__("zh_bert.train.objectives", fromlist=["x"]).objective_named("electr"),
     "unknown objective 'electr' (did you mean 'electra'?): one of mlm, mlm+nsp, mlm+sop, electra, distill"),
    (lambda: __import__("zh_bert.corpus.task_registry", fromlist=["x"]).suite_named("fewclu"),
     "--suite fewclu: unknown benchmark suite (did you mean 'fewclue'?); one of fewclue, "),
    (lambda: __import__("zh_bert.evaluation.heads", fromlist=["x"]).kind_named("tagg"),
     "unknown head kind 'tagg' (did you mean 'tag'?): one of classify, choice, span, tag, embed"),
])
def test_a_miss_is_one_line_with_the_nearest_name(lookup, says):
    with pytest.raises(ZhBertError) as e:
        lookup()
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_name_is_registered_once_and_reserved_names_never():
    from zh_bert.train.objectives import MLM, OBJECTIVES

    with pytest.raises(ZhBertError, match="objective mlm: already registered"):
        OBJECTIVES.add("mlm", MLM)
    r = Registry("thing", also=("all",))
    r.add("a", 1)
    with pytest.raises(ZhBertError, match="thing all: already registered"):
        r.add("all", 2)
    assert r.names() == ("a", "all") and r.listing() == "a, all" and r.named("a") == 1
