"""The table and README.md of a profile-replay folder (scripts/figures/profile_replay.sh): per method, the profile
it replayed (measured on the default target: its τ there), the τ its replay reached at the shape and its speedup
over vanilla in the same run (that run's leaderboard), the machine and its load. Everything is TIMING-ONLY.
Usage: python scripts/figures/profile_replay_table.py OUT TEMPERATURE RECORDS_RUN SCRIPT_COMMAND RUN_COMMAND"""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

out, t, source, script, command = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rows, missing, shape, device, threshold = [], [], "", "", 1.0
for profile_path in sorted((out / "profiles").glob(f"speculation_profile_*_T{t}.json")):
    method = profile_path.name.removeprefix("speculation_profile_").removesuffix(f"_T{t}.json")
    if not (out / method / f"leaderboard_T{t}.csv").is_file():
        error = out / method / "error.txt"
        missing.append(f"{method} ({'failed: ' + error.read_text().strip() if error.is_file() else 'not run'})")
        continue
    profile = json.loads(profile_path.read_text())
    board = pd.read_csv(out / method / f"leaderboard_T{t}.csv", comment="#", index_col=0)
    spec = next(m for m in board.index if m != "vanilla")
    info = json.loads((out / method / "run" / "run.json").read_text())
    shape, device = info["settings"]["target"], info.get("environment", {}).get("device", "?")
    busy = max((max(e.get("at_start", 0), e.get("max_share", 0)) for e in info.get("load", [])), default=0)
    threshold = min([threshold, *(e.get("threshold", 1.0) for e in info.get("load", []))])
    rows.append({
        "method": method, "replayed as": spec, "profile": f"profiles/{profile_path.name}",
        "τ default target": round(profile["mean_accept_length"], 3), "positions": profile["num_speculative_tokens"],
        # ± (a 95% interval paired with vanilla) only where the run had two questions or more
        "τ replayed": board.loc[spec, "overall_tau"], "τ replayed ±": board.get("overall_tau_ci95", {}).get(spec),
        "speedup": board.loc[spec, "overall_speedup"], "speedup ±": board.get("overall_speedup_ci95", {}).get(spec),
        "questions": int(board.loc[spec, "overall_questions"]), "max CPU share of other work %": round(100 * busy),
    })
if not rows:
    sys.exit(f"{out}: no replayed method (no <method>/leaderboard_T{t}.csv)")
table = pd.DataFrame(rows).sort_values("speedup", ascending=False).dropna(axis=1, how="all")
shared = table["max CPU share of other work %"].max() > 100 * threshold  # the runs' own busy threshold
label = (f"TIMING-ONLY: each method at {shape} (random weights) with synthetic acceptance replaying its own "
         f"acceptance profile measured on the default target from {source}/records.jsonl; T={t}; "
         + ("timed beside other work on a shared machine." if shared else "timed on an idle machine."))
(out / f"replay_T{t}.csv").write_text(f"# {label}\n" + table.to_csv(index=False), encoding="utf-8")
(out / f"replay_T{t}.md").write_text(f"{label}\n\n{table.to_markdown(index=False)}\n", encoding="utf-8")
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
facts = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lscpu)}
wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")
flags = " ".join(f for f in facts.get("Flags", "").split() if f in wanted)
load_line = ("**Load warning:** the machine was shared with other jobs while these runs were timed" if shared
             else "Idle: other processes stayed under the runs' busy threshold (`run.json` `load`) while these "
                  "runs were timed")
readme = f"""# Acceptance profiles replayed at {shape} (TIMING-ONLY)

Made by `{script}`: `python -m specbench report {source}` wrote each method's acceptance profile
(`profiles/`, the `speculation_profile.json` schema; nothing was decoded again on the default target), then per
method, beside vanilla in the same run:

    {command}

Every number here is **TIMING-ONLY**: the target is the shape's random weights and every drafted token was accepted
or not by the replayed profile's conditional per-position rates (per question category where the profile has it),
not by verification. A row says how fast the method would decode at this shape if its drafter accepted as it did on
the default target; nothing here says how well any drafter drafts at this shape. The replay carries the acceptance,
not the drafts: a method whose drafts at the shape are shallower than on the default target accepts less than its
profile (the training-free methods that copy from the text draft little over random weights' text), so compare
τ replayed with τ default target before reading a row's speedup.

<!-- src: replay_T{t}.md -->
Machine: {facts.get("Model name", "?")} [{flags}], {device}. {load_line} (the table's last column: the largest share
of the CPUs other processes used, from each run's `run.json` `load`), and each method decoded few questions (the
table's questions column): the speedups describe these runs and do not rank methods whose costs are close.

<!-- src: replay_T{t}.md -->
{table.to_markdown(index=False)}

Table: `replay_T{t}.md` / `.csv` (speedup and τ from each `<method>/leaderboard_T{t}.csv`, ± where present the 95%
interval paired with vanilla; τ default target: the profile's `mean_accept_length`). Profiles: {", ".join(f"`{p}`" for p in table["profile"])}.
Each method's records and tables: `<method>/`.
""" + (f"\nProfiles not replayed here: {'; '.join(missing)}.\n" if missing else "")
(out / "README.md").write_text(readme, encoding="utf-8")
print(table.to_markdown(index=False))
