"""A feature head's tree expansion for every row of a batch at once, in tensors on the head's device, as EAGLE-2's
reference code (eagle/model/cnets.py, topK_genrate) does it: each level runs the head over the whole frontier of
every row in one forward, takes the top-k children of each frontier node and the top-k of all those candidates in
tensors. Nothing comes back to the host until the finished trees do, in one copy (`finish`).

Ties are broken the same way everywhere (`best_k`: the lower index first), so a row's tree never depends on which
rows are drafted beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np
import torch

from specbench.decode.draft import ROOT, DecodeContext, Draft


def best_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest values along the last dimension and their indices, largest first, equal values in index
    order; the same for a row whatever else is in the tensor (torch.topk leaves the order of ties open). ONE topk,
    over a key that orders by value, then by lower index: each value's float32 bits made order-preserving as an
    integer (IEEE 754: a negative's magnitude bits flipped), above 32 bits of n - 1 - index; every key is distinct,
    so the top k and their order are unique (-0.0 is made 0.0 first: they are equal)."""
    n = values.shape[-1]
    bits = (values.float() + 0.0).view(torch.int32).long()
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    key = ordered * (1 << 32) + (n - 1 - torch.arange(n, device=values.device))
    index = key.topk(k, dim=-1).indices
    return values.gather(-1, index), index


