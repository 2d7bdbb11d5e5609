"""The type language of the documents' contract (sidecar/documents/contract.py): JSON's types,
lists, objects, maps, enums and forward references, small on purpose. The declarations, the JSON
Schema, the docs and the validator are in contract.py; this module only names the types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# ---------------------------------------------------------------------------------------------
# The type language: small on purpose (JSON's types, lists, objects, maps, enums)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prim:
    json: str  # JSON Schema type name
    js: str  # JSDoc type


INT = Prim("integer", "number")
NUM = Prim("number", "number")
STR = Prim("string", "string")
BOOL = Prim("boolean", "boolean")


@dataclass(frozen=True)
class Enum:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class ListOf:
    item: Any
    max_items: int | None = None


@dataclass(frozen=True)
class MapOf:
    """An object with free string keys (values all of one type)."""

    value: Any


@dataclass(frozen=True)
class OneOf:
    options: tuple[Any, ...]


@dataclass(frozen=True)
class F:
    """A field: its type, whether it may be null, and what it means (units are in the name)."""

    type: Any
    doc: str
    null: bool = False


@dataclass(frozen=True)
class Obj:
    name: str
    doc: str
    fields: dict[str, F]


class Lazy:
    """A reference to an object type declared later (recursive types)."""

    def __init__(self, name: str):
        self.name = name
