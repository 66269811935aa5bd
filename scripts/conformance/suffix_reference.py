"""SuffixDecoding's reference (Snowflake's arctic-inference, the authors' implementation that vLLM's suffix
decoding calls), its proposer run unchanged on the seeded tiny target.

    python scripts/conformance/suffix_reference.py --version 0.3.0 --out TRACE.json

Runs in a venv of its own (scripts/conformance/suffix.sh builds the package's suffix-tree extension from its sdist
and puts it on PYTHONPATH), never with specbench. The reference's SuffixDecodingCache is driven as vLLM's proposer
drives it: one cache for the run (max_tree_depth 24, no limit on cached requests), start_request(prompt) for each
prompt in turn, then each step speculate(the last 24 tokens of prompt + output, max_spec_tokens 16,
max_spec_factor 1.0, min_token_prob 0.1, use_tree_spec True), and add_active_response(what the step emitted: the
accepted draft tokens and the target's next token; the prefill's token first), stop_request at the end. Those are
the reference's defaults save max_spec_tokens (vLLM passes its num_speculative_tokens) and use_tree_spec (the
paper's tree speculation; vLLM verifies chains). What the target accepts is its greedy continuation (T=0): the
longest path of the draft tree that continues it, then one more token; vLLM's own loop runs only on a GPU, so this
driver's few lines stand in for it. Each step's draft (tokens and parents, in the reference's order) and accepted
length are written down.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

DEPTH, MAX_TOKENS, FACTOR, MIN_PROB = 24, 16, 1.0, 0.1


def accepted_length(tokens: list[int], parents: list[int], continuation: list[int]) -> int:
    """How many draft tokens the target accepts at T=0: the longest path from the root whose tokens are its greedy
    continuation (a suffix tree's siblings hold distinct tokens)."""
    node, n = -1, 0
    while n < len(continuation):
        nxt = [i for i, (t, p) in enumerate(zip(tokens, parents)) if p == node and t == continuation[n]]
        if not nxt:
            break
        node, n = nxt[0], n + 1
    return n


def probes(cache_class, seed: int, count: int = 24) -> list[dict]:
    """The reference's speculate on crafted texts where ties decide the draft (a 4-token vocabulary, so many
    siblings share a count and many paths a probability; a small budget, so which of them come first matters):
    each text is one request's prompt (its first half) and response (the rest), so the local and the global tree
    both hold it; the contexts are random too (so they match only a few tokens deep, where many continuations
    compete)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        text = torch.randint(0, 4, (80,), generator=gen).tolist()
        cache = cache_class(max_tree_depth=8, max_cached_requests=-1)
        cache.start_request(0, text[:40])
        cache.add_active_response(0, text[40:])
        for _ in range(7):
            context = torch.randint(0, 4, (8,), generator=gen).tolist()
            draft = cache.speculate(0, context, max_spec_tokens=6, max_spec_factor=3.0, min_token_prob=0.02,
                                    use_tree_spec=True)
            out.append({"text": text, "context": context, "draft": list(draft.token_ids),
                        "parents": list(draft.parents), "score": float(draft.score)})
        cache.stop_request(0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", required=True, help="the arctic-inference release the extension was built from")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    args = p.parse_args()
    torch.set_num_threads(1)
    from arctic_inference.suffix_decoding import SuffixDecodingCache  # the reference, as is

    t0 = time.time()
    target = tiny_target.build()
    cache = SuffixDecodingCache(max_tree_depth=DEPTH, max_cached_requests=-1)
    runs = []
    for r, prompt in enumerate(tiny_target.prompts()):
        greedy = tiny_target.greedy(target, prompt, args.tokens + MAX_TOKENS + 1)
        cache.start_request(r, prompt)
        out = greedy[:1]  # the prefill's token
        cache.add_active_response(r, out)
        steps = []
        while len(out) < args.tokens:
            context = prompt + out
            draft = cache.speculate(r, context[-DEPTH:], max_spec_tokens=MAX_TOKENS, max_spec_factor=FACTOR,
                                    min_token_prob=MIN_PROB, use_tree_spec=True)
            n = accepted_length(draft.token_ids, draft.parents, greedy[len(out):])
            emitted = greedy[len(out):len(out) + n + 1]
            steps.append({"context": len(context), "draft": list(draft.token_ids), "parents": list(draft.parents),
                          "accepted": n, "score": round(float(draft.score), 6), "match_len": int(draft.match_len)})
            out = out + emitted
            cache.add_active_response(r, emitted)
        cache.stop_request(r)
        assert out == greedy[:len(out)]
        runs.append({"prompt": prompt, "output": out, "steps": steps})
    trace = {
        "method": "suffix",
        "reference": {"package": "arctic-inference", "version": args.version,
                      "code": "arctic_inference/suffix_decoding/cache.py: SuffixDecodingCache; "
                              "csrc/suffix_decoding/suffix_tree.cc: SuffixTree::speculate, _speculate_tree",
                      "settings": {"max_tree_depth": DEPTH, "max_spec_tokens": MAX_TOKENS,
                                   "max_spec_factor": FACTOR, "max_spec_offset": 0.0, "min_token_prob": MIN_PROB,
                                   "use_tree_spec": True, "max_cached_requests": -1, "temperature": 0.0}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": tiny_target.fingerprint(target),
                   "eos": tiny_target.PLACEHOLDER},
        "max_new_tokens": args.tokens,
        "probe_settings": {"recipe": "suffix_reference.py probes", "seed": tiny_target.SEED, "max_tree_depth": 8,
                           "max_spec_tokens": 6, "max_spec_factor": 3.0, "min_token_prob": 0.02},
        "probes": probes(SuffixDecodingCache, tiny_target.SEED),
        "runs": runs,
    }
    write_trace(args.out, trace, one_line=("probes", "runs"))  # a line per probe and per run
    steps = [s for r in runs for s in r["steps"]]
    acc = [s["accepted"] for s in steps]
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps, {sum(bool(s['draft']) for s in steps)} drafted, "
          f"mean accepted {sum(acc) / len(acc):.2f}, max {max(acc)}, most drafted {max(len(s['draft']) for s in steps)}, "
          f"outputs {[len(r['output']) for r in runs]}; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
