"""EAGLE-1's reference (github.com/SafeAILab/EAGLE, the last EAGLE-1 code), run unchanged on the seeded tiny target.

    python scripts/conformance/eagle1_reference.py --ref REF_DIR --commit SHA --head-dir D --out TRACE.json

Runs in the reference code's own venv (transformers 4.36.2, torch 2.13.0: scripts/conformance/eagle1.sh makes it),
never with specbench. REF_DIR holds the reference's `eagle/model/` package as `git archive` gives it (nothing edited).
The tiny target, its tokenizer and the head folder are written as for EAGLE-2 (eagle_reference.py: the same
published EAGLE-1/2 head layout, config.json + pytorch_model.bin, and the same committed head), then the reference's
own EaModel.from_pretrained loads them and EaModel.eagenerate decodes at temperature 0 with its default tree
(`tree_choices=mc_sim_7b_63` of eagle/model/choices.py: 25 paths of child ranks, depth 5; the head drafts the same
tree, cnets.Model.init_tree).

Nothing of the reference is replaced or wrapped. What each step drafted and accepted is read while eagenerate runs,
by a sys.settrace tracer that only looks: the frame locals of generate_candidates, evaluate_posterior,
update_inference_inputs and topK_genrate at their return, and of topK_genrate at its call. The trace is checked
against the target itself: the features handed to topK_genrate are the target's final-norm hidden states of the
accepted tokens, and the output is the target's greedy continuation.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: no hub retries
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eagle_reference  # noqa: E402  (the tiny base folder, the head layout and the head: shared with EAGLE-2's)
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402


class Tracer:
    """Reads the reference's frames while eagenerate runs (sys.settrace; nothing is changed). Only the calls and
    returns of the functions named here are looked at; every other call returns at once."""

    def __init__(self, utils, cnets):
        from eagle.model.ea_model import EaModel
        unwrap = inspect.unwrap
        self.codes = {
            unwrap(cnets.Model.topK_genrate).__code__: "topk",
            unwrap(utils.generate_candidates).__code__: "candidates",
            unwrap(utils.evaluate_posterior).__code__: "evaluate_posterior",
            unwrap(utils.update_inference_inputs).__code__: "update",
            unwrap(utils.initialize_tree).__code__: "initialize_tree",
            unwrap(EaModel.eagenerate).__code__: "eagenerate",
        }
        self.events: list[tuple[str, str, dict]] = []

    def __call__(self, frame, event, arg):
        name = self.codes.get(frame.f_code)
        if name is None:
            return None
        if name == "topk":
            f = frame.f_locals
            stable = f["self"].stable_kv
            self.events.append((name, "call", {
                "features": f["hidden_states"].detach().clone(), "input_ids": f["input_ids"][0].tolist(),
                "stable_kv_len": None if stable is None else int(stable[0][0].shape[2])}))
        return self.local

    def local(self, frame, event, arg):
        if event != "return":
            return self.local
        name = self.codes[frame.f_code]
        f = frame.f_locals
        if name == "topk":  # (ss_token, ss_prob, ss_op): each expanded node's top-10 tokens and raw logits
            rec = {"ss_token": arg[0].tolist(), "ss_prob": arg[1].detach().clone()}
        elif name == "candidates":
            rec = {"tree_candidates": arg[2][0].tolist(), "candidates": arg[0].tolist()}
        elif name == "evaluate_posterior":
            rec = {"best_candidate": int(arg[0]), "accept_length": int(arg[1]),
                   "row_accept_lengths": f["candidates_accept_length"].tolist()}
        elif name == "update":
            rec = {"input_ids": arg[0][0].tolist(), "token": int(arg[-1])}
        elif name == "initialize_tree":
            rec = {"token": int(arg[-1])}
        else:
            rec = {"output_ids": arg[0].tolist()}
        self.events.append((name, "return", rec))
        return self.local


def rank_margin(ss_prob: torch.Tensor, ranks: int) -> float:
    """The smallest gap between consecutive raw logits among the ranks a static tree picks (0..ranks-1) and the
    next: a near-tie there would make the children's order a matter of float noise."""
    top = ss_prob[:, : ranks + 1]
    return float((top[:, :-1] - top[:, 1:]).min())


