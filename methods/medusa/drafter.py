"""Medusa's drafter over its heads (methods/medusa/__init__.py says what the method is), typical acceptance's
verifier, and `build(ctx, typical)` for both methods the package declares."""
from __future__ import annotations

import torch

from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.graphs import Graphs
from specbench.decode.runner import call_rows
from specbench.decode.runtime import RuntimeInfo, frozen_linear, prepare_drafter
from specbench.decode.sampling import Sampling, sample, target_probs
from specbench.decode.verify import Verdict, verify_greedy
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import trained_folder
from specbench.methods.common.static_tree import static_tree
from specbench.methods.common.tree_search import best_k
from specbench.methods.medusa.checkpoint import load_heads
from specbench.methods.medusa.head import MedusaHeads


class MedusaDrafter(Drafter):
    hidden_layers = (-1,)

    def __init__(self, heads: MedusaHeads, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None,
                 tree: list[tuple[int, ...]], verifier=None, runtime: RuntimeInfo | None = None,
                 graphs: Graphs | None = None) -> None:
        """graphs: the target runner's for drafting (runner.call_rows: padded per row count with fixed shapes,
        captured on CUDA); None: run at the batch's own shape."""
        depth = max(len(p) for p in tree)
        if depth > len(heads.heads):
            raise SpecbenchError(f"the Medusa tree is {depth} deep but there are only {len(heads.heads)} heads")
        self.heads = heads
        device, dtype = heads.heads[0][0].linear.weight.device, heads.heads[0][0].linear.weight.dtype
        vocab = draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])
        # Heads with their own lm_heads (the published layout) need none of the target's.
        self.lm_head = None if heads.own_lm_heads else \
            frozen_linear(lm_head.detach()[vocab].to(device, dtype).contiguous(), runtime)
        self.vocab = vocab.to(device)
        self.tree = tree
        self.width = max(max(p) for p in tree) + 1
        self.depth = depth
        self.parents = [ROOT if len(p) == 1 else tree.index(p[:-1]) for p in tree]
        # Node i is head levels[i]'s guess of rank ranks[i] (device tensors: the indexing is captured on CUDA).
        self.levels = torch.tensor([len(p) - 1 for p in tree], device=device)
        self.ranks = torch.tensor([p[-1] for p in tree], device=device)
        self.verifier = verifier
        self.graphs = graphs
        self.last_feature: torch.Tensor | None = None

    def begin(self, ctx: DecodeContext) -> None:
        self.last_feature = None

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        self.last_feature = step.hidden[-1]  # the feature that predicted the token just emitted last

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return medusa_drafts([self], [ctx])[0]

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(MedusaDrafter, drafters, ctxs, medusa_drafts, ("heads", "tree", "graphs"))

    def guess(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Every node's target id [R, nodes] from the rows' last features [R, H]: each head's top-width guesses in
        one forward, ties to the lower index."""
        predicted = self.heads(inputs["features"])  # [K, R, H]
        logits = self.heads.own_logits(predicted[: self.depth]) if self.lm_head is None else \
            self.lm_head(predicted[: self.depth])
        guesses = best_k(logits, self.width)[1]  # [depth, R, width]
        return self.vocab[guesses[self.levels, :, self.ranks]].T


def medusa_drafts(drafters: list[MedusaDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's tree at once (the same heads and tree for all; `guess`, captured with fixed shapes on CUDA), and one
    copy of every row's tokens to the host."""
    drafts = [Draft() for _ in drafters]
    ready = [b for b, d in enumerate(drafters) if d.last_feature is not None]
    if not ready:
        return drafts
    first = drafters[ready[0]]
    dtype = first.heads.heads[0][0].linear.weight.dtype
    features = torch.stack([drafters[b].last_feature for b in ready]).to(dtype)  # [R, H]
    tokens = call_rows(first.graphs, first.guess, {"features": features})  # [R, nodes]
    for b, row in zip(ready, tokens.tolist()):
        drafts[b] = Draft(row, list(first.parents))
    return drafts


def typical_verifier(threshold: float, alpha: float):
    """Medusa's typical acceptance (lossy at T > 0): a node is accepted when the target gives it more than
    min(threshold, alpha * exp(-entropy)) at its parent; the deepest such path wins; then one token is sampled."""

    def verify(draft: Draft, logits: torch.Tensor, sampling: Sampling, generator) -> Verdict:
        if sampling.greedy or not draft:
            return verify_greedy(draft, logits) if sampling.greedy else Verdict([], sample(
                target_probs(logits[0], sampling), generator))
        probs = target_probs(logits, sampling)
        entropy = -torch.special.xlogy(probs, probs).sum(-1)
        limit = torch.minimum(torch.full_like(entropy, threshold), alpha * torch.exp(-entropy))
        ok: list[bool] = []
        best: list[int] = []
        depth: list[int] = []
        for i, (token, parent) in enumerate(zip(draft.tokens, draft.parents)):
            row = parent + 1
            passes = bool(probs[row, token] > limit[row]) and (parent == ROOT or ok[parent])
            ok.append(passes)
            depth.append(1 if parent == ROOT else depth[parent] + 1)
            if passes and (not best or depth[i] > depth[best[-1]]):
                best = [i]
        path: list[int] = []
        if best:
            node = best[0]
            while node != ROOT:
                path.insert(0, node)
                node = draft.parents[node]
        end_row = path[-1] + 1 if path else 0
        return Verdict(path, sample(probs[end_row], generator))

    return verify


def build(ctx: BuildContext, typical: bool) -> Drafter:
    lm_head = ctx.target.model.get_output_embeddings().weight
    if wants_random(ctx):  # a shape target: 4 random heads of its hidden size (as `train medusa` makes)
        with seeded("medusa", lm_head.device):
            heads, vocab, folder = MedusaHeads(lm_head.shape[1], 4), None, RANDOM_FROM
    else:
        folder = trained_folder(ctx, "medusa", "Medusa heads", "medusa")
        heads, vocab = load_heads(folder)
    if heads.heads[0][0].linear.weight.shape[0] != lm_head.shape[1] or \
            (heads.own_lm_heads and heads.heads[0][1].weight.shape[0] != lm_head.shape[0]):
        raise SpecbenchError(f"Medusa heads {folder} do not fit target {ctx.target.name} (hidden size or vocabulary)")
    heads.to(lm_head.device, lm_head.dtype)
    prepare_drafter(heads, ctx.target.runtime)
    verifier = typical_verifier(ctx.option("threshold"), ctx.option("alpha")) if typical else None
    graphs = ctx.target.runner.drafting_graphs() if ctx.target.runner is not None else None
    drafter = MedusaDrafter(heads, lm_head, vocab, static_tree(ctx.options), verifier, ctx.target.runtime, graphs)
    drafter.trained_from = str(folder)
    return drafter
