"""The named trees of Medusa's reference (medusa/model/medusa_choices.py), written as data for `tree=NAME`.

    python scripts/conformance/medusa_trees.py --repo GIT_DIR [--commit SHA] [--out methods/common/medusa_trees.json]

Reads the file from the reference repository (a clone or mirror; scripts/conformance/medusa.sh fetches one) at the
commit, takes each module-level NAME = [paths] literal as it is (ast.literal_eval: nothing is executed), and writes
them with their source. Each path lists child ranks: [0, 1] is the second-ranked guess of head 2 under the
first-ranked guess of head 1."""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

PATH = "medusa/model/medusa_choices.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--commit", default="e2a5d20c048a9b0a4092e6933c34313687422518")
    parser.add_argument("--out", type=Path, default=Path("methods/common/medusa_trees.json"))
    args = parser.parse_args()
    text = subprocess.run(["git", "-C", str(args.repo), "show", f"{args.commit}:{PATH}"], capture_output=True,
                          text=True, check=True).stdout
    trees = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            trees[node.targets[0].id] = [list(path) for path in ast.literal_eval(node.value)]
    out = {"source": f"github.com/FasterDecoding/Medusa@{args.commit}:{PATH}",
           "made_by": "scripts/conformance/medusa_trees.py", "trees": trees}
    args.out.write_text("{\n" + ",\n".join(
        [f' "source": {json.dumps(out["source"])}', f' "made_by": {json.dumps(out["made_by"])}',
         ' "trees": {\n' + ",\n".join(f'  {json.dumps(k)}: {json.dumps(v, separators=(",", ":"))}'
                                       for k, v in trees.items()) + "\n }"]) + "\n}\n")
    print(f"{args.out}: {', '.join(f'{k} ({len(v)} nodes)' for k, v in trees.items())}")


if __name__ == "__main__":
    main()
