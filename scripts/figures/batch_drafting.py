"""Drafting time of eagle's trees for B rows: each row alone (B propose calls) against one batched call
(Drafter.propose_batch), on the default target with its shipped head, T=0, total_tokens=16 (a fixed size: no
per-run costs). Before every timed call each row is told one more position (a fill of one token per row, as after a
step that accepts nothing), so the head's cache is brought up to date inside the timed call as in decoding. The two
modes alternate, and each keeps its fastest of the repeats, so load from other processes shifts both alike.

    python scripts/figures/batch_drafting.py [--rows 4] [--repeats 15]
"""
from __future__ import annotations

import argparse
import time

import torch

import specbench
from specbench.decode.draft import DecodeContext, StepResult
from specbench.decode.engine import generate_batch
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens

QUESTIONS = ["What is 7 * 8?", "Write a haiku about rain.", "Name three prime numbers.", "Why is the sky blue?",
             "Sort 3, 1, 2.", "What is a hash map?", "Say hello in French.", "Add 19 and 23."]


def started(target, drafters, prompts: list[list[int]]) -> list[DecodeContext]:
    """Decode 8 tokens for the prompts together (row b: prompts[b]) with these drafters (forks of one, sharing its
    head's cache); their contexts afterwards, each its batch row."""
    generate_batch(target.model, prompts, drafters, Sampling(), 8, set())
    return [DecodeContext(list(p), len(p), Sampling(), None, row=b) for b, p in enumerate(prompts)]


def tell_one_more(drafters, ctxs: list[DecodeContext]) -> None:
    """Each row told its last position's features once more (a step that accepted nothing)."""
    for drafter, ctx in zip(drafters, ctxs):
        last = drafter.rows.features[ctx.row, drafter.known - 1 : drafter.known].clone()
        drafter.accepted(ctx, StepResult([], [], last))
        ctx.token_ids.append(ctx.token_ids[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target = specbench.load_target("smollm2-135m-instruct")
    protos = [specbench.load_method("eagle", target, total_tokens=16) for _ in range(2)]  # a head cache each
    prompts = [chat_tokens(target.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS[: args.rows]]
    alone = [protos[0].fork() for _ in prompts]  # one per row, each drafted by itself
    together = [protos[1].fork() for _ in prompts]  # drafted in one call
    ctx_alone, ctx_together = started(target, alone, prompts), started(target, together, prompts)
    for d, c in zip(alone + together, ctx_alone + ctx_together):  # the contexts decoded above
        c.token_ids = list(c.token_ids) + [0] * (d.known + 1 - len(c.token_ids))
    batched = hasattr(type(protos[0]), "propose_batch")
    best = {"alone": float("inf"), "together": float("inf")}
    for _ in range(args.repeats):
        tell_one_more(alone, ctx_alone)
        t0 = time.perf_counter()
        drafts_alone = [d.propose(c) for d, c in zip(alone, ctx_alone)]
        best["alone"] = min(best["alone"], time.perf_counter() - t0)
        if batched:
            tell_one_more(together, ctx_together)
            t0 = time.perf_counter()
            drafts_together = type(protos[1]).propose_batch(together, ctx_together)
            best["together"] = min(best["together"], time.perf_counter() - t0)
            assert [(d.tokens, d.parents) for d in drafts_alone] == [(d.tokens, d.parents) for d in drafts_together]
    print(f"rows {args.rows}: {args.rows} propose calls {1000 * best['alone']:.1f} ms", end="")
    if batched:
        print(f"; one propose_batch call {1000 * best['together']:.1f} ms "
              f"(ratio {best['alone'] / best['together']:.2f}); same drafts")
    else:
        print(" (this code has no propose_batch)")


if __name__ == "__main__":
    main()
