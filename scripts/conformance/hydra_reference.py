"""Hydra's reference (github.com/zankner/Hydra), run unchanged on the seeded tiny target: a golden trace.

    python scripts/conformance/hydra_reference.py --ref REF_DIR --commit SHA --arch prefix-mlp|mlp --out TRACE.json
        [--heads-file F.safetensors] [--save-heads DIR]

Runs in the reference code's own venv (transformers 4.36.2, torch 2.13.0: scripts/conformance/hydra.sh makes it),
never with specbench. REF_DIR holds the reference's `hydra/` package as `git archive` gives it (nothing edited).
The tiny target is scripts/conformance/tiny_target.py, saved as a local base folder (weights + a word-level
tokenizer, which HydraModel.__init__ insists on loading). The heads are written as the published ones are
(hydra/train/train.py: HydraConfig(...).save_pretrained -> config.json, torch.save(hydra_head.state_dict()) ->
hydra_lm_head.pt), loaded with the reference's own HydraModel.from_pretrained, and the reference's hydra_generate is
iterated at temperature 0 with its default tree (mc_sim_7b_63).

Two head architectures (--arch), both grounded (sequentially dependent) with 4 heads, hidden_state_offset 0:
  prefix-mlp  Hydra++ as released (README's training command: hydra_num_heads 4, hydra_num_layers 4,
              hydra_head_arch prefix-mlp, grounded_heads true, hidden_state_offset 0): HydraPrefixMLP
  mlp         plain Hydra heads, one ResBlock each (hydra_num_layers 1): HydraMLP

The one thing set up from outside: the reference sizes its preallocated KV cache with config.num_attention_heads
(kv_cache.py: initialize_past_key_values, from Llama-1 days) and the tiny target has 2 KV heads under 4 query heads,
so KVCache.cat could not store the 2-head keys. We call the reference's own initialize_past_key_values with a view of
the config whose num_attention_heads is the KV head count (same head_dim, layers and length) and store the result on
the model under the three attribute names hydra_generate caches it under (past_key_values, past_key_values_data,
current_length_data); hydra_generate then takes its own "cache already made" branch, zeroes the lengths and runs
as is. Nothing of the reference is replaced or wrapped.

What each step built and accepted is read from hydra_generate's own frame at each `yield` (gen.gi_frame.f_locals:
candidates, tree_candidates, best_candidate, accept_length, input_ids), checked against a forward pre-hook on the
base LlamaModel (the tree fed and its position ids) and, for prefix-mlp, a pre-hook on the prefix layer (which
hidden states it ran over, at which positions, over how long a cache). A forward hook on the base lm_head keeps the
tree's logits so that the driver can re-derive (and assert) best_candidate / accept_length and record ties.

Heads (--heads): drawn from one seeded generator, parameter by parameter in name order, into the reference's own
head module (so the state dict has the published keys and the published weight sharing), then self-distilled
briefly (`distill`: ~1.5 min CPU for prefix-mlp, ~40 s for mlp) so that the trace has multi-token accepts. Float training: ship the written
hydra_lm_head.safetensors with the trace (--heads-file reads it back) rather than re-derive it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: no hub retries
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402

# The config.json values of each architecture (HydraConfig keys). prefix-mlp: the README's Hydra++ training command,
# which is what the released ankner/hydra-vicuna-*-v1.3 checkpoints are.
ARCHES = {
    "prefix-mlp": {"hydra_num_heads": 4, "hydra_num_layers": 4, "hydra_head_arch": "prefix-mlp",
                   "grounded_heads": True, "hidden_state_offset": 0},
    "mlp": {"hydra_num_heads": 4, "hydra_num_layers": 1, "hydra_head_arch": "mlp",
            "grounded_heads": True, "hidden_state_offset": 0},
}
SHIPPED_BASE = "tiny_target (scripts/conformance/tiny_target.py)"  # base_model_name_or_path in the shipped config


def save_base(model, folder: Path) -> None:
    """The tiny target as a local base folder + a word-level tokenizer 't0'..'t159' whose eos is the placeholder
    (token 100, which the target never picks: every prompt decodes its whole budget)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {f"t{i}": i for i in range(tiny_target.VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{tiny_target.PLACEHOLDER}",
                                                unk_token="t0")
    fast.save_pretrained(folder)


def head_module(arch: str, target, base: Path):
    """The reference's own head module for `arch`, built as HydraModel.__init__ builds it (dropout 0: eval), on the
    base config as read from the base folder (as from_pretrained reads it: no attention implementation set, so the
    copy the prefix layer gets is not marked sdpa, which the reference's LlamaModel refuses)."""
    from hydra.model.hydra_heads import HydraMLP, HydraPrefixMLP
    cfg = ARCHES[arch]
    kw = dict(hydra_num_layers=cfg["hydra_num_layers"], hydra_num_heads=cfg["hydra_num_heads"],
              grounded_heads=cfg["grounded_heads"], input_embed_fn=target.model.embed_tokens,
              base_config=transformers.LlamaConfig.from_pretrained(str(base)), lm_head_init_weight=target.lm_head.weight.data)
    return (HydraPrefixMLP(dropout_rate=0.0, **kw) if arch == "prefix-mlp" else HydraMLP(**kw)).float()


@torch.no_grad()
def fill(module, target, gen) -> None:
    """Each distinct parameter (named_parameters dedupes the shared ResBlocks) from `gen`, in name order, but the
    target's embed_tokens (input_embed_fn, which the head module registers as its own submodule): norms 1,
    the prefix layer's (unused) embed_tokens N(0, 1), the heads' lm_head weights = the target's lm_head + N(0, 0.1)
    and their biases 0, every other weight and bias N(0, 1/fan_in)."""
    lm = target.lm_head.weight.detach().float()
    for name, p in sorted(module.named_parameters()):
        if name.startswith("input_embed_fn."):  # the target's own embed_tokens, registered as a submodule
            continue
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=gen))
        elif name.startswith("hydra_lm_head") and name.endswith("weight"):
            p.copy_(lm + torch.randn(p.shape, generator=gen) * 0.1)
        elif name.startswith("hydra_lm_head"):
            p.zero_()
        else:
            fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
            p.copy_(torch.randn(p.shape, generator=gen) * fan_in ** -0.5)


