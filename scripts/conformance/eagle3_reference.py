"""EAGLE-3's reference (github.com/SafeAILab/EAGLE, the EAGLE-3 code), run unchanged on a seeded tiny target.

    python scripts/conformance/eagle3_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--head-dir D]

Runs in the reference code's own venv (transformers 4.53.1, the oldest its requirements.txt allows; torch 2.13.0:
scripts/conformance/eagle3.sh makes it), never with specbench. REF_DIR holds the reference's `eagle/model/` package
as `git archive` gives it (nothing edited). The target is scripts/conformance/tiny_target.py with 8 layers (EAGLE-3
fuses the inputs of decoder layers 2, L//2 and L-3: three distinct layers only from 6 layers on), saved as a local
base folder with its weights in shards and an index (the head takes its embedding from the base through
model.safetensors.index.json, as EaModel does with load_emb=True). The head is written in the published EAGLE-3
layout (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's: config.json with architectures LlamaForCausalLMEagle3,
num_hidden_layers 1, draft_vocab_size; pytorch_model.bin with midlayer.*, fc.weight, norm.weight, lm_head.weight,
d2t, t2d and no embedding), here with a draft vocabulary of 96 of the 160 target tokens, so that d2t matters. The
reference's own EaModel.from_pretrained(use_eagle3=True) loads both at its own defaults (total_token=60, depth=7,
top_k=10) and EaModel.eagenerate decodes at temperature 0.

What each step drafted and accepted is read as for EAGLE-2 (eagle_reference.py's Tracer and decode: the tree search
is the same code shape); here the features handed to topK_genrate are checked against the target's fused hidden
states (the inputs of decoder layers 2, 4 and 5, concatenated).

The head (--head-dir absent): `distill` trains one on the tiny target (about a minute on one CPU thread) through
the reference's own cnets.Model (its forward, called with gradients): the target's greedy token two positions on,
cross-entropy over the draft vocabulary, and the same one step further on the head's own hidden states (EAGLE-3's
training-time test, one step deep). Shipped as eagle3_head/ (--save-head) and read back with --head-dir.
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
import eagle_reference  # noqa: E402  (the tiny base folder, the tracer, the per-step decode)
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

LAYERS, DRAFT_VOCAB = 8, 96
TOTAL_TOKEN, DEPTH, TOP_K = 60, 7, 10  # EaModel.from_pretrained's defaults (checked against the code below)
FUSED = (2, LAYERS // 2, LAYERS - 3)  # modeling_llama_kv: the inputs of these decoder layers, in this order


def fused_batch(target, ids: torch.Tensor) -> torch.Tensor:
    """What EaModel(use_eagle3=True) hands the head: the inputs of decoder layers 2, L//2 and L-3, concatenated."""
    states = target.model(ids, output_hidden_states=True).hidden_states  # [i]: the input of decoder layer i
    return torch.cat([states[i] for i in FUSED], dim=-1)


def fused_features(target, ids: torch.Tensor) -> torch.Tensor:
    return fused_batch(target, ids)[0]


