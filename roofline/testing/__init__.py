"""Public test helpers: Hypothesis strategies for roofline's inputs (:mod:`.strategies`).

Requires the optional ``testing`` extra (``pip install roofline[testing]``), which
brings Hypothesis.
"""
