"""The T=0 check shared by the training-free drafters' tests: a drafter emits vanilla's tokens on a few prompts of
a tiny target, and drafts are accepted two or more at a time often enough to show it drafted."""
from __future__ import annotations

from specbench.decode.draft import Drafter
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.methods.vanilla.drafter import VanillaDrafter

PROMPTS = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7]]


def assert_vanilla_tokens_with_deep_accepts(target, drafter: Drafter, tokens: int = 48, min_deep: int = 6) -> None:
    deep = 0
    for prompt in PROMPTS:
        expected = generate(target, prompt, VanillaDrafter(), Sampling(), tokens, set()).token_ids
        out = generate(target, prompt, drafter, Sampling(), tokens, set())
        assert out.token_ids == expected, prompt
        deep += sum(a >= 3 for a in out.accept_lengths)
    assert deep >= min_deep, f"only {deep} steps accepted two or more draft tokens"
