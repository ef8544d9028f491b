"""Reading a config.json: the model is named first, and non-finite numbers are judged by field.

docs/conventions.md, "Architectures" (reading a config): ``model_type`` (and
``architectures``) are read before any other field, so a refusal always names the model;
``NaN`` and ``Infinity`` are tolerated in a field no reader uses and refused by name in one
it uses. The two real configs with ``Infinity`` are in tests/data/configs (MANIFEST.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline import ConfigError, ModelConfig
from roofline.errors import UnsupportedModelError

HERE = Path(__file__).parent / "data" / "configs"
LLAMA = (HERE / "llama-3.1-8b.json").read_text()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


def test_the_nemotron_h_config_with_infinity_is_refused_naming_nemotron_h():
    """Nemotron-H-8B's ``"time_step_limit": [0.0, Infinity]`` no longer hides the model: refused as nemotron_h."""
    assert "Infinity" in (HERE / "nemotron-h-8b-base-8k.json").read_text()
    with pytest.raises(UnsupportedModelError) as info:
        ModelConfig.from_hf_config(HERE / "nemotron-h-8b-base-8k.json")
    assert info.value.model_type == "nemotron_h" and "state-space" in str(info.value)
    assert "Infinity" not in str(info.value) and "JSON" not in str(info.value)


def test_the_cli_refuses_the_nemotron_h_config_in_one_line_naming_it(capsys):
    """`roofline report --model` on it: exit status 2, one line naming nemotron_h."""
    from roofline.cli import main

    assert main(["report", "--model", str(HERE / "nemotron-h-8b-base-8k.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nemotron_h" in err and len(err.splitlines()) == 1


def test_infinity_in_an_unused_field_prices_the_model_as_without_it(tmp_path):
    """Llama 3.1 8B with ``rope_scaling.factor`` Infinity and a NaN extra field: the same model, to the unit."""
    cfg = json.loads(LLAMA)
    text = LLAMA.replace('"factor": 8.0', '"factor": Infinity').replace('"use_cache": true',
                                                                        '"use_cache": true, "spare": NaN')
    assert text.count("Infinity") == 1 and "NaN" in text
    model = ModelConfig.from_hf_config(_write(tmp_path, text))
    assert model.parameters == ModelConfig.from_hf_config(cfg).parameters == 8_030_261_248
    assert model.kv_bytes(32768) == 32 * 2 * 8 * 128 * 2 * 32768


@pytest.mark.parametrize("key", ["hidden_size", "num_key_value_heads", "vocab_size"])
@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN"])
def test_a_non_finite_value_in_a_used_field_is_refused_by_name(tmp_path, key, token):
    """Infinity, -Infinity or NaN where a reader needs a size: ConfigError naming the field and the file."""
    cfg = json.loads(LLAMA)
    text = LLAMA.replace(f'"{key}": {cfg[key]}', f'"{key}": {token}')
    assert token in text
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"field '{key}'=") as info:
        ModelConfig.from_hf_config(path)
    assert str(path) in str(info.value) and not isinstance(info.value, UnsupportedModelError)


def test_the_model_type_is_read_before_a_bad_field(tmp_path):
    """A refused family with a malformed or non-finite size is refused as its family, not as the bad field."""
    text = '{"model_type": "t5", "d_model": NaN, "hidden_size": "wide", "x": ' + "[" * 10 + "]" * 10 + "}"
    with pytest.raises(UnsupportedModelError) as info:
        ModelConfig.from_hf_config(_write(tmp_path, text))
    assert info.value.model_type == "t5" and "encoder-decoder" in str(info.value)


def test_a_missing_model_type_names_the_architectures(tmp_path):
    """No model_type: refused, naming the config's architectures so the user knows which model it was."""
    text = '{"architectures": ["NemotronHForCausalLM"], "time_step_limit": [0.0, Infinity], "hidden_size": 4096}'
    with pytest.raises(UnsupportedModelError, match="architectures NemotronHForCausalLM") as info:
        ModelConfig.from_hf_config(_write(tmp_path, text))
    assert "'model_type' missing" in str(info.value)


def test_an_unknown_model_type_names_its_architectures():
    """An unknown type is refused naming the type and its architectures."""
    with pytest.raises(UnsupportedModelError, match="architectures FooForCausalLM") as info:
        ModelConfig.from_hf_config({"model_type": "foo", "architectures": ["FooForCausalLM"]})
    assert info.value.model_type == "foo"
