"""EAGLE-2's reference (github.com/SafeAILab/EAGLE, the EAGLE-2 release), run unchanged on the seeded tiny target.

    python scripts/conformance/eagle_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--head-dir D]

Runs in the reference code's own venv (transformers 4.36.2, torch 2.13.0: scripts/conformance/eagle.sh makes it),
never with specbench. REF_DIR holds the reference's `eagle/model/` package as `git archive` gives it (nothing edited).
The tiny target is scripts/conformance/tiny_target.py. We save it as a local base folder (weights + a word-level
tokenizer, which EaModel.__init__ loads with AutoTokenizer(use_fast=False); eos = the placeholder token 100, which
the target never picks), write an EAGLE-1/2 head folder in the published layout (config.json: a Llama config with
num_hidden_layers 1, as yuhuili/EAGLE-llama2-chat-7B's; pytorch_model.bin: embed_tokens.weight, fc.weight, fc.bias,
layers.0.* without input_layernorm), load both with the reference's own EaModel.from_pretrained (total_token=60,
depth=5, top_k=10: the settings of the reference's evaluation scripts; from_pretrained's own default is
total_token=59) and call the reference's EaModel.eagenerate at temperature 0, max_new_tokens 96.

Nothing of the reference is replaced or wrapped. What each step drafted and accepted is read while eagenerate runs,
by a sys.settrace tracer that only looks: it reads the frame locals of topK_genrate (at a few of its lines and at its
return), of tree_decoding, evaluate_posterior and update_inference_inputs (at their call and return); forward
pre-hooks on the target's LlamaModel and on the head record what each forward was fed. The trace is checked against
the target itself: the features handed to topK_genrate are the target's final-norm hidden states of the accepted
tokens, and the output is the target's greedy continuation.

The head (--head-dir absent): `distill` self-distils one on the tiny target (about a minute on one CPU thread) by
training the reference's own cnets.Model (its forward, called with gradients) on the target's greedy continuations
of random prompts; float training: ship the written head folder with the trace (--head-dir reads it back).
"""
from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: no hub retries
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

TOTAL_TOKEN, DEPTH, TOP_K = 60, 5, 10  # gen_ea_answer_*.py's --total-token/--depth/--top-k defaults at the EAGLE-2 commit


