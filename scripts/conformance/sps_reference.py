"""Spec-Bench's speculative sampling (SpS: a small draft LM + the target, HF assisted generation), run unchanged on
the seeded tiny target: a golden trace of `sps`.

    python sps_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--draft-dir FOLDER | --draft-out FOLDER]

Runs in the reference's own venv (transformers 4.37.1, the version Spec-Bench's requirements.txt pins; torch 2.13.0:
sps.sh makes it), never with specbench. REF_DIR holds Spec-Bench's `evaluation/` and `model/sps/` as `git archive`
gives them (nothing edited). What the reference does, and so what this driver calls:
  - evaluation/inference_sps.py's __main__ sets `GenerationMixin.assisted_decoding = assisted_decoding` (Spec-Bench's
    copy in model/sps/decoding.py, which also returns the step count and accept_length_list), loads the target and
    the drafter with AutoModelForCausalLM.from_pretrained, and each question goes through its `sps_forward`:
    `model.generation_config.max_new_tokens = N; model.generate(**inputs, generation_config=model.generation_config,
    assistant_model=drafter, do_sample=False, temperature=0.0)`. transformers 4.37.1's generate builds an
    AssistedCandidateGenerator (fresh for each generate call) and calls the patched assisted_decoding with it.
  - Spec-Bench sets nothing about the number of draft tokens: it is the drafter's generation_config default,
    num_assistant_tokens=5 with num_assistant_tokens_schedule="heuristic" (transformers 4.37.1: +2 after a step whose
    draft was all accepted, else -1, never below 1; the draft is also cut to max_length - len - 1).
Here: the target is scripts/conformance/tiny_target.py (its generation_config is the one LlamaForCausalLM makes from
its config, as from_pretrained does for a folder without generation_config.json, with eos_token_id set to token
100, which the target never picks, so every prompt decodes its whole budget, as the other traces do); the drafter is
a 2-layer Llama of the target's vocabulary (its own embeddings and lm_head), written as an HF folder (config.json +
model.safetensors, no generation_config.json: the defaults above apply) and loaded with
AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32) as inference_sps.py does (less
low_cpu_mem_usage/device_map="auto", which need accelerate and only place weights; CPU float32 here).
`sps_forward` is imported from evaluation/inference_sps.py; that module's imports of fastchat/shortuuid (used only
by its __main__ and run_eval, never by sps_forward) are satisfied by stand-in modules that raise if used.

Nothing of the reference is replaced or wrapped. What each step did is read off:
  - sys.setprofile on the candidate generator's get_candidates (its num_assistant_tokens, the draft length it asked
    the assistant for, the candidate ids and logits it returned) and update_candidate_strategy (num_matches: the
    reference's own accepted count, and num_assistant_tokens after), and on assisted_decoding's return (its
    accept_length_list and step);
  - forward pre-hooks on the target (the tokens it verifies past its cache) and a forward hook (its argmax there).

Drafter weights (--draft-dir takes a committed folder; without it they are made here): the target's embedding,
lm_head, final norm and first two decoder layers, then self-distilled (`distill`) on the target's greedy
continuations of random prompts (forward KL to the target's next-token distribution; AdamW), so that multi-token
accepts happen. Float training on CPU: ship the written folder with the trace rather than re-derive it.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers

HERE = Path(__file__).resolve().parent  # scripts/conformance/ in the checkout; else TINY_TARGET_DIR names it
sys.path.insert(0, os.environ.get("TINY_TARGET_DIR") or str(HERE))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

DRAFT_LAYERS = 2
EOS = tiny_target.PLACEHOLDER  # a token the target never picks: every prompt decodes its whole budget


def draft_config() -> transformers.LlamaConfig:
    cfg = tiny_target.config()
    cfg.num_hidden_layers = DRAFT_LAYERS
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "float32"
    return cfg


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def init_from_target(draft, target) -> None:
    """Embedding, lm_head, final norm and decoder layers 0..DRAFT_LAYERS-1 copied from the target (then distilled)."""
    draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    draft.lm_head.weight.copy_(target.lm_head.weight)
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    for mine, theirs in zip(draft.model.layers, target.model.layers):
        mine.load_state_dict(theirs.state_dict())


@torch.enable_grad()
def distill(draft, target, seed: int, prompts: int = 2048, prompt_len: int = 12, length: int = 120,
            steps: int = 800, batch: int = 64):
    """Forward KL(target || draft) of the next-token distributions at every position of the target's greedy
    continuations (`length` tokens) of `prompts` random prompts (never token 100), drawn from one generator; the
    draft's embedding and lm_head are trained too (they are its own). AdamW 3e-3, warmup 50, cosine; CPU float32."""
    gen = torch.Generator().manual_seed(seed + 1)
    V = tiny_target.VOCAB
    starts = torch.randint(0, V, (prompts, prompt_len), generator=gen)
    starts[starts == EOS] = 1
    with torch.no_grad():
        seqs = torch.cat([target.generate(s, attention_mask=torch.ones_like(s), max_new_tokens=length,
                                          do_sample=False, eos_token_id=None, pad_token_id=0)
                          for s in starts.split(512)])
        teacher = torch.cat([target(s).logits.log_softmax(-1) for s in seqs.split(256)])
    draft.train()
    opt = torch.optim.AdamW(draft.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    t0 = time.time()
    for step in range(steps):
        rows = torch.randint(0, prompts, (batch,), generator=gen)
        logp = draft(seqs[rows]).logits.log_softmax(-1)
        t = teacher[rows]
        loss = (t.exp() * (t - logp)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                top1 = float((logp.argmax(-1) == t.argmax(-1)).float().mean())
            print(f"distill step {step}: kl {float(loss.detach()):.4f} top1 {top1:.3f} ({time.time() - t0:.0f} s)",
                  file=sys.stderr)
    draft.eval()


def save_draft(draft, folder: Path) -> None:
    """config.json (config.save_pretrained) + model.safetensors (float32), the HF folder layout."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    draft.config.save_pretrained(str(folder))
    save_file({k: v.detach().contiguous() for k, v in draft.state_dict().items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})


def reference_modules(ref: Path):
    """Spec-Bench's sps_forward and assisted_decoding, imported from REF_DIR. evaluation/inference_sps.py imports
    fastchat.utils.str_to_torch_dtype and evaluation.eval (fastchat.llm_judge.common, fastchat.model, shortuuid) at
    module level; none of them is on sps_forward's path, so they are stand-ins that raise if called."""
    def unused(name):
        def f(*a, **k):
            raise RuntimeError(f"{name} is a stand-in: not on sps_forward's code path")
        return f

    stubs = {"fastchat": {}, "fastchat.utils": {"str_to_torch_dtype": unused("str_to_torch_dtype")},
             "fastchat.llm_judge": {}, "fastchat.llm_judge.common": {"load_questions": unused("load_questions")},
             "fastchat.model": {"get_conversation_template": unused("get_conversation_template")},
             "shortuuid": {"uuid": unused("shortuuid.uuid")}}
    for name, attrs in stubs.items():
        if name in sys.modules:
            continue
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mod.__path__ = []  # a package, so that submodules resolve to the stand-ins above
        sys.modules[name] = mod
    sys.path.insert(0, str(ref))
    from evaluation.inference_sps import sps_forward  # noqa: E402  (the reference, as is)
    from model.sps.decoding import assisted_decoding  # noqa: E402
    return sps_forward, assisted_decoding


def past_length(past) -> int:
    if past is None:
        return 0
    if hasattr(past, "get_seq_length"):
        return int(past.get_seq_length())
    return int(past[0][0].shape[2])


def decode(sps_forward, assisted_decoding, target, drafter, prompt: list[int], max_new_tokens: int) -> dict:
    from transformers.generation.candidate_generator import AssistedCandidateGenerator
    get_code = AssistedCandidateGenerator.get_candidates.__code__
    update_code = AssistedCandidateGenerator.update_candidate_strategy.__code__
    decoding_code = assisted_decoding.__code__
    drafts, updates, ret, fed = [], [], {}, []

    def profile(frame, event, arg):
        code = frame.f_code
        if code is get_code:
            loc = frame.f_locals
            if event == "call":
                drafts.append({"context": int(loc["input_ids"].shape[-1]),
                               "num_assistant_tokens": float(loc["self"].num_assistant_tokens)})
            elif event == "return":
                ids, logits = arg
                d = drafts[-1]
                d["limit"] = int(loc["max_new_tokens"])
                d["draft"] = ids[0, d["context"]:].tolist()
                d["logits"] = None if logits is None else logits[0].detach().clone()
        elif code is update_code:
            loc = frame.f_locals
            if event == "call":
                updates.append({"num_matches": int(loc["num_matches"]),
                                "before": float(loc["self"].num_assistant_tokens)})
            elif event == "return":
                updates[-1]["after"] = float(loc["self"].num_assistant_tokens)
        elif code is decoding_code and event == "return":
            loc = frame.f_locals
            ret.update(accept_length_list=[int(a) for a in loc["accept_length_list"]], step=int(loc["step"]))

    def on_target(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        fed.append({"input_ids": ids[0].tolist(), "cached": past_length(kwargs.get("past_key_values"))})

    def on_target_out(module, args, kwargs, output):
        fed[-1]["argmax"] = output.logits[0].argmax(-1).tolist()

    hooks = [target.register_forward_pre_hook(on_target, with_kwargs=True),
             target.register_forward_hook(on_target_out, with_kwargs=True)]
    ids = torch.tensor([prompt])
    inputs = transformers.BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    sys.setprofile(profile)
    try:
        output_ids, new_token, idx, accept_length_list = sps_forward(
            inputs, target, None, max_new_tokens, do_sample=False, temperature=0.0, drafter=drafter)
    finally:
        sys.setprofile(None)
        for h in hooks:
            h.remove()
    n = len(prompt)
    output = output_ids[0, n:].tolist()
    assert new_token == len(output) == max_new_tokens
    assert accept_length_list == ret["accept_length_list"] and idx == ret["step"] == len(drafts) == len(updates)
    assert len(fed) == len(drafts), "one target forward per step"
    seq = list(prompt)
    steps = []
    for k, (d, u, v) in enumerate(zip(drafts, updates, fed)):
        draft = d["draft"]
        assert d["context"] == len(seq) and u["before"] == d["num_assistant_tokens"]
        assert d["limit"] == min(int(d["num_assistant_tokens"]), n + max_new_tokens - len(seq) - 1)
        assert len(draft) <= d["limit"]  # shorter: the assistant stopped at the eos token
        # the target verifies what its cache lacks: the whole prompt at first, then the last token; then the draft
        tail = seq[v["cached"]:] + draft
        assert v["input_ids"] == tail and v["cached"] == (0 if k == 0 else len(seq) - 1), (k, v["cached"], len(seq))
        post = v["argmax"][len(tail) - len(draft) - 1:]
        acc = 0
        while acc < len(draft) and draft[acc] == post[acc]:
            acc += 1
        acc = min(acc, n + max_new_tokens - len(seq) - 1)
        assert acc == u["num_matches"], "the reference's own accepted count"
        assert accept_length_list[k] == acc + 1
        appended = draft[:acc] + [post[acc]]
        gaps = []
        if d["logits"] is not None:
            assert d["logits"].argmax(-1).tolist() == draft, "drafted tokens = argmax of the assistant's scores"
            top2 = d["logits"].topk(2, -1).values
            gaps = [round(float(g), 4) for g in top2[:, 0] - top2[:, 1]]
        steps.append({
            "context": len(seq),  # tokens before the step (prompt + emitted): cur_len
            "num_assistant_tokens": int(d["num_assistant_tokens"]),  # the schedule's value for this step
            "draft_limit": d["limit"],  # what the assistant was asked for: min(that, max_length - context - 1)
            "draft": draft,
            "target_argmax": post,  # the target's greedy token after the context and after each drafted token
            "accepted": acc,  # drafted tokens accepted (n_matches)
            "accept_length": acc + 1,  # as Spec-Bench records it (accept_length_list)
            "appended": appended,
            "num_assistant_tokens_after": int(u["after"]),
            "draft_top2_gaps": gaps,
        })
        seq += appended
    assert seq[n:] == output, "the reference's output"
    return {"prompt": prompt, "output": output, "accept_length_list": accept_length_list, "idx": idx,
            "steps": steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding Spec-Bench's evaluation/ and model/sps/")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--draft-dir", type=Path, default=None,
                   help="load the drafter from this folder (the committed fixture) instead of making one")
    p.add_argument("--draft-out", type=Path, default=None, help="write the drafter folder made here")
    p.add_argument("--seed", type=int, default=tiny_target.SEED + 21)
    p.add_argument("--train-steps", type=int, default=800)
    args = p.parse_args()
    torch.set_num_threads(1)
    sps_forward, assisted_decoding = reference_modules(args.ref)
    from transformers import AutoModelForCausalLM, GenerationMixin

    target = tiny_target.build().requires_grad_(False)
    if args.draft_dir is not None:
        folder = args.draft_dir
        recipe = (f"folder {folder.name}/ (made by this script with --draft-out: the target's embedding, lm_head, final "
                  f"norm and layers 0..{DRAFT_LAYERS - 1}, distilled; its sha256 below)")
    else:
        assert args.draft_out is not None, "--draft-out FOLDER: where the drafter made here goes"
        folder = args.draft_out
        torch.manual_seed(args.seed)
        fresh = transformers.LlamaForCausalLM(draft_config())
        init_from_target(fresh, target)
        if args.train_steps > 0:
            distill(fresh, target, args.seed, steps=args.train_steps)
        save_draft(fresh, folder)
        recipe = (f"the target's embedding, lm_head, final norm and layers 0..{DRAFT_LAYERS - 1}, then distilled "
                  f"{args.train_steps} steps (forward KL on the target's greedy continuations)")

    # as inference_sps.py's __main__ (less low_cpu_mem_usage / device_map="auto": accelerate, placement only)
    GenerationMixin.assisted_decoding = assisted_decoding
    drafter = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.float32)
    drafter.eval()
    target.eval()
    target.generation_config.eos_token_id = EOS
    gc = drafter.generation_config
    settings = {"temperature": 0.0, "do_sample": False, "num_assistant_tokens": gc.num_assistant_tokens,
                "num_assistant_tokens_schedule": gc.num_assistant_tokens_schedule, "dtype": "float32",
                "eos_token_id": EOS, "drafter_generation_config_json": (folder / "generation_config.json").exists()}
    state = {k: v.detach().clone() for k, v in drafter.state_dict().items()}

    t0 = time.time()
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(sps_forward, assisted_decoding, target, drafter, prompt, args.tokens)
        run["greedy_matches"] = run["output"] == tiny_target.greedy(target, prompt, args.tokens)
        runs.append(run)
    elapsed = time.time() - t0
    gap = min(tiny_target.margins(target, r["prompt"] + r["output"], len(r["prompt"])) for r in runs)
    steps = [s for r in runs for s in r["steps"]]
    compared = [g for s in steps for g in s["draft_top2_gaps"][:s["accepted"] + 1]]
    trace = {
        "method": "sps",
        "reference": {"repository": "github.com/hemingkx/Spec-Bench", "commit": args.commit,
                      "code": "evaluation/inference_sps.py: sps_forward (model.generate(..., assistant_model=drafter)) "
                              "with GenerationMixin.assisted_decoding = model/sps/decoding.py: assisted_decoding "
                              "(as its __main__ sets); transformers 4.37.1 AssistedCandidateGenerator drafts",
                      "settings": settings},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": EOS},
        "drafter": {"recipe": recipe, "seed": args.seed, "layers": DRAFT_LAYERS, "sha256": digest(state),
                    "files": ["config.json", "model.safetensors"]},
        "smallest_top2_gap": round(gap, 4),
        "smallest_draft_top2_gap_compared": min(compared),  # up to the first rejected drafted position
        "drafted_eos": sum(EOS in s["draft"] for s in steps),
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    hist = {}
    for s in steps:
        hist[s["accepted"]] = hist.get(s["accepted"], 0) + 1
    sched = {}
    for s in steps:
        sched[s["num_assistant_tokens"]] = sched.get(s["num_assistant_tokens"], 0) + 1
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps ({elapsed:.1f} s), mean accepted "
          f"{sum(s['accepted'] for s in steps) / len(steps):.2f} (accept_length "
          f"{sum(s['accept_length'] for s in steps) / len(steps):.2f}), accepted histogram {dict(sorted(hist.items()))}, "
          f"num_assistant_tokens per step {dict(sorted(sched.items()))}, drafted eos {trace['drafted_eos']}, "
          f"smallest top-2 gap {gap:.3f} (draft, compared {min(compared):.3f}), greedy matches "
          f"{[r['greedy_matches'] for r in runs]}")


if __name__ == "__main__":
    main()
