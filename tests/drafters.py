"""Drafters used only by tests: random trees (with and without the right answer inside), one-hot and sampled
trees from a second model."""
from __future__ import annotations

import random

import torch
from transformers import PreTrainedModel

from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter
from specbench.decode.sampling import target_probs
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle.training import EagleTrainable
from specbench.train.training import Batch


class RandomTreeDrafter(Drafter):
    """Random trees of varying depth and branching. With `reference` (vanilla's output for the prompt) it hides the
    right continuation on one random branch among distractors, so long paths through non-first children get
    accepted and the cache compaction is exercised with gaps."""

    def __init__(self, vocab: int, seed: int, reference: list[int] | None = None) -> None:
        self.vocab, self.rng, self.reference = vocab, random.Random(seed), reference

    def propose(self, ctx: DecodeContext) -> Draft:
        tokens: list[int] = []
        parents: list[int] = []
        done = len(ctx.token_ids) - ctx.prompt_len
        truth = self.reference[done:] if self.reference is not None else []
        depth = self.rng.randint(0, 6)
        # The spine: the right tokens (or random ones), one per level, each with random siblings before/after it.
        parent = ROOT
        for level in range(depth):
            for _ in range(self.rng.randint(0, 2)):
                tokens.append(self.rng.randrange(self.vocab))
                parents.append(parent)
                if self.rng.random() < 0.5:  # a distractor subtree hanging off the decoy
                    tokens.append(self.rng.randrange(self.vocab))
                    parents.append(len(tokens) - 2)
            wrong = self.rng.random() < 0.15
            spine = truth[level] if level < len(truth) and not wrong else self.rng.randrange(self.vocab)
            tokens.append(spine)
            parents.append(parent)
            parent = len(tokens) - 1
        return Draft(tokens, parents)


class ModelTreeDrafter(Drafter):
    """A two-level tree from a second model: `width` children per node. Greedy or one-hot: its top tokens (q=None).
    Sampled: drawn without replacement from its processed distribution q (q rows returned)."""

    def __init__(self, model: PreTrainedModel, width: int = 2, sampled: bool = False) -> None:
        self.model, self.width, self.sampled = model, width, sampled

    def _pick(self, ctx: DecodeContext, prefix: list[int]) -> tuple[list[int], torch.Tensor | None]:
        with torch.no_grad():
            logits = self.model(torch.tensor([ctx.token_ids + prefix])).logits[0, -1]
        if not self.sampled or ctx.sampling.greedy:
            return logits.topk(self.width).indices.tolist(), None
        q = target_probs(logits, ctx.sampling)
        k = min(self.width, int((q > 0).sum()))
        return torch.multinomial(q, k, replacement=False, generator=ctx.generator).tolist(), q

    def propose(self, ctx: DecodeContext) -> Draft:
        tokens, parents, q_rows = [], [], []
        first, q_root = self._pick(ctx, [])
        for token in first:
            tokens.append(token)
            parents.append(ROOT)
            q_rows.append(q_root)
        for i, token in enumerate(first):
            second, q_child = self._pick(ctx, [token])
            for t in second:
                tokens.append(t)
                parents.append(i)
                q_rows.append(q_child)
        q = torch.stack(q_rows) if q_rows and q_rows[0] is not None else None
        return Draft(tokens, parents, q)


def fitted_eagle_head(target: PreTrainedModel, tokens: torch.Tensor, steps: int, lr: float, seed: int,
                      valid: torch.Tensor | None = None, noise: float = 0.1,
                      embedding: torch.Tensor | None = None) -> EagleHead:
    """An EAGLE head fitted for `steps` Adam steps (EAGLE's loss) to the target's own last hidden states over these
    token rows (valid: the real positions, all by default), with the target's input embedding (or `embedding`)."""
    torch.manual_seed(seed)
    head = EagleHead(head_config(target.config))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight if embedding is None else embedding)
    valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
    with torch.no_grad():
        hidden = target(tokens, attention_mask=valid.long(), output_hidden_states=True).hidden_states[-1]
    trainable = EagleTrainable(head.train(), target.get_output_embeddings().weight, None, noise=noise)
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        loss, _ = trainable.loss(Batch(tokens, hidden, valid, valid))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()

