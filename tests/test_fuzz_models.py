"""ModelConfig.from_hf_config under generated config documents: the shipped presets with fields
deleted, mistyped, nested, duplicated or added. Each gives a model whose counts are finite and
positive, or a project error naming the field; a field of the wrong type is never read as another value.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline
from roofline._io import parse_json
from roofline.errors import ConfigError, InvalidValueError, RooflineError, shown

FUZZ = settings(settings.get_profile("fuzz"), deadline=timedelta(seconds=5))

PRESETS = {
    f.name.removesuffix(".json"): json.loads(f.read_text(encoding="utf-8"))
    for f in resources.files("roofline.data").joinpath("models").iterdir() if f.name.endswith(".json")
}

#: Fields every family reads, and what each must hold (absent or null is "not given").
_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "head_dim",
          "max_position_embeddings")
_FLAGS = ("tie_word_embeddings",)
_TEXT = ("torch_dtype", "_name", "_name_or_path", "_source")

_WEIRD = st.sampled_from([
    True, False, "", " ", "12", "\u0661\u0662", "bfloat16", "no", 1.5, 0.0, -1, 0, 1, 2**33, 10**400, 10**5000,
    [], [1], {}, {"a": 1}, [[[[1]]]], math.nan, math.inf, -math.inf, "x" * 10_000,
])
_VALUES = _WEIRD | st.integers(-(2**70), 2**70) | st.text(max_size=20) | st.floats() | st.none()


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def _configs(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[str]]:
    """A preset's config with one to three mutations; the keys it touched."""
    name = draw(st.sampled_from(sorted(PRESETS)))
    cfg = json.loads(json.dumps(PRESETS[name]))
    touched = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["delete", "mistype", "extra", "nest", "deep"]))
        key = draw(st.sampled_from(sorted(cfg))) if cfg else "x_extra"
        if kind == "delete":
            cfg.pop(key, None)
        elif kind == "mistype":
            cfg[key] = draw(_VALUES)
        elif kind == "extra":
            key = "x_" + draw(st.text("abc", min_size=1, max_size=5))
            cfg[key] = draw(_VALUES)
        elif kind == "nest":
            cfg[key] = draw(st.sampled_from([[cfg.get(key)], {"value": cfg.get(key)}]))
        else:
            cfg[key] = _deep(draw(st.sampled_from([3, 64, 65, 200, 10_000])))
        touched.append(key)
    return name, cfg, touched


def _wrong(key: str, value: Any) -> bool:
    """True if ``value`` is the wrong type for ``key`` (one the reader must refuse, never read as another)."""
    if value is None:
        return False
    if key in _SIZES:
        return isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**32
    if key in _FLAGS:
        return not isinstance(value, bool)
    if key in _TEXT:
        return not isinstance(value, str) or not value.strip()
    return False


def _check_model(model: roofline.ModelConfig) -> None:
    """Every count a model gives is an exact, finite, positive number."""
    for value in (model.parameters, model.weight_bytes, model.kv_bytes_per_token, model.matmul_flops_per_token,
                  model.attention_flops_per_token):
        assert isinstance(value, (int, Fraction)) and value > 0, value
        assert math.isfinite(float(value))


@FUZZ
@given(case=_configs())
def test_a_mutated_preset_gives_a_sound_model_or_an_error_naming_a_touched_field(case: Any) -> None:
    """A preset with fields deleted, mistyped, nested or added: a model with finite positive counts, or a
    RooflineError naming a field it touched; a field of the wrong type is always refused."""
    name, cfg, touched = case
    note(f"{name}: touched {touched}")
    wrong = [k for k in touched if k in cfg and _wrong(k, cfg[k])]
    try:
        model = roofline.ModelConfig.from_hf_config(cfg)
    except RooflineError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 3000, message
        # Besides a touched field: one checked against it, or one a changed model_type now requires.
        names = {*touched, "num_key_value_heads", "head_dim", "hidden_size", "num_attention_heads", "torch_dtype",
                 "max_position_embeddings", "word_embed_proj_dim", "intermediate_size", "ffn_dim"}
        assert any(k in message for k in names), message
        return
    assert not wrong, f"accepted {[(k, cfg[k]) for k in wrong]}"
    _check_model(model)


