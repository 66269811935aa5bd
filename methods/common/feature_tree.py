"""Tree drafting with a head that autoregresses on the target's features (EAGLE-1/2/3).

The head reads (token, feature) pairs and predicts the next feature; a draft distribution comes from that feature.
Known context positions use the target's own features, which the engine hands over after every verification;
deeper draft steps feed the head's own predictions back. The head's KV cache keeps the known context, and tree
levels are appended under a mask (each node sees the context and its ancestors), then dropped after the proposal.

Every row of a batch drafts in one call (propose_batch): one head forward brings every row's cache up to date, one
per tree level expands every row's frontier, the expansion runs in tensors on the head's device (tree_search), and
the finished trees come back to the host in one copy. The head's cache holds every row (head_cache). A row drafts
exactly the tree it drafts alone (ties are broken by index, padding is masked out), but for auto sizing, which
sizes trees from the costs of the batch's rows verified together.

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
from typing import Any, Mapping, Protocol

import numpy as np
import torch

from specbench.decode.cost_model import SIZES, CostCurve
from specbench.decode.costs import CONTEXT, measure_forward_curve
from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import alike, propose_together
from specbench.decode.inputs import to_device
from specbench.decode.runner import ModelRunner, held_pairs
from specbench.decode.runtime import fastest_seconds
from specbench.method import BuildContext
from specbench.methods.common.head_cache import HeadCache, HeadRows
from specbench.methods.common.options import AUTO_MAX_TOKENS
from specbench.methods.common.tree_search import Search, dynamic, finish, static, synthetic_log_rates


class FeatureHead(Protocol):
    shift: int  # at position t the head reads token t + shift (EAGLE: 1)
    hidden_layers: tuple[int, ...]  # the target's hidden states it reads (transformers' output_hidden_states index)
    feature_size: int  # width of the target features it reads (len(hidden_layers) x the target's hidden size)
    target_ids: list[int]  # draft index -> target token id
    dtype: torch.dtype
    device: torch.device

    head: torch.nn.Module  # the module that runs (its parameters tell the device)

    def run(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
            cache: Any, **cache_kwargs: torch.Tensor | int) -> torch.Tensor:
        """tokens [B, n], features [B, n, feature_size or the head's own width], positions [B, n], mask
        [B, 1, n, key slots] additive, cache_kwargs the cache's write slots and key span (kv.SlotCache) ->
        predicted features [B, n, *]."""

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


class RowFeatures:
    """Every batch row's target features at its cached positions [rows, slots, F] and its tree root, the head's
    prediction after the last position in the head's cache [rows, W]: row b is the batch's row b (DecodeContext.row),
    shared by a head's drafters (one write and one gather a step for the whole batch) and moved with the batch's
    rows (a row store of Drafter.row_caches). Both grow by doubling; slots past a row's known positions hold stale
    values that no query reads."""

    def __init__(self) -> None:
        self.features: torch.Tensor | None = None
        self.roots: torch.Tensor | None = None

    def write(self, rows: list[int], starts: list[int], new: list[torch.Tensor], dtype: torch.dtype) -> None:
        """new[i] [n_i, F] at row rows[i]'s positions starts[i], starts[i] + 1, ...: one copy for every row."""
        values = torch.cat(new) if len(new) > 1 else new[0]
        values = values if values.dtype == dtype else values.to(dtype)
        counts = [t.shape[0] for t in new]
        self.features = grown(self.features, (max(rows) + 1, max(map(sum, zip(starts, counts)))), values)
        if len(new) == 1:
            self.features[rows[0], starts[0] : starts[0] + counts[0]] = values
            return
        offsets = np.array(starts) - (np.cumsum(counts) - counts)  # a row's slot minus its values' first index
        index = to_device(np.stack([np.repeat(rows, counts), np.arange(len(values)) + np.repeat(offsets, counts)]),
                          values.device)
        self.features[index[0], index[1]] = values

    def read(self, rows: torch.Tensor, start: torch.Tensor, n: int) -> torch.Tensor:
        """Each row's features [R, n, F] at positions start[r], ..., start[r] + n - 1 (past the buffer: its last
        slot's, a pad's), rows and start [R] on the device."""
        slots = (start[:, None] + torch.arange(n, device=start.device)).clamp(max=self.features.shape[1] - 1)
        return self.features[rows[:, None], slots]

    def keep_roots(self, rows: torch.Tensor, count: int, roots: torch.Tensor) -> None:
        """roots [R, W] as rows' (count: the batch rows the store must hold, known on the host)."""
        self.roots = grown(self.roots, (count,), roots)
        self.roots[rows] = roots

    def copy_rows(self, holes: list[int], movers: list[int]) -> None:
        """Rows `movers` into rows `holes` (specbench.decode.runner.keep_rows), those the store holds."""
        for store in (s for s in (self.features, self.roots) if s is not None):
            pairs = held_pairs(holes, movers, len(store))
            if pairs:
                into, out_of = zip(*pairs)
                store[list(into)] = store[list(out_of)]


def grown(store: torch.Tensor | None, need: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """`store` with room for `need` in its leading dimensions (the last is like's), each doubled where it must
    grow, what it holds kept."""
    have = store.shape[:-1] if store is not None else (0,) * len(need)
    if all(h >= n for h, n in zip(have, need)):
        return store
    new = like.new_zeros(*(max(n, 2 * h) if n > h else h for h, n in zip(have, need)), like.shape[-1])
    if store is not None:
        new[tuple(slice(n) for n in store.shape)] = store
    return new


# A row's last search: roots, (node indices, outputs) per head run, its row, every row's kept nodes (finish), its size
LastSearch = tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], int, np.ndarray, int]


