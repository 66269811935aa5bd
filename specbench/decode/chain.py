"""A draft model's forwards on the static runtime (sps's small LM, swift's layer-skipped view of the target): every
row of a batch in ONE forward per drafted token, on a static cache of the draft's own (specbench.decode.static,
captured per shape on CUDA).

Each row's new tokens are right-padded to the block's (bucketed) length and written at the row's own next slots,
so slot s of a row always holds position s: nothing is ever compacted, a rejected draft is dropped by lowering the
row's length, and the mask is causal from each row's length, built on the device (slot s visible to the query at
position p when s <= p). A pad token lands past its row's real tokens, where no real query looks and the next
forward overwrites it. Rows keep their cache row while they stay in the batch; when rows leave (a finished
sequence), the rows after them move up, as the engine's do.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from specbench.decode.layout import AttentionLayout
from specbench.decode.static import BATCH_SIZES, BLOCK_SIZES, HEADROOM, StaticTarget, arrange, bucket


@dataclass
class StaticChain:
    """One draft model's static cache and forwards, shared by the drafters of every row (each names its row by
    an owner key, e.g. id(drafter))."""
    static: StaticTarget  # the draft model's
    layout: AttentionLayout  # the draft model's attention kinds (its masks)
    target: StaticTarget | None = None  # the target's: the draft cache is sized like it (one size for the run)
    owners: list[int] = field(default_factory=list)  # who holds each cache row, in row order

    @staticmethod
    def of(model: PreTrainedModel, target: StaticTarget, layers: int = 0) -> "StaticChain":
        static = StaticTarget(model, target.capture, layers=layers)
        target.drafting.append(static.graphs)
        return StaticChain(static, AttentionLayout.of(model.config), target)

    def arrange(self, owners: list[int]) -> list[bool]:
        """Cache rows in the order of `owners` (static.arrange); returns which rows are new."""
        fresh = arrange(self.static.cache, self.owners, owners)
        self.owners = list(owners)
        return fresh

    def target_rows(self) -> int:
        return self.target.cache.plan.rows if self.target is not None and self.target.cache is not None else 0

    def target_slots(self) -> int:
        return self.target.capacity - HEADROOM if self.target is not None and self.target.cache is not None else 0

    def logits(self, feeds: list[list[int]], lengths: list[int]) -> torch.Tensor:
        """Row b's draft logits [rows, V] after feeding feeds[b] (non-empty) at slots lengths[b], lengths[b] + 1, ...
        (the row's cache holds its first lengths[b] tokens)."""
        model = self.static.model
        rows, size = bucket(len(feeds), BATCH_SIZES), bucket(max(map(len, feeds)), BLOCK_SIZES)
        before = self.static.cache
        self.static.reserve(max(rows, self.target_rows()), max(self.target_slots(), max(lengths) + size))
        if before is not None and self.static.cache is not before and any(lengths):
            raise ValueError("a draft model's static cache outgrew the target's in mid-generation: use --runtime eager")
        device = model.device
        padded = [feed + [0] * (size - len(feed)) for feed in feeds] + [[0] * size] * (rows - len(feeds))
        start = torch.tensor(lengths + [0] * (rows - len(feeds)), device=device)
        positions = start[:, None] + torch.arange(size, device=device)
        slots = torch.arange(self.static.capacity, device=device)
        masks = self.layout.masks(slots[None, None, :] <= positions[:, :, None], positions,
                                  slots.expand(rows, -1) if self.layout.windows else None, model.dtype)
        inputs = {"input_ids": torch.tensor(padded, device=device), "position_ids": positions,
                  "attention_mask": masks}
        last = torch.tensor([len(feed) - 1 for feed in feeds], device=device)
        if size <= BLOCK_SIZES[-1]:  # a captured shape: every position's logits
            out = self.static.forward(inputs, start, size, False)
            return out.logits[torch.arange(len(feeds), device=device), last]
        # A prefill (uncaptured): only the positions some row ends at, so [rows, positions, V] stays small.
        ends, which = torch.unique(last, return_inverse=True)
        out = self.static.forward(inputs, start, ends, False)
        return out.logits[torch.arange(len(feeds), device=device), which]
