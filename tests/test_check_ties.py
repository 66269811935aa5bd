"""check's near-tie rule: what a method's divergence from vanilla may be blamed on float noise."""
from specbench.measure.check import near_tie_threshold


def test_bf16_logits_one_step_apart_are_a_near_tie():
    # On an H200 in bf16 (reports/gpu-h200) divergences came with margins of exactly 0.125: one bf16 step for
    # logits between 16 and 32, as close as two distinct bf16 logits there can be.
    assert 0.125 <= near_tie_threshold("bfloat16", 20.0) < 0.5
    assert near_tie_threshold("bfloat16", 3.0) == 0.1  # small logits: the fixed floor holds
    assert near_tie_threshold("bfloat16", None) == 0.1  # no logit measured: the floor


def test_fp32_keeps_its_floor():
    # fp32's step at 20 is about 2e-6: kernel noise (the 1e-3 floor) decides, and 0.125 stays a clear margin.
    assert near_tie_threshold("float32", 20.0) == 1e-3
    assert near_tie_threshold("float32", 1e6) > 1e-3  # until the logits are huge
    assert near_tie_threshold("no-such-dtype", 20.0) == 1e-3
