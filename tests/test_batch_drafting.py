"""Batched drafting: a feature-tree drafter (eagle, eagle1, eagle3) drafts every row of a batch in one call
(Drafter.propose_batch over a batched head cache, the tree expanded in tensors), and each row gets exactly the tree
it drafts alone, ties included."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.draft import DecodeContext, StepResult, parse_tree
from specbench.decode.engine import generate, generate_batch
from specbench.decode.sampling import Sampling
from specbench.methods.common.feature_tree import TreeSpec
from specbench.methods.common.tree_search import Nodes, Search, best_k, dynamic, finish
from specbench.methods.eagle import EAGLE1_TREE
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.drafters import fitted_eagle_head
from tests.test_distribution import VOCAB, prompt, target  # noqa: F401  (shared fixtures)


class Recording(EagleDrafter):
    """Keeps every verified tree and its accepted path, and how many rows were drafted in one call with it. It
    overrides accepted and propose_batch only, so its rows still draft in one batched call."""

    def begin(self, ctx):
        super().begin(ctx)
        self.seen, self.shared = [], 0

    def accepted(self, ctx, step):
        super().accepted(ctx, step)
        self.seen.append((step.draft.tokens, step.draft.parents, step.path))

    @classmethod
    def propose_batch(cls, drafters, ctxs):
        for drafter in drafters:
            drafter.shared = max(drafter.shared, len(drafters))  # the rows of the largest call that drafted it
        return super().propose_batch(drafters, ctxs)


@pytest.fixture(scope="module")
def head(target):  # noqa: F811
    """An EAGLE head fitted for a moment to the target's greedy continuations (40 Adam steps), so that its trees
    are accepted several tokens deep."""
    starts = torch.randint(0, VOCAB, (16, 4), generator=torch.Generator().manual_seed(3)).tolist()
    tokens = torch.tensor([s + generate(target, s, VanillaDrafter(), Sampling(), 12, set()).token_ids for s in starts])
    return fitted_eagle_head(target, tokens, steps=40, lr=0.03, seed=5)


def recording(target, head, static_tree: bool) -> Recording:
    spec = TreeSpec(top_k=3, depth=3, total_tokens=8, static_paths=parse_tree(EAGLE1_TREE) if static_tree else None)
    return Recording(head, target.get_output_embeddings().weight, None, spec)


@pytest.mark.parametrize("static_tree", [False, True], ids=["eagle", "eagle1"])
def test_rows_drafted_together_draft_what_they_draft_alone(target, prompt, head, static_tree):  # noqa: F811
    prompts = [prompt, prompt[:5], [2, 9] + prompt[4:]]
    alone = []
    for p in prompts:
        drafter = recording(target, head, static_tree)
        generate(target, p, drafter, Sampling(), 24, set())
        alone.append(drafter.seen)
    drafter = recording(target, head, static_tree)
    rows = [drafter] + [drafter.fork() for _ in prompts[1:]]
    generate_batch(target, prompts, rows, Sampling(), 24, set())
    assert max(d.shared for d in rows) == len(prompts)  # one head cache for every row: one call drafted them all
    for single, batched in zip(alone, [d.seen for d in rows]):
        assert batched == single
    deep = sum(len(path) >= 2 for d in rows for _, _, path in d.seen)
    assert deep >= 3, f"only {deep} steps accepted a draft token at depth 2 or more"


def test_ties_go_to_the_lower_index_whatever_the_batch():
    values = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0, 5.0, 5.0]])
    scores, index = best_k(values, 2)
    assert index.tolist() == [[1, 2], [0, 1]] and scores.tolist() == [[3.0, 3.0], [5.0, 5.0]]
    assert best_k(values, 4)[1].tolist() == [[1, 2, 4, 5], [0, 1, 2, 3]]
    alone = best_k(values[1:], 3)
    assert torch.equal(alone[1], best_k(values, 3)[1][1:]) and torch.equal(alone[0], best_k(values, 3)[0][1:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_best_k_is_a_stable_descending_sort_cut_to_k(dtype):
    """best_k's one topk over (value, lower index) keys picks and orders exactly what a stable descending sort of the
    whole row puts first: ties (rounded values, -inf, 0.0 against -0.0) in index order, negatives below positives."""
    gen = torch.Generator().manual_seed(0)
    for decimals, vocab in [(0, 7), (1, 64), (2, 1000), (6, 5000)]:
        values = (torch.randn(3, 4, vocab, generator=gen) * 3).round(decimals=decimals).to(dtype)
        values[0, 0, ::3] = -torch.inf
        values[1, 1, : vocab // 2] = -0.0
        values[1, 1, vocab // 2 :] = 0.0
        for k in (1, 3, 6):
            order = values.sort(dim=-1, descending=True, stable=True)
            scores, index = best_k(values, k)
            assert torch.equal(index, order.indices[..., :k]) and torch.equal(scores, order.values[..., :k])


def kept_alone(scores, depths, cap, total):
    """A dynamic tree's selection for one row, written plainly: the best nodes by score (ties: the earlier) no deeper
    than cap, at most total, then ordered by depth, then score (then the earlier)."""
    best = sorted((i for i in range(len(scores)) if depths[i] <= cap), key=lambda i: -scores[i])[:total]
    return sorted(best, key=lambda i: (depths[i], -scores[i], i))


def test_finish_selects_for_every_row_what_each_row_selects_alone():
    generator = torch.Generator().manual_seed(5)
    for _ in range(40):
        rows, k, levels = (int(x) for x in torch.randint(1, 5, (3,), generator=generator))
        parents, scores = [torch.full((rows, k), -1)], [-torch.randint(0, 4, (rows, k), generator=generator) / 2]
        for level in range(1, levels):  # k * k children under the previous level's nodes (scores tie often)
            count = k + (level - 1) * k * k
            under = torch.randint(count - (k if level == 1 else k * k), count, (rows, k * k), generator=generator)
            parents.append(under)
            drops = torch.randint(0, 3, (rows, k * k), generator=generator) / 2
            scores.append(torch.cat(scores, 1).gather(1, under) - drops)
        depths = [1] * k + [d for d in range(2, levels + 1) for _ in range(k * k)]
        stops = [torch.rand(rows, generator=generator) < 0.3 for _ in range(levels - 1)]
        tokens = [torch.randint(0, 99, p.shape, generator=generator) for p in parents]
        total = int(torch.randint(1, 30, (1,), generator=generator))
        trees, nodes = finish(Nodes(tokens, parents, scores, depths, [], stops), True, total)
        every = torch.cat(scores, 1).tolist()
        for r, draft in enumerate(trees):
            kept = nodes[r, : len(draft)].tolist()
            cap = next((level + 1 for level, stop in enumerate(stops) if stop[r]), levels)
            assert kept == kept_alone(every[r], depths, cap, total)
            assert draft.tokens == torch.cat(tokens, 1)[r, kept].tolist()  # parents renumbered (Draft checks order)
            assert [kept[p] if p >= 0 else -1 for p in draft.parents] == torch.cat(parents, 1)[r, kept].tolist()


class CountedLevels:
    """A head cache's stand-in for tree_search.dynamic: random top-k under each node, and a count of the levels
    drafted (each one head forward over the frontier)."""

    def __init__(self, vocab: int, width: int) -> None:
        self.vocab, self.width, self.levels = vocab, width, 0
        self.generator = torch.Generator().manual_seed(0)

    def top(self, rows: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.randn(rows, n, self.vocab, generator=self.generator)
        return best_k(torch.log_softmax(logits, dim=-1), k)

    def expand_root(self, root, k):
        return self.top(root.shape[0], 1, k)

    def level(self, head, tokens, features, positions, ancestors, k, then, state):
        self.levels += 1
        rows, n = tokens.shape
        out = torch.randn(rows, n, self.width, generator=self.generator)
        logp, index = self.top(rows, n, k)
        return out, logp, index, then(out, logp, index, state)


@pytest.mark.parametrize("stop_after", [0, 1, 3, None])
def test_no_level_past_every_rows_stop_is_drafted(stop_after):
    """Auto sizing's stop is read per level on every device (not only on the CPU): once every row's tree has
    stopped, no further level is drafted, so a GPU does not draft levels that finish() throws away."""
    rows, k, depth, vocab = 3, 4, 6, 50
    asked = []

    def stop(mass: torch.Tensor) -> torch.Tensor:
        asked.append(mass.shape)
        return torch.full((rows,), stop_after is not None and len(asked) > stop_after)

    cache = CountedLevels(vocab, 8)
    search = Search(type("Head", (), {"shift": True})(), cache, torch.full((rows,), 5), torch.zeros(rows, dtype=torch.long),
                    torch.arange(vocab), stop)
    nodes = dynamic(search, torch.zeros(rows, 8), k, depth)
    drafted = depth - 1 if stop_after is None else min(stop_after, depth - 1)
    assert cache.levels == drafted and len(nodes.expanded) == drafted
    assert nodes.depths == [1] * k + [d for d in range(2, drafted + 2) for _ in range(k * k)]


def test_rows_regrouped_in_any_order_keep_their_own_state(target, prompt, head):  # noqa: F811
    """Drafters drafted together in changing groups and orders (subsets of the batch's rows, named by their
    DecodeContext.row in one shared head cache) draft what each drafts alone."""
    prompts = [prompt, prompt[:6], [2, 9] + prompt[4:]]
    contexts = [DecodeContext(list(p), len(p), Sampling(), None, row=i) for i, p in enumerate(prompts)]

    proto = recording(target, head, static_tree=False)

    def started(p: list[int], ctx: DecodeContext) -> Recording:
        drafter = proto.fork()  # forks share the head: they draft together
        drafter.begin(ctx)
        with torch.no_grad():
            hidden = target(torch.tensor([p[:-1]]), output_hidden_states=True).hidden_states[-1][0]
        drafter.accepted(ctx, StepResult([], [], hidden))  # written at the context's batch row
        return drafter

    alone = [started(p, c).propose(c) for p, c in zip(prompts, contexts)]
    a, b, c = (started(p, ctx) for p, ctx in zip(prompts, contexts))
    for group in ([0, 1], [1, 2], [2, 0], [0, 1, 2], [2], [1, 0]):
        drafters = [(a, b, c)[i] for i in group]
        drafts = type(a).propose_batch(drafters, [contexts[i] for i in group])
        assert all(d.cache is a.cache for d in drafters)  # one head cache: each row keeps its own batch row in it
        assert [(d.tokens, d.parents) for d in drafts] == [(alone[i].tokens, alone[i].parents) for i in group]


def test_rows_that_stop_early_reorder_the_batch_and_the_rest_draft_on(target, head):  # noqa: F811
    """Stop ids end rows at different steps, so the engine moves rows around (and a row's head cache is taken out
    of a shared one that only it still uses): every row still emits what it emits alone."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        prompts = [torch.randint(0, VOCAB, (int(n),), generator=generator).tolist()
                   for n in torch.randint(3, 12, (4,), generator=generator)]
        stop = {int(torch.randint(0, VOCAB, (1,), generator=generator))}
        drafter = recording(target, head, static_tree=False)
        alone = [generate(target, p, drafter, Sampling(), 20, stop).token_ids for p in prompts]
        rows = [drafter] + [drafter.fork() for _ in prompts[1:]]
        assert [g.token_ids for g in generate_batch(target, prompts, rows, Sampling(), 20, stop)] == alone
