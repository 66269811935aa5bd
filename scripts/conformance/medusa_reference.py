"""Medusa's reference (github.com/FasterDecoding/Medusa), run unchanged on the seeded tiny target: a golden trace.

    python scripts/conformance/medusa_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--heads-file F]

Runs in the reference code's own venv (transformers 4.36.2, torch 2.13.0: scripts/conformance/medusa.sh makes it),
never with specbench. REF_DIR holds the reference's `medusa/` package as `git archive` gives it (nothing edited).
The tiny target is scripts/conformance/tiny_target.py. We save it as a local base folder (weights +
a word-level tokenizer, which MedusaModelABC.__init__ insists on loading), write a Medusa-1 head folder in the
published layout (config.json without model_type + medusa_lm_head.pt), load both with the reference's own
MedusaModel.from_pretrained and iterate the reference's medusa_generate at temperature 0.

Nothing of the reference is replaced or wrapped: what each step built and accepted is read from medusa_generate's
own frame at each `yield` (gen.gi_frame.f_locals: candidates, tree_candidates, best_candidate, accept_length,
input_ids), and checked against a forward pre-hook on the LlamaModel (the tree fed, its position ids).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: no hub retries
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

N_HEADS = 5  # MedusaModelABC.from_pretrained's legacy branch forces medusa_num_heads = 5 (medusa_model.py:143)


def save_base(model, folder: Path) -> None:
    """The tiny target as a local base folder + a word-level tokenizer 't0'..'t159' whose eos is the placeholder
    (token 100, which the target never picks: every prompt decodes its whole budget)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {f"t{i}": i for i in range(tiny_target.VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{tiny_target.PLACEHOLDER}",
                                                unk_token="t0")
    fast.save_pretrained(folder)


@torch.no_grad()
def head_state(target, recipe: str, seed: int) -> dict[str, torch.Tensor]:
    """5 heads in the published Medusa-1 layout (medusa_model.py:111-119): head k = Sequential(ResBlock, Linear(H, V,
    bias=False)), keys {k}.0.linear.weight [H,H], {k}.0.linear.bias [H], {k}.1.weight [V,H]. Drawn in key order
    from one seeded generator.
      random:      ResBlock W, b ~ N(0, 1/H); out ~ N(0, 0.5) (as the target's lm_head)
      lmhead:      ResBlock W, b ~ N(0, 1/H); out = the target's lm_head + N(0, 0.1)
      distilled:   lmhead, then `distill` (self-distillation, ~10 s on 2 CPUs; deterministic run to run here, but
                   float training: ship the written medusa_lm_head.safetensors with the trace rather than re-derive it)
    """
    H, V = tiny_target.HIDDEN, tiny_target.VOCAB
    gen = torch.Generator().manual_seed(seed)
    lm = target.lm_head.weight.detach().float()
    state = {}
    for k in range(N_HEADS):
        state[f"{k}.0.linear.weight"] = torch.randn(H, H, generator=gen) * H ** -0.5
        state[f"{k}.0.linear.bias"] = torch.randn(H, generator=gen) * H ** -0.5
        if recipe == "random":
            state[f"{k}.1.weight"] = torch.randn(V, H, generator=gen) * 0.5
        elif recipe == "lmhead":
            state[f"{k}.1.weight"] = lm + torch.randn(V, H, generator=gen) * 0.1
        elif recipe == "distilled":
            state[f"{k}.1.weight"] = lm + torch.randn(V, H, generator=gen) * 0.1
        else:
            raise SystemExit(f"unknown head recipe {recipe}")
    if recipe == "distilled":
        state = distill(target, state, gen)
    return {k: v.contiguous() for k, v in state.items()}


@torch.enable_grad()
def distill(target, state, gen, prompts: int = 128, length: int = 48, steps: int = 300):
    """Self-distillation from the lmhead start: head k learns the target's own greedy token k+2 ahead, on greedy
    continuations of random prompts (all drawn from `gen`); full-batch Adam, CPU, float32."""
    V = tiny_target.VOCAB
    starts = torch.randint(0, V, (prompts, 8), generator=gen)
    starts[starts == tiny_target.PLACEHOLDER] = 1
    with torch.no_grad():
        seqs = target.generate(starts, attention_mask=torch.ones_like(starts), max_new_tokens=length,
                               do_sample=False, eos_token_id=None, pad_token_id=0)
        hidden = target.model(seqs).last_hidden_state  # [P, T, H] (final norm applied, as medusa_forward reads it)
    params = {k: v.clone().requires_grad_(True) for k, v in state.items()}
    opt = torch.optim.Adam(params.values(), lr=1e-2)
    T = seqs.shape[1]
    for _ in range(steps):
        loss = 0.0
        for k in range(N_HEADS):
            h = hidden[:, 7:T - k - 2]  # positions in the generated part, head k predicts t + k + 2
            y = seqs[:, 7 + k + 2:T]
            z = h + torch.nn.functional.silu(h @ params[f"{k}.0.linear.weight"].T + params[f"{k}.0.linear.bias"])
            logits = z @ params[f"{k}.1.weight"].T
            loss = loss + torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"distilled heads: final loss {float(loss) / N_HEADS:.3f} per head", file=sys.stderr)
    return {k: v.detach().clone() for k, v in params.items()}


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_heads(state, folder: Path, base: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # As the published Medusa-1 heads' config.json: no model_type, so AutoConfig fails and the legacy branch runs.
    (folder / "config.json").write_text(json.dumps({"base_model_name_or_path": str(base.resolve()), "medusa_num_heads": N_HEADS,
                                                    "medusa_num_layers": 1}, indent=1))
    torch.save(state, folder / "medusa_lm_head.pt")  # the reference loads only this file (medusa_model.py:151-157)
    from safetensors.torch import save_file
    save_file(state, str(folder / "medusa_lm_head.safetensors"))  # same keys, for other readers


def decode(model, prompt: list[int], max_new_tokens: int, medusa_choices) -> dict:
    fed: list[dict] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        pos = kwargs.get("position_ids")
        fed.append({"input_ids": ids[0].tolist(), "position_ids": None if pos is None else pos.view(-1).tolist()})

    hook = model.model.register_forward_pre_hook(record, with_kwargs=True)
    steps = []
    try:
        gen = model.medusa_generate(torch.tensor([prompt]), temperature=0.0, medusa_choices=medusa_choices,
                                    max_steps=max_new_tokens)
        output: list[int] = []
        for _ in gen:
            f = gen.gi_frame.f_locals
            buffers = f["medusa_buffers"]
            retrieve = buffers["retrieve_indices"]
            best, acc = int(f["best_candidate"]), int(f["accept_length"])
            real_len = int((retrieve[best] >= 0).sum())  # root + real nodes on that path (pads are -1)
            ids = f["input_ids"][0].tolist()
            appended = ids[len(prompt) + len(output):]
            tree = fed[-1]
            assert tree["input_ids"] == f["tree_candidates"][0].tolist()
            depths = buffers["medusa_position_ids"].tolist()  # each tree node at the context length + its depth
            assert tree["position_ids"] == [len(prompt) + len(output) + d for d in depths], "the tree's positions"
            steps.append({
                "tree_tokens": f["tree_candidates"][0].tolist(),  # 64: root (base argmax) + 63 nodes, tree order
                "best_candidate": best,  # row of retrieve_indices
                "accept_length": acc,  # Medusa tokens accepted beyond the root
                "appended": appended,  # = candidates[best, :acc+1]
                "past_pad": acc + 1 > real_len,  # accepted a path's padding (the retrieve -1 quirk)
            })
            output = ids[len(prompt):]
            if len(output) >= max_new_tokens:
                break
        gen.close()
    finally:
        hook.remove()
    return {"prompt": prompt, "output": output, "steps": steps}


def greedy(target, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          eos_token_id=tiny_target.PLACEHOLDER, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's medusa/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--heads", default="distilled", choices=["lmhead", "random", "distilled"])
    p.add_argument("--heads-file", type=Path, default=None,
                   help="take the heads from this safetensors file (the committed fixture) instead of making them")
    p.add_argument("--head-seed", type=int, default=tiny_target.SEED + 7)
    p.add_argument("--work", type=Path, default=None, help="where the base and head folders go (default: a temp dir)")
    args = p.parse_args()
    sys.path.insert(0, str(args.ref))
    from medusa.model import medusa_choices as mc
    from medusa.model.medusa_model import MedusaModel  # the reference, as is

    target = tiny_target.build()
    work = args.work or Path(tempfile.mkdtemp(prefix="medusa-ref-"))
    base, headdir = work / "tinybase", work / "tinyheads"
    save_base(target, base)
    if args.heads_file is not None:
        from safetensors.torch import load_file
        state = load_file(str(args.heads_file))
    else:
        state = head_state(target, args.heads, args.head_seed)
    save_heads(state, headdir, base)
    try:  # the legacy branch needs AutoConfig to fail on the head folder (a path naming a model type would not)
        transformers.AutoConfig.from_pretrained(str(headdir))
        raise SystemExit(f"AutoConfig accepted {headdir}: the reference would take its Medusa-2 branch")
    except ValueError:
        pass

    model = MedusaModel.from_pretrained(str(headdir)).eval()
    assert type(model).__name__ == "MedusaModelLlama" and model.medusa == N_HEADS
    loaded = {k: v for k, v in model.medusa_head.state_dict().items()}
    assert all(torch.equal(loaded[k], state[k]) for k in state), "heads not loaded as written"
    assert tiny_target.fingerprint(model.model) == tiny_target.fingerprint(target.model)

    choices = mc.mc_sim_7b_63  # what medusa_generate picks for a base path naming no vicuna/zephyr (medusa_model.py:222-233)
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(model, prompt, args.tokens, choices)
        run["greedy_matches"] = run["output"][:args.tokens] == greedy(target, prompt, args.tokens)
        runs.append(run)
    buffers = model.medusa_buffers
    trace = {
        "method": "medusa",
        "reference": {"repository": "github.com/FasterDecoding/Medusa", "commit": args.commit,
                      "code": "medusa/model/medusa_model.py: MedusaModel.from_pretrained, medusa_generate",
                      "settings": {"temperature": 0.0, "medusa_choices": "mc_sim_7b_63", "posterior_threshold": 0.09,
                                   "posterior_alpha": 0.3, "top_p": 0.8, "sampling": "typical", "fast": True}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": tiny_target.PLACEHOLDER},
        "heads": {"recipe": args.heads, "seed": args.head_seed, "num_heads": N_HEADS, "num_layers": 1,
                  "sha256": digest(state)},
        "tree": {"tree_indices": buffers["tree_indices"].tolist(),
                 "position_ids": buffers["medusa_position_ids"].tolist(),
                 "retrieve_indices": buffers["retrieve_indices"].tolist()},
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    steps = [s for r in runs for s in r["steps"]]
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps, mean accept_length "
          f"{sum(s['accept_length'] for s in steps) / len(steps):.2f} (tokens/step "
          f"{sum(len(s['appended']) for s in steps) / len(steps):.2f}), max {max(s['accept_length'] for s in steps)}, "
          f"past_pad steps {sum(s['past_pad'] for s in steps)}, greedy matches {[r['greedy_matches'] for r in runs]}")


if __name__ == "__main__":
    main()
