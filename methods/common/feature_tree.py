"""Tree drafting with a head that autoregresses on the target's features (EAGLE-1/2/3).

The head reads (token, feature) pairs and predicts the next feature; a draft distribution comes from that feature.
Known context positions use the target's own features, which the engine hands over after every verification;
deeper draft steps feed the head's own predictions back. The head's KV cache keeps the known context, and tree
levels are appended under a mask (each node sees the context and its ancestors), then dropped after the proposal.

Every row of a batch drafts in one call (propose_batch): one head forward brings every row's cache up to date, one
per tree level expands every row's frontier, the expansion runs in tensors on the head's device (tree_search), and
the finished trees come back to the host in one copy. The head's cache is batched (head_rows; static_head on the
static runtime). A row drafts exactly the tree it drafts alone (ties are broken by index, padding is masked out),
but for auto sizing, which sizes trees from the costs of the batch's rows verified together.

Trees: EAGLE-2's dynamic tree (expand the top_k best frontier nodes by cumulative draft log-prob for `depth` levels,
keep the total_tokens best nodes; with the run's fixed costs, the size that maximises expected tokens per second)
or a static tree of paths (EAGLE-1). Candidates are deterministic top-k picks, verified by the engine's lossless
rule at any temperature.

A head plugs in through `FeatureHead`: how it runs, how its output becomes draft logits, which target token each
draft index stands for, and which of the target's hidden states it reads.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping, Protocol

import torch
from transformers import DynamicCache

from specbench.decode.cost_model import CostCurve
from specbench.decode.costs import CONTEXT, measure_cost_model
from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.kv import truncate_cache
from specbench.decode.runtime import fastest_seconds
from specbench.decode.static import StaticTarget
from specbench.method import BuildContext, Option
from specbench.methods.common.head_rows import HeadRows, join
from specbench.methods.common.static_head import StaticHead, StaticRows
from specbench.methods.common.tree_search import Search, additive_mask, dynamic, expand, finish, static

AUTO_MAX_TOKENS = 32  # total_tokens=auto chooses each tree's size up to this


class FeatureHead(Protocol):
    shift: int  # at position t the head reads token t + shift (EAGLE: 1)
    hidden_layers: tuple[int, ...]  # the target's hidden states it reads (transformers' output_hidden_states index)
    feature_size: int  # width of the target features it reads (len(hidden_layers) x the target's hidden size)
    target_ids: list[int]  # draft index -> target token id
    dtype: torch.dtype
    device: torch.device

    def new_cache(self) -> DynamicCache: ...

    def run(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
            mask: torch.Tensor | None, cache: DynamicCache) -> torch.Tensor:
        """tokens [B, n], features [B, n, feature_size or the head's own width], positions [B, n], mask
        [B, 1, n, cached + n] additive or None (see everything) -> predicted features [B, n, *]."""

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., *] -> logits over the draft vocabulary [..., V_draft]."""


@dataclass
class TreeSpec:
    top_k: int = 4
    depth: int = 5
    total_tokens: int = 12  # draft nodes kept (the root is the last emitted token, not counted)
    static_paths: list[tuple[int, ...]] | None = None  # set: EAGLE-1 static tree instead of the dynamic one
    # Set: choose the tree size per step (at most total_tokens) from the run's fixed costs: the target's
    # verification curve and the time of one drafting level, both measured when the run started.
    costs: CostCurve | None = None
    level_seconds: float = 0.0


def tree_options(depth: int) -> tuple[Option, ...]:
    """The dynamic tree's options (eagle, eagle3), with the method's default depth."""
    return (
        Option("top_k", 4, "frontier nodes expanded per level, and children drafted per node", int, low=1),
        Option("depth", depth, "draft levels", int, low=1),
        Option("total_tokens", "auto", f"draft nodes verified per step (auto: sized per step, at most "
               f"{AUTO_MAX_TOKENS}, from this machine's measured verification cost)", int, ("auto",), low=1),
    )


def dynamic_tree(options: Mapping[str, Any]) -> TreeSpec:
    """The TreeSpec of tree_options' values (total_tokens=auto: the largest size, chosen per step by cost)."""
    sizing = options["total_tokens"]
    return TreeSpec(top_k=options["top_k"], depth=options["depth"],
                    total_tokens=AUTO_MAX_TOKENS if sizing == "auto" else sizing)


def tree_slots(tree: TreeSpec) -> int:
    """The most nodes one search runs the head over (a dynamic tree: top_k at every level but the last)."""
    if tree.static_paths is not None:
        return len({p[:-1] for p in tree.static_paths if len(p) > 1})
    return (tree.depth - 1) * tree.top_k


class FeatureTreeDrafter(Drafter):
    def __init__(self, head: FeatureHead, tree: TreeSpec, static_target: StaticTarget | None = None) -> None:
        """static_target: the target's static runtime, when it runs on one; the head then runs on a static cache
        of its own beside it (static_head), captured on CUDA."""
        self.head = head
        self.hidden_layers = head.hidden_layers
        self.tree = tree
        self.target_ids = torch.tensor(head.target_ids, device=head.device)
        self.static = StaticHead.of(head, static_target, tree_slots(tree)) if static_target is not None else None
        self._reset()

    def _reset(self) -> None:
        self.rows: HeadRows | None = None  # the head cache this row shares with the rows last drafted beside it
        self.features: torch.Tensor | None = None  # target features of every cached target position
        self.filled = 0  # context positions in the head's cache (built from true target features)
        self.root_feature: torch.Tensor | None = None  # the head's prediction after the last of them
        self.tree_features: dict[int, torch.Tensor] = {}

    def begin(self, ctx: DecodeContext) -> None:
        if self.rows is not None:  # its row in the shared cache is no longer anyone's
            self.rows.members = [None if m is self else m for m in self.rows.members]
        self._reset()

    def fork(self) -> "FeatureTreeDrafter":
        twin = copy.copy(self)
        twin._reset()
        return twin

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        new = step.hidden.to(self.head.dtype)
        self.features = new if self.features is None else torch.cat([self.features, new])

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return draft_rows([self], [ctx])[0]

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(FeatureTreeDrafter, drafters, ctxs, draft_rows, ("head", "tree", "static"))

    def _best_size(self, scores: list[float], rows: int = 1) -> int:
        """Nodes to keep (best first) for the most tokens per second. A node is on the accepted path with about
        the probability exp(its cumulative draft log-prob) (EAGLE-2: the draft is well calibrated), so keeping n
        nodes yields about 1 + sum of the first n of those per step, at the cost of drafting (depth levels) plus
        verifying n + 1 tokens in each of the `rows` drafted together: one forward of rows x (n + 1) tokens,
        costed as one row's forward of that many (the weights are read once either way; past the measured sizes
        the curve is extended linearly). Costs are the run's fixed ones: no clock is read here."""
        draft_seconds = self.tree.level_seconds * self.tree.depth
        best, best_rate, expected = 1, 0.0, 1.0
        for n, score in enumerate(scores, 1):
            expected += math.exp(score)
            rate = expected / (draft_seconds + self.tree.costs.at(rows * (n + 1)))
            if rate > best_rate:
                best, best_rate = n, rate
        return best

    def _size(self, scores: list[float], rows: int = 1) -> int:
        """Nodes a dynamic tree keeps, given every node's score best first, `rows` rows drafted together."""
        scores = scores[: self.tree.total_tokens]
        return self._best_size(scores, rows) if self.tree.costs is not None else len(scores)

    def _stop(self, mass: torch.Tensor, rows: int = 1) -> torch.Tensor:
        """Auto sizing stops a tree early: a level can add at most the frontier's acceptance mass in expected
        tokens, each worth what plain decoding spends on a token (a forward of the `rows` drafted together, shared
        by them); no more levels when that is less than a row's share of what the level costs to draft."""
        return mass * self.tree.costs.at(rows) < self.tree.level_seconds


def draft_rows(drafters: list[FeatureTreeDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's tree in one pass (the same head and tree for all): the first step of a row, the prefill, has no
    features yet and drafts nothing."""
    drafts = [Draft() for _ in drafters]
    ready = [b for b, d in enumerate(drafters) if d.features is not None]
    if not ready:
        return drafts
    first = drafters[ready[0]]
    head, tree = first.head, first.tree
    members, contexts = [drafters[b] for b in ready], [ctxs[b] for b in ready]
    if first.static is not None:
        for d, fresh in zip(members, first.static.arrange([id(d) for d in members])):
            if fresh:  # no row in the static cache yet (or no longer): its whole context is filled again
                d.filled = 0
        root = fill(members, contexts, lambda tokens, features, spans: first.static.fill(
            tokens, features, [filled for filled, _ in spans]))
    else:
        rows = join(members, head.new_cache, head.device)
        rows.squeeze([d.filled for d in members], head.new_cache)
        root = fill(members, contexts, lambda tokens, features, spans: fill_growing(rows, head, tokens, features,
                                                                                    spans))
    device = head.device
    base = torch.tensor([d.filled for d in members], device=device)  # where each row's tree starts
    if first.static is not None:
        rows = StaticRows(first.static, [d.filled for d in members], base)
    search = Search(head, rows, base, torch.tensor([c.token_ids[-1] for c in contexts], device=device),
                    first.target_ids,
                    partial(first._stop, rows=len(members)) if tree.costs is not None else None)
    try:
        if tree.static_paths is not None:
            nodes = static(search, root, tree.static_paths)
        else:
            nodes = dynamic(search, root, tree.top_k, tree.depth)
    finally:
        rows.drop_levels()
    for b, d, (draft, features) in zip(ready, members, finish(nodes, root, tree.static_paths is None,
                                                                 partial(first._size, rows=len(members)))):
        drafts[b] = draft
        d.tree_features = features  # the head's predicted feature under the root and each expanded node
    return drafts


Spans = list[tuple[int, int]]  # per row: (context positions in the head's cache, positions with known features)


def fill(drafters: list[FeatureTreeDrafter], ctxs: list[DecodeContext],
         run: Callable[[torch.Tensor, torch.Tensor, Spans], torch.Tensor]) -> torch.Tensor:
    """One head forward (run: on the growing or the static cache) over every row's context positions not yet in
    its cache (tokens [R, n] and their true features [R, n, F], right-padded to the longest); returns each row's
    predicted next feature, the root of its tree [R, W]."""
    head = drafters[0].head
    device, shift = head.device, head.shift
    spans = [(d.filled, d.features.shape[0]) for d in drafters]
    n = max(known - filled for filled, known in spans)
    if n > 0:
        tokens = torch.tensor([ctx.token_ids[filled + shift : known + shift] + [0] * (n - known + filled)
                               for ctx, (filled, known) in zip(ctxs, spans)], device=device)
        features = torch.stack([torch.nn.functional.pad(d.features[filled:known], (0, 0, 0, n - known + filled))
                                for d, (filled, known) in zip(drafters, spans)])
        out = run(tokens, features, spans)
    for b, (d, (filled, known)) in enumerate(zip(drafters, spans)):
        if known > filled:
            d.root_feature = out[b, known - filled - 1]
        d.filled = known
    return torch.stack([d.root_feature for d in drafters])


def fill_growing(rows: HeadRows, head: FeatureHead, tokens: torch.Tensor, features: torch.Tensor, spans: Spans
                 ) -> torch.Tensor:
    """fill's forward on the growing cache: the new positions go after every row's slots, padding never valid."""
    device = head.device
    rows_n, n = tokens.shape
    positions = torch.tensor([[filled + j for j in range(n)] for filled, _ in spans], device=device)
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril().expand(rows_n, n, n)
    allowed = torch.cat([rows.valid[:, None, :].expand(rows_n, n, -1), causal], dim=2)
    out = head.run(tokens, features, positions, additive_mask(allowed, head.dtype), rows.cache)
    rows.append(torch.arange(n, device=device)[None] < torch.tensor([k - f for f, k in spans], device=device)[:, None])
    return out


def size_automatically(drafter: FeatureTreeDrafter, ctx: BuildContext, key: str) -> None:
    """total_tokens=auto: the drafter sizes each tree from the run's fixed costs, the target's verification curve
    and one tree level's time, both measured on the runtime the run decodes on (the level with the drafter's own
    head and cache; stored under `key` with the machine's costs)."""
    costs = ctx.costs or measure_cost_model(ctx.target.model, ctx.target.name, static=ctx.target.static)
    drafter.tree.costs = costs.verify
    drafter.tree.level_seconds = costs.drafting_cost(
        key, lambda: measure_level_seconds(drafter.head, drafter.tree.top_k, static=drafter.static))


@torch.inference_mode()
def measure_level_seconds(head: FeatureHead, top_k: int, repeats: int = 20, static: StaticHead | None = None
                          ) -> float:
    """Fastest of a few runs of one dynamic-tree level: the head over top_k nodes after a cached context, then the
    draft logits, log-softmax and top-k of each. Measured once per run (see specbench.decode.costs). static: the
    head's static cache, where the run drafts on it (the level padded and, on CUDA, replayed from its graph)."""
    if static is not None:
        return static_level_seconds(head, top_k, repeats, static)
    device = head.device
    context, tokens = probe_context(head)
    cache = head.new_cache()
    head.run(tokens, context, torch.arange(CONTEXT, device=device)[None], None, cache)
    probe = head.run(tokens[:, :1], context[:, :1], torch.tensor([[CONTEXT]], device=device), None, cache)
    truncate_cache(cache, CONTEXT)  # the probe gives the head's own output width
    level_tokens = tokens[:, :1].expand(1, top_k)
    features = probe.expand(1, top_k, -1).contiguous()
    positions = torch.full((1, top_k), CONTEXT, device=device)
    mask = additive_mask(torch.ones(1, top_k, CONTEXT + top_k, dtype=torch.bool, device=device), head.dtype)

    def level() -> None:
        expand(head, head.run(level_tokens, features, positions, mask, cache), top_k)
        truncate_cache(cache, CONTEXT)

    return fastest_seconds(level, head.device, repeats)


def static_level_seconds(head: FeatureHead, top_k: int, repeats: int, static: StaticHead) -> float:
    """measure_level_seconds on the head's static cache: a context filled in one row (a row no drafter holds; the
    first to draft there fills its own context again), then the level as a search runs it."""
    device = head.device
    context, tokens = probe_context(head)
    static.arrange([-1])
    out = static.fill(tokens, context, [0])
    features = out[:, -1:].expand(1, top_k, -1).contiguous()
    level_tokens = tokens[:, :1].expand(1, top_k)
    positions = torch.full((1, top_k), CONTEXT, device=device)
    ancestors = torch.zeros(1, top_k, 0, dtype=torch.bool, device=device)
    rows = StaticRows(static, [CONTEXT], torch.tensor([CONTEXT], device=device))

    def level() -> None:
        rows.level(head, level_tokens, features, positions, ancestors, top_k)
        rows.drop_levels()

    return fastest_seconds(level, device, repeats)


def probe_context(head: FeatureHead) -> tuple[torch.Tensor, torch.Tensor]:
    """A level measurement's context on the head's device: CONTEXT random target features [1, CONTEXT, F] and
    draft-vocabulary tokens [1, CONTEXT] (seeded: every measurement the same)."""
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(1, CONTEXT, head.feature_size, generator=gen).to(head.device, head.dtype)
    picks = torch.randint(0, len(head.target_ids), (1, CONTEXT), generator=gen)
    return context, torch.tensor(head.target_ids)[picks].to(head.device)