def save_base(model, folder: Path, max_shard_size: str | None = None) -> None:
    """The tiny target as a local base folder + a word-level tokenizer 't0'..'t159' whose eos is the placeholder;
    max_shard_size: weights in shards with an index (what EAGLE-3's head reads the embedding through)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    shards = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, safe_serialization=True, **shards)
    vocab = {f"t{i}": i for i in range(tiny_target.VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{tiny_target.PLACEHOLDER}",
                                                unk_token="t0")
    fast.save_pretrained(folder)


def head_config() -> dict:
    """config.json as the published EAGLE-1/2 heads' (yuhuili/EAGLE-llama2-chat-7B: a LlamaForCausalLM config with
    num_hidden_layers 1, no "bias" key, so EaModel builds fc with a bias), sized as the tiny target."""
    return {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": tiny_target.HIDDEN, "initializer_range": 0.02, "intermediate_size": 2 * tiny_target.HIDDEN,
            "max_position_embeddings": tiny_target.CONTEXT, "model_type": "llama",
            "num_attention_heads": tiny_target.HEADS, "num_hidden_layers": 1,
            "num_key_value_heads": tiny_target.KV_HEADS, "pretraining_tp": 1, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float32",
            "transformers_version": transformers.__version__, "use_cache": True, "vocab_size": tiny_target.VOCAB}


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def greedy_texts(target, gen: torch.Generator, pool: int, prompt_len: int, length: int) -> torch.Tensor:
    """What a head is distilled on: the target's greedy continuations (`length` tokens) of `pool` random
    `prompt_len`-token prompts drawn from gen (never the placeholder)."""
    starts = torch.randint(0, tiny_target.VOCAB, (pool, prompt_len), generator=gen)
    starts[starts == tiny_target.PLACEHOLDER] = 1
    return torch.cat([target.generate(chunk, attention_mask=torch.ones_like(chunk), max_new_tokens=length,
                                      do_sample=False, eos_token_id=None, pad_token_id=tiny_target.PLACEHOLDER)
                      for chunk in starts.split(256)])


@torch.enable_grad()
def distill(target, seed: int, pool: int = 2048, prompt_len: int = 16, length: int = 112, batch: int = 128,
            steps: int = 800) -> dict[str, torch.Tensor]:
    """Self-distillation with the reference's own head class (cnets.Model, built as EaModel builds it, its forward
    called as is, with gradients). Data: the target's greedy continuations (`length` tokens) of `pool` random
    `prompt_len`-token prompts (eos_token_id=None makes generate fall back to the config's eos 2: about one row in
    ten stops there and is padded with token 100; the head is still taught the target's own features and argmax on
    whatever sequence it reads, so that stays). The head reads [embedding of token t+1, feature t] (features: the target's final-norm
    hidden states, as EaModel hands them over) and learns feature t+1 (smooth L1, as EAGLE's training) and the
    target's greedy token after it (cross-entropy through the frozen lm_head, weight 0.5); plus the same losses one
    step further with its own predicted features fed back (the deeper tree levels read the head's own outputs).
    Embedding = the target's, frozen. Adam (lr 3e-3, cosine) on minibatches of `batch` sequences, float32, one thread;
    init, data and batches all from `seed`."""
    from eagle.model.cnets import Model
    from eagle.model.configs import EConfig
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = EConfig(**{k: v for k, v in head_config().items() if k not in ("architectures", "transformers_version")})
    head = Model(config, bias=True, total_tokens=TOTAL_TOKEN, depth=DEPTH, top_k=TOP_K).eval()
    head.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight.detach())
    V = tiny_target.VOCAB
    seqs = greedy_texts(target, gen, pool, prompt_len, length)
    with torch.no_grad():
        feats = torch.cat([target.model(chunk).last_hidden_state for chunk in seqs.split(256)])  # final norm applied
        labels = target.lm_head(feats).argmax(-1)  # the target's greedy token after each position
    lm = target.lm_head
    params = [p for n, p in head.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.Adam(params, lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    smooth = torch.nn.SmoothL1Loss()
    ce = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        pick = torch.randint(0, pool, (batch,), generator=gen)
        f, x, y = feats[pick], seqs[pick], labels[pick]
        out = head(f[:, :-1], input_ids=x[:, 1:])  # feature t with token t+1 -> feature t+1
        loss1 = smooth(out, f[:, 1:]) + 0.5 * ce(lm(out).reshape(-1, V), y[:, 1:].reshape(-1))
        # one step on its own features: position t reads (predicted feature t, token t+1), for t >= 1
        out2 = head(torch.cat([f[:, :1], out[:, :-1]], dim=1), input_ids=x[:, 1:])
        loss2 = smooth(out2[:, 1:], f[:, 2:]) + 0.5 * ce(lm(out2[:, 1:]).reshape(-1, V), y[:, 2:].reshape(-1))
        loss = loss1 + loss2
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                acc = (lm(out).argmax(-1) == y[:, 1:]).float().mean()
                acc2 = (lm(out2[:, 1:]).argmax(-1) == y[:, 2:]).float().mean()
            print(f"distill step {step}: loss {loss.item():.4f} next-token acc {acc.item():.3f} "
                  f"(own features {acc2.item():.3f})", file=sys.stderr)
    return {k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}


def save_head(state: dict[str, torch.Tensor], folder: Path, pickle: bool = True, config: dict | None = None) -> None:
    """The published layout: config.json (default: head_config(), EAGLE-1/2's) + pytorch_model.bin (what
    EaModel.from_pretrained reads first), and the same tensors as model.safetensors (what later EAGLE commits fall
    back to; the fixture ships only this one)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or head_config(), indent=2) + "\n")
    if pickle:
        torch.save(state, folder / "pytorch_model.bin")
    save_file(state, str(folder / "model.safetensors"))


