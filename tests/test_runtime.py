"""The target runtime: every product kernel computes the Linear layer it replaces, and a swapped model gives the
stock model's logits at every token count the engine uses (1 row, a few, many, a prefill)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache

from specbench.decode.names import FIXED_RULE, PRODUCT_KERNELS, KernelRule, Runtime
from specbench.decode.runtime import (
    FEW_TOKENS,
    FewTokenLinear,
    prepare,
    restore,
    stock_linears,
)
from tests.conftest import tiny_llama


def test_kernel_rule_follows_the_row_count():
    # ROW_COUNTS (1, 2, 4, 8, 16, 32): a row count between two takes the larger's kernel.
    assert [FIXED_RULE.pick(r, FEW_TOKENS, packed=True) for r in range(1, 6)] == ["pair", "wxt", "wxt", "wxt", "packed"]
    assert FIXED_RULE.pick(FEW_TOKENS, FEW_TOKENS, packed=False) == "linear"  # nothing packed: F.linear
    assert FIXED_RULE.pick(FEW_TOKENS + 1, FEW_TOKENS, packed=True) == "linear"  # a prefill
    assert FIXED_RULE.pick(9, 8, packed=True) == "linear"  # above the module's max_tokens
    rule = KernelRule(("linear", "wxt", "packed", "wxt", "linear", "packed"))
    assert [rule.pick(r, FEW_TOKENS, True) for r in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32)] == \
        ["linear", "wxt", "packed", "packed", "wxt", "wxt", "linear", "linear", "packed", "packed"]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 7, 20])
def test_every_kernel_computes_the_linear_layer(bias, rows):
    torch.manual_seed(rows)
    linear = nn.Linear(48, 40, bias=bias)
    swapped = FewTokenLinear(linear, FEW_TOKENS)
    x = torch.randn(rows, 48)
    expected = F.linear(x, linear.weight, linear.bias)
    kernels = [k for k in PRODUCT_KERNELS if k != "packed" or swapped.packed is not None]
    assert "packed" in kernels or not torch.backends.mkldnn.is_available(), "oneDNN present but nothing packed"
    with torch.inference_mode():
        for kernel in kernels:
            out = swapped.product(x, kernel)
            assert out.shape == (rows, 40) and out.is_contiguous(), kernel
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{kernel}: {m}")
        # Through forward, with batch and sequence axes: the kernel the rule picks for this row count.
        torch.testing.assert_close(swapped(x[None]), expected[None], rtol=1e-5, atol=1e-5)


@torch.inference_mode()
def test_swapped_model_gives_the_stock_logits_at_every_token_count():
    model = tiny_llama(vocab=97, seed=3, layers=2, hidden=64)
    info = prepare(model, Runtime(kernels="few-token", graphs="off"))
    assert info.swapped_linears == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and lm_head
    if torch.backends.mkldnn.is_available():
        assert info.packed_linears == info.swapped_linears
    prompt = torch.randint(0, 97, (1, 40))  # a prefill above FEW_TOKENS rows: F.linear

    def logits_per_step(sizes: list[int]) -> list[torch.Tensor]:
        cache = DynamicCache(config=model.config)
        outs = [model(input_ids=prompt, cache=cache, use_cache=True).logits]
        for k in sizes:  # 1 row (pair), 3 (W @ xT), 9 and 20 (packed)
            outs.append(model(input_ids=torch.randint(0, 97, (1, k), generator=torch.Generator().manual_seed(k)),
                              cache=cache, use_cache=True).logits)
        return outs

    sizes = [1, 3, 9, 20]
    fast = logits_per_step(sizes)
    originals = stock_linears(model)
    stock = logits_per_step(sizes)
    restore(model, originals)
    assert all(isinstance(m, FewTokenLinear) for name, m in model.named_modules() if name.endswith("proj"))
    for k, a, b in zip([40] + sizes, fast, stock):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=lambda m: f"{k} new tokens: {m}")


def test_cost_bench_writes_a_curve_that_run_reuses(tiny_target_dir, tmp_path, capsys):
    import json

    from specbench.cli import main

    curve = tmp_path / "cost.json"
    assert main(["bench", "--cost", "--rounds", "1", "--target", str(tiny_target_dir), "--json", str(curve)]) == 0
    printed = capsys.readouterr().out
    assert "T(4)/T(1)" in printed and "floor: all weights streamed once" in printed
    result = json.loads(curve.read_text())
    for key in ("k", "hf_ms", "engine_ms", "engine_tree_ms", "floor_stream_ms", "cpu", "device"):
        assert key in result, key
    assert result["k"] == [1, 2, 4, 8, 12, 16, 24, 32]
    assert all(len(result[key]) == 8 and min(result[key]) > 0 for key in ("hf_ms", "engine_ms", "engine_tree_ms"))
    out = tmp_path / "run"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1", "--max-new-tokens", "4",
                 "--cost-curve", str(curve)]) == 0
    assert json.loads((out / "run.json").read_text())["costs"]["verify_ms"] == result["costs"]["verify_ms"]
    assert main(["bench", "--cost", "--rounds", "0", "--target", str(tiny_target_dir)]) == 2
    assert "--rounds must be > 0" in capsys.readouterr().err


def test_drafters_run_on_the_targets_kernels_and_stay_stock_with_a_stock_target():
    from specbench.decode.runtime import RuntimeInfo, frozen_linear, prepare_drafter

    rule = KernelRule(("wxt",) * 6)
    fast, stock = RuntimeInfo("few-token", 15, rule=rule), RuntimeInfo("stock", 0)
    head = nn.Sequential(nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 8, bias=False))
    x = torch.randn(4, 16)
    expected = head(x)
    prepare_drafter(head, stock)
    assert not any(isinstance(m, FewTokenLinear) for m in head.modules())
    prepare_drafter(head, fast)
    assert [m.rule for m in head.modules() if isinstance(m, FewTokenLinear)] == [rule, rule]  # the target's rule
    with torch.inference_mode():
        torch.testing.assert_close(head(x), expected, rtol=1e-5, atol=1e-5)
        rows = torch.randn(10, 16)
        assert isinstance(frozen_linear(rows, fast), FewTokenLinear) and frozen_linear(rows, fast).rule == rule
        assert type(frozen_linear(rows, stock)) is nn.Linear
        torch.testing.assert_close(frozen_linear(rows, fast)(x), x @ rows.T, rtol=1e-5, atol=1e-5)
