"""Every method of `list` on a tiny random target of each family the tests build (tests/test_families.py: full
attention, sliding windows, MLA, MoE), through the command line as a user runs it: the target saved with
save_pretrained beside the default target's tokenizer; its own self-distilled data (`distill`); the EAGLE, EAGLE-3,
Medusa and Hydra heads trained on it briefly (`train`, 20k positions at lr 0.01); a second tiny
model of the family as the sps draft; then `run` at T=0 and `check`. Writes one summary line per family.

    PYTHONPATH=. python scripts/figures/families.py --out results/families > reports/families/summary.txt

Takes about a minute per family on two cores. The ablation heads (eagle-features, ...) are EAGLE with other inputs
and need heads of their own; they are left out.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from specbench.cli import main as cli
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import load_tokenizer
from specbench.run.records import read_records
from specbench.run.registry import available_methods
from tests.test_families import FAMILIES, tiny

TRAINED = ("eagle", "eagle3", "medusa", "hydra")
HEAD_OF = {"eagle": "eagle", "eagle1": "eagle", "samd-eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa",
           "medusa-typical": "medusa", "hydra": "hydra"}


def quiet(args: list[str]) -> tuple[int, str]:
    """The CLI's exit code and what it wrote, without the progress bars."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli([str(a) for a in args])
    return code, out.getvalue() + err.getvalue()


def save(family: str, folder: Path, tokenizer, noise: float) -> Path:
    model = tiny(family, seed=0, vocab=len(tokenizer), noise=noise)
    model.config.max_position_embeddings = 2048  # the task prompts run past the tests' 256 positions
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def method_specs(folder: Path) -> list[str]:
    names = [n for n in available_methods() if not n.startswith("eagle-")]
    specs = []
    for name in names:
        if name in HEAD_OF:
            specs.append(f"{name}@head={folder / HEAD_OF[name]}")
        elif name == "sps":
            specs.append(f"sps@head={folder / 'draft'}")
        else:
            specs.append(name)
    return specs


def one_family(family: str, out: Path, data: Path, questions: Path, tokenizer) -> str:
    folder = out / family
    target = save(family, folder / "target", tokenizer, 0.0)
    save(family, folder / "draft", tokenizer, 1.5)
    code, text = quiet(["distill", "--target", target, "--data", data, "--prompts", "48", "--reply-tokens", "32",
                        "--batch-size", "16", "--out", folder / "data", "--features", folder / "features"])
    if code:
        return f"{family}: distill failed: {text.strip().splitlines()[-1]}"
    for method in TRAINED:
        code, text = quiet(["train", method, "--target", target, "--dataset", folder / "data", "--features",
                            folder / "features", "--out", folder / method, "--max-tokens", "20000", "--lr", "0.01",
                            "--batch-tokens", "512"])
        if code:
            return f"{family}: train {method} failed: {text.strip().splitlines()[-1]}"
    specs = method_specs(folder)
    code, text = quiet(["run", "--target", target, "--methods", ",".join(specs), "--tasks", "gsm8k,humaneval",
                        "--limit", "1", "--max-new-tokens", "32", "--temperatures", "0", "--question-dir", questions,
                        "--out", folder / "run", "--report-dir", folder / "report"])
    if code:
        return f"{family}: run failed: {text.strip().splitlines()[-1]}"
    code, text = quiet(["check", folder / "run"])
    (folder / "check.txt").write_text(text)
    identical = sum(line.endswith("OK") for line in text.splitlines())
    verdict = "check passed" if code == 0 else "check FAILED"
    return f"{family}: {verdict}, {identical} of {len(specs) - 1} methods identical to vanilla; τ {taus(folder / 'run')}"


def taus(run: Path) -> str:
    """Each method's τ over the run (tokens per target forward): above 1 where drafts were accepted."""
    steps: dict[str, list[int]] = {}
    for record in read_records(run):
        name = record.method.split("@")[0]
        steps.setdefault(name, []).extend(n for turn in record.choice.accept_lengths for n in turn)
    return " ".join(f"{name}={sum(v) / len(v):.2f}" for name, v in sorted(steps.items()) if name != "vanilla")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"))
    parser.add_argument("--question-dir", type=Path, default=Path("../shared/data/tasks"))
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    failed = 0
    for family in args.families.split(","):
        line = one_family(family, args.out, args.data, args.question_dir, tokenizer)
        failed += "passed" not in line
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
