"""Whose each job this process submitted is: a job's principal never changes, so a call that waits on or follows a
job it just submitted finds it visible without reading its row again (a sync `delegate` read its job six times)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from relay.principal import visible_to

# How many jobs' principals are remembered (the newest); an older job is looked up in the store as before.
KNOWN_JOBS = 4096


class Known:
    """The principal of each of the newest jobs this process submitted."""

    def __init__(self, look_up: Callable[[str], str], size: int = KNOWN_JOBS) -> None:
        self._look_up = look_up  # a job's id by id or prefix, for the current principal (JOB_NOT_FOUND if not its)
        self._size = size
        self._owner: OrderedDict[str, str] = OrderedDict()

    def add(self, job_id: str, principal: str) -> None:
        self._owner[job_id] = principal
        if len(self._owner) > self._size:
            self._owner.popitem(last=False)

    def id(self, job_id: str) -> str:
        """`job_id` when it is a job of this process the current principal may see; else as the store finds it (a
        prefix, another process's job; JOB_NOT_FOUND for one the principal may not see)."""
        owner = self._owner.get(job_id)
        viewer = visible_to()
        if owner is not None and (viewer is None or viewer == owner):
            return job_id
        return self._look_up(job_id)