def load_head(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return {k: v.contiguous() for k, v in load_file(str(folder / "model.safetensors")).items()}


class Tracer:
    """Reads the reference's frames while eagenerate runs (sys.settrace; nothing is changed). Only the frames of the
    functions named in `watch` are traced line by line; every other call returns at once."""

    def __init__(self, ea_model, utils, cnets):
        from eagle.model.ea_model import EaModel
        unwrap = inspect.unwrap
        self.codes = {
            unwrap(cnets.Model.topK_genrate).__code__: "topk",
            unwrap(utils.tree_decoding).__code__: "tree_decoding",
            unwrap(utils.evaluate_posterior).__code__: "evaluate_posterior",
            unwrap(utils.update_inference_inputs).__code__: "update",
            unwrap(utils.initialize_tree).__code__: "initialize_tree",
            unwrap(EaModel.eagenerate).__code__: "eagenerate",
        }
        lines, start = inspect.getsourcelines(unwrap(cnets.Model.topK_genrate))
        self.topk_lines = {}
        for i, text in enumerate(lines):
            s = text.strip()
            for key, prefix in (("post", "scores_list = torch.cat(scores_list, dim=0).view(-1)"),
                                ("topk_p", "topk_index, topk_p = top.indices, top.values"),
                                ("mask", "tree_mask = torch.eye(total_tokens + 1).bool()")):
                if s.startswith(prefix):
                    self.topk_lines.setdefault(start + i, key)
        assert sorted(self.topk_lines.values()) == ["mask", "post", "topk_p", "topk_p"], self.topk_lines
        self.events: list[tuple[str, str, dict]] = []

    def __call__(self, frame, event, arg):
        name = self.codes.get(frame.f_code)
        if name is None:
            return None
        self.on(name, frame, "call", None)
        return self.local

    def local(self, frame, event, arg):
        name = self.codes[frame.f_code]
        if event == "line" and name == "topk" and frame.f_lineno in self.topk_lines:
            self.on(name, frame, self.topk_lines[frame.f_lineno], None)
        elif event == "return":
            self.on(name, frame, "return", arg)
        return self.local

    def on(self, name, frame, what, arg):
        f = frame.f_locals
        rec: dict = {}
        if name == "topk":
            if what == "call":
                stable = f["self"].stable_kv
                rec = {"features": f["hidden_states"].detach().clone(), "input_ids": f["input_ids"][0].tolist(),
                       "stable_kv_len": None if stable is None else int(stable[0][0].shape[2])}
            elif what == "topk_p":  # the log-softmax each topk just ranked: [1, V] (root) or [top_k, V] (a level)
                rec = {"last_p": f["last_p"].detach().clone()}
            elif what == "post":  # before the level lists are concatenated (they are deleted before the return)
                rec = {"scores_list": [s.detach().clone() for s in f["scores_list"]],
                       "ss_token": [s.detach().clone() for s in f["ss_token"]],
                       "parents_list": [p.detach().clone() for p in f["parents_list"]]}
            elif what == "mask":
                rec = {"mask_index": f["mask_index"].tolist(), "top_scores_index": f["top_scores_index"].tolist()}
            elif what == "return":
                draft_tokens, retrieve_indices, tree_mask, tree_position_ids = arg
                rec = {"draft_tokens": draft_tokens[0].tolist(), "retrieve_indices": retrieve_indices.tolist(),
                       "tree_mask": tree_mask[0, 0].bool().clone(), "tree_position_ids": tree_position_ids.tolist()}
        elif name == "tree_decoding" and what == "call":
            rec = {"tree_candidates": f["tree_candidates"][0].tolist(), "context": int(f["input_ids"].shape[1]),
                   "tree_position_ids": f["tree_position_ids"].tolist()}
        elif name == "evaluate_posterior" and what == "return":
            best, acc, _ = arg
            lengths = f["candidates_accept_length"].tolist()
            rec = {"best_candidate": int(best), "accept_length": int(acc), "row_accept_lengths": lengths}
        elif name == "update" and what == "call":
            rec = {"candidates": f["candidates"].tolist()}
        elif name == "update" and what == "return":
            input_ids, *_rest, new_token, _hidden, token = arg
            rec = {"input_ids": input_ids[0].tolist(), "new_token": int(new_token), "token": int(token)}
        elif name == "initialize_tree" and what == "return":
            rec = {"token": int(arg[-1])}
        elif name == "eagenerate" and what == "return":
            rec = {"output_ids": arg[0].tolist()}
        else:
            return
        self.events.append((name, what, rec))


def tree_from_events(topk: dict, top_k: int = TOP_K) -> dict:
    """One topK_genrate call's tree, as read from its frame, with the per-level numbers that decide it."""
    scores = torch.cat(topk["post"]["scores_list"], dim=0).view(-1)
    flat = topk["mask"]["top_scores_index"]  # the total_tokens - 1... kept candidates' flat indices, ascending
    n = len(flat)
    mask_index = topk["mask"]["mask_index"]  # tree position of each node's parent (0 = root)
    tree_mask = topk["return"]["tree_mask"]
    depths = topk["return"]["tree_position_ids"]
    # parent by the tree mask: the ancestor one level up (checks mask_index and the mask against each other)
    parents = [-1]
    for i in range(1, n + 1):
        anc = [j for j in range(i) if bool(tree_mask[i, j]) and depths[j] == depths[i] - 1]
        assert len(anc) == 1 and anc[0] == mask_index[i - 1], (i, anc, mask_index[i - 1])
        parents.append(anc[0])
    # every kept node's parent (flat index from parents_list) is kept too (else searchsorted would misplace it)
    parent_flat = (torch.cat(topk["post"]["parents_list"])[torch.tensor(flat) // top_k] - 1).tolist()
    assert all(q == -1 or q in flat for q in parent_flat)
    assert [(-1 if q == -1 else flat.index(q)) + 1 for q in parent_flat] == mask_index
    ordered = torch.sort(scores, descending=True).values
    # the per-node top_k picks: gap between the top_k-th and (top_k+1)-th log-prob of each ranked distribution
    topk_gaps = []
    for lp in topk["topk_p"]:
        s = torch.sort(lp, dim=-1, descending=True).values
        topk_gaps.append(float((s[:, top_k - 1] - s[:, top_k]).min()))
    frontier_gaps = []
    for cu in topk["post"]["scores_list"][1:]:  # each level's top_k*top_k cumulative scores
        s = torch.sort(cu.view(-1), descending=True).values
        frontier_gaps.append(float(s[top_k - 1] - s[top_k]))
    expanded = [[int(x) - 1 for x in p.tolist()] for p in topk["post"]["parents_list"][1:]]
    return {
        "tree_tokens": topk["return"]["draft_tokens"],
        "parents": parents,
        "depths": depths,
        "flat_index": flat,
        "scores": [round(float(scores[i]), 6) for i in flat],
        "expanded": expanded,
        "retrieve_indices": topk["return"]["retrieve_indices"],
        "margins": {"select": float(ordered[n - 1] - ordered[n]), "frontier": frontier_gaps, "topk": topk_gaps},
    }


def final_norm_features(target, ids: torch.Tensor) -> torch.Tensor:
    """What EaModel hands an EAGLE-1/2 head: the target's final-norm hidden states (HF's LlamaModel applies it)."""
    return target.model(ids).last_hidden_state[0]


def decode(model, target, prompt: list[int], max_new_tokens: int, tracer: Tracer, depth: int = DEPTH,
           top_k: int = TOP_K, features=final_norm_features) -> dict:
    """One eagenerate call traced: every step's tree and accepted length. `features(target, ids)`: what the head
    should be handed for the tokens ids (checked at every call); depth, top_k: the reference's settings."""
    fed: list[dict] = []
    head_fed: list[dict] = []

    def record_target(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        pos = kwargs.get("position_ids")
        tm = getattr(module, "tree_mask", None)
        fed.append({"input_ids": ids[0].tolist(), "position_ids": None if pos is None else pos.view(-1).tolist(),
                    "tree_mask": None if tm is None else tm[0, 0].bool().clone()})

    def record_head(module, args, kwargs):
        ids = kwargs["input_ids"]
        pos = kwargs.get("position_ids")
        past = kwargs.get("past_key_values")
        head_fed.append({"n": int(ids.shape[1]), "past": 0 if past is None else int(past[0][0].shape[2]),
                         "position_ids": None if pos is None else pos.view(-1).tolist()})

    hooks = [model.base_model.model.register_forward_pre_hook(record_target, with_kwargs=True),
             model.ea_layer.register_forward_pre_hook(record_head, with_kwargs=True)]
    tracer.events.clear()
    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = model.eagenerate(torch.tensor([prompt]), temperature=0.0, max_new_tokens=max_new_tokens)
    finally:
        sys.settrace(old)
        for h in hooks:
            h.remove()
    events = tracer.events
    assert events[-1][:2] == ("eagenerate", "return") and events[-1][2]["output_ids"] == out[0].tolist()

    # group topK_genrate's records per call; the other records in order
    calls, cur = [], None
    seq = []
    for name, what, rec in events:
        if name == "topk":
            if what == "call":
                cur = {"call": rec, "topk_p": []}
            elif what == "topk_p":
                cur["topk_p"].append(rec["last_p"])
            else:
                cur[what] = rec
            if what == "return":
                calls.append(cur)
                seq.append(("topk", cur))
        else:
            seq.append((f"{name}.{what}", rec))
    names = [s[0] for s in seq]
    # eagenerate: initialize_tree (prefill + topK_genrate), then per step tree_decoding, evaluate_posterior,
    # update_inference_inputs (which ends in topK_genrate for the next step's tree)
    assert names[:2] == ["topk", "initialize_tree.return"], names[:4]
    body = names[2:-1]
    steps_n = len(body) // 5
    assert body == ["tree_decoding.call", "evaluate_posterior.return", "update.call", "topk", "update.return"] * steps_n

    # the target's own forwards: prefill, then per step the tree (nothing else runs the target)
    assert len(fed) == 1 + steps_n and fed[0]["input_ids"] == prompt and fed[0]["tree_mask"] is None
    with torch.no_grad():
        full_hidden = features(target, out)

    steps = []
    ids = list(prompt)
    root = seq[1][1]["token"]
    assert root == int(target(torch.tensor([prompt])).logits[0, -1].argmax())
    first = calls[0]
    assert first["call"]["stable_kv_len"] is None and first["call"]["input_ids"] == prompt + [root]
    assert torch.allclose(first["call"]["features"][0], full_hidden[:len(prompt)], atol=1e-4)
    tree, built = tree_from_events(first, top_k), first
    heads_per_call = 1 + depth  # per topK_genrate: the context forward, then one forward per level
    assert len(head_fed) == heads_per_call * len(calls)
    assert head_fed[0] == {"n": len(prompt), "past": 0, "position_ids": None}
    for s in range(steps_n):
        td, ev, upc, topk, upr = (x[1] for x in seq[2 + 5 * s: 7 + 5 * s])
        L = len(ids)
        assert td["context"] == L and td["tree_candidates"] == tree["tree_tokens"] and tree["tree_tokens"][0] == root
        assert fed[1 + s]["input_ids"] == tree["tree_tokens"]
        assert fed[1 + s]["position_ids"] == [L + d for d in tree["depths"]], "the tree's positions"
        best, acc = ev["best_candidate"], ev["accept_length"]
        row = tree["retrieve_indices"][best]
        appended = [tree["tree_tokens"][j] for j in row[:acc + 1]]
        assert upr["input_ids"] == ids + appended
        ties = [i for i, a in enumerate(ev["row_accept_lengths"]) if a == acc]
        assert best == ties[0], "torch.argmax takes the first of equal accept lengths"
        # the bonus token: the target's argmax after the last accepted node (root of the next tree)
        bonus = upr["token"]
        h = head_fed[heads_per_call * s:heads_per_call * (s + 1)]  # the call that built this step's tree
        ctx = built["call"]["input_ids"]
        assert [c["position_ids"] for c in h[1:]] == [[len(ctx) - 1 + i] * top_k for i in range(depth)]
        assert [(c["n"], c["past"]) for c in h[1:]] == [(top_k, len(ctx) - 1 + top_k * i) for i in range(depth)]
        nxt = topk["call"]
        steps.append({
            "context": L,  # tokens before this step's tree (prompt + output so far)
            **{k: tree[k] for k in ("tree_tokens", "parents", "depths", "flat_index", "scores", "expanded",
                                    "retrieve_indices")},
            "best_candidate": best,  # row of retrieve_indices
            "accept_length": acc,  # draft tokens accepted beyond the root
            "tied_rows": len(ties),  # rows with the same accept length (the first wins)
            "appended": appended,  # root + accepted nodes, = candidates[best, :acc+1]
            "bonus": bonus,  # argmax at the last accepted node: next step's root
            # how this step's tree was drafted: features fed to topK_genrate (the whole prompt at step 0, else the
            # previous step's accept_length + 1) and the head's forwards [tokens fed, head KV length before, position
            # of the first (None: arange from the KV length)]: the context forward, then one per level
            "head_features": int(built["call"]["features"].shape[1]),
            "head_calls": [[c["n"], c["past"], None if c["position_ids"] is None else c["position_ids"][0]] for c in h],
            "margins": tree["margins"],
        })
        # the features handed to the head are the target's final-norm hidden states of the accepted tokens,
        # the tokens it reads are those one position later (+ the bonus token); its KV cache keeps the rest
        assert nxt["input_ids"] == ids + appended + [bonus]
        assert torch.allclose(nxt["features"][0], full_hidden[L:L + acc + 1], atol=1e-4)
        assert nxt["stable_kv_len"] == L, (nxt["stable_kv_len"], L)
        assert head_fed[heads_per_call * (s + 1)] == {"n": acc + 1, "past": L, "position_ids": None}
        ids = ids + appended
        root = bonus
        tree, built = tree_from_events(topk, top_k), topk
    assert ids == out[0].tolist()
    output = ids[len(prompt):]
    return {"prompt": prompt, "output": output, "prefill_token": seq[1][1]["token"], "steps": steps}


def summary(out: Path, runs: list[dict], started: float) -> str:
    """One line on a written EAGLE-2-style trace (decode's runs): steps, accept lengths, the smallest margins."""
    steps = [s for r in runs for s in r["steps"]]
    acc = [s["accept_length"] for s in steps]
    hist = {a: acc.count(a) for a in sorted(set(acc))}
    m = [s["margins"] for s in steps]
    return (f"{out}: {len(runs)} prompts, {len(steps)} steps, mean accept_length {sum(acc) / len(acc):.2f} "
            f"(tokens/step {sum(len(s['appended']) for s in steps) / len(steps):.2f}), max {max(acc)}, histogram "
            f"{hist}, outputs {[len(r['output']) for r in runs]}, greedy matches "
            f"{[r['greedy_matches'] for r in runs]}, tied-row steps {sum(s['tied_rows'] > 1 for s in steps)}, min "
            f"margins: select {min(x['select'] for x in m):.2e} frontier {min(min(x['frontier']) for x in m):.2e} "
            f"topk {min(min(x['topk']) for x in m):.2e}; {time.time() - started:.0f} s")


def greedy(target, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                          eos_token_id=tiny_target.PLACEHOLDER,
                          pad_token_id=tiny_target.PLACEHOLDER)
    return out[0, len(prompt):].tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's eagle/model/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--head-dir", type=Path, default=None,
                   help="take the head from this folder's model.safetensors (the committed fixture) instead of "
                        "distilling one")
    p.add_argument("--save-head", type=Path, default=None, help="also write the head folder here (the fixture)")
    p.add_argument("--head-seed", type=int, default=tiny_target.SEED + 11)
    p.add_argument("--work", type=Path, default=None, help="where the base and head folders go (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))
    from eagle.model import cnets, utils
    from eagle.model.ea_model import EaModel  # the reference, as is

    t0 = time.time()
    target = tiny_target.build()
    work = args.work or Path(tempfile.mkdtemp(prefix="eagle-ref-"))
    base, headdir = work / "tinybase", work / "tinyhead"
    save_base(target, base)
    state = load_head(args.head_dir) if args.head_dir is not None else distill(target, args.head_seed)
    save_head(state, headdir)
    if args.save_head is not None:
        save_head(state, args.save_head, pickle=False)

    model = EaModel.from_pretrained(base_model_path=str(base), ea_model_path=str(headdir), total_token=TOTAL_TOKEN,
                                    depth=DEPTH, top_k=TOP_K).eval()
    assert type(model.base_model).__module__.endswith("modeling_llama_kv")
    assert tiny_target.fingerprint(model.base_model) == tiny_target.fingerprint(target)
    loaded = model.ea_layer.state_dict()
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state), "head not loaded as written"
    assert (model.ea_layer.total_tokens, model.ea_layer.depth, model.ea_layer.top_k) == (TOTAL_TOKEN - 1, DEPTH, TOP_K)
    assert model.ea_layer.fc.bias is not None and not hasattr(model.ea_layer.layers[0], "input_layernorm")
    defaults = inspect.signature(EaModel.from_pretrained).parameters
    eag = inspect.signature(inspect.unwrap(EaModel.eagenerate)).parameters

    tracer = Tracer(model, utils, cnets)
    runs = []
    for prompt in tiny_target.prompts():
        run = decode(model, target, prompt, args.tokens, tracer)
        run["greedy_matches"] = run["output"] == greedy(target, prompt, len(run["output"]))
        runs.append(run)
    trace = {
        "method": "eagle",
        "reference": {"repository": "github.com/SafeAILab/EAGLE", "commit": args.commit,
                      "code": "eagle/model/ea_model.py: EaModel.from_pretrained, EaModel.eagenerate; "
                              "eagle/model/cnets.py: Model.topK_genrate; eagle/model/utils.py",
                      "settings": {"total_token": TOTAL_TOKEN, "depth": DEPTH, "top_k": TOP_K, "temperature": 0.0,
                                   "max_new_tokens": args.tokens,
                                   "tree_nodes": TOTAL_TOKEN, "draft_nodes": TOTAL_TOKEN - 1,
                                   "max_tree_depth": DEPTH + 1},
                      "code_defaults": {"from_pretrained": {k: defaults[k].default for k in
                                                            ("total_token", "depth", "top_k", "threshold")},
                                        "eagenerate": {k: eag[k].default for k in
                                                       ("temperature", "max_new_tokens", "max_length")},
                                        "evaluation_scripts": {"total_token": 60, "depth": 5, "top_k": 10}}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": tiny_target.PLACEHOLDER},
        "head": {"recipe": "eagle_reference.py distill (--head-dir absent), shipped as eagle_head/",
                 "seed": args.head_seed, "layout": "config.json + pytorch_model.bin (EAGLE-1/2)",
                 "sha256": digest(state), "keys": {k: list(v.shape) for k, v in state.items()}},
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    print(summary(args.out, runs, t0))

if __name__ == "__main__":
    main()
