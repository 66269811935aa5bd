"""The one writer of a run folder, for the single-process run and the Ray driver alike: it checks that the folder's
earlier records came from the same hardware, writes run.json (settings, environment, the run's fixed costs, every
worker, every method's options as it runs), appends each record once as a whole line, and keeps the load log."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Collection, Iterable

from tqdm import tqdm

from specbench.decode.cost_model import CostModel
from specbench.run.load import LoadLog
from specbench.run.record import Record
from specbench.run.records import SUPERSEDED, RecordWriter, supersede
from specbench.run.run_info import (
    FOLDER_COSTS,
    check_same_hardware,
    write_capture_report,
    write_load_log,
    write_run_info,
)


class RunWriter:
    def __init__(self, out: Path, settings: dict[str, Any], environment: dict[str, Any], costs: CostModel,
                 workers: list[dict[str, Any]], methods: dict[str, dict[str, Any]],
                 rerun: Collection[tuple] = ()) -> None:
        """rerun: the record keys of the jobs decoded again whole (RunPlan.rerun_keys), whose earlier records move
        to records.superseded.jsonl now, once the run has loaded and is about to decode: a run refused while it
        loads (a bad draft, say) leaves every record where it was."""
        check_same_hardware(out, environment)
        write_run_info(out, settings, environment, costs.to_dict(), workers, methods)
        (out / FOLDER_COSTS).unlink(missing_ok=True)  # run.json holds the costs now: the early copy is not needed
        self.out = out
        moved = supersede(out, set(rerun))
        if moved:
            tqdm.write(f"{moved} earlier record(s) of questions that only some methods had finished are decoded again "
                       f"by every method, so that each question is timed in one process (the earlier ones: "
                       f"{SUPERSEDED})", file=sys.stderr)
        self.records = RecordWriter(out)

    def add(self, records: Iterable[Record]) -> None:
        """Each record not yet in the folder: a batch cut short by a stop, or a question requeued after a worker
        died, is decoded whole again and its finished records come back twice."""
        for record in records:
            if record.key() not in self.records.done:
                self.records.write(record)

    def write_load(self, log: LoadLog) -> None:
        write_load_log(self.out, log.to_dict())

    def write_capture(self, report: dict[str, Any] | None) -> None:
        """run.json's cuda_graphs as the run ends: the fixed shapes met, captured and failed (None: not at fixed
        shapes)."""
        if report is not None:
            write_capture_report(self.out, report)
