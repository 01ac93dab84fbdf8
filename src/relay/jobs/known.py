"""Whose each job this process submitted is: a job's principal never changes, so a call that waits on or follows a
job it just submitted finds it visible without reading its row again (a sync `delegate` read its job six times); and
which of them are quiet: claimed here in print mode, such a job can ask the person nothing (only an ACP agent asks
permission: relay.jobs.approvals), so the call that waits on it need not look for its questions."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from relay.agents import protocol_of
from relay.agents.base import Adapter
from relay.principal import visible_to

# How many jobs' principals are remembered (the newest); an older job is looked up in the store as before.
KNOWN_JOBS = 4096


def asks_nothing(adapter: Adapter) -> bool:
    """Whether a job this process runs with `adapter` can ask the person nothing: it is not driven over ACP."""
    return protocol_of(adapter) != "acp"


class Known:
    """The principal of each of the newest jobs this process submitted."""

    def __init__(self, look_up: Callable[[str], str], size: int = KNOWN_JOBS) -> None:
        self._look_up = look_up  # a job's id by id or prefix, for the current principal (JOB_NOT_FOUND if not its)
        self._size = size
        self._owner: OrderedDict[str, tuple[str, bool]] = OrderedDict()

    def add(self, job_id: str, principal: str, *, quiet: bool = False) -> None:
        self._owner[job_id] = (principal, quiet)
        if len(self._owner) > self._size:
            self._owner.popitem(last=False)

    def quiet(self, job_id: str) -> bool:
        """Whether the job can ask the person nothing (unknown here: it may, as far as this process can tell)."""
        known = self._owner.get(job_id)
        return known is not None and known[1]

    def id(self, job_id: str) -> str:
        """`job_id` when it is a job of this process the current principal may see; else as the store finds it (a
        prefix, another process's job; JOB_NOT_FOUND for one the principal may not see)."""
        known = self._owner.get(job_id)
        viewer = visible_to()
        if known is not None and (viewer is None or viewer == known[0]):
            return job_id
        return self._look_up(job_id)
