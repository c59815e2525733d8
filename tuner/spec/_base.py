"""What every study-file model shares: strictness, and each field's docstring as its description.

Strict on purpose: unknown keys are errors (typos must not pass silently) and strings are never
coerced into numbers. The descriptions are what the generated study-file reference prints.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class _Model(BaseModel):
    # each field's docstring is its description: the generated reference documents every field
    model_config = ConfigDict(
        extra="forbid", strict=True, validate_default=True, use_attribute_docstrings=True
    )
