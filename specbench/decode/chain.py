"""A draft model's forwards (sps's small LM, swift's layer-skipped view of the target): every row of a batch in ONE
forward per drafted token, on the draft's own SlotCache through its runner (specbench.decode.runner: the target's
shape policy, captured per shape on CUDA).

Each row's new tokens are right-padded to the block's length and written at the row's own next slots, so slot s of
a row always holds position s: nothing is ever compacted, a rejected draft is dropped by lowering the row's length,
and the mask is causal from each row's length, built on the device (slot s visible to the query at position p when
s <= p). A pad token lands past its row's real tokens, where no real query looks and the next forward overwrites
it. Rows keep their cache row while they stay in the batch; when rows leave (a finished sequence), the rows after
them move up, as the engine's do.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbench.decode.layout import AttentionLayout
from specbench.decode.runner import ModelRunner


@dataclass
class DraftChain:
    """One draft model's cache and forwards, shared by the drafters of every row (each names its row by an owner
    key, e.g. id(drafter))."""
    runner: ModelRunner  # the draft model's (its decoder's, with `head`)
    layout: AttentionLayout  # the draft model's attention kinds (its masks)
    # Rows of the draft's lm_head it scores (a reduced draft vocabulary: cheaper on a CPU), applied to the decoder's
    # last hidden state; None: the model's own logits.
    head: torch.Tensor | None = None
    owners: list[int] = field(default_factory=list)  # who holds each cache row, in row order

    @staticmethod
    def of(runner: ModelRunner, head: torch.Tensor | None = None) -> "DraftChain":
        return DraftChain(runner, AttentionLayout.of(runner.model.config), head)

    def arrange(self, owners: list[int]) -> list[bool]:
        """Cache rows in the order of `owners` (kv.arrange); returns which rows are new."""
        fresh = self.runner.arrange(self.owners, owners)
        self.owners = list(owners)
        return fresh

    def logits(self, feeds: list[list[int]], lengths: list[int]) -> torch.Tensor:
        """Row b's draft logits [rows, V] (V: the head's rows, with one) after feeding feeds[b] (non-empty) at slots lengths[b], lengths[b] + 1, ...
        (the row's cache holds its first lengths[b] tokens)."""
        return self.last_logits(feeds, lengths, 1)[:, 0]

    def last_logits(self, feeds: list[list[int]], lengths: list[int], count: int) -> torch.Tensor:
        """As logits(), at each row's last `count` fed positions: [rows, count, V] (every feed holds >= count)."""
        runner = self.runner
        model = runner.model
        shape = runner.fit(len(feeds), max(map(len, feeds)), max(lengths))
        rows, size = shape.rows, shape.tokens
        device = model.device
        padded = [feed + [0] * (size - len(feed)) for feed in feeds] + [[0] * size] * (rows - len(feeds))
        start = torch.tensor(lengths + [0] * (rows - len(feeds)), device=device)
        positions = start[:, None] + torch.arange(size, device=device)
        slots = torch.arange(shape.key_slots, device=device)
        masks = self.layout.masks(slots[None, None, :] <= positions[:, :, None], positions,
                                  slots.expand(rows, -1) if self.layout.windows else None, model.dtype)
        inputs = {"input_ids": torch.tensor(padded, device=device), "position_ids": positions,
                  "input_pos": positions, "attention_mask": masks}
        first = torch.tensor([len(feed) - count for feed in feeds], device=device)
        last = first[:, None] + torch.arange(count, device=device)  # [rows, count]: the positions read
        row = torch.arange(len(feeds), device=device)[:, None]
        if self.head is not None:
            hidden = runner.forward(inputs, shape, None, False).last_hidden_state
            return hidden[row, last] @ self.head.T
        if shape.captured:  # a captured shape: every position's logits
            out = runner.forward(inputs, shape, size, False)
            return out.logits[row, last]
        # Only the positions some row reads, so [rows, positions, V] stays small.
        ends, which = torch.unique(last, return_inverse=True)
        out = runner.forward(inputs, shape, ends, False)
        return out.logits[row, which]