def decode(model, target, prompt: list[int], max_new_tokens: int, tracer: Tracer, paths: list[list[int]]) -> dict:
    tracer.events.clear()
    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = model.eagenerate(torch.tensor([prompt]), temperature=0.0, max_new_tokens=max_new_tokens)
    finally:
        sys.settrace(old)
    events = tracer.events
    assert events[-1][:2] == ("eagenerate", "return") and events[-1][2]["output_ids"] == out[0].tolist()
    seq = [(f"{n}.{w}", r) for n, w, r in events[:-1]]
    names = [s[0] for s in seq]
    # initialize_tree (prefill + topK_genrate), then per step generate_candidates, evaluate_posterior,
    # update_inference_inputs (which ends in topK_genrate for the next step's tree)
    assert names[:3] == ["topk.call", "topk.return", "initialize_tree.return"], names[:4]
    body = names[3:]
    per_step = ["candidates.return", "evaluate_posterior.return", "topk.call", "topk.return", "update.return"]
    assert len(body) % len(per_step) == 0 and all(
        body[i:i + len(per_step)] == per_step for i in range(0, len(body), len(per_step))), body[:10]
    with torch.no_grad():
        full_hidden = eagle_reference.final_norm_features(target, out)
    ids, root = list(prompt), seq[2][1]["token"]
    first = seq[0][1]
    assert first["stable_kv_len"] is None and first["input_ids"] == prompt + [root]
    assert torch.allclose(first["features"][0], full_hidden[:len(prompt)], atol=1e-4)
    ranks = 1 + max(p[-1] for p in paths)
    built = seq[1][1]  # the topK_genrate return that built the next tree
    margin = rank_margin(built["ss_prob"], ranks)
    steps = []
    for s in range(len(body) // len(per_step)):
        cand, ev, call, topk, upd = (x[1] for x in seq[3 + 5 * s: 8 + 5 * s])
        L = len(ids)
        tree = cand["tree_candidates"]
        assert tree[0] == root and len(tree) == 1 + len(paths)
        for i, p in enumerate(paths):  # a first-level node p is the root's p[0]-th ranked head pick
            assert len(p) > 1 or tree[1 + i] == built["ss_token"][0][p[0]]
        best, acc = ev["best_candidate"], ev["accept_length"]
        appended = cand["candidates"][best][:acc + 1]
        assert -1 not in appended and upd["input_ids"] == ids + appended
        ties = [i for i, a in enumerate(ev["row_accept_lengths"]) if a == acc]
        assert acc == 0 or best == ties[0], "torch.argmax takes the first of equal accept lengths"
        bonus = upd["token"]
        assert call["input_ids"] == ids + appended + [bonus]
        assert torch.allclose(call["features"][0], full_hidden[L:L + acc + 1], atol=1e-4)
        assert call["stable_kv_len"] == L, (call["stable_kv_len"], L)
        steps.append({
            "context": L,  # tokens before this step's tree (prompt + output so far)
            "tree_tokens": tree,  # root + the 25 nodes, in the order of the sorted paths
            "accept_length": acc,  # draft tokens accepted beyond the root
            "best_candidate": best,  # row of the reference's retrieve_indices
            "tied_rows": len(ties),
            "appended": appended,  # root + accepted nodes
            "bonus": bonus,  # argmax at the last accepted node: next step's root
            "rank_margin": margin,  # of the head's top-k picks that built this tree
        })
        built, margin = topk, rank_margin(topk["ss_prob"], ranks)
        ids, root = ids + appended, bonus
    assert ids == out[0].tolist()
    return {"prompt": prompt, "output": ids[len(prompt):], "prefill_token": seq[2][1]["token"],
            "steps": steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's eagle/model/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--head-dir", type=Path, required=True, help="the head's folder (model.safetensors): the fixture")
    p.add_argument("--work", type=Path, default=None, help="where the base and head folders go (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))
    from eagle.model import choices, cnets, utils
    from eagle.model.ea_model import EaModel  # the reference, as is

    t0 = time.time()
    target = tiny_target.build()
    work = args.work or Path(tempfile.mkdtemp(prefix="eagle1-ref-"))
    base, headdir = work / "tinybase", work / "tinyhead"
    eagle_reference.save_base(target, base)
    state = eagle_reference.load_head(args.head_dir)
    eagle_reference.save_head(state, headdir)

    model = EaModel.from_pretrained(base_model_path=str(base), ea_model_path=str(headdir)).eval()
    assert type(model.base_model).__module__.endswith("modeling_llama_kv")
    assert tiny_target.fingerprint(model.base_model) == tiny_target.fingerprint(target)
    loaded = model.ea_layer.state_dict()
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state), "head not loaded as written"
    tree_default = inspect.signature(inspect.unwrap(EaModel.eagenerate)).parameters["tree_choices"].default
    assert tree_default == choices.mc_sim_7b_63 == model.ea_layer.tree, "the head drafts the tree eagenerate verifies"
    paths = sorted(tree_default, key=lambda x: (len(x), x))  # generate_tree_buffers' node order
    assert model.ea_layer.fc.bias is not None and not hasattr(model.ea_layer.layers[0], "input_layernorm")

    tracer = Tracer(utils, cnets)
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(model, target, prompt, args.tokens, tracer, paths)
        run["greedy_matches"] = run["output"] == eagle_reference.greedy(target, prompt, len(run["output"]))
        runs.append(run)
    eag = inspect.signature(inspect.unwrap(EaModel.eagenerate)).parameters
    trace = {
        "method": "eagle1",
        "reference": {"repository": "github.com/SafeAILab/EAGLE", "commit": args.commit,
                      "code": "eagle/model/ea_model.py: EaModel.from_pretrained, EaModel.eagenerate; "
                              "eagle/model/cnets.py: Model.topK_genrate; eagle/model/utils.py; eagle/model/choices.py",
                      "settings": {"tree_choices": "mc_sim_7b_63 (eagle/model/choices.py)", "paths": paths,
                                   "parents": [-1 if len(q) == 1 else paths.index(q[:-1]) for q in paths],
                                   "top_k": cnets.top_k, "temperature": 0.0, "max_new_tokens": args.tokens},
                      "code_defaults": {"eagenerate": {k: eag[k].default for k in
                                                       ("temperature", "max_new_tokens", "max_length")}}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": tiny_target.PLACEHOLDER},
        "head": {"recipe": "eagle_reference.py distill, shipped as eagle_head/ (the EAGLE-2 trace's head)",
                 "layout": "config.json + pytorch_model.bin (EAGLE-1/2)", "sha256": eagle_reference.digest(state)},
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    steps = [s for r in runs for s in r["steps"]]
    acc = [s["accept_length"] for s in steps]
    hist = {a: acc.count(a) for a in sorted(set(acc))}
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps, mean accept_length {sum(acc) / len(acc):.2f}, "
          f"max {max(acc)}, histogram {hist}, outputs {[len(r['output']) for r in runs]}, greedy matches "
          f"{[r['greedy_matches'] for r in runs]}, tied-row steps {sum(s['tied_rows'] > 1 for s in steps)}, "
          f"min rank margin {min(s['rank_margin'] for s in steps):.2e}; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
