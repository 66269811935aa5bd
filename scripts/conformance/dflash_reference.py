"""DFlash's reference (github.com/z-lab/dflash), run unchanged on the seeded tiny target: a golden trace.

    python scripts/conformance/dflash_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--drafter-file F]

Runs in the reference code's own venv (transformers 4.57.1, the version its pyproject pins for the transformers
backend; torch 2.13.0: scripts/conformance/dflash.sh makes it), never with specbench. REF_DIR holds the reference's
`dflash/` package as `git archive` gives it (nothing edited). The target is scripts/conformance/tiny_target.py (a
Llama: the reference's transformers loop reads only target.model.embed_tokens, target.lm_head and the target's
hidden_states, which any HF causal LM has; its benchmark also runs Llama-3.1 targets). The drafter is written as a
folder in the published z-lab layout (config.json with block_size, num_target_layers, dflash_config.{mask_token_id,
target_layer_ids}; model.safetensors with the released key names, no embeddings / lm_head: they are the target's),
loaded with the reference's own DFlashDraftModel.from_pretrained (as its benchmark does), and each prompt of
tiny_target.prompts() is decoded with the reference's DFlashDraftModel.spec_generate (the README's call) at
temperature 0, stop_token_ids=None.

Nothing of the reference is replaced or wrapped. What each step did is read off:
  - forward pre-hooks on the target (the block it verifies, its position ids) and on the drafter (its position ids,
    how many new context features it was given, its KV cache length), a forward hook on the target's lm_head (the
    draft logits: argmax must be the drafted tokens) and on the target (its greedy choice at each block position);
  - dflash_generate's own frame when it returns (sys.setprofile: its locals acceptance_lengths, start, output_ids),
    so each step's accepted length is the reference's own number, checked against the hooks.

Drafter weights (--drafter-file takes the committed fixture; without it they are made here): drawn in name order
from one seeded generator (norms 1, other weights N(0, 1/fan_in)), then self-distilled briefly on the tiny target
(`distill`, 1500 AdamW steps, ~5.5 min of one CPU thread: the reference's own DFlashDraftModel.forward, as its
inference calls it) so that multi-token accepts happen. Float training (deterministic run to run here, but another
machine's float sums may differ): ship the written model.safetensors with the trace rather than re-derive it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

BLOCK = 16  # as the z-lab *-b16 checkpoints
DRAFT_LAYERS = 2
TARGET_LAYER_IDS = [1, 2]  # read as hidden_states[1 + 1], hidden_states[2 + 1]: outputs of target layers 1 and 2
MASK = tiny_target.PLACEHOLDER  # a token of the target's vocabulary that the target never picks (cf. Qwen3's 151669)


def draft_config() -> dict:
    """config.json as the released z-lab checkpoints write it (z-lab/Qwen3-*-DFlash-b16), sized to the tiny target."""
    t = tiny_target.config()
    return {
        "architectures": ["DFlashDraftModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "block_size": BLOCK,
        "bos_token_id": t.bos_token_id,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": TARGET_LAYER_IDS},
        "dtype": "float32",
        "eos_token_id": t.eos_token_id,
        "head_dim": tiny_target.HIDDEN // tiny_target.HEADS,
        "hidden_act": "silu",
        "hidden_size": tiny_target.HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": 2 * tiny_target.HIDDEN,
        "layer_types": ["full_attention"] * DRAFT_LAYERS,
        "max_position_embeddings": tiny_target.CONTEXT,
        "max_window_layers": DRAFT_LAYERS,
        "model_type": "qwen3",
        "num_attention_heads": tiny_target.HEADS,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_key_value_heads": tiny_target.KV_HEADS,
        "num_target_layers": tiny_target.LAYERS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,  # the drafter's own (as published), not the target's 10000
        "sliding_window": None,
        "tie_word_embeddings": False,
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": tiny_target.VOCAB,
    }


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def seeded_fill(draft, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(draft.named_parameters()):
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * p.shape[-1] ** -0.5)


def features(target, seqs: torch.Tensor) -> torch.Tensor:
    """The context features the reference's loop gives the drafter (extract_context_feature: hidden_states[l + 1])."""
    hs = target(seqs, output_hidden_states=True).hidden_states
    return torch.cat([hs[layer + 1] for layer in TARGET_LAYER_IDS], dim=-1)


