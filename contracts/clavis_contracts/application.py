"""The application key: how a job's application is named everywhere in Clavis.

clavisd remembers each application's class (thesis §5.4: a job's containers start from
the class its application had last time), and select_clavis.so must find that memory
for a job still pending, from slurmctld's job record alone. What both ends can see of a
job is its owner's uid and its name, so the key is built from exactly those two:

    KEY = UID ":" NAME

- ``UID`` is the job owner's numeric uid in decimal (``job_ptr->user_id``; no user name:
  a name lookup could block slurmctld in NSS, and a uid is as distinct);
- ``NAME`` is the Slurm job name (``job_ptr->name``, ``SLURM_JOB_NAME`` in the job's
  environment), byte for byte. Slurm itself defaults it to the batch script's file name
  (``sbatch job.sh`` → ``job.sh``, ``sbatch`` for a script on stdin) or, for ``srun`` and
  ``salloc`` without an allocation, to the command's base name, so users who never give
  ``--job-name`` still get one key per program. When a step's environment has no job
  name, the monitor falls back to the base name of the step's command (what older
  SPANK plugins sent as ``app``);
- there is no key when the uid or the name is unknown, when the name is empty, or when
  it is longer than ``MAX_NAME_BYTES`` bytes in UTF-8 (such a job is classified from
  its measurements alone; no truncation, so C and Python can never disagree on where a
  cut falls).

Two jobs are the same application exactly when their keys are equal as byte strings.
"""

from __future__ import annotations

from typing import Final

MAX_NAME_BYTES: Final = 240  # keeps UID ":" NAME within the contracts' 256-character app
UID_MAX: Final = 4294967295


def app_key(uid: int | None, name: str | None) -> str | None:
    """The application key of a job owned by ``uid`` and named ``name``, or None."""
    if uid is None or not name or not 0 <= uid <= UID_MAX:
        return None
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return None
    return f"{uid}:{name}"


def is_app_key(text: str) -> bool:
    """Whether ``text`` is a key ``app_key`` can return (decimal uid without sign or
    leading zeros, ':', a name of 1 to MAX_NAME_BYTES bytes)."""
    uid, sep, name = text.partition(":")
    if not sep or not uid.isascii() or not uid.isdigit() or len(uid) > 10:
        return False
    if uid != str(int(uid)):
        return False
    return app_key(int(uid), name) == text
