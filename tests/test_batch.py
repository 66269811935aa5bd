"""Batch size above one: every method decodes B prompts at once through one target forward per step, and stays
lossless. At T=0 each row emits exactly what it emits alone, with the same accept lengths (drafts verified and
accepted); at T>0 a row samples vanilla's distribution although its batch neighbours advance by other lengths, its
prefill is left-padded and its cache has holes. The same test flags a wrong verifier in batched decoding."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specbench.cli import main
from specbench.decode.draft import Drafter
from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling
from specbench.decode.verify import VerifyFn
from tests.test_cli import bad_input, run_args
from tests.test_distribution import (  # noqa: F401  (shared fixtures)
    CANARIES,
    FLAG_P,
    LOSSLESS,
    SAMPLES,
    SAMPLING,
    TOKENS,
    VOCAB,
    Sampled,
    assert_lossless,
    draft_model,
    exact_joint,
    goodness_of_fit,
    prompt,
    target,
)

GREEDY_CASES = ["vanilla", "sps (chain with q)", "pld", "tree, candidates sampled from q", "eagle (dynamic tree)",
                "eagle1 (static tree)", "medusa", "hydra", "eagle3 (reduced draft vocabulary)", "lookahead (prompt_pool=1)",
                "recycling (matrix per generation)", "suffix (tree per generation)",
                "rest (datastore of the target's samples)", "samd (recycling fallback)", "samd-eagle (EAGLE fallback)"]


def rows(drafter: Drafter, n: int) -> list[Drafter]:
    return [drafter] + [drafter.fork() for _ in range(n - 1)]


@pytest.mark.parametrize("name", GREEDY_CASES)
def test_greedy_rows_equal_single_decoding(target, draft_model, prompt, name):
    runner = ModelRunner(target, fixed_shapes=False)
    drafter = LOSSLESS[name].build(target, draft_model, prompt, runner)
    # Prompts of different lengths: the prefill is left-padded, and rows then advance by different lengths.
    prompts = [prompt, prompt[:5], prompt + prompt[:3], [2, 9] + prompt[4:]]
    alone = [generate(target, p, drafter, Sampling(), 40, set(), runner=runner) for p in prompts]
    together = generate_batch(target, prompts, rows(drafter, len(prompts)), Sampling(), 40, set(), runner=runner)
    for single, batched in zip(alone, together):
        assert batched.token_ids == single.token_ids
        assert batched.accept_lengths == single.accept_lengths
    if name != "vanilla":  # the drafts were verified and accepted, in the batch too
        accepted = sum(a - 1 for g in together for a in g.accept_lengths)
        assert accepted >= 8, f"only {accepted} draft tokens accepted over {len(prompts)} rows"


def test_heuristic_schedule_rows_draft_their_own_gamma_in_a_batch(target, draft_model, prompt):
    """sps@schedule=heuristic: each row's gamma moves with its own accepts, so rows drafted together draft chains of
    different lengths (drafted a gamma at a time), each what it drafts alone."""
    from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain

    class Lengths(DraftModelDrafter):
        def accepted(self, ctx, step):
            self.lengths = getattr(self, "lengths", []) + [len(step.draft.tokens)]
            super().accepted(ctx, step)

    runner = ModelRunner(target, fixed_shapes=False)
    drafter = Lengths(draft_model, 2, VOCAB, None, draft_chain(draft_model, runner), "heuristic")
    prompts = [prompt, prompt[:5], prompt + prompt[:3], [2, 9] + prompt[4:]]
    alone = []
    for p in prompts:
        drafter.lengths = []
        alone.append((generate(target, p, drafter, Sampling(), 40, set(), runner=runner), drafter.lengths))
    batch = rows(drafter, len(prompts))
    for d in batch:
        d.lengths = []
    together = generate_batch(target, prompts, batch, Sampling(), 40, set(), runner=runner)
    for (single, lengths), batched, d in zip(alone, together, batch):
        assert batched.token_ids == single.token_ids and batched.accept_lengths == single.accept_lengths
        assert d.lengths == lengths
    assert len({length for _, lengths in alone for length in lengths}) >= 3  # gamma moved
    assert sum(a - 1 for g in together for a in g.accept_lengths) >= 8


def test_finished_rows_leave_and_stop_ids_end_rows(target, prompt):
    from specbench.methods.pld.drafter import PromptLookupDrafter

    stop = generate(target, prompt, PromptLookupDrafter(), Sampling(), 40, set()).token_ids[6]
    prompts = [prompt, prompt[:6], prompt[2:]]
    alone = [generate(target, p, PromptLookupDrafter(), Sampling(), 40, {stop}) for p in prompts]
    together = generate_batch(target, prompts, rows(PromptLookupDrafter(), 3), Sampling(), 40, {stop})
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.stop_reason for g in together] == [g.stop_reason for g in alone] and together[0].stop_reason == "eos"
    assert together[0].wall_time <= max(g.wall_time for g in together)


def test_one_drafter_per_row_is_required(target, prompt):
    from specbench.methods.vanilla.drafter import VanillaDrafter

    drafter = VanillaDrafter()
    with pytest.raises(ValueError, match="one distinct drafter per prompt"):
        generate_batch(target, [prompt, prompt], [drafter, drafter], Sampling(), 4, set())


# ------------------------------------------------------------------------------------------ T > 0 in a batch


def sample_batched(target, prompt, drafter: Drafter, verify: VerifyFn | None = None, batch: int = 4,
                   runner: ModelRunner | None = None) -> Sampled:
    """SAMPLES samples of the first TOKENS tokens after `prompt`, decoded batch - 1 at a time beside a longer
    companion prompt (so the measured rows are left-padded at the prefill); each row has its own generator. runner:
    the target's (None: one of its own shapes per batch)."""
    result = Sampled(np.zeros((VOCAB,) * TOKENS), 0, 0)
    companion = prompt + prompt[:5]
    measured = batch - 1
    for start in range(0, SAMPLES, measured):
        n = min(measured, SAMPLES - start)
        generators = [torch.Generator().manual_seed(10_000 + start + i) for i in range(n + 1)]
        outs = generate_batch(target, [prompt] * n + [companion], rows(drafter, n + 1), SAMPLING, TOKENS, set(),
                              generators, verify, runner=runner)
        for out in outs[:n]:
            result.counts[tuple(out.token_ids)] += 1
            result.deep_accepts += sum(max(0, a - 2) for a, k in zip(out.accept_lengths, out.tree_sizes) if k)
            result.full_paths += sum(out.full_paths)
    return result