@torch.enable_grad()
def distill(draft, target, seed: int, prompts: int = 4096, length: int = 48, steps: int = 1500, batch: int = 128,
            anchors: int = 4):
    """Self-distillation on greedy continuations of `prompts` random 8-token prompts (all drawn from one generator).
    Each update takes `batch` of them and `anchors` random anchor positions a (the same for the batch): context
    features of positions < a, block [token a, mask x 15] at positions a..a+15, labels tokens a+1..a+15 (CE weighted
    exp(-(k-1)/7) over block position k, as in the DFlash paper). The forward is the reference's
    DFlashDraftModel.forward (no cache, non-causal), the logits through the target's lm_head. AdamW 5e-3, warmup 50,
    cosine; CPU float32, one thread."""
    gen = torch.Generator().manual_seed(seed + 1)
    V = tiny_target.VOCAB
    starts = torch.randint(0, V, (prompts, 8), generator=gen)
    starts[starts == MASK] = 1
    with torch.no_grad():
        seqs = torch.cat([target.generate(s, attention_mask=torch.ones_like(s), max_new_tokens=length,
                                          do_sample=False, eos_token_id=None, pad_token_id=MASK)
                          for s in starts.split(512)])
        feats = torch.cat([features(target, s) for s in seqs.split(512)])
        embed = target.model.embed_tokens
    T = seqs.shape[1]
    weights = torch.exp(-(torch.arange(1, BLOCK, dtype=torch.float32) - 1) / 7.0)
    draft.train()
    opt = torch.optim.AdamW(draft.parameters(), lr=5e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    positions = torch.arange(T + BLOCK).unsqueeze(0).expand(batch, -1)
    t0 = time.time()
    for step in range(steps):
        rows = torch.randint(0, prompts, (batch,), generator=gen)
        loss = 0.0
        for a in torch.randint(4, T - BLOCK + 1, (anchors,), generator=gen).tolist():
            block = torch.full((batch, BLOCK), MASK)
            block[:, 0] = seqs[rows, a]
            with torch.no_grad():
                noise = embed(block)
            out = draft(position_ids=positions[:, :a + BLOCK], noise_embedding=noise, target_hidden=feats[rows, :a],
                        is_causal=False)
            logits = target.lm_head(out[:, 1:])
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, V), seqs[rows, a + 1:a + BLOCK].reshape(-1),
                                                   reduction="none").view(batch, BLOCK - 1)
            loss = loss + (ce * weights).sum(1).mean() / weights.sum()
        opt.zero_grad()
        (loss / anchors).backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"distill step {step}: loss {float(loss.detach()) / anchors:.3f} ({time.time() - t0:.0f} s)",
                  file=sys.stderr)
    draft.eval()


