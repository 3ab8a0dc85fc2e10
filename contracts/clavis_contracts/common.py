"""What every wire contract shares: strict models and the name pattern of the solver."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# The same pattern as clavis.model.Name, so every name on the wire is a valid solver name.
Name = Annotated[
    str,
    Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"),
]


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a time zone (e.g. 2026-01-01T00:00:00Z)")
    return value


AwareDatetime = Annotated[datetime, AfterValidator(_aware)]


class Strict(BaseModel):
    """Unknown keys are errors and NaN/inf are refused: a peer's bug must not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
