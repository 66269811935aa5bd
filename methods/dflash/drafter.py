"""DFlash's drafter: every row of a batch drafts its block in ONE forward of the draft (methods/dflash/model.py).

A row's step feeds the target's layer states of the positions the target cached since the row's last draft (the
whole prompt on its first draft: the engine hands them back after each step, `StepResult.hidden`) as context
columns, then its block [last emitted token, MASK x (B-1)], on the draft's own SlotCache through the draft's
runner (the target's shape policy: fixed bucketed shapes under CUDA graphs). Context columns are left-padded to the
step's width; a pad column is written past its row's block, where nothing reads before it is overwritten. The draft
tokens are the argmax of each mask position (as the reference drafts at any temperature): deterministic candidates,
which the engine's rule verifies losslessly (accepted with p(x) at T>0).
"""
from __future__ import annotations

import numpy as np
import torch

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.inputs import to_device
from specbench.decode.layout import additive
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import trained_folder
from specbench.methods.common.target_layers import fused_layers
from specbench.methods.dflash.model import DFlashDraft, dflash_config
from specbench.methods.dflash.training import load_dflash


class DFlashDrafter(Drafter):
    def __init__(self, model: DFlashDraft, block_size: int, runner: ModelRunner) -> None:
        """runner: the draft's (its cache and forwards), shared by the drafters of every row."""
        if block_size < 2:
            raise SpecbenchError(f"dflash: block must be >= 2 (the root and at least one mask), got {block_size}")
        self.model, self.block_size, self.runner = model, block_size, runner
        self.row_caches = (runner,)
        self.hidden_layers = model.target_layers
        self._reset()

    def _reset(self) -> None:
        self.fed = 0  # context positions the draft's cache holds
        self.pending: torch.Tensor | None = None  # target states of the positions after them, not fed yet

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return block_drafts([self], [ctx])[0]

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if step.hidden is not None and len(step.hidden):
            self.pending = step.hidden if self.pending is None else torch.cat([self.pending, step.hidden])

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(DFlashDrafter, drafters, ctxs, block_drafts, shared=("runner", "model"))


def block_drafts(drafters: list[DFlashDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's chain of B-1 tokens from one forward of the shared draft; empty for a row whose context the
    target has not scored yet (its first step: the prompt's prefill)."""
    drafts = [Draft() for _ in drafters]
    live = [b for b, d in enumerate(drafters) if d.pending is not None]
    if not live:
        return drafts
    rows, first = [drafters[b] for b in live], drafters[0]
    size = first.block_size
    ends = [len(ctxs[b].token_ids) - 1 for b in live]  # each row's block starts here (its last emitted token)
    assert all(d.fed + len(d.pending) == end for d, end in zip(rows, ends)), "context states out of step"
    runner = first.runner
    cache_rows = runner.cache_rows([ctxs[b].row for b in live])
    shape = runner.fit(len(rows), max(len(d.pending) for d in rows) + size, max(d.fed for d in rows),
                       gathered=cache_rows is not None)
    width = shape.tokens - size  # context columns (left-padded)
    positions = np.tile(np.arange(shape.tokens, dtype=np.int64), (shape.rows, 1))
    limits = np.full(shape.rows, shape.tokens, dtype=np.int64)
    roots = np.zeros(shape.rows, dtype=np.int64)
    for r, (d, end, b) in enumerate(zip(rows, ends, live)):
        pad = width - len(d.pending)
        positions[r, :pad] = end + size + np.arange(pad)  # past the block: overwritten before anything reads them
        positions[r, pad:] = d.fed + np.arange(len(d.pending) + size)
        limits[r], roots[r] = end + size, ctxs[b].token_ids[-1]
    device = first.model.fc.weight.device
    staged = to_device(np.concatenate([positions.ravel(), limits, roots]), device)
    at = positions.size
    position_ids = staged[:at].view(shape.rows, shape.tokens)
    slots = torch.arange(shape.key_slots, device=device)
    mask = additive((slots[None, :] < staged[at : at + shape.rows, None])[:, None].expand(-1, size, -1),
                    first.model.fc.weight.dtype)
    features = torch.zeros(shape.rows, width, first.model.fc.in_features, device=device,
                           dtype=first.model.fc.weight.dtype)
    for r, d in enumerate(rows):
        features[r, width - len(d.pending) :] = d.pending
    ids = torch.zeros(shape.rows, size, dtype=torch.long, device=device)
    ids[:, 0] = staged[at + shape.rows :]
    inputs = {"input_ids": ids, "features": features, "position_ids": position_ids, "input_pos": position_ids,
              "attention_mask": mask, **({} if cache_rows is None else {"cache_rows": cache_rows})}
    tokens = runner.forward(inputs, shape, size - 1, False)[: len(rows)].argmax(-1).tolist()
    for b, d, end, row_tokens in zip(live, rows, ends, tokens):
        d.fed, d.pending = end, None
        drafts[b] = Draft.chain(row_tokens)
    return drafts


RANDOM_BLOCK = 8  # a shape target's random draft: one layer, blocks of 8 (what `train dflash` trains by default)


def random_draft(target) -> DFlashDraft:
    """A shape target's draft (TIMING ONLY): one layer of the target's shape, random weights seeded by the name."""
    config = dflash_config(target.config, 1, RANDOM_BLOCK, fused_layers(target.config.num_hidden_layers))
    with seeded("dflash", target.device):
        draft = DFlashDraft(config)
    return draft.share(target).to(target.device, target.dtype).eval()


def build(ctx: BuildContext) -> Drafter:
    target = ctx.target.model
    if wants_random(ctx):
        draft, folder = random_draft(target), RANDOM_FROM
    else:
        folder = trained_folder(ctx, "dflash", "DFlash draft", "dflash")
        draft = load_dflash(folder, target)
    prepare_drafter(draft, ctx.target.runtime)
    runner = ctx.target.runner
    runner = runner.drafter_runner(draft) if runner is not None else ModelRunner(draft, fixed_shapes=False)
    drafter = DFlashDrafter(draft, ctx.option("block") or draft.block_size, runner)
    drafter.trained_from = str(folder)
    return drafter
