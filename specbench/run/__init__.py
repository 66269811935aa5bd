"""Running a benchmark on the decode core: tasks and question selection, the method registry, the run folder
(records, run.json, its lock, stored costs, machine load) and its one writer, single-process or on Ray workers."""
