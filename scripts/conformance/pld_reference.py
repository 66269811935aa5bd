"""Saxena's prompt lookup decoding, run unchanged, on the seeded tiny target: the golden trace of `pld`.

    python scripts/conformance/pld_reference.py --notebook demo-pld.ipynb --commit SHA --out TRACE.json

Runs in the reference code's own venv (transformers 4.36.2, torch 2.13.0: scripts/conformance/pld.sh makes it), never
with specbench. The reference is the notebook of github.com/apoorvumang/prompt-lookup-decoding: its code cells that
define `find_candidate_pred_tokens` and `greedy_search_pld` (and the imports before them) are executed as they are,
and `greedy_search_pld` decodes each prompt of tiny_target.prompts() with its defaults (3-gram window, 10 tokens).
What each step drafted and accepted is read off the target's forwards (a forward pre-hook: the tokens beyond the
cache are the last accepted token and the draft), so nothing of the reference is replaced.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402


def reference_code(notebook: Path) -> dict:
    """The notebook's code cells from its big import cell through the one defining greedy_search_pld, executed."""
    cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    first = next(i for i, c in enumerate(cells) if "GreedySearchDecoderOnlyOutput" in c)
    last = next(i for i, c in enumerate(cells) if "def greedy_search_pld" in c)
    namespace: dict = {}
    for cell in cells[first:last + 1]:
        exec(compile(cell, f"{notebook.name}", "exec"), namespace)
    return namespace


def past_length(past) -> int:
    if past is None:
        return 0
    if hasattr(past, "get_seq_length"):
        return int(past.get_seq_length())
    return int(past[0][0].shape[2])


def decode(ref: dict, model, prompt: list[int], max_new_tokens: int, eos: int) -> dict:
    forwards: list[tuple[int, list[int]]] = []  # (cached positions, the tokens fed) per target forward

    def record(module, args, kwargs):
        forwards.append((past_length(kwargs.get("past_key_values")), kwargs["input_ids"][0].tolist()))

    hook = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        ids = torch.tensor([prompt])
        out = ref["greedy_search_pld"](
            model, ids, attention_mask=torch.ones_like(ids),
            stopping_criteria=transformers.StoppingCriteriaList(
                [transformers.MaxLengthCriteria(max_length=len(prompt) + max_new_tokens)]),
            draft_matching_window_size=3, draft_num_candidate_tokens=10, use_cache=True, pad_token_id=0,
            eos_token_id=eos, return_dict_in_generate=True, print_output=False)
    finally:
        hook.remove()
    sequence = out.sequences[0].tolist()
    # Step i's context is what precedes its draft: the prompt at first, then (the cache cut to the context less its
    # last token) cached + 1 tokens.
    contexts = [len(prompt)] + [cached + 1 for cached, _ in forwards[1:]] + [len(sequence)]
    steps = []
    for i, (cached, fed) in enumerate(forwards):
        k = cached + len(fed) - contexts[i]
        draft = fed[len(fed) - k:]
        found = ref["find_candidate_pred_tokens"](torch.tensor([sequence[:contexts[i]]]), 3, 10)
        steps.append({"context": contexts[i], "draft": draft, "placeholder": len(found) == 0,
                      "accepted": contexts[i + 1] - contexts[i] - 1})
    return {"prompt": prompt, "output": sequence[len(prompt):], "steps": steps}


def margins(model, sequence: list[int], start: int) -> float:
    """The smallest gap between the target's top two logits over the decoded positions (a near-tie could go either
    way under another library's float sums)."""
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0, start - 1:-1]
    top = logits.topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, required=True, help="demo-pld.ipynb of the reference repository")
    parser.add_argument("--commit", required=True, help="the reference repository's commit (recorded)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=96, help="new tokens per prompt")
    args = parser.parse_args()
    ref = reference_code(args.notebook)
    model = tiny_target.build()
    eos = tiny_target.PLACEHOLDER  # a token the target never picks: every prompt decodes its whole budget
    runs = [decode(ref, model, p, args.tokens, eos) for p in tiny_target.prompts()]
    gap = min(margins(model, r["prompt"] + r["output"], len(r["prompt"])) for r in runs)
    trace = {
        "method": "pld",
        "reference": {"repository": "github.com/apoorvumang/prompt-lookup-decoding", "commit": args.commit,
                      "code": "demo-pld.ipynb: find_candidate_pred_tokens, greedy_search_pld",
                      "settings": {"draft_matching_window_size": 3, "draft_num_candidate_tokens": 10}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(model),
                   "eos": eos},
        "smallest_top2_gap": round(gap, 4),
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(trace, indent=1) + "\n")
    steps = [s for r in runs for s in r["steps"]]
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps, {sum(not s['placeholder'] for s in steps)} drafted "
          f"from a match, mean accepted {sum(s['accepted'] for s in steps) / len(steps):.2f}, smallest top-2 gap {gap:.3f}")


if __name__ == "__main__":
    main()
