"""Hydra's drafter over its sequentially dependent heads (methods/hydra/__init__.py says what the method is)
and its build."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.graphs import Graphs
from specbench.decode.runner import call_rows
from specbench.decode.runtime import RuntimeInfo, frozen_linear, prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import trained_folder
from specbench.methods.common.static_tree import static_tree
from specbench.methods.common.tree_search import best_k
from specbench.methods.hydra.checkpoint import load_heads
from specbench.methods.hydra.head import HydraHeads


class HydraDrafter(Drafter):
    hidden_layers = (-1,)

    def __init__(self, heads: HydraHeads, embed: torch.nn.Module, lm_head: torch.Tensor,
                 draft_vocab: torch.Tensor | None, tree: list[tuple[int, ...]],
                 runtime: RuntimeInfo | None = None, graphs: Graphs | None = None) -> None:
        """graphs: the target runner's for drafting (runner.call_rows: padded per row count with fixed shapes,
        captured on CUDA); None: run at the batch's own shape."""
        depth = max(len(p) for p in tree)
        if depth > len(heads):
            raise SpecbenchError(f"the Hydra tree is {depth} deep but there are only {len(heads)} heads")
        self.heads = heads
        self.embed = embed
        self.dtype = heads.hydra_mlp[0][0].linear.weight.dtype
        vocab = draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])
        # Heads with their own lm_heads (the published layout) need none of the target's.
        self.lm_head = None if heads.hydra_lm_head is not None else \
            frozen_linear(lm_head.detach()[vocab].to(lm_head.device, self.dtype).contiguous(), runtime)
        self.vocab = vocab.to(lm_head.device)
        self.tree = tree
        self.parents = [ROOT if len(p) == 1 else tree.index(p[:-1]) for p in tree]
        # Per depth d: the nodes of depth d - 1 that have children (() is the root), and how many ranks they need.
        self.expanded = [sorted({p[:-1] for p in tree if len(p) == d}) for d in range(1, depth + 1)]
        self.width = [1 + max(p[-1] for p in tree if len(p) == d) for d in range(1, depth + 1)]
        self.graphs = graphs
        self.last_feature: torch.Tensor | None = None
        self.prefix_cache: DynamicCache | None = None  # Hydra++'s prefix layer's keys and values, this row's

    def begin(self, ctx: DecodeContext) -> None:
        self.last_feature = None
        self.prefix_cache = DynamicCache() if self.heads.prefix is not None else None

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        """The context vector: the feature that predicted the token just emitted last, or (prefix-mlp) the prefix
        layer's output there, run over the target's states of the tokens the step kept (the prompt's at the
        prefill) at their positions, on this row's cache of it."""
        if self.prefix_cache is None:
            self.last_feature = step.hidden[-1]
            return
        start = self.prefix_cache.get_seq_length()
        positions = torch.arange(start, start + len(step.hidden), device=step.hidden.device)[None]
        out = self.heads.prefix(inputs_embeds=step.hidden[None].to(self.dtype), position_ids=positions,
                                cache=self.prefix_cache, use_cache=True)
        self.last_feature = out.last_hidden_state[0, -1]

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return hydra_drafts([self], [ctx])[0]

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(HydraDrafter, drafters, ctxs, hydra_drafts, ("heads", "tree", "graphs"))

    def guess(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Every node's target id [R, nodes] from the rows' last features [R, H] and last tokens [R], level by level:
        each head over every row's expanded nodes in one forward, ties to the lower index."""
        features, roots = inputs["features"].to(self.dtype), self.embed(inputs["roots"]).to(self.dtype)
        # given[path]: [h, e(root), e(path's tokens)...] per row, the input of the head that guesses path's children.
        given = {(): torch.cat([features, roots], dim=-1)}
        token_of: dict[tuple[int, ...], torch.Tensor] = {}  # [R] target ids
        for k, (parents, width) in enumerate(zip(self.expanded, self.width)):
            x = torch.stack([given[p] for p in parents], dim=1)  # [R, n, (k + 2) H]
            out = self.heads(k, x)
            logits = self.lm_head(out) if self.lm_head is not None else self.heads.hydra_lm_head[k](out)
            ranked = self.vocab[best_k(logits, width)[1]]  # [R, n, width]
            for path in (p for p in self.tree if len(p) == k + 1):
                token_of[path] = ranked[:, parents.index(path[:-1]), path[-1]]
            if k + 1 < len(self.expanded):
                grow = self.expanded[k + 1]
                embeds = self.embed(torch.stack([token_of[p] for p in grow], dim=1)).to(self.dtype)  # [R, m, H]
                for j, path in enumerate(grow):
                    given[path] = torch.cat([given[path[:-1]], embeds[:, j]], dim=-1)
        return torch.stack([token_of[p] for p in self.tree], dim=1)


def hydra_drafts(drafters: list[HydraDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's tree at once (the same heads and tree for all; `guess`, captured with fixed shapes on CUDA), and
    every row's tokens back in one copy."""
    drafts = [Draft() for _ in drafters]
    ready = [b for b, d in enumerate(drafters) if d.last_feature is not None]
    if not ready:
        return drafts
    first = drafters[ready[0]]
    features = torch.stack([drafters[b].last_feature for b in ready])  # [R, H]
    roots = torch.tensor([ctxs[b].token_ids[-1] for b in ready], device=first.vocab.device)
    tokens = call_rows(first.graphs, first.guess, {"features": features, "roots": roots}).tolist()  # the one copy
    for b, row in zip(ready, tokens):
        drafts[b] = Draft(row, list(first.parents))
    return drafts


def build(ctx: BuildContext) -> Drafter:
    lm_head = ctx.target.model.get_output_embeddings().weight
    if wants_random(ctx):  # a shape target: 4 random one-layer heads of its hidden size (as `train hydra` makes)
        with seeded("hydra", lm_head.device):
            heads, vocab, folder = HydraHeads(lm_head.shape[1], 4, 1), None, RANDOM_FROM
    else:
        folder = trained_folder(ctx, "hydra", "Hydra heads", "hydra")
        heads, vocab = load_heads(folder, ctx.target.model.config)
    rows = lm_head.shape[0] if vocab is None else len(vocab)  # own lm_heads: over the draft vocabulary, if any
    if heads.hidden != lm_head.shape[1] or (heads.hydra_lm_head is not None and
                                            heads.hydra_lm_head[0].weight.shape[0] != rows):
        raise SpecbenchError(f"Hydra heads {folder} do not fit target {ctx.target.name} (hidden size or vocabulary)")
    heads.to(lm_head.device, lm_head.dtype)
    prepare_drafter(heads, ctx.target.runtime)
    graphs = ctx.target.runner.drafting_graphs() if ctx.target.runner is not None else None
    drafter = HydraDrafter(heads, ctx.target.model.get_input_embeddings(), lm_head, vocab, static_tree(ctx.options),
                           ctx.target.runtime, graphs)
    drafter.trained_from = str(folder)
    return drafter
