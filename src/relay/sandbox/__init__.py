"""Running untrusted snippets (python, bash, node) in a sandbox, as relay jobs; reducing large datasets with them.

Core only: it knows nothing of MCP; the `gobby` toolset's execute_code and process_large_dataset call it.
"""

from relay.sandbox.isolation import Isolation, detect
from relay.sandbox.jobs import read_outcome, submit_execute
from relay.sandbox.runner import LANGUAGES, Outcome, language_of, run_code

__all__ = ["LANGUAGES", "Isolation", "Outcome", "detect", "language_of", "read_outcome", "run_code", "submit_execute"]
