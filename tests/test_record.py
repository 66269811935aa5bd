"""The typed record: what the writer writes is what every reader reads back; records from before the schema was
named still read; a malformed or newer record is one clear error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.errors import SpecbenchError
from specbench.run.record import SCHEMA, BatchPlace, Choice, Record, Worker
from specbench.run.records import RecordWriter, read_records


def _record(**changes) -> Record:
    choice = Choice(turns=["a b"], new_tokens=[2], wall_time=[0.5], accept_lengths=[[1, 1]], decoding_steps=[2],
                    token_ids=[[5, 6]], draft_time=[0.1], verify_time=[0.3], stop_reason=["eos"])
    values = dict(method="pld", task="gsm8k", temperature=0.0, question_id=7, choice=choice, lossless=True,
                  category="math", target="t", seed=1, max_new_tokens=8, repeat=1, tstamp=12.5,
                  worker=Worker(0, "host", "cpu: x"))
    values.update(changes)
    return Record(**values)


@pytest.mark.parametrize("record", [
    _record(),
    _record(batch_size=4, batch=BatchPlace(1, 3), question_id="q-1", temperature=1.0),
])
def test_written_records_read_back_equal(tmp_path: Path, record: Record) -> None:
    if record.batch_size > 1:
        record.choice.batch_wall_time = [0.9]
    writer = RecordWriter(tmp_path)
    writer.write(record)
    (back,) = read_records(tmp_path)
    assert back == record
    assert back.key() in RecordWriter(tmp_path).done
    raw = json.loads((tmp_path / "records.jsonl").read_text())
    assert raw["schema"] == SCHEMA and len(raw["choices"]) == 1
    assert ("batch_size" in raw) == (record.batch_size > 1)  # single-question records as before batching


def test_a_record_from_before_the_schema_reads_with_defaults() -> None:
    old = {"method": "vanilla", "task": "qa", "temperature": 0, "question_id": 3,
           "choices": [{"turns": ["x"], "new_tokens": [1], "wall_time": [0.1], "accept_lengths": [[1]],
                        "decoding_steps": [1], "token_ids": [[9]]}]}
    record = Record.from_json(old, "old")
    assert (record.repeat, record.batch_size, record.lossless, record.worker) == (0, 1, True, None)
    assert record.choice.draft_time == [] and record.task_category == "qa"
    assert record.key() == ("vanilla", "qa", 0.0, "3", 0, 1)


@pytest.mark.parametrize("raw, says", [
    ({"method": "pld"}, "KeyError"),
    ({**_record().to_json(), "choices": []}, "ValueError"),
    ([1, 2], "not an object"),
    ({**_record().to_json(), "schema": SCHEMA + 1}, "newer than this specbench"),
])
def test_a_malformed_record_is_one_line(raw, says: str) -> None:
    with pytest.raises(SpecbenchError, match=says) as caught:
        Record.from_json(raw, "run/records.jsonl:3")
    assert str(caught.value).startswith("run/records.jsonl:3: not a specbench record")
    assert "\n" not in str(caught.value)


def test_run_info_round_trips_and_reads_runs_from_before_its_schema(tmp_path) -> None:
    import json

    from specbench.run.run_info import SCHEMA as INFO_SCHEMA
    from specbench.run.run_info import RunInfo, read_run_info

    info = RunInfo(command="python -m specbench run", started="2026-11-26T00:00:00+00:00", settings={"target": "t"},
                   method_options={"pld@num_tokens=4": {"max_ngram": 3, "min_ngram": 1, "num_tokens": 4}})
    (tmp_path / "run.json").write_text(json.dumps(info.to_json()))
    assert read_run_info(tmp_path) == info and info.to_json()["schema"] == INFO_SCHEMA
    old = {"command": "c", "started": "s", "settings": {"target": "t"}, "environment": {"dtype": "float32"}}
    (tmp_path / "run.json").write_text(json.dumps(old))  # schema 1: no "schema", no method_options
    read = read_run_info(tmp_path)
    assert read.environment == {"dtype": "float32"} and read.method_options == {} and read.resumed == []
    (tmp_path / "run.json").write_text(json.dumps({**old, "schema": INFO_SCHEMA + 1}))
    with pytest.raises(SpecbenchError, match="newer than this specbench"):
        read_run_info(tmp_path)
    assert read_run_info(tmp_path / "absent") == RunInfo()
