"""`python -m tests.cluster.skewed OFFSET_S ARGS...`: run `relay ARGS` with this process's clock (time.time) OFFSET_S
seconds off, as on a host whose clock is wrong. A test hook only: relay itself reads no such setting."""

from __future__ import annotations

import sys
import time


def main() -> int:
    offset = float(sys.argv[1])
    real = time.time

    def skewed() -> float:
        return real() + offset

    time.time = skewed
    sys.argv = ["relay", *sys.argv[2:]]
    from relay.cli.main import main as relay_main

    return relay_main()


if __name__ == "__main__":
    sys.exit(main())
