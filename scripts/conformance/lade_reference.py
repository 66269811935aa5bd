"""Lookahead decoding's reference (github.com/hao-ai-lab/LookaheadDecoding, `lade`), run unchanged: a golden trace.

    python scripts/conformance/lade_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--pool-from-prompt]

Runs in the reference code's own venv (transformers 4.36.2, einops 0.7.0, torch 2.13.0: scripts/conformance/lade.sh
makes it), never with specbench. REF_DIR holds the reference's `lade/` package as `git archive` gives it (nothing
edited). The target is scripts/conformance/tiny_target.py, saved as a local folder. Lookahead decoding has no
drafter: the target itself drafts (Jacobi iterations over a 2-D window) and verifies (n-grams from a pool).

What runs, as the README says: USE_LADE=1, `lade.augment_all()`, `lade.config_lade(LEVEL=5, WINDOW_SIZE=7,
GUESS_SET_SIZE=7, DEBUG=0)` (POOL_FROM_PROMPT left at lade's default 0; --pool-from-prompt sets it True with DEBUG=1,
as minimal.py does), then `model.generate(ids, max_new_tokens=T, do_sample=False)`, which lade's greedy_search_proxy
sends to jacobi_greedy_search_multilevel. Before each prompt's generate the driver seeds Python's global `random` and
torch with the seed it records (lade draws its initial window with the unseeded `random.choice`).

The model is loaded the README's way, after augment_all: transformers.AutoModelForCausalLM.from_pretrained(folder,
attn_implementation="eager"). augment_all copies every attribute of lade's model classes onto transformers' classes,
the bound classmethod from_pretrained included, so that call builds lade's own class
(lade.models.modeling_llama.LlamaForCausalLM, its constructors and forwards); the driver asserts it. (Building
transformers' LlamaForCausalLM(config) directly after augment_all raises TypeError in the transplanted __init__'s
zero-argument super(); without attn_implementation="eager", 4.36.2 picks sdpa and lade's LlamaSdpaAttention.forward
rejects the `lookahead` argument.) The greedy baseline is transformers' plain greedy_search on transformers' own class,
loaded from the same folder and run before lade is imported.

Nothing of lade is replaced or wrapped: each step is read from jacobi_greedy_search_multilevel's own frame with a
line tracer (sys.settrace, local to that one code object), at two lines of its loop: `past_tokens_inp = past_tokens`
(just before the forward: the window, the guesses, the pool) and `input_ids = torch.cat([input_ids,
torch.tensor(hits[:max_hit + 1]...` (after the step: logits, hits, max_hit, the new window and pool). Forward
pre-hooks on the embedding and the first decoder layer record what the forward was fed (tokens, position ids, the 4-D
mask, the cache length), and the driver checks them against the layout rules written in NOTES.md.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import inspect
import json
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["USE_LADE"] = "1"  # read by lade's greedy_search_proxy at every generate
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

LEVEL, WINDOW, GUESS_SET = 5, 7, 7  # the README's N, W, G
GUESS = LEVEL - 1  # tokens per n-gram value (lade's GUESS_SIZE)
PRE_LINE = "past_tokens_inp = past_tokens"
POST_PREFIX = "input_ids = torch.cat([input_ids, torch.tensor(hits[:max_hit + 1]"


def pool_rows(token_map) -> list:
    return [[int(k), [list(map(int, t)) for t in token_map[k]]] for k in sorted(token_map)]


def pool_digest(token_map) -> str:
    """sha256 of json.dumps([[key, [[tokens...], ...]], ...] sorted by key, each list in lade's order), compact."""
    return hashlib.sha256(json.dumps(pool_rows(token_map), separators=(",", ":")).encode()).hexdigest()


def window_copy(past_tokens) -> list:
    return [None if lvl is None else [int(t) for t in lvl] for lvl in past_tokens]


def expected_layout(prefill: bool, context_len: int, window: list, guesses: list):
    """The forward's tokens (beyond the cache), position ids and in-step visibility, from the rules in NOTES.md."""
    levels = [lvl for lvl in window if lvl is not None]
    if prefill:
        return None, None, None  # checked apart: prompt + window level 0, plain causal
    lst_pos = context_len - 1
    size = len(levels[-1])  # lade's tiny_mask_size: the [lst] + level 0 block and every other level block
    assert len(levels[0]) + 1 == size and all(len(lv) == size for lv in levels[1:])
    n = size * len(levels) + GUESS * len(guesses)
    vis = [[False] * n for _ in range(n)]
    pos = []
    for ll in range(len(levels)):
        for j in range(size):
            row = ll * size + j
            for c in range(j + 1):  # level 0 columns 0..j (column 0 is the last accepted token)
                vis[row][c] = True
            for r in range(1, ll + 1):  # the same column j of levels 1..ll
                vis[row][r * size + j] = True
            pos.append(lst_pos + j if ll == 0 else lst_pos + ll + j)
    base = size * len(levels)
    for g in range(len(guesses)):
        for e in range(GUESS):
            row = base + g * GUESS + e
            vis[row][0] = True
            for c in range(e + 1):
                vis[row][base + g * GUESS + c] = True
            pos.append(lst_pos + 1 + e)
    return None, pos, vis


class Recorder:
    """Reads jacobi_greedy_search_multilevel's frame at its two lines and the forwards' inputs."""

    def __init__(self, func, model):
        self.code = func.__code__
        lines, start = inspect.getsourcelines(func)
        pre = [start + i for i, lv in enumerate(lines) if lv.strip() == PRE_LINE]
        post = [start + i for i, lv in enumerate(lines) if lv.strip().startswith(POST_PREFIX)]
        assert len(pre) == 1 and len(post) == 1, (pre, post)
        self.pre_line, self.post_line = pre[0], post[0]
        self.model = model
        self.steps: list[dict] = []
        self.fed: list[dict] = []
        self.pending = None
        self.initial_pool = None
        self.finals = None

    # --- forward hooks ---
    def on_embed(self, module, args, kwargs):
        ids = args[0] if args else kwargs["input"]
        self.fed.append({"tokens": ids[0].tolist()})

    def on_layer0(self, module, args, kwargs):
        mask = kwargs["attention_mask"][0, 0]
        pkv = kwargs.get("past_key_value")
        past = 0 if pkv is None else int(pkv[0].shape[-2])
        visible = mask > torch.finfo(mask.dtype).min / 2
        assert visible.shape[1] - visible.shape[0] == past
        assert bool(visible[:, :past].all()), "every new token sees the whole cache"
        self.fed[-1].update({"positions": kwargs["position_ids"].view(-1).tolist(), "past_len": past,
                             "visible": visible[:, past:].tolist()})

    # --- frame reading ---
    def tracer(self, frame, event, arg):
        if event == "call" and frame.f_code is self.code:
            return self.local
        return None

    def local(self, frame, event, arg):
        if event == "line":
            if frame.f_lineno == self.pre_line:
                self.pre(frame.f_locals)
            elif frame.f_lineno == self.post_line:
                self.post(frame.f_locals)
        return self.local

    def pre(self, f):
        if self.initial_pool is None:
            self.initial_pool = copy.deepcopy(f["token_map"])
        guess = f["guess_tokens"]
        assert guess is None or len(guess) % GUESS == 0
        self.pending = {
            "context_len": int(f["input_ids"].shape[1]),
            "lst_token": int(f["lst_token"]) if "lst_token" in f else None,
            "fill_level": int(f["fill_level"]),
            "window": window_copy(f["past_tokens"]),
            "guesses": [] if guess is None else [list(map(int, guess[i:i + GUESS])) for i in range(0, len(guess), GUESS)],
            "pool_before": copy.deepcopy(f["token_map"]),
        }

    def post(self, f):
        p, self.pending = self.pending, None
        out = f["outputs"]
        max_hit = int(f["max_hit"])
        hits = [int(t) for t in f["hits"]]
        first_guess = int(f["first_guess"])
        inp = out.inp_logits[0]
        used = [out.out_logits[0][None], inp]
        verify = []
        if p["guesses"]:
            gl = out.guess_logits[0]
            used.append(gl)
            g = gl.argmax(-1).tolist()
            verify = [g[i:i + GUESS] for i in range(0, len(g), GUESS)]
            assert [list(map(int, f["guess_results"][i:i + GUESS])) for i in range(0, len(g), GUESS)] == verify
        def gap(rows):
            top2 = torch.cat(rows).topk(2, dim=-1).values
            return float((top2[:, 0] - top2[:, 1]).min())
        # per chain: how many leading guess tokens the target confirms (0..N-1), and lade's count min(., N-2)
        matched = []
        for chain, ver in zip(p["guesses"], verify):
            correct = [first_guess] + ver
            k = 0
            while k < GUESS and chain[k] == correct[k]:
                k += 1
            matched.append(k)
        lade_hits = [min(k, GUESS - 1) for k in matched]
        best = max(lade_hits, default=0)
        chosen = lade_hits.index(best) if best > 0 else None
        assert best == max_hit, (best, max_hit)
        if chosen is not None:
            assert int(f["max_hit_idx"]) == chosen
            assert hits[:max_hit + 1] == ([first_guess] + verify[chosen])[:max_hit + 1]
        pool_after = f["token_map"]
        before = p.pop("pool_before")
        changed = [[int(k), [list(map(int, t)) for t in pool_after[k]]] for k in sorted(pool_after)
                   if before.get(k) != pool_after[k]]
        step = {
            "step": int(f["steps"]),
            "phase": "prefill" if p["fill_level"] == 0 else "warmup" if p["window"][LEVEL - 2] is None else "lookahead",
            **p,
            "first_guess": first_guess,
            "lookahead_argmax": inp.argmax(-1).tolist(),
            "verify_argmax": verify,
            "matched": matched,
            "accepted_chain": chosen,
            "max_hit": max_hit,
            "appended": hits[:max_hit + 1],
            "new_window": window_copy(f["past_tokens"]),
            "new_lst_token": int(f["lst_token"]),
            "pool_changed": changed,
            "pool_entries": sum(len(v) for v in pool_after.values()),
            "pool_sha256": pool_digest(pool_after),
            "top2_gap_decide": gap([u for k, u in enumerate(used) if k != 1]),  # first_guess + verification rows
            "top2_gap_window": gap([inp]),  # the lookahead rows that make the next window
        }
        del step["fill_level"]
        self.steps.append(step)
        self.finals = {"all_old_tokens": [int(t) for t in f["all_old_tokens"]], "pool": copy.deepcopy(pool_after)}


def decode(model, prompt: list[int], tokens: int, seed: int, decoding) -> dict:
    rec = Recorder(decoding.jacobi_greedy_search_multilevel, model)
    h1 = model.model.embed_tokens.register_forward_pre_hook(rec.on_embed, with_kwargs=True)
    h2 = model.model.layers[0].register_forward_pre_hook(rec.on_layer0, with_kwargs=True)
    random.seed(seed)
    torch.manual_seed(seed)
    ids = torch.tensor([prompt])
    sys.settrace(rec.tracer)
    try:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                             eos_token_id=tiny_target.PLACEHOLDER, pad_token_id=0)
    finally:
        sys.settrace(None)
        h1.remove()
        h2.remove()
    output = out[0, len(prompt):].tolist()
    steps = rec.steps
    assert len(rec.fed) == len(steps), (len(rec.fed), len(steps))
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    # the forwards' layout against NOTES.md
    generated: list[int] = []
    for s, fed in zip(steps, rec.fed):
        assert s["context_len"] == len(prompt) + len(generated)
        lvls = [lvl for lvl in s["window"] if lvl is not None]
        if s["phase"] == "prefill":
            assert fed["tokens"] == prompt + lvls[0] and fed["past_len"] == 0
            assert fed["positions"] == list(range(len(prompt) + len(lvls[0])))
            n = len(fed["tokens"])
            assert fed["visible"] == [[c <= r for c in range(n)] for r in range(n)]
        else:
            _, pos, vis = expected_layout(False, s["context_len"], s["window"], s["guesses"])
            assert fed["tokens"] == [s["lst_token"]] + sum(lvls, []) + sum(s["guesses"], []), s["step"]
            assert fed["positions"] == pos, s["step"]
            assert fed["visible"] == vis, s["step"]
            assert fed["past_len"] == s["context_len"] - 1
        s["fed_tokens"] = fed["tokens"] if s["phase"] != "prefill" else None  # prefill: prompt + window[0]
        s["fed_positions"] = fed["positions"] if s["phase"] != "prefill" else None
        s["past_len"] = fed["past_len"]
        generated += s["appended"]
    assert generated[:tokens] == output and len(generated) >= tokens
    steps[-1]["kept"] = tokens - (len(generated) - len(steps[-1]["appended"]))  # the final trim to the budget
    # lade's history bug: all_old_tokens gets hits[max_hit] (max_hit + 1) times per step, not hits[:max_hit + 1]
    history = list(prompt) + sum([[s["appended"][-1]] * len(s["appended"]) for s in steps], [])
    assert rec.finals["all_old_tokens"] == history, "all_old_tokens as the bug predicts"
    return {"prompt": prompt, "seed": seed, "init_window": steps[0]["window"][0],
            "initial_pool": pool_rows(rec.initial_pool), "output": output, "steps": steps,
            "final_pool": pool_rows(rec.finals["pool"])}


def greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=tiny_target.PLACEHOLDER, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's lade/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=tiny_target.SEED, help="prompt i is decoded after random.seed(seed + i)")
    p.add_argument("--pool-from-prompt", action="store_true", help="POOL_FROM_PROMPT=True, DEBUG=1 (minimal.py's)")
    p.add_argument("--work", type=Path, default=None, help="where the target folder goes (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(args.ref))

    work = args.work or Path(tempfile.mkdtemp(prefix="lade-ref-"))
    folder = work / "tinytarget"
    tiny_target.build().save_pretrained(folder, safe_serialization=True)
    # transformers' own class, built before lade touches anything: the greedy baseline, and later the cross-check
    plain = transformers.LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                          torch_dtype=torch.float32).eval()
    assert tiny_target.fingerprint(plain) == tiny_target.fingerprint(tiny_target.build())
    prompts = tiny_target.prompts()
    baseline = [greedy(plain, pr, args.tokens) for pr in prompts]

    import lade  # the reference, as is
    from lade import decoding
    from lade.models import modeling_llama as lade_llama
    lade.augment_all()
    debug = 1 if args.pool_from_prompt else 0
    if args.pool_from_prompt:
        lade.config_lade(LEVEL=LEVEL, WINDOW_SIZE=WINDOW, GUESS_SET_SIZE=GUESS_SET, DEBUG=debug, POOL_FROM_PROMPT=True)
    else:
        lade.config_lade(LEVEL=LEVEL, WINDOW_SIZE=WINDOW, GUESS_SET_SIZE=GUESS_SET, DEBUG=debug)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                              torch_dtype=torch.float32).eval()
    assert type(model) is lade_llama.LlamaForCausalLM, type(model)  # augment_all's transplanted from_pretrained
    assert model.config._attn_implementation == "eager"
    assert all(type(lv.self_attn) is lade_llama.LlamaAttention for lv in model.model.layers)
    assert tiny_target.fingerprint(model) == tiny_target.fingerprint(plain)

    runs = []
    for i, prompt in enumerate(prompts):
        run = decode(model, prompt, args.tokens, args.seed + i, decoding)
        run["greedy_matches"] = run["output"] == baseline[i]
        runs.append(run)
    if debug:  # lade's own DEBUG summary: [generated tokens, steps, ratio] per generate
        sys.stdout.write("\n")
        assert [lv[:2] for lv in decoding.CONFIG_MAP["log"]] == [[args.tokens, len(r["steps"])] for r in runs]

    settings = {"LEVEL": LEVEL, "WINDOW_SIZE": WINDOW, "GUESS_SET_SIZE": GUESS_SET, "DEBUG": debug,
                "POOL_FROM_PROMPT": 1 if args.pool_from_prompt else 0, "ALWAYS_FWD_ONE": 1, "USE_FLASH": 0,
                "DIST_WORKERS": 1, "USE_LADE": 1, "attn_implementation": "eager", "dtype": "float32",
                "do_sample": False}
    trace = {
        "method": "lade",
        "reference": {"repository": "github.com/hao-ai-lab/LookaheadDecoding", "commit": args.commit,
                      "code": "lade/decoding.py: jacobi_greedy_search_multilevel (via lade.augment_all's "
                              "greedy_search_proxy); lade/models/modeling_llama.py: LlamaForCausalLM.jforward_multilevel",
                      "settings": settings,
                      "model": "transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="
                               "'eager', torch_dtype=float32) after lade.augment_all(): an instance of "
                               "lade.models.modeling_llama.LlamaForCausalLM"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0], "einops": __import__("einops").__version__},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(model),
                   "eos": tiny_target.PLACEHOLDER},
        "seeds": "random.seed(S); torch.manual_seed(S) right before prompt i's generate, S = run.seed",
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    steps = [s for r in runs for s in r["steps"]]
    look = [s for s in steps if s["phase"] == "lookahead"]
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps ({[len(r['steps']) for r in runs]} per prompt), "
          f"lookahead steps {len(look)}, accepted (max_hit>0) {sum(s['max_hit'] > 0 for s in steps)}, "
          f"mean tokens/step {sum(len(s['appended']) for s in steps) / len(steps):.2f}, "
          f"max tokens/step {max(len(s['appended']) for s in steps)}, "
          f"full-chain matches {sum(m == GUESS for s in steps for m in s['matched'])}, "
          f"min top-2 gap: decisions {min(s['top2_gap_decide'] for s in steps):.2e}, "
          f"window {min(s['top2_gap_window'] for s in steps):.2e}, "
          f"greedy matches {[r['greedy_matches'] for r in runs]}")


if __name__ == "__main__":
    main()
