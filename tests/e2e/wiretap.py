"""A transparent tap on a stdio MCP server: `python wiretap.py LOG -- COMMAND ARGS...`.

Runs COMMAND with its stdin and stdout piped through this process and appends every line that
passes to LOG, as `> ` (client to server) or `< ` (server to client) followed by the line. The
server's stderr, exit code and environment are its own. The e2e tier puts it in front of the
`relay` that `relay install` wrote into a client's config, to see which era the client speaks.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import IO


def _pump(src: IO[bytes], dst: IO[bytes], log: IO[bytes], mark: bytes, lock: threading.Lock) -> None:
    for line in iter(src.readline, b""):
        with lock:
            log.write(mark + line if line.endswith(b"\n") else mark + line + b"\n")
            log.flush()
        dst.write(line)
        dst.flush()
    dst.close()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: wiretap.py LOG -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    lock = threading.Lock()
    with open(argv[0], "ab") as log:
        proc = subprocess.Popen(argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        inbound = threading.Thread(target=_pump, args=(sys.stdin.buffer, proc.stdin, log, b"> ", lock), daemon=True)
        inbound.start()
        _pump(proc.stdout, sys.stdout.buffer, log, b"< ", lock)
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
