"""The typed record of a run: one per (method, task, temperature, question, repeat, batch size), written as one JSON
line of records.jsonl by the run's one writer and read back by every reader (report, export, check, scripts).

The JSON layout is Spec-Bench's answer files' (FastChat's), with `choices[0]` holding the turns, plus our fields.
Schema versions: 1 is every record written before the schema was named (no "schema" key); 2 adds the key and
nothing else; 3 adds `options`, the method's options as it ran (defaults included), and each turn's `step_ends`
(per-token latency); 4 adds each turn's `prompt_tokens` and `prefill_time` (the roofline's bytes and times) and,
where an energy counter was readable, `energy_j`. A field that early runs did not write reads as its default here, so old runs still read.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from specbench.errors import SpecbenchError

SCHEMA = 4


@dataclass
class Choice:
    """Every turn of one question as one method answered it (per-turn lists, in turn order)."""
    turns: list[str] = field(default_factory=list)  # the answers' text
    new_tokens: list[int] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)  # seconds, prefill included
    accept_lengths: list[list[int]] = field(default_factory=list)  # tokens emitted per target forward
    decoding_steps: list[int] = field(default_factory=list)  # target forwards
    token_ids: list[list[int]] = field(default_factory=list)
    draft_time: list[float] = field(default_factory=list)  # seconds in the drafter
    verify_time: list[float] = field(default_factory=list)  # seconds in the forward, verification, compaction
    stop_reason: list[str] = field(default_factory=list)  # "eos", "length" or "context"
    batch_wall_time: list[float] | None = None  # batches only: the whole batch's wall time per turn
    # Per turn, per step: seconds from the turn's start to the end of the step (its tokens share that time).
    step_ends: list[list[float]] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)  # the conversation's tokens before the turn's answer
    prefill_time: list[float] = field(default_factory=list)  # seconds of the first step's forward (the prefill)
    # Joules the device's counter (specbench.run.energy) read over the turn: the whole batch's at batch size above
    # one, like batch_wall_time; None where no counter was readable.
    energy_j: list[float] | None = None


@dataclass(frozen=True)
class Worker:
    """Where the record was decoded."""
    id: int = 0
    host: str = ""
    device: str = ""  # "cpu: <model> [flags]" or "cuda: <GPU name>"


@dataclass(frozen=True)
class BatchPlace:
    """Which batch of the task's questions this one was decoded in (batches of batch_size, in question order)."""
    index: int
    size: int  # questions in that batch (the last may be smaller than batch_size)


def record_key(method: str, task: str, temperature: float, question_id: int | str, repeat: int,
               batch_size: int) -> tuple:
    """What a resumed run checks to skip a finished record: one record per key."""
    return method, task, float(temperature), str(question_id), int(repeat), int(batch_size)


@dataclass
class Record:
    method: str
    task: str
    temperature: float
    question_id: int | str
    choice: Choice
    lossless: bool = True
    top_p: float = 1.0
    top_k: int = 0
    category: str | None = None
    target: str = ""
    seed: int = 0
    max_new_tokens: int = 0
    drafter_state: str = "generation"  # how long drafter state lives (Drafter.state_scope)
    repeat: int = 0
    batch_size: int = 1
    batch: BatchPlace | None = None
    tstamp: float = 0.0  # when the answer was finished (Spec-Bench's answer files keep it)
    worker: Worker | None = None
    options: dict[str, Any] | None = None  # the method's options as it ran, defaults included (None: before schema 3)
    # TIMING ONLY: the synthetic acceptance rates the run accepted drafts at (specbench.run.synthetic), not the
    # target's verification; None (not written): a verified run
    synthetic: list[float] | None = None
    schema: int = SCHEMA

    def key(self) -> tuple:
        return record_key(self.method, self.task, self.temperature, self.question_id, self.repeat, self.batch_size)

    @property
    def task_category(self) -> str:
        """The question's category, or its task when it has none (speed.py selects tasks by category)."""
        return self.category or self.task

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("choice", "batch", "worker")}
        out["choices"] = [{k: v for k, v in asdict(self.choice).items() if v is not None}]
        if self.batch_size == 1:  # as written before batching: single-question records carry no batch fields
            del out["batch_size"]
        else:
            out["batch"] = asdict(self.batch) if self.batch else None
        if self.worker is not None:
            out["worker"] = asdict(self.worker)
        if self.synthetic is None:
            del out["synthetic"]
        return out

    @staticmethod
    def from_json(raw: Any, origin: str) -> "Record":
        """A record from its JSON object; a malformed one is a SpecbenchError naming origin (file:line)."""
        try:
            if not isinstance(raw, dict):
                raise TypeError(f"a {type(raw).__name__}, not an object")
            if int(raw.get("schema", 1)) > SCHEMA:
                raise ValueError(f"schema {raw['schema']} is newer than this specbench's {SCHEMA}: upgrade it")
            known = {f.name for f in fields(Record)} - {"choice", "batch", "worker", "schema"}
            values = {k: raw[k] for k in known if raw.get(k) is not None}
            choice_fields = {f.name for f in fields(Choice)}
            (choice,) = raw["choices"]
            values["choice"] = Choice(**{k: v for k, v in choice.items() if k in choice_fields})
            if raw.get("batch"):
                values["batch"] = BatchPlace(int(raw["batch"]["index"]), int(raw["batch"]["size"]))
            if raw.get("worker"):
                values["worker"] = Worker(**raw["worker"])
            record = Record(**values)
            record.temperature, record.repeat = float(record.temperature), int(record.repeat)
            record.batch_size = int(record.batch_size)
            return record
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecbenchError(f"{origin}: not a specbench record ({type(exc).__name__}: {exc})") from None