class FeatureTreeDrafter(Drafter):
    def __init__(self, head: FeatureHead, tree: TreeSpec, target: ModelRunner | None = None) -> None:
        """target: the target's runner; the head's cache and forwards go beside it (its shapes, its graphs)."""
        self.head = head
        self.hidden_layers = head.hidden_layers
        self.tree = tree
        self.target_ids = torch.tensor(head.target_ids, device=head.device)
        self.cache = HeadCache.of(head, target, tree_slots(tree))
        self.rows = RowFeatures()  # shared by the forks, as the cache is
        self.log_rates: dict[tuple, torch.Tensor] = {}  # synthetic_log_rates' tensors, made once a run (forks share)
        self.row_caches = (self.cache.runner, self.rows)
        self._reset()

    def _reset(self) -> None:
        self.known = 0  # target positions whose features this row's drafter was told (in self.rows)
        self.filled = 0  # context positions in the head's cache (built from true target features)
        self.last_search: LastSearch | None = None  # tree_features

    @property
    def tree_features(self) -> dict[int, torch.Tensor]:
        """The head's predicted feature under the root (ROOT) and under each expanded node of the last draft (read
        back from the device when asked: only tests and inspection ask)."""
        if self.last_search is None:
            return {}
        root, expanded, row, kept, size = self.last_search
        new_index = {node: i for i, node in enumerate(kept[row, :size].tolist())}
        return {ROOT: root[row], **{new_index[node]: out[row, column] for index, out in expanded
                                    for column, node in enumerate(index[row].tolist()) if node in new_index}}

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    def fork(self) -> "FeatureTreeDrafter":
        twin = copy.copy(self)
        twin._reset()
        return twin

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        keep_features([self], [ctx], [step])

    @classmethod
    def accepted_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext], steps: list[StepResult]) -> None:
        """Every row's new target features in one write (rows of one head: their drafters share its store); row by
        row where a subclass has an accepted of its own."""
        if not alike(drafters, FeatureTreeDrafter, "accepted", ("rows",)):
            return super().accepted_batch(drafters, ctxs, steps)
        keep_features(drafters, ctxs, steps)

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return draft_rows([self], [ctx])[0]

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(FeatureTreeDrafter, drafters, ctxs, draft_rows, ("head", "tree", "cache"))

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

    def _stop(self, mass: torch.Tensor, rows: int = 1) -> torch.Tensor:
        """Auto sizing stops a tree early: a level can add at most the frontier's acceptance mass in expected
        tokens, each worth what plain decoding spends on a token (a forward of the `rows` drafted together, shared
        by them); no more levels when that is less than a row's share of what the level costs to draft."""
        return mass * self.tree.costs.at(rows) < self.tree.level_seconds


@torch.inference_mode()
def keep_features(drafters: list[FeatureTreeDrafter], ctxs: list[DecodeContext], steps: list[StepResult]) -> None:
    """The target features of the positions each row's step added to its cache, into the rows' store in one write."""
    drafters[0].rows.write([ctx.row for ctx in ctxs], [d.known for d in drafters], [s.hidden for s in steps],
                           drafters[0].head.dtype)
    for d, step in zip(drafters, steps):
        d.known += step.hidden.shape[0]


