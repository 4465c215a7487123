"""roll-agentic: agentic RL post-training for LLMs (see README.md)."""

import os as _os
import sys as _sys


def _joins_remote_cluster() -> bool:
    if _os.environ.get("RAY_ADDRESS"):
        return True
    for arg in _sys.argv[1:]:
        if arg.startswith("ray.address="):
            value = arg.split("=", 1)[1].strip("'\"")
            return value not in ("", "local") and not value.startswith("127.")
    return False


# Ray decides when it is first imported whether a node advertises its network
# address; "0" keeps a local Ray on 127.0.0.1, bound to loopback only. Joining
# a real cluster (RAY_ADDRESS or ray.address=<remote>) needs the default.
if not _joins_remote_cluster():
    _os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