def head_config() -> dict:
    """config.json as the published EAGLE-3 heads' (a Llama config with one layer and draft_vocab_size), sized as the
    tiny target."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": tiny_target.HIDDEN, "initializer_range": 0.02, "intermediate_size": 2 * tiny_target.HIDDEN,
            "max_position_embeddings": tiny_target.CONTEXT, "model_type": "llama",
            "num_attention_heads": tiny_target.HEADS, "num_hidden_layers": 1,
            "num_key_value_heads": tiny_target.KV_HEADS, "pad_token_id": 0, "pretraining_tp": 1,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "torch_dtype": "float32", "transformers_version": transformers.__version__, "use_cache": True,
            "vocab_size": tiny_target.VOCAB, "draft_vocab_size": DRAFT_VOCAB}


@torch.enable_grad()
def distill(target, seed: int, pool: int = 2048, prompt_len: int = 16, length: int = 112, batch: int = 128,
            steps: int = 800) -> dict[str, torch.Tensor]:
    """A head trained with the reference's own cnets.Model (built as EaModel builds it, its forward called as is,
    with gradients) on the target's greedy continuations of random prompts (as eagle_reference.distill). The draft
    vocabulary: the DRAFT_VOCAB target tokens most often the target's greedy choice in that data, ascending (d2t[i]
    = target id - i, t2d their mask, as EAGLE-3's own training writes them). Position t reads (fused feature t,
    token t+1) and learns the target's token t+2 (cross-entropy over the draft vocabulary, tokens outside it
    ignored); then the same one step further with its own hidden state fed back (position t reads its own output at
    t and token t+2, and learns token t+3). Adam (lr 3e-3, cosine), float32, one thread; everything from `seed`."""
    from eagle.model.cnets import Model
    from eagle.model.configs import EConfig
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = EConfig(**{k: v for k, v in head_config().items() if k not in ("architectures", "transformers_version")})
    head = Model(config, load_emb=False, total_tokens=TOTAL_TOKEN, depth=DEPTH, top_k=TOP_K).eval()
    head.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight.detach())
    V = tiny_target.VOCAB
    seqs = eagle_reference.greedy_texts(target, gen, pool, prompt_len, length)
    with torch.no_grad():
        feats = torch.cat([fused_batch(target, chunk) for chunk in seqs.split(256)])
        labels = target(seqs).logits.argmax(-1)  # the target's greedy token after each position
    counts = torch.bincount(labels.view(-1), minlength=V)
    keep = torch.sort(torch.topk(counts, DRAFT_VOCAB).indices).values  # ascending target ids
    head.d2t.copy_(keep - torch.arange(DRAFT_VOCAB))
    head.t2d.zero_()
    head.t2d[keep] = True
    to_draft = torch.full((V,), -100, dtype=torch.long)
    to_draft[keep] = torch.arange(DRAFT_VOCAB)
    y_all = to_draft[labels]
    params = [p for n, p in head.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.Adam(params, lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)

    def logits(h):
        return head.lm_head(head.norm(h)).reshape(-1, DRAFT_VOCAB)

    for step in range(steps):
        pick = torch.randint(0, pool, (batch,), generator=gen)
        f, x, y = feats[pick], seqs[pick], y_all[pick]
        out = head(f[:, :-1], input_ids=x[:, 1:])  # fused feature t with token t+1 -> token t+2
        loss1 = ce(logits(out), y[:, 1:].reshape(-1))
        out2 = head(out[:, :-1], input_ids=x[:, 2:])  # its own hidden state at t with token t+2 -> token t+3
        loss2 = ce(logits(out2), y[:, 2:].reshape(-1))
        loss = loss1 + loss2
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                m1, m2 = y[:, 1:] >= 0, y[:, 2:] >= 0
                acc = (logits(out).argmax(-1).view(m1.shape) == y[:, 1:])[m1].float().mean()
                acc2 = (logits(out2).argmax(-1).view(m2.shape) == y[:, 2:])[m2].float().mean()
            print(f"distill step {step}: loss {loss.item():.4f} next-token acc {acc.item():.3f} "
                  f"(own hidden states {acc2.item():.3f})", file=sys.stderr)
    state = {k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}
    del state["embed_tokens.weight"]  # the published heads take the target's
    return state


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's eagle/model/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--head-dir", type=Path, default=None, help="take the head from this folder's model.safetensors "
                                                                 "(the committed fixture) instead of distilling one")
    p.add_argument("--save-head", type=Path, default=None, help="also write the head folder here (the fixture)")
    p.add_argument("--head-seed", type=int, default=tiny_target.SEED + 13)
    p.add_argument("--work", type=Path, default=None, help="where the base and head folders go (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))
    from eagle.model import cnets, utils
    from eagle.model.ea_model import EaModel  # the reference, as is

    t0 = time.time()
    target = tiny_target.build(LAYERS)
    work = args.work or Path(tempfile.mkdtemp(prefix="eagle3-ref-"))
    base, headdir = work / "tinybase", work / "tinyhead"
    eagle_reference.save_base(target, base, max_shard_size="60KB")
    assert (base / "model.safetensors.index.json").exists()
    state = eagle_reference.load_head(args.head_dir) if args.head_dir is not None else distill(target, args.head_seed)
    eagle_reference.save_head(state, headdir, config=head_config())
    if args.save_head is not None:
        eagle_reference.save_head(state, args.save_head, pickle=False, config=head_config())

    defaults = inspect.signature(EaModel.from_pretrained).parameters
    assert {k: defaults[k].default for k in ("use_eagle3", "total_token", "depth", "top_k")} == {
        "use_eagle3": True, "total_token": TOTAL_TOKEN, "depth": DEPTH, "top_k": TOP_K}, "the defaults moved"
    model = EaModel.from_pretrained(base_model_path=str(base), ea_model_path=str(headdir)).eval()
    assert type(model.base_model).__module__.endswith("modeling_llama_kv")
    assert tiny_target.fingerprint(model.base_model) == tiny_target.fingerprint(target)
    loaded = model.ea_layer.state_dict()
    assert set(loaded) == set(state) | {"embed_tokens.weight"}, set(loaded) ^ set(state)
    assert all(torch.equal(loaded[k], state[k]) for k in state), "head not loaded as written"
    assert torch.equal(loaded["embed_tokens.weight"], target.model.embed_tokens.weight), "embedding not the target's"
    assert (model.ea_layer.total_tokens, model.ea_layer.depth, model.ea_layer.top_k) == (TOTAL_TOKEN - 1, DEPTH, TOP_K)
    eag = inspect.signature(inspect.unwrap(EaModel.eagenerate)).parameters

    tracer = eagle_reference.Tracer(model, utils, cnets)
    runs = []
    for prompt in tiny_target.prompts():
        run = eagle_reference.decode(model, target, prompt, args.tokens, tracer, depth=DEPTH, top_k=TOP_K,
                                     features=fused_features)
        run["greedy_matches"] = run["output"] == eagle_reference.greedy(target, prompt, len(run["output"]))
        runs.append(run)
    trace = {
        "method": "eagle3",
        "reference": {"repository": "github.com/SafeAILab/EAGLE", "commit": args.commit,
                      "code": "eagle/model/ea_model.py: EaModel.from_pretrained(use_eagle3=True), EaModel.eagenerate; "
                              "eagle/model/cnets.py: Model.topK_genrate; eagle/model/utils.py",
                      "settings": {"total_token": TOTAL_TOKEN, "depth": DEPTH, "top_k": TOP_K, "temperature": 0.0,
                                   "max_new_tokens": args.tokens, "tree_nodes": TOTAL_TOKEN,
                                   "draft_nodes": TOTAL_TOKEN - 1, "max_tree_depth": DEPTH + 1,
                                   "fused_layers": list(FUSED), "draft_vocab_size": DRAFT_VOCAB},
                      "code_defaults": {"from_pretrained": {k: defaults[k].default for k in
                                                            ("use_eagle3", "total_token", "depth", "top_k",
                                                             "threshold")},
                                        "eagenerate": {k: eag[k].default for k in
                                                       ("temperature", "max_new_tokens", "max_length")}}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": f"scripts/conformance/tiny_target.py build({LAYERS})", "layers": LAYERS,
                   "fingerprint": tiny_target.fingerprint(target), "eos": tiny_target.PLACEHOLDER},
        "head": {"recipe": "eagle3_reference.py distill (--head-dir absent), shipped as eagle3_head/",
                 "seed": args.head_seed, "layout": "config.json + pytorch_model.bin (EAGLE-3), no embedding",
                 "sha256": eagle_reference.digest(state), "keys": {k: list(v.shape) for k, v in state.items()}},
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    print(eagle_reference.summary(args.out, runs, t0))

if __name__ == "__main__":
    main()
