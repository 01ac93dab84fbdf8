"""No cold import on the first call: what a first model call needs is loaded in the background.

The vendor SDKs (anthropic, openai) take about a second of CPU to import and build their first
client, which the first `ask` or `consensus` after start-up would otherwise wait for. Once the
client has sent `notifications/initialized` (the server has answered `initialize`), a daemon
thread imports the SDK of every provider kind that has a key, builds one client of each (no
request is sent) and touches the resources a call uses. Clients that never send `initialized`
get the same after WARM_FALLBACK_S. RELAY_WARMUP=0 turns it off (Settings.warmup).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable

from relay.config import Settings

logger = logging.getLogger(__name__)

# Warm even if the client never sends `notifications/initialized` (2026-07-28 clients, stateless HTTP).
WARM_FALLBACK_S = 3.0
# An address nothing listens on: building a client sends nothing, this is only its base_url.
NOWHERE = "http://127.0.0.1:9"


def _anthropic() -> None:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="relay-warmup", base_url=NOWHERE, max_retries=0)
    _ = client.messages  # the resource module loads on first access


def _openai() -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="relay-warmup", base_url=NOWHERE, max_retries=0)
    _ = client.chat.completions


STEPS: dict[str, tuple[str, Callable[[], None]]] = {
    "anthropic": ("relay.agents.api.anthropic_provider", _anthropic),
    "openai": ("relay.agents.api.openai_provider", _openai),
}


def kinds_with_keys(settings: Settings) -> list[str]:
    """The SDK kinds (anthropic, openai) of providers a call could use now: a key is set, or the provider is local."""
    from relay.agents.api.keys import find_key
    from relay.agents.api.registry import load_registry

    kinds: list[str] = []
    for provider in load_registry(settings).providers.values():
        usable = settings.environ.get(provider.base_url_env) if provider.local else find_key(provider, settings)
        if usable and provider.kind in STEPS and provider.kind not in kinds:
            kinds.append(provider.kind)
    return kinds


class Warmup:
    """Runs once per process, in a daemon thread; `start()` again is a no-op."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.done = threading.Event()
        self.warmed: list[str] = []
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> bool:
        """Start warming in a daemon thread; False when it is off or already started."""
        with self._lock:
            if self._started or not self.settings.warmup:
                return False
            self._started = True
        threading.Thread(target=self._run, name="relay-warmup", daemon=True).start()
        return True

    def start_later(self, delay_s: float = WARM_FALLBACK_S) -> threading.Timer:
        timer = threading.Timer(delay_s, self.start)
        timer.daemon = True
        timer.start()
        return timer

    def _run(self) -> None:
        try:
            for kind in kinds_with_keys(self.settings):
                module, build = STEPS[kind]
                importlib.import_module(module)
                build()
                self.warmed.append(kind)
        except Exception as exc:  # warming is an optimization: the call itself reports any real problem
            logger.warning("warm-up stopped: %s", exc)
        finally:
            self.done.set()
