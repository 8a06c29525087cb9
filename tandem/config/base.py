"""What every config section is built on: the base model, the error a broken rule raises, shared field types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

RULE_ERROR = "config_rule"
"""pydantic error type of a broken cross-field rule; its message names every key involved."""

Port = Annotated[int, Field(ge=0, le=65535)]
DecayRate = Annotated[float, Field(ge=0.0, lt=1.0)]


def rule_broken(message: str) -> PydanticCustomError:
    """The error a named model validator raises; ConfigError shows `message` as written."""
    return PydanticCustomError(RULE_ERROR, message)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


def by_backend(default: str, variants: Mapping[str, type[BaseModel]]) -> Any:
    """The type of a section whose settings depend on its `backend` key: a discriminated union of
    one model per backend, each holding the common keys and a sub-table named after its backend
    (`engine.sim.*` exists only when engine.backend = "sim"). A table without `backend` is the
    default's; anything else in `backend` fails as a bad value of that key."""
    def tag(value: Any) -> str:
        backend = value.get("backend", default) if isinstance(value, dict) else getattr(value, "backend", default)
        return str(backend)  # an unknown one fails as pydantic's union_tag_invalid, which errors.py words
    members = tuple(Annotated[model, Tag(name)] for name, model in variants.items())
    return Annotated[Union[members], Discriminator(tag)]


def backend_variants(annotation: Any) -> dict[str, type[BaseModel]]:
    """{backend: model} of a field typed by `by_backend`; {} for any other field."""
    if get_origin(annotation) is not Union:
        return {}
    found = {}
    for member in get_args(annotation):
        model, *meta = get_args(member) or (member,)
        tags = [m.tag for m in meta if isinstance(m, Tag)]
        if tags and isinstance(model, type) and issubclass(model, BaseModel):
            found[tags[0]] = model
    return found


def section_model(annotation: Any, value: Any = None) -> type[BaseModel] | None:
    """The model of a field that is a section (for a by-backend field, the member `value` selects,
    a tree or a model, else the default's); None for a leaf key."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    variants = backend_variants(annotation)
    if not variants:
        return None
    backend = value.get("backend") if isinstance(value, dict) else getattr(value, "backend", None)
    return variants.get(str(backend)) or next(iter(variants.values()))


def variant_only_keys(variants: dict[str, type[BaseModel]]) -> dict[str, str]:
    """{key: backend} for the keys only one backend's model has (its sub-table)."""
    counts: dict[str, list[str]] = {}
    for backend, model in variants.items():
        for name in model.model_fields:
            counts.setdefault(name, []).append(backend)
    return {name: owners[0] for name, owners in counts.items() if len(owners) == 1}


def backend_doc(variants: dict[str, type[BaseModel]]) -> str:
    """The `backend` key's docstring for a section by backend: each backend's, named."""
    return " ".join(f"{name}: {model.model_fields['backend'].description}" for name, model in variants.items())
