"""Tree drafting with a head that autoregresses on the target's features (EAGLE-1/2/3).

The head reads (token, feature) pairs and predicts the next feature; a draft distribution comes from that feature.
Known context positions use the target's own features, which the engine hands over after every verification;
deeper draft steps feed the head's own predictions back. The head's KV cache keeps the known context, and tree
levels are appended under a mask (each node sees the context and its ancestors), then dropped after the proposal.

Trees: EAGLE-2's dynamic tree (expand the top_k best frontier nodes by cumulative draft log-prob for `depth` levels,
keep the total_tokens best nodes; with the run's fixed costs, the size that maximises expected tokens per second)
or a static tree of paths (EAGLE-1). Candidates are deterministic top-k picks, verified by the engine's lossless
rule at any temperature.

A head plugs in through `FeatureHead`: how it runs, how its output becomes draft logits, which target token each
draft index stands for, and which of the target's hidden states it reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import torch
from transformers import DynamicCache

from specbench.decode.cost_model import CostCurve
from specbench.decode.costs import CONTEXT
from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.decode.kv import truncate_cache
from specbench.decode.runtime import fastest_seconds
from specbench.method import Option

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
        """tokens [n], features [n, feature_size or the head's own width], positions [n] -> predicted features."""

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [m, *] -> logits over the draft vocabulary [m, V_draft]."""


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


@dataclass
class _Node:
    token: int  # draft-vocabulary index
    parent: int  # node index or ROOT
    depth: int
    score: float  # cumulative draft log-prob
    ancestors: frozenset[int]  # node indices on its path, itself included


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


class FeatureTreeDrafter(Drafter):
    def __init__(self, head: FeatureHead, tree: TreeSpec) -> None:
        self.head = head
        self.hidden_layers = head.hidden_layers
        self.tree = tree
        self._reset()

    def _reset(self) -> None:
        self.cache = self.head.new_cache()
        self.features: torch.Tensor | None = None  # target features of every cached target position
        self.filled = 0  # head positions in self.cache built from true target features
        self.tree_features: dict[int, torch.Tensor] = {}

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        new = step.hidden.to(self.head.dtype)
        self.features = new if self.features is None else torch.cat([self.features, new])

    def _run(self, tokens: list[int], features: torch.Tensor, positions: list[int], mask: torch.Tensor | None) -> torch.Tensor:
        device = self.head.device
        return self.head.run(torch.tensor(tokens, device=device), features, torch.tensor(positions, device=device),
                             mask, self.cache)

    def _fill(self, ctx: DecodeContext) -> torch.Tensor:
        """Bring the head's cache up to date with the true features; returns the predicted next feature."""
        known = self.features.shape[0]
        shift = self.head.shift
        tokens = ctx.token_ids[self.filled + shift : known + shift]
        n, cached = len(tokens), self.filled
        mask = None
        if n > 1:
            allowed = torch.ones(n, cached + n, dtype=torch.bool).tril(cached)
            mask = additive_mask(allowed, self.head.dtype, self.head.device)
        out = self._run(tokens, self.features[cached:known], list(range(cached, known)), mask)
        self.filled = known
        return out[-1]

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        if self.features is None:
            return Draft()  # the first step is the prefill: no features yet
        root_feature = self._fill(ctx)
        nodes: list[_Node] = []
        expanded: list[int] = []  # node of each head cache entry after the filled context
        frontier_features = {ROOT: root_feature}
        target_ids = self.head.target_ids

        def expand(parents: list[int], k: int) -> tuple[torch.Tensor, torch.Tensor]:
            """Top-k (log-probs, draft indices) under each of `parents` (ROOT or expanded nodes)."""
            feats = torch.stack([frontier_features[p] for p in parents])
            return torch.log_softmax(self.head.draft_logits(feats).float(), dim=-1).topk(k, dim=-1)

        def step(group: list[int]) -> None:
            """Run the head on nodes `group`, storing their predicted features."""
            shift = self.head.shift
            root_token = ctx.token_ids[-1]
            tokens = []
            for i in group:
                node = nodes[i]
                if shift:
                    tokens.append(target_ids[node.token])
                else:
                    tokens.append(root_token if node.parent == ROOT else target_ids[nodes[node.parent].token])
            feats = torch.stack([frontier_features[nodes[i].parent] for i in group])
            depth = nodes[group[0]].depth
            allowed = torch.zeros(len(group), self.filled + len(expanded) + len(group), dtype=torch.bool)
            allowed[:, : self.filled] = True
            for row, i in enumerate(group):
                for col, j in enumerate(expanded):
                    allowed[row, self.filled + col] = j in nodes[i].ancestors
                allowed[row, self.filled + len(expanded) + row] = True
            mask = additive_mask(allowed, self.head.dtype, self.head.device)
            # Every node of a group sits at the same depth, hence the same position.
            out = self._run(tokens, feats, [self.filled + depth - 1] * len(group), mask)
            for row, i in enumerate(group):
                frontier_features[i] = out[row]
            expanded.extend(group)

        def add(parent: int, token: int, score: float) -> int:
            depth = 1 if parent == ROOT else nodes[parent].depth + 1
            ancestors = frozenset() if parent == ROOT else nodes[parent].ancestors
            nodes.append(_Node(token, parent, depth, score, ancestors | {len(nodes)}))
            return len(nodes) - 1

        try:
            if self.tree.static_paths is not None:
                self._static(expand, step, add, nodes)
                keep = list(range(len(nodes)))
            else:
                self._dynamic(expand, step, add, nodes)
                order = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))
                size = self.tree.total_tokens
                if self.tree.costs is not None:
                    size = self._best_size([nodes[i].score for i in order[:size]])
                keep = sorted(order[:size], key=lambda i: (nodes[i].depth, -nodes[i].score))
        finally:
            truncate_cache(self.cache, self.filled)
        new_index = {old: new for new, old in enumerate(keep)}
        # The head's predicted feature under the root and each expanded draft node (for tests and analysis).
        self.tree_features = {new_index.get(i, ROOT): f for i, f in frontier_features.items() if i in new_index or i == ROOT}
        return Draft(
            tokens=[target_ids[nodes[i].token] for i in keep],
            parents=[ROOT if nodes[i].parent == ROOT else new_index[nodes[i].parent] for i in keep],
        )

    def _best_size(self, scores: list[float]) -> int:
        """Nodes to keep (best first) for the most tokens per second. A node is on the accepted path with about
        the probability exp(its cumulative draft log-prob) (EAGLE-2: the draft is well calibrated), so keeping n
        nodes yields about 1 + sum of the first n of those per step, at the cost of drafting (depth levels) plus
        verifying n + 1 tokens. Costs are the run's fixed ones: no clock is read here."""
        draft_seconds = self.tree.level_seconds * self.tree.depth
        best, best_rate, expected = 1, 0.0, 1.0
        for n, score in enumerate(scores, 1):
            expected += math.exp(score)
            rate = expected / (draft_seconds + self.tree.costs.at(n + 1))
            if rate > best_rate:
                best, best_rate = n, rate
        return best

    def _dynamic(self, expand, step, add, nodes: list[_Node]) -> None:
        k = self.tree.top_k
        logp, index = expand([ROOT], k)
        frontier = [add(ROOT, int(t), float(s)) for s, t in zip(logp[0].tolist(), index[0].tolist())]
        for _ in range(self.tree.depth - 1):
            # Auto sizing also stops early: a level can add at most the frontier's acceptance mass in expected
            # tokens, worth one target forward each; skip it when that is less than what the level costs to draft.
            if self.tree.costs is not None:
                mass = sum(math.exp(nodes[i].score) for i in frontier)
                if mass * self.tree.costs.at(1) < self.tree.level_seconds:
                    break
            step(frontier)
            logp, index = expand(frontier, k)
            scores = (torch.tensor([nodes[i].score for i in frontier]).unsqueeze(1) + logp.cpu()).flatten()
            tokens = index.flatten().tolist()
            candidates = [add(frontier[j // k], tokens[j], score) for j, score in enumerate(scores.tolist())]
            best = scores.topk(min(k, len(candidates))).indices.tolist()
            frontier = [candidates[j] for j in best]

    def _static(self, expand, step, add, nodes: list[_Node]) -> None:
        paths = self.tree.static_paths
        width = max(p[-1] for p in paths) + 1
        by_path: dict[tuple[int, ...], int] = {}
        logp, index = expand([ROOT], width)
        for p in (p for p in paths if len(p) == 1):
            by_path[p] = add(ROOT, int(index[0, p[0]]), float(logp[0, p[0]]))
        for depth in range(2, max(len(p) for p in paths) + 1):
            level = [p for p in paths if len(p) == depth]
            parents = sorted({p[:-1] for p in level}, key=lambda p: by_path[p])
            step([by_path[p] for p in parents])
            logp, index = expand([by_path[p] for p in parents], width)
            row_of = {p: r for r, p in enumerate(parents)}
            for p in level:
                r, parent = row_of[p[:-1]], by_path[p[:-1]]
                by_path[p] = add(parent, int(index[r, p[-1]]), nodes[parent].score + float(logp[r, p[-1]]))


@torch.inference_mode()
def measure_level_seconds(head: FeatureHead, top_k: int, repeats: int = 20) -> float:
    """Fastest of a few runs of one dynamic-tree level: the head over top_k nodes after a cached context, then the
    draft logits, log-softmax and top-k of each. Measured once per run (see specbench.decode.costs)."""
    drafter = FeatureTreeDrafter(head, TreeSpec(top_k=top_k))
    gen = torch.Generator().manual_seed(0)
    vocab = len(head.target_ids)
    context = torch.randn(CONTEXT, head.feature_size, generator=gen).to(head.device, head.dtype)
    drafter._run([head.target_ids[i] for i in torch.randint(0, vocab, (CONTEXT,), generator=gen).tolist()],
                 context, list(range(CONTEXT)), None)
    probe = drafter._run([head.target_ids[0]], context[:1], [CONTEXT], None)  # the head's own output width
    truncate_cache(drafter.cache, CONTEXT)
    tokens = [head.target_ids[0]] * top_k
    features = probe.expand(top_k, -1).contiguous()
    mask = additive_mask(torch.ones(top_k, CONTEXT + top_k, dtype=torch.bool), head.dtype, head.device)

    def level() -> None:
        out = drafter._run(tokens, features, [CONTEXT] * top_k, mask)
        torch.log_softmax(head.draft_logits(out).float(), dim=-1).topk(top_k, dim=-1)
        truncate_cache(drafter.cache, CONTEXT)

    return fastest_seconds(level, head.device, repeats)