def draft_rows(drafters: list[FeatureTreeDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's tree in one pass (the same head and tree for all): the first step of a row, the prefill, has no
    features yet and drafts nothing."""
    ready = [b for b, d in enumerate(drafters) if d.known]
    if not ready:
        return [Draft() for _ in drafters]
    first = drafters[ready[0]]
    head, tree = first.head, first.tree
    members, contexts = [drafters[b] for b in ready], [ctxs[b] for b in ready]
    cache_rows = first.cache.runner.cache_rows([ctx.row for ctx in contexts])
    root, root_tokens, base = fill(members, contexts, cache_rows)
    rows = HeadRows(first.cache, [d.filled for d in members], base, cache_rows)
    search = Search(head, rows, base, root_tokens, first.target_ids,
                    partial(first._stop, rows=len(members)) if tree.costs is not None else None,
                    synthetic_log_rates(first.log_rates, contexts, tree.depth, root.device))
    try:
        if tree.static_paths is not None:
            nodes = static(search, root, tree.static_paths)
        else:
            nodes = dynamic(search, root, tree.top_k, tree.depth)
    finally:
        rows.drop_levels()
    best_size = partial(first._best_size, rows=len(members)) if tree.costs is not None else None
    trees, kept = finish(nodes, tree.static_paths is None, tree.total_tokens, best_size)
    for row, (d, draft) in enumerate(zip(members, trees)):
        d.last_search = (root, nodes.expanded, row, kept, len(draft))
    drafted = dict(zip(ready, trees))
    return [drafted[b] if b in drafted else Draft() for b in range(len(drafters))]


def fill(drafters: list[FeatureTreeDrafter], ctxs: list[DecodeContext], cache_rows: torch.Tensor | None
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One head forward over every row's context positions not yet in its cache (tokens [R, n] and their true
    features [R, n, F], right-padded to the longest), its host inputs sent in one copy. Returns each row's predicted
    next feature, the root of its tree [R, W], its root token [R] and where its tree starts (its context length,
    [R]), on the head's device."""
    head, store = drafters[0].head, drafters[0].rows
    shift = head.shift
    spans = [(d.filled, d.known) for d in drafters]
    n = max(known - filled for filled, known in spans)
    host = np.array([ctx.token_ids[filled + shift : known + shift] + [0] * (n - known + filled)  # right-padded
                     + [filled, known, ctx.token_ids[-1], ctx.row] for ctx, (filled, known) in zip(ctxs, spans)],
                    dtype=np.int64)
    staged = to_device(host, head.device)  # tokens, start, context length, root token, batch row
    start, length, root_tokens, rows = staged[:, n:].unbind(1)
    if n > 0:
        out = drafters[0].cache.fill(staged[:, :n], store.read(rows, start, n), start,
                                     max(filled for filled, _ in spans), cache_rows)
        last = (length - start - 1).clamp(min=0)
        root = out.gather(1, last[:, None, None].expand(-1, 1, out.shape[-1]))[:, 0]
        if not all(known > filled for filled, known in spans):  # a row with nothing new keeps its root
            root = torch.where((length > start)[:, None], root, store.roots[rows])
        store.keep_roots(rows, max(ctx.row for ctx in ctxs) + 1, root)
    else:
        root = store.roots[rows]
    for d, (_, known) in zip(drafters, spans):
        d.filled = known
    return root, root_tokens, length


def size_automatically(drafter: FeatureTreeDrafter, ctx: BuildContext, key: str) -> None:
    """total_tokens=auto: each tree sized from the run's fixed costs (a drafter built without them, through the API:
    the curve measured now), the target's verification curve and one tree level's time, both on the runtime the run
    decodes on (the level with the drafter's own head and cache; stored under `key` with the machine's costs)."""
    runner, level = ctx.target.runner, partial(measure_level_seconds, drafter.head, drafter.tree.top_k, drafter.cache)
    drafter.tree.costs = (ctx.costs.verify if ctx.costs is not None
                          else measure_forward_curve(runner.model, SIZES, tree=True, runner=runner))
    drafter.tree.level_seconds = ctx.costs.drafting_cost(key, level) if ctx.costs is not None else level()


@torch.inference_mode()
def measure_level_seconds(head: FeatureHead, top_k: int, cache: HeadCache, repeats: int = 20) -> float:
    """Fastest of a few runs of one dynamic-tree level on the head's cache, as a search runs it: the head over top_k
    nodes after a context filled in its first row (before any sequence: a drafter fills its own context when it
    begins one), then the draft logits, log-softmax and top-k of each. Measured once per run
    (specbench.decode.costs)."""
    device = head.device
    context, tokens = probe_context(head)
    out = cache.fill(tokens, context, torch.zeros(1, dtype=torch.long, device=device), 0, None)
    features = out[:, -1:].expand(1, top_k, -1).contiguous()
    level_tokens = tokens[:, :1].expand(1, top_k)
    positions = torch.full((1, top_k), CONTEXT, device=device)
    ancestors = torch.zeros(1, top_k, 0, dtype=torch.bool, device=device)
    rows = HeadRows(cache, [CONTEXT], torch.tensor([CONTEXT], device=device), None)

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
