"""Hugging Face repository ids (``ORG/NAME``, as vLLM's ``--model`` takes them) of the model presets.

Each preset's source (:attr:`roofline.ModelConfig.source`) begins with the repository whose
``config.json`` it is (``"meta-llama/Llama-3.1-8B config.json (model card); ..."``): that id
names the preset too, case-insensitively. The package never downloads: an id that no preset
holds is refused, with the address of the repository's config.json to download and pass as a path.
"""

from __future__ import annotations

import os
import re
from functools import cache

from .errors import UnknownPresetError
from .models import get_model, model_names

__all__ = ["preset_repo", "preset_for_repo", "looks_like_repo", "model_spec"]

#: A Hugging Face repository id: ORG/NAME, each letters, digits, '-', '_' or '.' (the Hub's rule).
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def looks_like_repo(text: str) -> bool:
    """Whether ``text`` has the form ORG/NAME of a Hugging Face repository id (and no ``.json`` ending)."""
    return isinstance(text, str) and _REPO.fullmatch(text.strip()) is not None and not text.endswith(".json")


def preset_repo(name: str) -> str | None:
    """The repository id of preset ``name`` (the first word of its source), or None if its source names none.

    Raises
    ------
    UnknownPresetError
        No preset ``name`` (:func:`roofline.get_model`).
    """
    source = get_model(name).source or ""
    first = source.split(" ", 1)[0]
    return first if _REPO.fullmatch(first) else None


@cache
def _repos() -> dict[str, tuple[str, str]]:
    """Lower-cased repository id -> (the id as its source spells it, preset name), over every preset."""
    out = {}
    for name in model_names():
        repo = preset_repo(name)
        if repo is not None:
            out[repo.lower()] = (repo, name)
    return out


def preset_for_repo(repo: str) -> str | None:
    """The preset whose config is repository ``repo`` (case-insensitive), or None."""
    found = _repos().get(repo.strip().lower())
    return None if found is None else found[1]


def model_spec(text: str) -> str:
    """What ``--model TEXT`` names, for :func:`roofline.load_model`: a preset's repository id becomes the
    preset's name; any other text (a preset name, a path) is returned as given.

    Raises
    ------
    UnknownPresetError
        ``text`` has the form ORG/NAME, is not an existing file, and no preset holds that repository:
        the message says to download ``https://huggingface.co/ORG/NAME/blob/main/config.json`` and
        pass its path (and suggests a close repository id of a preset).
    """
    if not looks_like_repo(text) or os.path.exists(text):
        return text
    name = preset_for_repo(text)
    if name is not None:
        return name
    repo = text.strip()
    raise UnknownPresetError("model repository", repo, sorted(r for r, _ in _repos().values()),
                             advice=f"no preset holds it: download https://huggingface.co/{repo}/blob/main/config.json "
                                    "and pass that file's path to --model")