BATCHED_LOSSLESS = ["vanilla", "sps (chain with q)", "pld", "eagle (dynamic tree)", "medusa", "hydra", "lookahead (prompt_pool=1)"]


@pytest.mark.parametrize("name", BATCHED_LOSSLESS)
def test_batched_rows_sample_vanillas_joint(target, draft_model, prompt, exact_joint, name):
    case, runner = LOSSLESS[name], ModelRunner(target, fixed_shapes=False)
    assert_lossless(case, sample_batched(target, prompt, case.build(target, draft_model, prompt, runner), runner=runner),
                    exact_joint)


def test_batched_test_flags_a_wrong_bonus(target, draft_model, prompt, exact_joint):
    build, verify = CANARIES["eagle, bonus from the unprocessed softmax"]
    result = sample_batched(target, prompt, build(target, draft_model, prompt), verify)
    assert goodness_of_fit(result.counts, exact_joint) < FLAG_P


# ------------------------------------------------------------------------------------------ the command


def test_run_at_several_batch_sizes(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    args = run_args(tiny_target_dir, out, "--methods", "pld,lookahead", "--tasks", "mt_bench,gsm8k", "--limit", "3",
                    "--temperatures", "0,1", "--batch-size", "1,3")
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3 * 2 * 3 * 2 * 2  # methods x tasks x questions x temperatures x batch sizes
    batched = [r for r in records if r.get("batch_size") == 3]
    assert len(batched) == len(records) // 2 and all(r["batch"]["size"] == 3 for r in batched)
    assert all(len(r["choices"][0]["batch_wall_time"]) == len(r["choices"][0]["turns"]) for r in batched)
    report = out / "report"
    for name in ("throughput_T0.md", "throughput_T1_B3.csv", "batch_costs_T0.md", "speedup_T0_B1.md",
                 "speedup_T0_B3.tex", "speedup_vs_batch_T0.png"):
        assert (report / name).is_file(), name
    table = (report / "throughput_T0.md").read_text()
    assert "B=1 tok/s" in table and "B=3 Speedup" in table
    costs = (report / "batch_costs_T0.csv").read_text()
    assert "b_1_tokens_per_forward" in costs and "b_3_forward_ms" in costs
    capsys.readouterr()
    assert main(["check", str(out)]) == 0
    summary = capsys.readouterr().out
    assert "pld (B=3)" in summary and "vanilla (B=3)" in summary and "MISMATCH" not in summary
    before = (out / "records.jsonl").read_text()
    assert main(args) == 0  # resume: nothing left to decode
    assert (out / "records.jsonl").read_text() == before


def test_bad_batch_size_is_one_line(tiny_target_dir, tmp_path, capsys):
    for value, message in (("0", "batch sizes must be > 0"), ("2,x", "not a comma-separated list")):
        line = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "r", "--methods", "vanilla", "--batch-size", value))
        assert message in line
    assert not (tmp_path / "r").exists()
