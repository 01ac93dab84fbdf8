"""Run inside a simulated host: place a job from a repository URL, write a file as its agent would, seal, push.

`python -m tests.cluster.place_job URL HOME JOB_ID TIMEOUT_S` prints one JSON line: the sealed
workspace with `remote` (what the push did), or `{"error": {code, message, hint}}`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from relay.errors import RelayError
from relay.workspaces import remote, seal
from relay.workspaces.records import WorkspaceStore


def main(url: str, home: str, job_id: str, timeout_s: str) -> dict[str, Any]:
    root = Path(home)
    store = WorkspaceStore(root / "relay.db")
    try:
        rec = remote.place(root / "repos", root / "worktrees", store, job_id, url, timeout_s=float(timeout_s))
        Path(rec.path, f"{job_id}.txt").write_text(f"written on the host by {job_id}\n")
        sealed = seal.seal(store, rec, f"job {job_id}\n")
        return sealed | {"remote": remote.push_quietly(root / "repos", rec)}
    except RelayError as err:
        return {"error": err.to_dict()}
    finally:
        store.close()


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))
