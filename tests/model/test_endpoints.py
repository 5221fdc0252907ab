"""BRAID_ENDPOINTS files (JSON or TOML) and the settings for real models."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.agent import orchestrate
from server.agent.tools import Workspace
from server.base.settings import Settings
from server.model.client import ModelClient
from server.model.endpoints import bound_arguments, load_endpoints_file


def test_toml_and_json_files_name_the_same_endpoints(tmp_path: Path) -> None:
    toml = tmp_path / "e.toml"
    toml.write_text('[[endpoints]]\nname = "local"\nbase_url = "http://127.0.0.1:8080/v1/"\n'
                    'api_key_env = "K"\ntool_choice = "write_file"\ntools = ["write_file"]\n'
                    '[[endpoints]]\nname = "openai"\nbase_url = "https://api.openai.com/v1"\n'
                    'api_key_env = "OPENAI_API_KEY"\nmodels = ["gpt-4o-mini"]\n')
    js = tmp_path / "e.json"
    js.write_text('[{"name": "local", "base_url": "http://127.0.0.1:8080/v1/", '
                  '"api_key_env": "K", "tool_choice": "write_file", "tools": ["write_file"]},'
                  '{"name": "openai", "base_url": "https://api.openai.com/v1", '
                  '"api_key_env": "OPENAI_API_KEY", "models": ["gpt-4o-mini"]}]')
    a, b = load_endpoints_file(toml), load_endpoints_file(js)
    assert a == b
    assert a[0].base_url == "http://127.0.0.1:8080/v1" and a[0].key({"K": "s3"}) == "s3"
    assert a[1].models == ("gpt-4o-mini",)


@pytest.mark.parametrize("text,words", [
    ("[[endpoints]]\nname = 'x'\n", "needs a name and a base_url"),
    ('{"endpoints": [{"name": "demo", "base_url": "http://h"}]}', "demo model"),
    ('[{"name": "a", "base_url": "ftp://h"}]', "http://"),
    ('[{"name": "a", "base_url": "http://h"}, {"name": "a", "base_url": "http://i"}]', "twice"),
    ("not = [valid", "neither valid JSON nor TOML"),
    ('[{"name": "a", "base_url": "http://h", "max_argument_chars": 0}]', "at least 1"),
    ('[{"name": "a", "base_url": "http://h", "max_argument_chars": "9"}]', "whole number"),
])
def test_a_bad_file_says_what_is_wrong(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad"
    path.write_text(text)
    with pytest.raises(ValueError, match=words) as info:
        load_endpoints_file(path)
    assert str(path) in str(info.value)


def test_settings_and_model_resolution(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('[[endpoints]]\nname = "local"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'models = ["smollm2"]\n')
    s = Settings.from_env({"BRAID_MODEL": "gpt-4o-mini", "OPENAI_BASE_URL": "http://h/v1",
                           "BRAID_MODEL_TIMEOUT": "7.5", "BRAID_MODEL_RETRIES": "1",
                           "BRAID_ENDPOINTS": str(path), "BRAID_TOOL_CHOICE": "required"})
    assert (s.model_timeout, s.model_retries) == (7.5, 1)
    client = ModelClient(s)
    assert list(client.endpoints) == ["demo", "default", "local"]
    assert client.endpoints["default"].tool_choice == "required"
    assert [(e.name, m) for e, m in [client.resolve(), client.resolve("smollm2"),
                                     client.resolve("smollm2@default"),
                                     client.resolve("demo")]] == [
        ("default", "gpt-4o-mini"), ("local", "smollm2"), ("default", "smollm2"),
        ("demo", "demo")]
    assert Settings.from_env({}).model_timeout == 120.0
    with pytest.raises(ValueError, match="BRAID_MODEL_TIMEOUT must be a number"):
        Settings.from_env({"BRAID_MODEL_TIMEOUT": "soon"})


def _string_bounds(schema: object) -> list[int | None]:
    if isinstance(schema, list):
        return [n for item in schema for n in _string_bounds(item)]
    if not isinstance(schema, dict):
        return []
    own = [schema.get("maxLength")] if schema.get("type") == "string" else []
    return own + [n for key, value in schema.items() if key != "maxLength"
                  for n in _string_bounds(value if key != "properties" else list(value.values()))]


def test_max_argument_chars_bounds_every_string_of_every_tool(tmp_path: Path) -> None:
    """A schema-constrained server (llama-server) then ends a forced call within the bound."""
    path = tmp_path / "e.toml"
    path.write_text('[[endpoints]]\nname = "local"\nbase_url = "http://h/v1"\n'
                    "max_argument_chars = 60\nmax_argument_items = 2\n")
    endpoint = load_endpoints_file(path)[0]
    assert (endpoint.max_argument_chars, endpoint.max_argument_items) == (60, 2)
    tools = Workspace.schemas(True) + orchestrate.schemas()
    before = [n for t in tools for n in _string_bounds(t["function"]["parameters"])]
    assert None in before and 24 in before  # unbounded strings, and the label's own 24
    after = [n for t in tools
             for n in _string_bounds(bound_arguments(t["function"]["parameters"], 60, None))]
    assert len(after) == len(before) and set(after) == {24, 60}
    # The tool's own schema is left as it was (one list of schemas serves every endpoint).
    assert [n for t in tools for n in _string_bounds(t["function"]["parameters"])] == before


def test_max_argument_items_bounds_every_list() -> None:
    spawn = orchestrate.schemas()[0]["function"]["parameters"]
    agents = spawn["properties"]["agents"]  # type: ignore[index]
    assert agents["maxItems"] == orchestrate.MAX_CHILDREN
    bound = bound_arguments(spawn, None, 2)
    assert bound["properties"]["agents"]["maxItems"] == 2  # type: ignore[index]
    assert bound["properties"]["agents"]["items"] == agents["items"]  # type: ignore[index]
    assert bound_arguments(spawn, None, 99)["properties"]["agents"]["maxItems"] == 8  # type: ignore[index]