@FUZZ
@given(case=_configs(), duplicate=st.booleans())
def test_a_mutated_preset_file_is_read_like_its_dict_and_duplicate_keys_are_refused(
    tmp_path_factory: pytest.TempPathFactory, case: Any, duplicate: bool
) -> None:
    """Written to a config.json, the same document gives the same model or a ConfigError naming the file (strict
    JSON refuses NaN, inf and 10^400, which the dict path refuses by field); a key written twice is refused."""
    _, cfg, touched = case
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    try:
        text = json.dumps(cfg)
    except (ValueError, RecursionError):  # an int of 5,000 digits, or nesting json cannot write
        return
    try:
        parse_json(text)
        strict = True
    except ValueError:  # nesting past 64 or a number strict JSON refuses: refused before duplicates are seen
        strict = False
    if duplicate:
        text = text[:-1] + (', ' if len(cfg) else '') + '"hidden_size": 4096}'
    path.write_text(text, encoding="utf-8")
    try:
        from_file: Any = roofline.ModelConfig.from_hf_config(path)
    except RooflineError as exc:
        from_file = exc
    if duplicate and "hidden_size" in cfg:
        assert isinstance(from_file, ConfigError) and str(path) in str(from_file)
        assert "duplicate key 'hidden_size'" in str(from_file) or not strict, from_file
        return
    if isinstance(from_file, RooflineError):
        # The file named, or an error naming its field (InvalidValueError) or the model_type it cannot model.
        assert str(path) in str(from_file) or isinstance(from_file, InvalidValueError) or \
            "model_type" in str(from_file), from_file
        return
    assert isinstance(from_file, roofline.ModelConfig)
    _check_model(from_file)
    expected = roofline.ModelConfig.from_hf_config(json.loads(text))
    assert attrs_without_source(from_file) == attrs_without_source(expected)


def attrs_without_source(model: roofline.ModelConfig) -> tuple[Any, ...]:
    """A model's fields other than ``name`` and ``source`` (which say where it was read from)."""
    import attrs

    return tuple(v for k, v in attrs.asdict(model).items() if k not in ("name", "source"))


BASE = PRESETS["llama-3.1-8b"]


@pytest.mark.parametrize(("change", "field"), [
    ({"torch_dtype": ""}, "torch_dtype"),
    ({"torch_dtype": 16}, "torch_dtype"),
    ({"model_type": ["llama"]}, "model_type"),
    ({"_name": 5}, "_name"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({"attention_bias": "no"}, "attention_bias"),
    ({"hidden_size": 10**5000}, "hidden_size"),
    ({"hidden_size": math.inf}, "hidden_size"),
    ({"x": _deep(100)}, "x"),
    ({"_published_parameters": [8_030_261_248]}, "_published_parameters"),
    ({"text_config": {"torch_dtype": ""}}, "text_config.torch_dtype"),
])
def test_each_listed_config_fault_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    """An empty or numeric torch_dtype, a list as model_type, a number as a name, booleans as strings, a
    5,000-digit size, an infinite size, nesting past 64: a ConfigError naming the field and the value (an infinite
    value in a field no reader uses is tolerated: tests/test_reading.py)."""
    with pytest.raises(ConfigError) as exc:
        roofline.ModelConfig.from_hf_config({**BASE, **change})
    message = str(exc.value)
    assert f"field '{field}" in message and "\n" not in message
    value = next(iter(change.values()))
    if not isinstance(value, (dict, list)):
        assert shown(value)[:40] in message


def test_a_config_that_contains_itself_is_refused_not_recursed() -> None:
    """A dict holding itself (possible in Python, not in JSON) is refused as nested too deep."""
    cfg: dict[str, Any] = dict(BASE)
    cfg["self"] = cfg
    with pytest.raises(ConfigError, match="nested more than 64"):
        roofline.ModelConfig.from_hf_config(cfg)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(name=5), "name"), (dict(weight_dtype=""), "weight_dtype"), (dict(kv_dtype=["fp8"]), "kv_dtype"),
])
def test_from_hf_config_checks_its_overrides(kwargs: dict[str, Any], field: str) -> None:
    """A number as the model name or an empty dtype override is refused, not replaced by the config's."""
    with pytest.raises(InvalidValueError) as exc:
        roofline.ModelConfig.from_hf_config(BASE, **kwargs)
    assert exc.value.field == field


@pytest.mark.parametrize(("spec", "field"), [(None, "spec"), (5, "spec"), (b"llama-3.1-8b", "spec")])
def test_load_model_checks_its_argument(spec: Any, field: str) -> None:
    """load_model(None), a number or bytes: an InvalidValueError naming spec, not a TypeError."""
    with pytest.raises(InvalidValueError) as exc:
        roofline.load_model(spec)
    assert exc.value.field == field


@pytest.mark.parametrize("name", [None, 5, ["llama-3.1-8b"]])
def test_get_model_checks_its_argument(name: Any) -> None:
    """get_model with a non-str name: an InvalidValueError naming name (not 'unknown model None')."""
    with pytest.raises(InvalidValueError) as exc:
        roofline.get_model(name)
    assert exc.value.field == "name"


def test_an_unmutated_preset_reads_the_same_from_dict_and_file(tmp_path: Path) -> None:
    """The fuzz baseline: llama-3.1-8b read from its dict has 8,030,261,248 parameters, as the preset."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BASE), encoding="utf-8")
    assert roofline.ModelConfig.from_hf_config(path).parameters == 8_030_261_248


@pytest.mark.parametrize("spec", ["a" * 500, "x\x00y"])
def test_a_name_too_long_for_the_file_system_is_an_unknown_preset_not_an_os_error(spec: str) -> None:
    """load_model("a" * 500) once raised OSError (file name too long), which the command line reported as an
    output failure (exit 1); it is an unknown preset (UnknownPresetError, exit 2)."""
    from roofline.errors import UnknownPresetError

    with pytest.raises(UnknownPresetError):
        roofline.load_model(spec)
