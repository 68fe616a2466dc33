"""Immutable JSON containers: what makes a cached fingerprint trustworthy.

``FrozenDict``/``FrozenList`` are ``dict``/``list`` subclasses (so types, ``isinstance``,
orjson, pydantic and jsonschema-rs treat them as plain JSON containers) whose mutating
methods raise ``TypeError``. A value frozen with ``freeze`` can be cached by identity:
it cannot change under the cache.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze", "is_frozen", "thaw"]


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable; build a new value instead")


class FrozenDict(dict[str, Any]):
    """A JSON object that cannot change after construction."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self  # frozen all the way down: sharing is copying

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A JSON array that cannot change after construction."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable
    append = clear = extend = insert = pop = remove = reverse = sort = _immutable

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    """A deep, frozen copy of a JSON value (frozen parts are shared, not copied)."""
    if isinstance(value, (FrozenDict, FrozenList)):
        return value
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(item) for item in value)
    return value


def is_frozen(value: Any) -> bool:
    """Whether ``value`` cannot change (a scalar, or a frozen container)."""
    return isinstance(value, (FrozenDict, FrozenList, str, int, float, bool, type(None)))


def thaw(value: Any) -> Any:
    """A deep copy in plain ``dict``/``list`` (for libraries that want exact types)."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