@torch.enable_grad()
def distill(module, target, gen, prompts: int = 128, length: int = 48, steps: int = 300) -> float:
    """Self-distillation: head k learns the target's own greedy token k+2 ahead, on greedy continuations of random
    prompts (all drawn from `gen`), through the reference head's own training forward (HydraMLP/HydraPrefixMLP
    .forward: head k at position t reads [h_t (prefix-mlp: the prefix layer over h), E(x_{t+1}), .., E(x_{t+k+1})],
    torch.roll'd embeddings; the wrapped tail positions are left out of the loss). Full-batch Adam, CPU, float32."""
    V = tiny_target.VOCAB
    starts = torch.randint(0, V, (prompts, 8), generator=gen)
    starts[starts == tiny_target.PLACEHOLDER] = 1
    with torch.no_grad():
        seqs = target.generate(starts, attention_mask=torch.ones_like(starts), max_new_tokens=length,
                               do_sample=False, eos_token_id=None, pad_token_id=0)
        hidden = target.model(seqs).last_hidden_state.clone()  # final norm applied (hidden_state_offset 0)
    for p in target.parameters():
        p.requires_grad_(False)
    params = [p for p in module.parameters() if p.requires_grad and p is not target.model.embed_tokens.weight]
    opt = torch.optim.Adam(params, lr=1e-2)
    T = seqs.shape[1]
    module.train()
    for _ in range(steps):
        logits, _ = module(base_hidden_states=hidden, input_ids=seqs)
        loss = 0.0
        for k, lg in enumerate(logits):
            y = seqs[:, 7 + k + 2:T]
            loss = loss + torch.nn.functional.cross_entropy(lg[:, 7:T - k - 2].reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    module.eval()
    final = float(loss) / len(logits)
    print(f"distilled heads: final loss {final:.3f} per head", file=sys.stderr)
    return final


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_heads(state, config: dict, folder: Path, base: str) -> None:
    """As train.py writes them: HydraConfig(...).save_pretrained (config.json) + torch.save(state_dict)
    (hydra_lm_head.pt, the one file from_pretrained reads), and a safetensors copy with the same keys."""
    from hydra.model.hydra_model import HydraConfig
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    HydraConfig(base_model_name_or_path=base, **config).save_pretrained(str(folder))
    torch.save(state, folder / "hydra_lm_head.pt")
    save_file({k: v.clone().contiguous() for k, v in state.items()}, str(folder / "hydra_lm_head.safetensors"))
    for f in folder.iterdir():
        f.chmod(0o644)


def check_tree_order(buffers, choices) -> None:
    """_grounded_proposal appends, head by head, each expanded row's top-n children (rank order), its rows being
    the previous level's first children_to_expand children of each row; the attention mask, positions and
    retrieve_indices take the nodes in sorted((len, path)) order. Assert the two orders agree on this tree."""
    rows, order = [()], []
    for n_children, n_expand in zip(buffers["children_per_head"], buffers["children_to_expand_per_head"]):
        assert len(n_children) == len(rows) == len(n_expand)
        nxt = []
        for row, n, e in zip(rows, n_children, n_expand):
            order += [row + (c,) for c in range(n)]
            nxt += [row + (c,) for c in range(e)]
        rows = nxt
    assert order == [tuple(c) for c in sorted(choices, key=lambda x: (len(x), x))], "tree order"


def check_shared(state: dict[str, torch.Tensor], arch: str, layers: int, heads: int) -> None:
    """The published layout repeats one ResBlock object for blocks 2..L of each head (list * (L-1)), so the state
    dict holds equal copies under each index; a file where they differ would load only its last copy."""
    idx = [3, 5, 7][: layers - 1] if arch == "prefix-mlp" else list(range(1, layers))
    for k in range(heads):
        for j in idx[1:]:
            for leaf in ("linear.weight", "linear.bias"):
                assert torch.equal(state[f"hydra_mlp.{k}.{idx[0]}.{leaf}"], state[f"hydra_mlp.{k}.{j}.{leaf}"])


def make_cache(model, arch: str) -> None:
    """The reference's initialize_past_key_values, sized by the KV head count (module docstring)."""
    from hydra.model.kv_cache import initialize_past_key_values
    c = model.base_model.config
    head_dim = c.hidden_size // c.num_attention_heads
    view = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=c.num_hidden_layers,
                                                  num_attention_heads=c.num_key_value_heads,
                                                  hidden_size=c.num_key_value_heads * head_dim,
                                                  max_position_embeddings=c.max_position_embeddings),
                           device=model.base_model.device, dtype=model.base_model.dtype)
    model.past_key_values, model.past_key_values_data, model.current_length_data = \
        initialize_past_key_values(view, arch)


