"""BRAID_ENDPOINTS files (JSON or TOML) and the settings for real models."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.base.settings import Settings
from server.model.client import ModelClient
from server.model.endpoints import load_endpoints_file


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
