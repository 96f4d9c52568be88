"""One registry of named variants (architectures, objectives, tasks, suites, head kinds): filled as each variant's
module loads or a declaration runs, a name registered twice refused, a lookup that misses is one line with the
nearest name, and the names listed for `--help`. A dict, so reading one is reading a dict."""

from __future__ import annotations

from typing import Generic, Iterable, TypeVar

from zh_bert.core.errors import ZhBertError, suggest

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """name -> variant, in registration order. `what` names the kind in messages ("objective", "benchmark
    suite"); `also` are names a lookup accepts beside the registered ones (`all`), so none may be registered."""

    def __init__(self, what: str, also: Iterable[str] = ()):
        super().__init__()
        self.what, self.also = what, tuple(also)

    @classmethod
    def of(cls, what: str, variants: Iterable[T]) -> "Registry[T]":
        """A registry of `variants` under their `name`s, in the order given."""
        out = cls(what)
        for v in variants:
            out.add(v.name, v)
        return out

    def add(self, name: str, variant: T) -> T:
        if name in self or name in self.also:
            raise ZhBertError(f"{self.what} {name}: already registered")
        self[name] = variant
        return variant

    def names(self) -> tuple[str, ...]:
        """Every name a lookup takes, registered ones first (what `--help` lists)."""
        return (*self, *self.also)

    def listing(self) -> str:
        return ", ".join(self.names())

    def named(self, name: str, flag: str | None = None) -> T:
        """The variant `name` names; one line with the nearest name otherwise (`flag`: the option it came from)."""
        if name in self:
            return self[name]
        near = suggest(name, self.names())
        if flag:
            raise ZhBertError(f"{flag} {name}: unknown {self.what}{near}; one of {self.listing()}")
        raise ZhBertError(f"unknown {self.what} {name!r}{near}: one of {self.listing()}")