def lm_heads(model, arch: str):
    heads = model.hydra_head.hydra_lm_head
    return [h[1] for h in heads] if arch == "prefix-mlp" else list(heads)


def decode(model, arch: str, prompt: list[int], max_new_tokens: int, choices) -> dict:
    fed, prefix, tree_logits, draft_gaps = [], [], [], []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        pos = kwargs.get("position_ids")
        fed.append({"input_ids": ids[0].tolist(), "position_ids": None if pos is None else pos.view(-1).tolist()})

    def record_prefix(module, args, kwargs):
        emb, pos, past = kwargs["inputs_embeds"], kwargs["position_ids"], kwargs["past_key_values"]
        prefix.append({"n": emb.shape[1], "positions": pos.view(-1).tolist(),
                       "cache_before": int(past[0][0].current_length), "inputs": emb[0].clone()})

    def record_logits(module, args, out):
        tree_logits.append(out)

    def record_draft(k):  # the smallest gap that orders head k's picks: ranks 0..n-1 of each row, and n-1 vs n
        def hook(module, args, out):
            rows = out.reshape(-1, out.shape[-1])
            for r, n in enumerate(model.hydra_buffers["children_per_head"][k]):
                top = rows[r].topk(n + 1).values
                draft_gaps.append(float((top[:-1] - top[1:]).min()))
        return hook

    hooks = [model.base_model.model.register_forward_pre_hook(record, with_kwargs=True),
             model.base_model.lm_head.register_forward_hook(record_logits)]
    hooks += [h.register_forward_hook(record_draft(k)) for k, h in enumerate(lm_heads(model, arch))]
    if arch == "prefix-mlp":
        hooks.append(model.hydra_head.prefix_embeding_layer.register_forward_pre_hook(record_prefix,
                                                                                     with_kwargs=True))
    steps, target_gap = [], float("inf")
    try:
        with torch.no_grad():
            gen = model.hydra_generate(torch.tensor([prompt]), temperature=0.0, hydra_choices=choices,
                                       max_steps=max_new_tokens)
            output: list[int] = []
            prev_ctx, prev_hidden = 0, None  # the previous step's context length and tree hidden states
            for i, _ in enumerate(gen):
                f = gen.gi_frame.f_locals
                buffers = f["hydra_buffers"]
                retrieve, max_accepts = buffers["retrieve_indices"], buffers["max_accepts"]
                best, acc = int(f["best_candidate"]), int(f["accept_length"])
                cands = f["candidates"]
                ctx = len(prompt) + len(output)
                ids = f["input_ids"][0].tolist()
                appended = ids[ctx:]
                tree = fed[-1]
                assert len(fed) == i + 2, "one base forward per step after the prefill"
                assert tree["input_ids"] == f["tree_candidates"][0].tolist(), "the tree fed is tree_candidates"
                depths = buffers["hydra_position_ids"].tolist()
                assert tree["position_ids"] == [ctx + d for d in depths], "the tree's positions"
                # re-derive the verification from the tree's logits (evaluate_posterior at T=0)
                lg = tree_logits[-1][0, retrieve]
                pred = lg[:, :-1].argmax(-1)
                cal = torch.cumprod((cands[:, 1:] == pred).int(), dim=1).sum(1)
                clamped = torch.minimum(cal, max_accepts)
                assert int(clamped.max()) == acc and (acc == 0 and best == 0 or int(cal.argmax()) == best)
                top2 = tree_logits[-1][0].topk(2, dim=-1).values
                on_path = retrieve[best, : acc + 1]
                target_gap = min(target_gap, float((top2[on_path, 0] - top2[on_path, 1]).min()))
                real_len = int((retrieve[best] >= 0).sum())
                step = {
                    "tree_tokens": f["tree_candidates"][0].tolist(),  # 64: root (base argmax) + 63 nodes, tree order
                    "best_candidate": best,  # row of retrieve_indices
                    "accept_length": acc,  # Hydra tokens accepted beyond the root
                    "appended": appended,  # = candidates[best, :acc+1]
                    "rows_at_max": int((clamped == acc).sum()),  # paths that tie for the accepted length
                    "past_pad": acc + 1 > real_len,  # accepted a path's padding (pads read the last tree node)
                }
                if arch == "prefix-mlp":
                    pr = prefix[-1]
                    assert len(prefix) == i + 1 and pr["cache_before"] == pr["positions"][0]
                    # what the prefix layer ran over: step 0 the prompt's hidden states, then those of the
                    # previous step's root + accepted tokens (their rows of the tree's hidden states)
                    step["prefix_positions"] = [pr["positions"][0], pr["n"]]
                    if i == 0:
                        assert pr["positions"] == list(range(len(prompt)))
                    else:
                        assert pr["positions"] == list(range(prev_ctx, ctx))
                        assert torch.equal(pr["inputs"], prev_hidden)
                    assert [int(x) for x in model.current_length_data[-2:]] == [ctx] * 2
                    assert all(int(x) == len(ids) for x in model.current_length_data[:-2])
                prev_ctx, prev_hidden = ctx, f["hidden_states"][0]
                steps.append(step)
                output = ids[len(prompt):]
                if len(output) >= max_new_tokens:
                    break
            gen.close()
    finally:
        for h in hooks:
            h.remove()
    return {"prompt": prompt, "output": output, "steps": steps,
            "min_gaps": {"target_top2": round(target_gap, 4), "draft_topk": round(min(draft_gaps), 6)}}


