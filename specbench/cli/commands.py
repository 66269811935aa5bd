"""Every command: its parser (added in this order to `specbench --help`) and its handler, each pair in the module of
its command. The heavy imports happen inside the handlers, so `list` and `--help` stay fast."""
from __future__ import annotations

from specbench.cli.info_command import (
                                        add_bench_parser,
                                        add_costs_parser,
                                        add_doctor_parser,
                                        add_list_parser,
                                        cmd_bench,
                                        cmd_costs,
                                        cmd_doctor,
                                        cmd_list,
)
from specbench.cli.report_command import (
                                        add_check_parser,
                                        add_export_parser,
                                        add_report_parser,
                                        cmd_check,
                                        cmd_export,
                                        cmd_report,
)
from specbench.cli.run_command import add_run_parser, add_tune_parser, cmd_run, cmd_tune
from specbench.cli.tasks_command import add_tasks_parser, cmd_tasks
from specbench.cli.train_command import (
                                        add_datastore_parser,
                                        add_distill_parser,
                                        add_train_parser,
                                        cmd_datastore,
                                        cmd_distill,
                                        cmd_train,
)

PARSERS = (add_run_parser, add_tune_parser, add_report_parser, add_export_parser, add_check_parser, add_doctor_parser,
           add_list_parser, add_train_parser, add_distill_parser, add_datastore_parser, add_tasks_parser,
           add_bench_parser, add_costs_parser)
COMMANDS = {"run": cmd_run, "distill": cmd_distill, "report": cmd_report, "export": cmd_export, "check": cmd_check,
            "list": cmd_list, "bench": cmd_bench, "train": cmd_train, "datastore": cmd_datastore, "tune": cmd_tune,
            "doctor": cmd_doctor, "tasks": cmd_tasks, "costs": cmd_costs}
