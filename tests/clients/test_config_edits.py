"""Targeted edits of client config files: the rest of the file keeps its bytes, and removal restores them."""

from __future__ import annotations

import json
import tomllib

import pytest

from relay.clients import jsonedit, tomledit
from relay.errors import RelayError

VSCODE_JSONC = """{
    // my servers
    "servers": {
        "github": {"type": "http", "url": "https://api.example/mcp"}, /* keep */
    },
    "inputs": []
}
"""

CLAUDE_JSON = """{
  "numStartups": 3,
  "mcpServers": {
    "other": {
      "command": "other-server"
    }
  },
  "projects": {}
}
"""


GEMINI_TRAILING_COMMENT = """{
  "general": {"vimMode": true}, // editor
  "ui": {"theme": "dark"} // mine
}
"""


@pytest.mark.parametrize("original", [CLAUDE_JSON, VSCODE_JSONC, GEMINI_TRAILING_COMMENT, "{}", "{}\n", '{"a": 1}', ""])
def test_setting_then_removing_a_member_gives_the_original_bytes_back(original: str) -> None:
    entry = {"command": "/bin/relay", "args": ["serve"], "env": {"RELAY_HOME": "/h"}}
    added = jsonedit.set_value(original, ("mcpServers", "relay"), entry, "f.json")
    assert jsonedit.load(added, "f.json")["mcpServers"]["relay"] == entry
    assert jsonedit.set_value(added, ("mcpServers", "relay"), entry, "f.json") == added  # idempotent
    removed = jsonedit.remove_value(added, ("mcpServers", "relay"), "f.json")
    assert removed == original or (original in ("", "{}\n") and removed.strip() in ("", "{}"))


def test_a_member_is_inserted_with_the_files_own_indentation_and_everything_else_untouched() -> None:
    added = jsonedit.set_value(CLAUDE_JSON, ("mcpServers", "relay"), {"command": "r"}, "f.json")
    assert added == CLAUDE_JSON.replace(
        '      "command": "other-server"\n    }\n',
        '      "command": "other-server"\n    },\n    "relay": {\n      "command": "r"\n    }\n',
    )


def test_a_trailing_line_comment_stays_on_its_members_line_and_the_new_member_gets_its_own() -> None:
    added = jsonedit.set_value(GEMINI_TRAILING_COMMENT, ("mcpServers", "relay"), {"trust": True}, "settings.json")
    assert added == GEMINI_TRAILING_COMMENT.replace(
        '  "ui": {"theme": "dark"} // mine\n',
        '  "ui": {"theme": "dark"}, // mine\n  "mcpServers": {\n    "relay": {\n      "trust": true\n    }\n  }\n',
    )


def test_comments_and_trailing_commas_of_jsonc_survive_an_edit() -> None:
    added = jsonedit.set_value(VSCODE_JSONC, ("servers", "relay"), {"type": "stdio"}, "mcp.json")
    assert "// my servers" in added and "/* keep */" in added
    assert jsonedit.load(added, "mcp.json")["servers"] == {
        "github": {"type": "http", "url": "https://api.example/mcp"},
        "relay": {"type": "stdio"},
    }


def test_an_array_item_is_added_once_and_its_removal_drops_the_parents_it_created() -> None:
    original = '{\n  "theme": "dark"\n}\n'
    once = jsonedit.add_item(original, ("permissions", "allow"), "mcp__relay", "s.json")
    assert jsonedit.add_item(once, ("permissions", "allow"), "mcp__relay", "s.json") == once
    assert json.loads(once) == {"theme": "dark", "permissions": {"allow": ["mcp__relay"]}}
    assert jsonedit.remove_item(once, ("permissions", "allow"), "mcp__relay", "s.json") == original
    mine = '{\n  "permissions": {\n    "allow": [\n      "Bash(ls)"\n    ]\n  }\n}\n'
    both = jsonedit.add_item(mine, ("permissions", "allow"), "mcp__relay", "s.json")
    assert json.loads(both)["permissions"]["allow"] == ["Bash(ls)", "mcp__relay"]
    assert jsonedit.remove_item(both, ("permissions", "allow"), "mcp__relay", "s.json") == mine


def test_a_file_that_is_not_json_is_refused_with_a_hint() -> None:
    with pytest.raises(RelayError) as info:
        jsonedit.set_value('{"a": ', ("b",), 1, "broken.json")
    assert info.value.code.value == "CONFIG_INVALID" and "broken.json" in info.value.message


CODEX_TOML = """model = "gpt-5.5"  # mine

[mcp_servers.docs]
command = "docs-server"
args = ["--port", "1"]

[mcp_servers.docs.env]
TOKEN_NAME = "x"

[profiles.fast]
model = "gpt-5.5-mini"
notes = '''
[mcp_servers.relay]
this is a string, not a table
'''
"""


def test_a_toml_table_is_appended_replaced_and_removed_without_touching_the_rest() -> None:
    body = {"command": "/bin/relay", "args": ["serve"], "required": True, "tool_timeout_sec": 3600}
    added = tomledit.set_table(CODEX_TOML, ("mcp_servers", "relay"), body, "config.toml")
    assert added.startswith(CODEX_TOML)
    assert tomllib.loads(added)["mcp_servers"]["relay"] == body
    assert tomledit.set_table(added, ("mcp_servers", "relay"), body, "config.toml") == added
    changed = tomledit.set_table(added, ("mcp_servers", "relay"), {**body, "required": False}, "config.toml")
    assert changed == added.replace("required = true", "required = false")
    assert tomledit.remove_table(added, ("mcp_servers", "relay"), "config.toml") == CODEX_TOML


def test_a_toml_table_in_the_middle_is_replaced_in_place_with_its_sub_tables() -> None:
    text = '[mcp_servers.relay]\ncommand = "old"\n\n[mcp_servers.relay.env]\nA = "1"\n\n[other]\nx = 1\n'
    new = tomledit.set_table(text, ("mcp_servers", "relay"), {"command": "new"}, "c.toml")
    assert new == '[mcp_servers.relay]\ncommand = "new"\n\n[other]\nx = 1\n'
    assert tomledit.remove_table(new, ("mcp_servers", "relay"), "c.toml") == "[other]\nx = 1\n"


def test_an_inline_relay_table_is_refused_rather_than_duplicated() -> None:
    text = 'mcp_servers = { relay = { command = "x" } }\n'
    with pytest.raises(RelayError):
        tomledit.set_table(text, ("mcp_servers", "relay"), {"command": "y"}, "c.toml")
