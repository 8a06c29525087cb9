"""What every config section is built on: the base model, the error a broken rule raises, shared field types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
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