def save_drafter(state: dict[str, torch.Tensor], folder: Path) -> None:
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(draft_config(), indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"), metadata={"format": "pt"})


def decode(draft, target, prompt: list[int], max_new_tokens: int) -> dict:
    from dflash import model as ref_model
    fed, draft_calls, head_calls = [], [], []
    ret: dict = {}

    def on_target(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        fed.append({"input_ids": ids[0].tolist(), "position_ids": kwargs["position_ids"][0].tolist(),
                    "cached": kwargs["past_key_values"].get_seq_length()})

    def on_target_out(module, args, kwargs, output):
        fed[-1]["argmax"] = output.logits[0].argmax(-1).tolist()

    def on_draft(module, args, kwargs):
        pos = kwargs["position_ids"][0].tolist()
        draft_calls.append({"positions": [pos[0], pos[-1]], "n_positions": len(pos),
                            "new_context": int(kwargs["target_hidden"].shape[1]),
                            "cached": kwargs["past_key_values"].get_seq_length(),
                            "block_embed": kwargs["noise_embedding"][0].clone(), "is_causal": kwargs.get("is_causal")})

    def on_head(module, args, output):
        head_calls.append(output[0].detach().clone())

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is ref_model.dflash_generate.__wrapped__.__code__:
            loc = frame.f_locals
            ret.update(acceptance_lengths=list(loc["acceptance_lengths"]), start=int(loc["start"]))

    hooks = [target.register_forward_pre_hook(on_target, with_kwargs=True),
             target.register_forward_hook(on_target_out, with_kwargs=True),
             draft.register_forward_pre_hook(on_draft, with_kwargs=True),
             target.lm_head.register_forward_hook(on_head)]
    sys.setprofile(profile)
    try:
        out = draft.spec_generate(target=target, input_ids=torch.tensor([prompt]), max_new_tokens=max_new_tokens,
                                  stop_token_ids=None, temperature=0.0)
    finally:
        sys.setprofile(None)
        for h in hooks:
            h.remove()
    n = len(prompt)
    output = out[0, n:].tolist()
    prefill, verifies = fed[0], fed[1:]
    assert prefill["input_ids"] == prompt and prefill["position_ids"] == list(range(n)) and prefill["cached"] == 0
    # lm_head calls: prefill (1 position: logits_to_keep=1), then per step the draft (B - 1) and the verify (B)
    assert len(head_calls) == 1 + 2 * len(verifies) and head_calls[0].shape[0] == 1
    assert len(draft_calls) == len(verifies) == len(ret["acceptance_lengths"])
    embed = target.model.embed_tokens.weight
    seq = prompt + [prefill["argmax"][-1]]
    steps = []
    start = n
    for k, (v, d) in enumerate(zip(verifies, draft_calls)):
        block = v["input_ids"]
        draft_logits = head_calls[1 + 2 * k]
        assert draft_logits.shape[0] == BLOCK - 1 and head_calls[2 + 2 * k].shape[0] == BLOCK
        assert draft_logits.argmax(-1).tolist() == block[1:], "drafted tokens = argmax of the draft logits"
        top2 = draft_logits.topk(2, -1).values
        assert len(block) == BLOCK and block[0] == seq[start] and v["position_ids"] == list(range(start, start + BLOCK))
        assert v["cached"] == start
        assert torch.equal(d["block_embed"], embed[torch.tensor([block[0]] + [MASK] * (BLOCK - 1))]), "block input"
        assert d["positions"] == [d["cached"], start + BLOCK - 1] and d["new_context"] == start - d["cached"]
        assert d["is_causal"] is False
        post = v["argmax"]
        acc = 0
        while acc < BLOCK - 1 and block[1 + acc] == post[acc]:
            acc += 1
        assert acc + 1 == ret["acceptance_lengths"][k], "the reference's acceptance length"
        appended = block[1:acc + 1] + [post[acc]]
        seq += appended
        steps.append({
            "start": start,  # position of block[0] (tokens before it: the context the target has cached)
            "block": block,  # fed to the target at positions start..start+15: [last token, 15 drafted]
            "draft": block[1:],
            "draft_context": {"cached": d["cached"], "new": d["new_context"],
                              "positions": d["positions"]},  # drafter's KV cache length, new features, position range
            "target_argmax": post,  # the target's greedy token after each block position
            "accepted": acc,  # drafted tokens accepted
            "acceptance_length": acc + 1,  # as the reference records it (accepted + the target's own token)
            "appended": appended,
            "draft_top2_gaps": [round(float(g), 4) for g in top2[:, 0] - top2[:, 1]],  # per drafted position
        })
        start += acc + 1
    assert start == ret["start"]
    assert output == seq[n:n + max_new_tokens], "the reference's output"
    return {"prompt": prompt, "first_token": seq[n], "output": output, "steps": steps}


def greedy(target, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def margins(model, sequence: list[int], start: int) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0, start - 1:-1]
    top = logits.topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's dflash/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--drafter-file", type=Path, default=None,
                   help="take the drafter weights from this safetensors file (the committed fixture) instead of making them")
    p.add_argument("--seed", type=int, default=tiny_target.SEED + 11)
    p.add_argument("--train-steps", type=int, default=1500)
    p.add_argument("--drafter-out", type=Path, default=None,
                   help="also write the drafter folder (config.json + model.safetensors) here (the fixture)")
    p.add_argument("--work", type=Path, default=None, help="where the drafter folder goes (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))
    from dflash.model import DFlashDraftModel  # the reference, as is

    target = tiny_target.build().requires_grad_(False)
    work = args.work or Path(tempfile.mkdtemp(prefix="dflash-ref-"))
    folder = work / "tinydflash"
    if args.drafter_file is not None:
        from safetensors.torch import load_file
        state = load_file(str(args.drafter_file))
        recipe = (f"file {args.drafter_file} (the fixture: made by this script without --drafter-file, seeded "
                  f"N(0, 1/fan_in) then distilled; its sha256 below)")
    else:
        save_drafter({}, folder)  # config only: build the model from it, fill, distil
        cfg = transformers.AutoConfig.from_pretrained(str(folder))
        torch.manual_seed(args.seed)
        fresh = DFlashDraftModel(cfg)
        seeded_fill(fresh, args.seed)
        if args.train_steps > 0:
            distill(fresh, target, args.seed, steps=args.train_steps)
        state = {k: v.detach().clone() for k, v in fresh.state_dict().items()}
        recipe = f"seeded N(0, 1/fan_in), distilled {args.train_steps} steps" if args.train_steps else "seeded N(0, 1/fan_in)"
    save_drafter(state, folder)
    if args.drafter_out is not None:
        save_drafter(state, args.drafter_out)

    draft, info = DFlashDraftModel.from_pretrained(str(folder), output_loading_info=True)
    draft.eval()
    assert not any(info.values()), f"loading info {info}"
    loaded = draft.state_dict()
    assert sorted(loaded) == sorted(state) and all(torch.equal(loaded[k], state[k]) for k in state)
    assert draft.block_size == BLOCK and draft.mask_token_id == MASK and draft.target_layer_ids == TARGET_LAYER_IDS

    t0 = time.time()
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(draft, target, prompt, args.tokens)
        run["greedy_matches"] = run["output"] == greedy(target, prompt, args.tokens)
        runs.append(run)
    elapsed = time.time() - t0
    gap = min(margins(target, r["prompt"] + r["output"], len(r["prompt"])) for r in runs)
    trace = {
        "method": "dflash",
        "reference": {"repository": "github.com/z-lab/dflash", "commit": args.commit,
                      "code": "dflash/model.py: DFlashDraftModel.from_pretrained, DFlashDraftModel.spec_generate "
                              "(dflash_generate)",
                      "settings": {"temperature": 0.0, "block_size": BLOCK, "mask_token_id": MASK,
                                   "target_layer_ids": TARGET_LAYER_IDS, "stop_token_ids": None,
                                   "attn_implementation": draft.config._attn_implementation}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target)},
        "drafter": {"recipe": recipe, "seed": args.seed, "config": draft_config(), "sha256": digest(state),
                    "files": ["config.json", "model.safetensors"]},
        "smallest_top2_gap": round(gap, 4),
        "smallest_draft_top2_gap": min(min(s["draft_top2_gaps"]) for r in runs for s in r["steps"]),
        "smallest_draft_top2_gap_compared": min(min(s["draft_top2_gaps"][:s["accepted"] + 1]) for r in runs
                                                for s in r["steps"]),  # up to the first rejected position
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    steps = [s for r in runs for s in r["steps"]]
    hist = [sum(s["accepted"] == a for s in steps) for a in range(BLOCK)]
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps ({elapsed:.1f} s), mean acceptance_length "
          f"{sum(s['acceptance_length'] for s in steps) / len(steps):.2f}, max accepted "
          f"{max(s['accepted'] for s in steps)}, accepted histogram {hist}, smallest top-2 gap {gap:.3f} "
          f"(draft {trace['smallest_draft_top2_gap']:.3f}), greedy matches {[r['greedy_matches'] for r in runs]}")


if __name__ == "__main__":
    main()
