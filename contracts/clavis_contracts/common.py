"""What every wire contract shares: strict models and the name pattern of the solver."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

# The same pattern as clavis.model.Name, so every name on the wire is a valid solver name.
Name = Annotated[
    str,
    Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"),
]


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a time zone (e.g. 2026-01-01T00:00:00Z)")
    return value


def _text_or_datetime(value: object) -> object:
    if not isinstance(value, str | datetime):
        raise ValueError("timestamp must be an ISO 8601 string (e.g. 2026-01-01T00:00:00Z)")
    return value


# A time on the wire is ISO 8601 text: parsed from text in either mode (strict models
# would refuse text in Python mode), and never from a number.
AwareDatetime = Annotated[
    datetime, BeforeValidator(_text_or_datetime), Field(strict=False), AfterValidator(_aware)
]


class Strict(BaseModel):
    """Unknown keys are errors, NaN/inf are refused and types are strict (no `true` or "2"
    for an integer, no "2.0" for one either): a peer's bug must not pass silently, nor be
    changed into something that fails later, e.g. in clavisd's writer."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
