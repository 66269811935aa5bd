"""The static runtime's attention masks, built on the device over the whole cache capacity from each row's small
block part, are bit for bit the masks the host built over the whole capacity before (the reference below): a batch
with different cache lengths, pad tokens, a pad row, a tree, a chain and an extra branch, under full attention and
both kinds of sliding window. The dynamic path's masks are unchanged too, and sliding-window families decode on
the static runtime as HF's generate does."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.draft import Branch, Draft
from specbench.decode.engine import generate_batch
from specbench.decode.inputs import Block, batch_inputs, row_block
from specbench.decode.layout import FULL_ONLY, SLIDING, AttentionLayout
from specbench.decode.sampling import Sampling
from specbench.decode.static import StaticTarget
from tests.drafters import RandomTreeDrafter
from tests.test_families import PROMPTS, TOKENS, VOCAB, hf_greedy, tiny

LAYOUTS = {"full": FULL_ONLY, "one window": AttentionLayout({"all": 3}),
           "per kind": AttentionLayout({SLIDING: 2}, per_kind=True)}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="no CUDA device here"))]
WIDTH = 10  # cache slots per row in use


def step_blocks() -> tuple[list[Block], list[int]]:
    """Three rows of one step: a tree (cache full to the width), a chain after two pending tokens, and a one-node
    draft with an extra branch (short contexts)."""
    tree = Draft([1, 2, 3, 4, 6], [-1, -1, 0, 0, 2])
    extra = Draft([5], [-1], extra=Branch([4, 5], [1, 2], torch.ones(2, 2, dtype=torch.bool).tril()))
    cache_lens = [WIDTH, 7, 3]
    pending = [[5], [7, 8], [9]]
    drafts = [tree, Draft.chain([2, 3]), extra]
    return [row_block(p, d, n) for p, d, n in zip(pending, drafts, cache_lens)], cache_lens


def host_masks(blocks: list[Block], cache_lens: list[int], layout: AttentionLayout, dtype: torch.dtype,
               shape: tuple[int, int, int]) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
    """The reference: what each query sees, set on the host over every key slot, query by query (pad rows and pad
    queries see themselves only), and the key positions of every slot; then the layout's additive masks."""
    rows, size, slots = shape
    seen = torch.zeros(rows, size, slots, dtype=torch.bool)
    positions = torch.zeros(rows, size, dtype=torch.long)
    for row in range(rows):
        block = blocks[row] if row < len(blocks) else None
        pad = size - (len(block.tokens) if block else 0)
        length = cache_lens[row] if block else 0
        positions[row, :pad] = length
        for query in range(size):
            if query < pad:
                seen[row, query, WIDTH + query] = True
                continue
            positions[row, query] = block.positions[query - pad]
            seen[row, query, :length] = True
            seen[row, query, WIDTH + pad : WIDTH + size] = block.allowed[query - pad]
    keys = torch.zeros(rows, slots, dtype=torch.long)
    keys[:, :WIDTH] = torch.arange(WIDTH)
    keys[:, WIDTH : WIDTH + size] = positions
    return layout.masks(seen, positions, keys, dtype), positions


def same_bits(a: torch.Tensor | dict[str, torch.Tensor], b: torch.Tensor | dict[str, torch.Tensor]) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            same_bits(a[k], b[k]) for k in a)
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(4, 8, 40), (3, 6, WIDTH + 6)])  # pads and a pad row; the block at the end
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_mask_built_on_the_device_equals_the_host_built_one(device, layout, shape, dtype):
    blocks, cache_lens = step_blocks()
    inputs = batch_inputs(blocks, cache_lens, WIDTH, dtype, torch.device(device), LAYOUTS[layout], shape)
    expected, positions = host_masks(blocks, cache_lens, LAYOUTS[layout], dtype, shape)
    masks = inputs.attention_mask
    assert all(m.device.type == device for m in (masks.values() if isinstance(masks, dict) else [masks]))
    assert same_bits(masks, expected)
    assert torch.equal(inputs.position_ids.cpu(), positions)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dynamic_mask_is_the_host_built_one_over_the_blocks_own_slots(layout):
    blocks, cache_lens = step_blocks()
    inputs = batch_inputs(blocks, cache_lens, WIDTH, torch.float32, torch.device("cpu"), LAYOUTS[layout])
    expected, _ = host_masks(blocks, cache_lens, LAYOUTS[layout], torch.float32, (3, 6, WIDTH + 6))
    assert same_bits(inputs.attention_mask, expected)


@pytest.mark.parametrize("name", ["mistral", "gemma3_text"])
def test_sliding_window_families_decode_on_the_static_runtime_as_hf_generate(name):
    target = tiny(name, seed=0)
    references = [hf_greedy(target, p) for p in PROMPTS]
    rows = [RandomTreeDrafter(VOCAB, seed=i, reference=r) for i, r in enumerate(references)]
    together = generate_batch(target, PROMPTS, rows, Sampling(), TOKENS, set(), static=StaticTarget(target, False))
    assert [g.token_ids for g in together] == references
    assert max(a for g in together for a in g.accept_lengths) >= 3  # trees accepted deep
