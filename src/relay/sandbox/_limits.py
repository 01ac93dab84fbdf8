"""Run as a script: set resource limits on this process, then exec the sandboxed command (limits are inherited).

Usage: python -I -S _limits.py '{"RLIMIT_CPU": [soft, hard], ...}' [--uid N] -- argv...
`--uid N` drops to that user (and its group) first, when relay runs as root without bubblewrap.
"""

import json
import os
import resource
import sys


def main(args: list[str]) -> int:
    if len(args) < 3 or "--" not in args:
        sys.stderr.write("usage: _limits.py LIMITS_JSON [--uid N] -- argv...\n")
        return 2
    split = args.index("--")
    head, argv = args[:split], args[split + 1 :]
    limits: dict[str, list[int]] = json.loads(head[0])
    for name, (soft, hard) in limits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if "--uid" in head:
        uid = int(head[head.index("--uid") + 1])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"could not start {argv[0]}: {exc}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
