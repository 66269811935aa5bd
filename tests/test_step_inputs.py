"""A step's inputs (specbench.decode.inputs: stage_inputs, then device_inputs): the attention masks, built on the
device over the key slots a forward reads from each row's small block part, are bit for bit the masks a host builds
query by query (the reference below, from the cache's convention: slot s of a row holds its position s, row b's
block written from its context length on, pad tokens after its real ones): a batch with different context lengths,
pad tokens, a pad row, a tree, a chain and an extra branch, under full attention and both kinds of sliding window,
at fixed shapes and at own shapes. Sliding-window families decode at fixed shapes as HF's generate does."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.draft import Branch, Draft
from specbench.decode.engine import generate_batch
from specbench.decode.inputs import Blocks, device_inputs, row_blocks, stage_inputs
from specbench.decode.layout import FULL_ONLY, SLIDING, AttentionLayout
from specbench.decode.runner import ModelRunner, Shape
from specbench.decode.sampling import Sampling
from tests.conftest import tiny_llama
from tests.drafters import RandomTreeDrafter
from tests.test_families import PROMPTS, TOKENS, VOCAB, hf_greedy, tiny

LAYOUTS = {"full": FULL_ONLY, "one window": AttentionLayout({"all": 3}),
           "per kind": AttentionLayout({SLIDING: 2}, per_kind=True)}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="no CUDA device here"))]
WIDTH = 10  # the longest context of a row


def step_blocks(chain: bool = False) -> tuple[Blocks, list[int]]:
    """Three rows of one step: a tree (the longest context), a chain after two pending tokens, and a one-node draft
    with an extra branch (short contexts); chain: every row a chain (the causal case)."""
    tree = Draft([1, 2, 3, 4, 6], [-1, -1, 0, 0, 2])
    extra = Draft([5], [-1], extra=Branch([4, 5], [1, 2], torch.ones(2, 2, dtype=torch.bool).tril()))
    cache_lens = [WIDTH, 7, 3]
    pending = [[5], [7, 8], [9]]
    drafts = [Draft.chain([1, 2, 3, 4]), Draft.chain([2, 3]), Draft()] if chain else [tree, Draft.chain([2, 3]), extra]
    return row_blocks(pending, drafts, cache_lens), cache_lens


def host_masks(blocks: Blocks, cache_lens: list[int], layout: AttentionLayout, dtype: torch.dtype,
               shape: Shape) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
    """The reference: what each query sees, set on the host over every key slot, query by query, and the position
    each slot holds; then the layout's additive masks. Row b's block is left-padded to the shape's tokens; its real
    tokens go at slots cache_lens[b], ... and its pad tokens after them, each pad at the slot of its own position
    seeing only itself (in a chain step of its own shape: every slot up to it; a captured shape's chain step takes a
    tree step's masks); a pad row is all pads from slot 0."""
    rows, size, slots = shape.rows, shape.tokens, shape.key_slots
    chain = blocks.allowed is None and not shape.captured
    seen = torch.zeros(rows, size, slots, dtype=torch.bool)
    positions = torch.zeros(rows, size, dtype=torch.long)
    keys = torch.arange(slots).repeat(rows, 1)
    for row in range(rows):
        real = row < len(blocks.lengths)
        n = blocks.lengths[row] if real else 0
        pad, length = size - n, cache_lens[row] if real else 0
        for query in range(size):
            slot = length + (query - pad) % size
            if query < pad:
                positions[row, query] = slot
                if chain:
                    seen[row, query, : slot + 1] = True
                else:
                    seen[row, query, slot] = True
                continue
            positions[row, query] = int(blocks.positions[row, query - size])
            keys[row, slot] = positions[row, query]
            seen[row, query, :length] = True
            allowed = (torch.ones(n, n, dtype=torch.bool).tril() if blocks.allowed is None
                       else torch.from_numpy(blocks.allowed[row, -n:, -n:]))
            seen[row, query, length : length + n] = allowed[query - pad]
    return layout.masks(seen, positions, keys, dtype), positions


def same_bits(a: torch.Tensor | dict[str, torch.Tensor], b: torch.Tensor | dict[str, torch.Tensor]) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            same_bits(a[k], b[k]) for k in a)
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def assert_host_built(blocks: Blocks, cache_lens: list[int], layout: str, dtype: torch.dtype, device: str,
                      shape: Shape) -> None:
    staged = stage_inputs(blocks, cache_lens, shape, torch.device(device))
    inputs = device_inputs(staged.raw, shape, staged.tree, dtype, LAYOUTS[layout])
    expected, positions = host_masks(blocks, cache_lens, LAYOUTS[layout], dtype, shape)
    masks = inputs["attention_mask"]
    assert all(m.device.type == device for m in (masks.values() if isinstance(masks, dict) else [masks]))
    assert same_bits(masks, expected)
    assert torch.equal(inputs["position_ids"].cpu(), positions)
    assert staged.pads == [shape.tokens - n for n in blocks.lengths]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [Shape(4, 8, 40, True), Shape(3, 6, WIDTH + 6, False)],
                         ids=["pads and a pad row", "the block at the end"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
def test_mask_built_on_the_device_equals_the_host_built_one(device, layout, shape, dtype, chain):
    assert_host_built(*step_blocks(chain), layout, dtype, device, shape)


@pytest.mark.parametrize("fixed_shapes", [False, True])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_mask_of_the_shape_a_runner_fits_equals_the_host_built_one(fixed_shapes, layout):
    """The shape each policy gives the step (own: its rows and tokens over the slots in use rounded up; fixed:
    bucketed over the whole capacity)."""
    blocks, cache_lens = step_blocks()
    runner = ModelRunner(tiny_llama(64, seed=3, layers=1, hidden=16), fixed_shapes=fixed_shapes)
    shape = runner.fit(len(blocks.lengths), max(blocks.lengths), max(cache_lens))
    assert (shape.rows, shape.tokens) == ((4, 8) if fixed_shapes else (3, 6))
    assert_host_built(blocks, cache_lens, layout, torch.float32, "cpu", shape)


@pytest.mark.parametrize("name", ["mistral", "gemma3_text"])
def test_sliding_window_families_decode_at_fixed_shapes_as_hf_generate(name):
    target = tiny(name, seed=0)
    references = [hf_greedy(target, p) for p in PROMPTS]
    rows = [RandomTreeDrafter(VOCAB, seed=i, reference=r) for i, r in enumerate(references)]
    together = generate_batch(target, PROMPTS, rows, Sampling(), TOKENS, set(),
                              runner=ModelRunner(target, fixed_shapes=True))
    assert [g.token_ids for g in together] == references
    assert max(a for g in together for a in g.accept_lengths) >= 3  # trees accepted deep


def plain_block(pending: list[int], draft: Draft, cache_len: int) -> tuple[list[int], list[list[bool]]]:
    """A row's positions and block mask written plainly, token by token: pending tokens causal at cache_len on; a
    tree node at the root's position plus its depth, seeing the pending tokens, its ancestors and itself; an extra
    branch token at the root's position plus its offset, seeing the pending tokens and what its mask allows."""
    n_pending, nodes = len(pending), len(draft)
    extra = draft.extra.tokens if draft.extra else []
    total, root = n_pending + nodes + len(extra), cache_len + n_pending - 1
    positions = list(range(cache_len, cache_len + n_pending)) + [root + d for d in draft.depths()]
    positions += [root + o for o in (draft.extra.offsets if draft.extra else [])]
    allowed = [[j < n_pending and j <= i for j in range(total)] for i in range(total)]
    for i in range(nodes):
        node = i
        while node >= 0:
            allowed[n_pending + i][n_pending + node] = True
            node = draft.parents[node]
    for i in range(len(extra)):
        for j in range(len(extra)):
            allowed[n_pending + nodes + i][n_pending + nodes + j] = bool(draft.extra.allowed[i, j])
    return positions, allowed


def test_the_blocks_of_a_batch_are_each_rows_own():
    """row_blocks makes every row's positions and mask in one pass over the batch (trees of other sizes, chains,
    extra branches, different pending counts side by side): each row's block is the one written plainly; a batch of
    chains only has no masks (causal)."""
    generator = torch.Generator().manual_seed(4)
    for _ in range(30):
        pendings, drafts, cache_lens = [], [], []
        for _ in range(int(torch.randint(1, 6, (1,), generator=generator))):
            size = int(torch.randint(0, 12, (1,), generator=generator))
            parents = [int(torch.randint(-1, i, (1,), generator=generator)) for i in range(size)]
            extra = None
            if torch.rand(1, generator=generator) < 0.3:
                m = int(torch.randint(1, 4, (1,), generator=generator))
                extra = Branch([9] * m, torch.randint(1, 4, (m,), generator=generator).tolist(),
                               torch.rand(m, m, generator=generator) < 0.5)
            drafts.append(Draft(list(range(size)), parents, extra=extra))
            pendings.append([7] * int(torch.randint(1, 4, (1,), generator=generator)))
            cache_lens.append(int(torch.randint(0, 50, (1,), generator=generator)))
        blocks = row_blocks(pendings, drafts, cache_lens)
        chains = all(draft.is_chain() and not draft.extra for draft in drafts)
        assert (blocks.allowed is None) == chains
        for b, (pending, draft, cache_len) in enumerate(zip(pendings, drafts, cache_lens)):
            positions, allowed = plain_block(pending, draft, cache_len)
            n = len(positions)
            assert blocks.ids[b, -n:].tolist() == pending + draft.tokens + (draft.extra.tokens if draft.extra else [])
            assert blocks.lengths[b] == n and blocks.positions[b, -n:].tolist() == positions
            assert chains or blocks.allowed[b, -n:, -n:].tolist() == allowed  # a chain beside trees: causal
            assert chains or not blocks.allowed[b, -n:, :-n].any()  # nothing sees the padding
