"""Sessions reported by CLIs through hooks (seed 003's call_hook), and the one session list relay shows.

Core only: it knows nothing of MCP; the `gobby` toolset's call_hook and core's session_list call it.
"""

from relay.hooks.listing import merged_sessions
from relay.hooks.service import HOOK_TYPES, Hooks, normalize, title_from
from relay.hooks.store import HookSession, HookStore

__all__ = ["HOOK_TYPES", "HookSession", "HookStore", "Hooks", "merged_sessions", "normalize", "title_from"]
