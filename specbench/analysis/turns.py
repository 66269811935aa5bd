"""The turns of a run as they were decoded: one group per generate call, i.e. one turn of one question at batch size
one, or turn k of every question of a batch (its rows share the batch's forwards, wall time and energy)."""
from __future__ import annotations

from collections import defaultdict

from specbench.run.record import Record


def turn_groups(records: list[Record]) -> dict[tuple, list[tuple[Record, int]]]:
    """(method, task, temperature, batch size, repeat, batch or question, turn) -> the (record, turn index) pairs
    decoded together, in record order."""
    groups: dict[tuple, list[tuple[Record, int]]] = defaultdict(list)
    for r in records:
        place = ("batch", r.batch.index) if r.batch is not None and r.batch_size > 1 else ("question", str(r.question_id))
        for turn in range(len(r.choice.new_tokens)):
            groups[(r.method, r.task, r.temperature, r.batch_size, r.repeat, place, turn)].append((r, turn))
    return dict(groups)
