"""A draft model's forwards (sps's small LM, swift's layer-skipped view of the target): every row of a batch in ONE
forward per drafted token, on the draft's own SlotCache through its runner (specbench.decode.runner: the target's
shape policy, captured per shape on CUDA).

Each row's new tokens are right-padded to the block's length and written at the row's own next slots, so slot s of
a row always holds position s: nothing is ever compacted, a rejected draft is dropped by lowering the row's length,
and the mask is causal from each row's length, built on the device (slot s visible to the query at position p when
s <= p). A pad token lands past its row's real tokens, where no real query looks and the next forward overwrites
it. Row b of the cache is the batch's row b (DecodeContext.row): the engine moves the draft's rows with its own
when rows leave (runner.keep_rows, Drafter.row_caches); a call over a subset of the batch's rows names them
(`cache_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specbench.decode.inputs import to_device
from specbench.decode.layout import AttentionLayout
from specbench.decode.runner import ModelRunner


@dataclass
class DraftChain:
    """One draft model's cache and forwards, shared by the drafters of every row (row b: the batch's row b)."""
    runner: ModelRunner  # the draft model's (its decoder's, with `head`)
    layout: AttentionLayout  # the draft model's attention kinds (its masks)
    # Rows of the draft's lm_head it scores (a reduced draft vocabulary: cheaper on a CPU), applied to the decoder's
    # last hidden state; None: the model's own logits.
    head: torch.Tensor | None = None

    @staticmethod
    def of(runner: ModelRunner, head: torch.Tensor | None = None) -> "DraftChain":
        return DraftChain(runner, AttentionLayout.of(runner.model.config), head)

    def logits(self, feeds: list[list[int]], lengths: list[int], batch_rows: list[int]) -> torch.Tensor:
        """The draft logits [len(feeds), V] (V: the head's rows, with one) of the batch's rows `batch_rows` after
        feeding feeds[i] (non-empty) to row batch_rows[i] at slots lengths[i], lengths[i] + 1, ... (its cache holds
        its first lengths[i] tokens)."""
        return self.last_logits(feeds, lengths, batch_rows, 1)[:, 0]

    def last_logits(self, feeds: list[list[int]], lengths: list[int], batch_rows: list[int], count: int
                    ) -> torch.Tensor:
        """As logits(), at each row's last `count` fed positions: [rows, count, V] (every feed holds >= count). The
        host's inputs (ids, start slots, the positions read) go to the device in one copy."""
        runner = self.runner
        model = runner.model
        cache_rows = runner.cache_rows(batch_rows)
        shape = runner.fit(len(feeds), max(map(len, feeds)), max(lengths), gathered=cache_rows is not None)
        rows, size = shape.rows, shape.tokens
        device = model.device
        read = [[len(feed) - count + j for j in range(count)] for feed in feeds]  # [rows, count] block columns
        # Kept positions: every one of a captured shape or of a decoder's output (`head`), else only those some row
        # reads (so [rows, positions, V] stays small).
        everything = shape.captured or self.head is not None
        kept = list(range(size)) if everything else sorted({c for columns in read for c in columns})
        column = {c: i for i, c in enumerate(kept)}
        ids = np.zeros((rows, size), dtype=np.int64)
        for b, feed in enumerate(feeds):
            ids[b, : len(feed)] = feed
        start = np.zeros(rows, dtype=np.int64)
        start[: len(feeds)] = lengths
        which = np.array([[column[c] for c in columns] for columns in read], dtype=np.int64)
        staged = to_device(np.concatenate([ids.ravel(), start, which.ravel(), np.array(kept, dtype=np.int64)]),
                           device)
        at = rows * size
        positions = staged[at : at + rows, None] + torch.arange(size, device=device)
        which_kept = staged[at + rows : at + rows + which.size].view(len(feeds), count)
        slots = torch.arange(shape.key_slots, device=device)
        masks = self.layout.masks(slots[None, None, :] <= positions[:, :, None], positions,
                                  slots.expand(rows, -1) if self.layout.windows else None, model.dtype)
        inputs = {"input_ids": staged[:at].view(rows, size), "position_ids": positions, "input_pos": positions,
                  "attention_mask": masks, **({} if cache_rows is None else {"cache_rows": cache_rows})}
        row = torch.arange(len(feeds), device=device)[:, None]
        if self.head is not None:
            hidden = runner.forward(inputs, shape, None, False).last_hidden_state
            return hidden[row, which_kept] @ self.head.T
        keep = size if shape.captured else staged[at + rows + which.size :]
        return runner.forward(inputs, shape, keep, False).logits[row, which_kept]
