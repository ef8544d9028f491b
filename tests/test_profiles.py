"""Engine profiles outside the measurement side: the shipped file is the fit, exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from roofline import calibrate, profiles
from roofline.calibrate.fit import fit_shipped
from roofline.errors import InvalidValueError, UnknownPresetError


@pytest.mark.parametrize("flops", ["exact", "2p"])
def test_shipped_file_is_what_the_fit_gives(flops: str) -> None:
    """roofline/data/engine_profiles.json equals fit_profiles on the published set (regenerate with
    profiles_document({f: fit_shipped(f) for f in ("exact", "2p")}) when the set changes)."""
    fitted, unavailable = fit_shipped(flops)
    assert profiles.engine_profiles(flops=flops) == fitted
    assert profiles.unavailable_profiles(flops=flops) == unavailable


def test_vllm_profile_values_and_the_calibrate_names_are_the_same_objects() -> None:
    """vLLM's constants as fitted (eta_bw 0.8052, t_layer 76.8 us); calibrate re-exports the names of profiles."""
    vllm = profiles.get_engine_profile("vllm")
    assert vllm.constants() == {"eta_bw": Fraction(2013, 2500), "eta_mm": Fraction(113, 130),
                                "t_step": 0, "t_layer": Fraction(6, 78125), "t_seq": 0}
    assert calibrate.get_engine_profile is profiles.get_engine_profile
    assert calibrate.EngineProfile is profiles.EngineProfile
    assert profiles.get_engine_profile(vllm) is vllm


def test_unknown_profile_and_convention_are_refused_by_name() -> None:
    with pytest.raises(UnknownPresetError):
        profiles.get_engine_profile("nope")
    with pytest.raises(InvalidValueError, match="^flops="):
        profiles.engine_profiles(flops="3p")