def greedy(target, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          eos_token_id=tiny_target.PLACEHOLDER, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's hydra/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--arch", choices=sorted(ARCHES), default="prefix-mlp")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--heads", default="distilled", choices=["random", "distilled"])
    p.add_argument("--heads-file", type=Path, default=None,
                   help="take the heads from this safetensors file (the committed fixture) instead of making them")
    p.add_argument("--head-seed", type=int, default=tiny_target.SEED + 11)
    p.add_argument("--save-heads", type=Path, default=None,
                   help="also write the head folder (config.json, hydra_lm_head.pt/.safetensors) here, as shipped")
    p.add_argument("--work", type=Path, default=None, help="where the base and head folders go (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))
    from hydra.model import hydra_choices as hc
    from hydra.model.hydra_model import HydraModel  # the reference, as is

    t0 = time.time()
    cfg = ARCHES[args.arch]
    target = tiny_target.build()
    work = args.work or Path(tempfile.mkdtemp(prefix="hydra-ref-"))
    base, headdir = work / "tinybase", work / f"tinyheads-{args.arch}"
    save_base(target, base)
    module = head_module(args.arch, target, base)
    loss = None
    if args.heads_file is not None:
        from safetensors.torch import load_file
        state = load_file(str(args.heads_file))
        recipe = f"{args.heads} (read from {args.heads_file.parent.name}/{args.heads_file.name})"
    else:
        gen = torch.Generator().manual_seed(args.head_seed)
        fill(module, target, gen)
        if args.heads == "distilled":
            loss = distill(module, target, gen)
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        recipe = args.heads
    check_shared(state, args.arch, cfg["hydra_num_layers"], cfg["hydra_num_heads"])
    save_heads(state, cfg, headdir, str(base.resolve()))
    if args.save_heads is not None:
        save_heads(state, cfg, args.save_heads, SHIPPED_BASE)

    model = HydraModel.from_pretrained(str(headdir)).eval()
    assert model.hydra_head_arch == args.arch and model.hydra == cfg["hydra_num_heads"]
    loaded = model.hydra_head.state_dict()
    assert sorted(loaded) == sorted(state), "from_pretrained loads with strict=False: every key must match"
    assert all(torch.equal(loaded[k], state[k].to(loaded[k].dtype)) for k in state), "heads not loaded as written"
    assert tiny_target.fingerprint(model.base_model) == tiny_target.fingerprint(target)
    make_cache(model, args.arch)

    choices = hc.mc_sim_7b_63  # hydra_generate's default (hydra_model.py: hydra_choices=mc_sim_7b_63)
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(model, args.arch, prompt, args.tokens, choices)
        run["greedy_matches"] = run["output"][:args.tokens] == greedy(target, prompt, args.tokens)
        runs.append(run)
    buffers = model.hydra_buffers
    check_tree_order(buffers, choices)
    trace = {
        "method": "hydra",
        "arch": args.arch,
        "reference": {"repository": "github.com/zankner/Hydra", "commit": args.commit,
                      "code": "hydra/model/hydra_model.py: HydraModel.from_pretrained, hydra_generate; "
                              f"hydra/model/hydra_heads/{'prefix_mlp_head' if args.arch == 'prefix-mlp' else 'mlp_head'}"
                              ".py: _grounded_proposal",
                      "settings": {"temperature": 0.0, "hydra_choices": "mc_sim_7b_63", "posterior_threshold": 0.09,
                                   "posterior_alpha": 0.3},
                      "kv_cache": "initialize_past_key_values sized by num_key_value_heads, preset on the model"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": tiny_target.PLACEHOLDER},
        "heads": {"recipe": recipe, "seed": args.head_seed, "config": cfg, "sha256": digest(state),
                  **({"distill_loss": round(loss, 4)} if loss is not None else {})},
        "tree": {"nodes": sorted(choices, key=lambda x: (len(x), x)),
                 "position_ids": buffers["hydra_position_ids"].tolist(),
                 "retrieve_indices": buffers["retrieve_indices"].tolist(),
                 "max_accepts": buffers["max_accepts"].tolist(),
                 "children_per_head": buffers["children_per_head"],
                 "children_to_expand_per_head": buffers["children_to_expand_per_head"]},
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs_text = ",\n".join(json.dumps(r, separators=(",", ":")) for r in trace.pop("runs"))  # a line per run
    tree_text = ",\n".join(f'  "{k}": {json.dumps(v, separators=(",", ":"))}' for k, v in trace.pop("tree").items())
    head = json.dumps(trace, indent=1)[:-2]
    args.out.write_text(head + ',\n "tree": {\n' + tree_text + '\n },\n "runs": [\n' + runs_text + "\n ]\n}\n")
    json.loads(args.out.read_text())
    steps = [s for r in runs for s in r["steps"]]
    print(f"{args.out}: {args.arch}, {len(runs)} prompts, {len(steps)} steps, mean accept_length "
          f"{sum(s['accept_length'] for s in steps) / len(steps):.2f} (tokens/step "
          f"{sum(len(s['appended']) for s in steps) / len(steps):.2f}), max {max(s['accept_length'] for s in steps)}, "
          f"past_pad steps {sum(s['past_pad'] for s in steps)}, tied steps {sum(s['rows_at_max'] > 1 for s in steps)}, "
          f"greedy matches {[r['greedy_matches'] for r in runs]}, min gaps "
          f"{[r['min_gaps'] for r in runs]}, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