def expand(head: Any, features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (draft log-probs, draft indices) [R, n, k] under nodes whose predicted features are [R, n, W]. The
    log-softmax is taken over the whole row, as EAGLE's code does (x - logsumexp(x) of the k picked differs from it
    in the last bits, which moves near-ties between a frontier's candidates; the pass over the vocabulary is needed
    for the normaliser either way)."""
    return best_k(torch.log_softmax(head.draft_logits(features).float(), dim=-1), k)


@dataclass
class Search:
    """The rows being drafted: the head, their context caches, where their trees start."""

    head: Any  # a FeatureHead
    rows: Any  # head_cache.HeadRows: the rows' head cache its levels run on
    base: torch.Tensor  # [R] the position of each row's first tree level (its context length)
    root_tokens: torch.Tensor  # [R] target id of each row's last emitted token
    target_ids: torch.Tensor  # [V_draft] draft index -> target token id
    stop: Callable[[torch.Tensor], torch.Tensor] | None = None  # frontier mass [R] -> stop here [R] (auto sizing)
    # TIMING ONLY (synthetic acceptance): [R, depth] each row's log acceptance rate at depth 1, 2, ...: the search
    # scores its candidates as a head calibrated to those rates would (`calibrated`); None: by the head's log-probs
    log_rates: torch.Tensor | None = None

    def run(self, tokens: torch.Tensor, features: torch.Tensor, depth: int, ancestors: torch.Tensor, k: int,
            then: Callable | None = None, state: dict[str, torch.Tensor] | None = None) -> tuple:
        """The head over n nodes of each row at one depth (tokens [R, n], their parents' features [R, n, W]); each
        sees its row's context, its ancestors among the nodes run before (ancestors [R, n, S]) and itself.
        Returns their predicted features [R, n, W] and the top k under each, and with `then` its result
        then(features, log-probs, indices, state) computed in the same step (captured with it); their keys stay in
        the cache until the search ends."""
        rows, n = tokens.shape
        positions = (self.base + depth - 1)[:, None].expand(rows, n)
        return self.rows.level(self.head, tokens, features, positions, ancestors, k, then, state)


@dataclass
class Nodes:
    """Every row's drafted nodes (node m of every row has the same depth; tokens, parents and scores differ)."""

    tokens: torch.Tensor  # [R, M] target ids
    parents: torch.Tensor  # [R, M] node index or ROOT
    scores: torch.Tensor  # [R, M] cumulative draft log-prob
    depths: list[int]  # [M]
    expanded: list[tuple[torch.Tensor, torch.Tensor]]  # per head run: node indices [R, n], predicted features [R, n, W]
    stops: list[torch.Tensor]  # per level of a dynamic tree: [R] bool, the row's tree would have stopped there


def calibrated(logp: torch.Tensor, log_rate: torch.Tensor) -> torch.Tensor:
    """TIMING ONLY (synthetic acceptance): the scores [R, n, k] that a head calibrated to the synthetic verifier
    would give the top k under each of n nodes: its first-ranked child the log of its depth's rate (log_rate [R], the
    chance the verifier accepts that depth given its parent), the others -inf (the verifier never accepts off the best
    path, the first child at each level). The tokens stay the head's; so does every forward."""
    first = torch.arange(logp.shape[-1], device=logp.device) == 0
    return torch.where(first, log_rate[:, None, None], -torch.inf).expand_as(logp)


def synthetic_log_rates(made: dict[tuple, torch.Tensor], ctxs: list[DecodeContext], depth: int,
                        device: torch.device) -> torch.Tensor | None:
    """TIMING ONLY: each row's log acceptance rate at depths 1..depth [R, depth] under synthetic acceptance
    (DecodeContext.synthetic_rates; the last rate repeats, as the verifier's does), what the search scores its
    candidates by (tree_search.calibrated), so that a tree is sized from the rates the run verifies at, not from a
    random head's confidence; None when the target verifies. Kept in `made` once made: no copy to the device a
    step."""
    rates = tuple(ctx.synthetic_rates for ctx in ctxs)
    if rates[0] is None:
        return None
    if (rates, depth) not in made:
        logs = [[math.log(r) if r > 0 else -math.inf for r in row] for row in rates]
        made[rates, depth] = torch.tensor([row[:depth] + row[-1:] * (depth - len(row)) for row in logs], device=device)
    return made[rates, depth]


def dynamic(search: Search, root: torch.Tensor, k: int, depth: int) -> Nodes:
    """EAGLE-2's dynamic tree: the top k children of the root, then depth - 1 times: run the head over the frontier
    (k nodes), add the top k children of each (k * k candidates), keep the k best candidates by cumulative log-prob
    as the next frontier. Each level's bookkeeping (`frontier_step`) runs inside the level's step, after the head's
    top-k: one captured graph a level. With search.log_rates, candidates are scored by those rates (`calibrated`)."""
    rows, device = root.shape[0], root.device
    logp, index = search.rows.expand_root(root, k)
    if search.log_rates is not None:
        logp = calibrated(logp, search.log_rates[:, 0])
    f_tokens = search.target_ids[index[:, 0]]
    state = {"f_scores": logp[:, 0], "f_tokens": f_tokens, "frontier": torch.arange(k, device=device).expand(rows, k),
             "parent_tokens": search.root_tokens[:, None].expand(rows, k),
             "ancestors": torch.zeros(rows, k, 0, dtype=torch.bool, device=device)}
    if search.log_rates is not None:
        state["log_rates"] = search.log_rates
    nodes = Nodes([f_tokens], [torch.full((rows, k), ROOT, device=device)], [state["f_scores"]], [1] * k, [], [])
    parent_features = root[:, None].expand(rows, k, -1)
    for level in range(1, depth):
        if search.stop is not None:
            nodes.stops.append(search.stop(state["f_scores"].exp().sum(dim=1)))
            if bool(nodes.stops[-1].all()):  # read back on every device: a level no row keeps is never drafted
                break  # (one [R] bool copy a level, against the level's forward; rows that stop earlier are cut later)
        then = partial(frontier_step, search.target_ids, k, len(nodes.depths), level + 1)
        fed = state["f_tokens"] if search.head.shift else state["parent_tokens"]
        out, _, _, found = search.run(fed, parent_features, level, state["ancestors"], k, then, state)
        nodes.expanded.append((state["frontier"], out))
        nodes.tokens.append(found["tokens"])
        nodes.parents.append(found["parents"])
        nodes.scores.append(found["scores"])
        nodes.depths += [level + 1] * (k * k)
        parent_features = found["parent_features"]
        state = {name: found[name] for name in state}
    return nodes


def frontier_step(target_ids: torch.Tensor, k: int, count: int, depth: int, out: torch.Tensor, logp: torch.Tensor,
                  index: torch.Tensor, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A dynamic level's bookkeeping, from the head's output over the frontier's k nodes (out [R, k, W]) and the
    top k under each (logp, index [R, k, k]; with state["log_rates"], scored by those, `calibrated`): the k * k
    candidates at `depth` (scores, target tokens, parents: node indices, the frontier's numbered from `count` on),
    and the next frontier (the k best candidates by cumulative log-prob: their scores, tokens, node indices, their
    parents' tokens and predicted features, and each one's ancestors among the nodes run so far)."""
    frontier = state["frontier"]
    if "log_rates" in state:
        logp = calibrated(logp, state["log_rates"][:, depth - 1])
    scores = (state["f_scores"][..., None] + logp).flatten(1)
    tokens = target_ids[index].flatten(1)
    best = best_k(scores, k)[1]
    slot = best // k  # the frontier node each new frontier node hangs under
    ancestors = state["ancestors"]
    return {"scores": scores, "tokens": tokens, "parents": frontier.repeat_interleave(k, dim=1),
            "parent_tokens": state["f_tokens"].gather(1, slot), "parent_features": out.gather(1, spread(slot, out)),
            "f_scores": scores.gather(1, best), "f_tokens": tokens.gather(1, best), "frontier": count + best,
            "ancestors": torch.cat([ancestors.gather(1, spread(slot, ancestors)),
                                    torch.nn.functional.one_hot(slot, k).bool()], dim=2),
            **({"log_rates": state["log_rates"]} if "log_rates" in state else {})}


def spread(index: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """index [R, n] expanded to gather whole rows of like [R, m, X] along dim 1."""
    return index[..., None].expand(-1, -1, like.shape[-1])


def static(search: Search, root: torch.Tensor, paths: list[tuple[int, ...]]) -> Nodes:
    """EAGLE-1's static tree: node [r0, r1, ...] is the r-th ranked child of its parent path. Its shape is the same
    for every row, so every index below is known on the host; only tokens, scores and features are tensors."""
    rows, device = root.shape[0], root.device
    width = max(p[-1] for p in paths) + 1
    logp, index = search.rows.expand_root(root, width)
    first = [p for p in paths if len(p) == 1]
    ranks = [p[0] for p in first]
    nodes = Nodes([search.target_ids[index[:, 0, ranks]]], [], [logp[:, 0, ranks]], [1] * len(first), [], [])
    parents: list[int] = [ROOT] * len(first)
    node_of = {p: i for i, p in enumerate(first)}
    features = [root[:, None]]  # column c of their concatenation: the feature under node c - 1 (0: the root's)
    feature_col = {ROOT: 0}
    slots: list[int] = []  # nodes run so far, in cache order
    for depth in range(2, max(len(p) for p in paths) + 1):
        level = [p for p in paths if len(p) == depth]
        run = sorted({node_of[p[:-1]] for p in level})
        tokens, scores = torch.cat(nodes.tokens, dim=1), torch.cat(nodes.scores, dim=1)
        with_root = torch.cat([search.root_tokens[:, None], tokens], dim=1)
        fed = tokens[:, run] if search.head.shift else with_root[:, [parents[i] + 1 for i in run]]
        parent_features = torch.cat(features, dim=1)[:, [feature_col[parents[i]] for i in run]]
        allowed = [[is_ancestor(slot, i, parents) for slot in slots] for i in run]
        ancestors = torch.tensor(allowed, dtype=torch.bool, device=device).reshape(len(run), len(slots))
        out, logp, index = search.run(fed, parent_features, depth - 1, ancestors.expand(rows, -1, -1), width)
        nodes.expanded.append((torch.tensor(run, device=device).expand(rows, -1), out))
        for j, i in enumerate(run):
            feature_col[i] = sum(f.shape[1] for f in features) + j
        features.append(out)
        slots += run
        at = {i: j for j, i in enumerate(run)}
        which, rank = [at[node_of[p[:-1]]] for p in level], [p[-1] for p in level]
        above = [node_of[p[:-1]] for p in level]
        nodes.tokens.append(search.target_ids[index[:, which, rank]])
        nodes.scores.append(scores[:, above] + logp[:, which, rank])
        for p, parent in zip(level, above):
            node_of[p] = len(parents)
            parents.append(parent)
        nodes.depths += [depth] * len(level)
    nodes.parents = [torch.tensor(parents, device=device).expand(rows, -1)]
    return nodes


def is_ancestor(node: int, of: int, parents: list[int]) -> bool:
    while of != ROOT:
        if of == node:
            return True
        of = parents[of]
    return False


def finish(nodes: Nodes, dynamic_tree: bool, total: int,
           best_size: Callable[[list[float]], int] | None = None) -> tuple[list[Draft], np.ndarray]:
    """Each row's draft and, for each of its nodes, the node of `nodes` it is (row r's draft's node j is node
    kept[r, j], kept the second value), from ONE copy of every row's nodes to the host, the selection made for every
    row at once in numpy. A dynamic tree keeps the best nodes by cumulative log-prob (ties: the earlier node), at
    most `total` (auto sizing: as many as best_size(their scores, best first, at most `total`) says), ordered by
    depth then score; nodes past the level where the row's tree would have stopped (auto sizing) are not there. A
    static tree keeps every node."""
    tokens, parents, scores = (torch.cat(part, dim=1) for part in (nodes.tokens, nodes.parents, nodes.scores))
    rows, count = tokens.shape
    order = scores.sort(dim=1, descending=True, stable=True).indices
    parts = [tokens, parents, scores, order] + [s[:, None] for s in nodes.stops]
    host = torch.cat([part.float() for part in parts], dim=1).cpu().numpy()  # the one copy
    tok, par, order_host = (host[:, i * count : (i + 1) * count].astype(np.int64) for i in (0, 1, 3))
    if dynamic_tree:
        keep, sizes = best_nodes(host[:, 2 * count : 3 * count], order_host, host[:, 4 * count :] != 0,
                                 np.array(nodes.depths), total, best_size)
    else:
        keep, sizes = np.arange(count)[None].repeat(rows, 0), [count] * rows
    new_index = np.zeros_like(par)
    np.put_along_axis(new_index, keep, np.arange(keep.shape[1])[None].repeat(rows, 0), 1)
    kept_parents = np.take_along_axis(par, keep, 1)
    renumbered = np.where(kept_parents == ROOT, ROOT, np.take_along_axis(new_index, kept_parents.clip(0), 1))
    tokens_of, parents_of = np.take_along_axis(tok, keep, 1).tolist(), renumbered.tolist()
    return [Draft(tokens_of[r][:n], parents_of[r][:n]) for r, n in enumerate(sizes)], keep


def best_nodes(scores: np.ndarray, order: np.ndarray, stops: np.ndarray, depths: np.ndarray, total: int,
               best_size: Callable[[list[float]], int] | None) -> tuple[np.ndarray, list[int]]:
    """A dynamic tree's kept nodes for every row: (their indices [R, n] by depth then score, each row's first
    sizes[r] of them), from the scores [R, M], their best-first order [R, M], where each row's tree stopped
    ([R, levels] bool) and every node's depth [M]."""
    rows, count = scores.shape
    cap = (np.where(stops.any(1), stops.argmax(1) + 1, depths.max()) if stops.shape[1]
           else np.full(rows, depths.max()))
    allowed = depths[order] <= cap[:, None]  # best first
    if best_size is None:
        sizes = np.minimum(allowed.sum(1), total)
    else:
        best_first = np.take_along_axis(scores, order, 1)
        sizes = np.array([best_size(best_first[r][allowed[r]][:total].tolist()) for r in range(rows)])
    chosen = allowed & (np.cumsum(allowed, 1) <= sizes[:, None])
    rank, kept = np.zeros_like(order), np.zeros_like(chosen)
    np.put_along_axis(rank, order, np.arange(count)[None].repeat(rows, 0), 1)
    np.put_along_axis(kept, order, chosen, 1)
    key = np.where(kept, depths[None] * (count + 1) + rank, np.iinfo(np.int64).max)
    return np.argsort(key, axis=1, kind="stable")[:, : max(sizes.max(), 0)], sizes.tolist()
