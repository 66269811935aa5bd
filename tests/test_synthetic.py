"""Synthetic acceptance (TIMING ONLY, specbench.run.synthetic): the per-position acceptance matches the
conditional rates within binomial intervals, along the draft's best path; the engine emits the draft's own tokens
then the target's choice; `check` refuses such a run in one line and every table says TIMING-ONLY."""
from __future__ import annotations

import json

import pytest
import torch
from scipy.stats import binomtest

from specbench.cli import main
from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.synthetic import SyntheticAcceptance, best_path
from tests.conftest import tiny_llama
from tests.test_cli import run_args

RATES = (0.8, 0.6, 0.5, 0.4)
VOCAB = 64


def conditional_counts(accepted: list[int], depths: list[int], positions: int) -> list[tuple[int, int]]:
    """Per position i (1-based): (steps that tested it, steps that accepted it). Position i is tested when the
    path reaches depth i and positions 1..i-1 were accepted."""
    counts = []
    for i in range(1, positions + 1):
        tested = [a for a, d in zip(accepted, depths) if d >= i and a >= i - 1]
        counts.append((len(tested), sum(a >= i for a in tested)))
    return counts


def assert_rates(counts: list[tuple[int, int]], rates: SyntheticAcceptance) -> None:
    for i, (n, k) in enumerate(counts, start=1):
        assert n > 20, f"position {i} tested only {n} times"
        assert binomtest(k, n, rates.rate(i)).pvalue > 1e-3, f"position {i}: {k}/{n} vs rate {rates.rate(i)}"


def test_rates_parse_and_refuse_bad_input():
    assert SyntheticAcceptance.parse("0.8, 0.6,0.4").rates == (0.8, 0.6, 0.4)
    one = SyntheticAcceptance.parse("0.7")
    assert [one.rate(i) for i in (1, 2, 9)] == [0.7, 0.7, 0.7]
    assert SyntheticAcceptance(RATES).rate(7) == 0.4  # past the list, the last rate repeats
    for bad in ("1.5", "x", "", "nan"):
        with pytest.raises(SpecbenchError):
            SyntheticAcceptance.parse(bad)


def test_best_path_is_the_first_child_at_each_level():
    # root -> 0 -> 2 -> 4 is the first-ranked chain; 1, 3 and 5 are lower-ranked siblings
    draft = Draft([10, 11, 12, 13, 14, 15], [ROOT, ROOT, 0, 0, 2, 1])
    assert best_path(draft) == [0, 2, 4]
    assert best_path(Draft()) == []


@pytest.mark.parametrize("all_rows, temperature", [(False, 0.0), (True, 0.0), (True, 1.0)])
def test_per_position_acceptance_matches_the_conditional_rates(all_rows, temperature):
    """Many steps of the verifier alone on a tree whose best path is 6 deep: the share of steps accepting position
    i among those that accepted 1..i-1 is rates[i-1] (binomial test), and the path is the best path's prefix; the
    same with the accelerator's one copy to the host (all_rows), and with a sampled bonus."""
    verify = SyntheticAcceptance(RATES)
    draft = Draft([1, 2, 3, 4, 5, 6, 7, 8, 9], [ROOT, ROOT, 0, 0, 2, 4, 5, 1, 6])
    best = best_path(draft)
    assert best == [0, 2, 4, 5, 6, 8]
    generator = torch.Generator().manual_seed(0)
    logits = torch.zeros(len(draft) + 1, VOCAB)
    logits[:, 7] = 50.0
    accepted = []
    for _ in range(4000):
        verdict = verify.verdict(draft, logits, Sampling(temperature), generator, all_rows)
        assert verdict.path == best[: len(verdict.path)] and verdict.bonus == 7
        accepted.append(len(verdict.path))
    assert_rates(conditional_counts(accepted, [len(best)] * len(accepted), 6), verify)
    # the rates are conditional: two positions accepted in about 0.8 * 0.6 of the steps, not in 0.6
    assert abs(sum(a >= 2 for a in accepted) / len(accepted) - 0.48) < 0.03


class DeepChainDrafter(Drafter):
    """Always drafts a chain of `depth` random tokens: every step tests every position the budget allows."""

    def __init__(self, depth: int, seed: int) -> None:
        self.depth, self.generator = depth, torch.Generator().manual_seed(seed)

    def propose(self, ctx: DecodeContext) -> Draft:
        return Draft.chain(torch.randint(0, VOCAB, (self.depth,), generator=self.generator).tolist())


@pytest.fixture(scope="module")
def model():
    return tiny_llama(VOCAB, seed=3, context=1024)


def test_engine_emits_the_drafts_tokens_at_the_rates(model):
    drafter = DeepChainDrafter(6, seed=1)
    verify = SyntheticAcceptance(RATES)
    out = generate(model, [1, 2, 3], drafter, Sampling(), 600, set(), torch.Generator().manual_seed(5), verify)
    accepted = [n - 1 for n in out.accept_lengths]
    assert_rates(conditional_counts(accepted[:-1], out.tree_sizes[:-1], 3), verify)
    assert len(out.token_ids) == 600 and max(accepted) == 6


def test_rate_zero_is_vanilla_and_rate_one_takes_every_drafted_token(model):
    prompt, sampling = [5, 6, 7], Sampling()
    vanilla = generate(model, prompt, VanillaDrafter(), sampling, 40, set())
    none = generate(model, prompt, DeepChainDrafter(4, 0), sampling, 40, set(), torch.Generator().manual_seed(0),
                    SyntheticAcceptance((0.0,)))
    assert none.token_ids == vanilla.token_ids and set(none.accept_lengths) == {1}

    class Recording(DeepChainDrafter):
        def propose(self, ctx):
            self.last = super().propose(ctx)
            return self.last

        def accepted(self, ctx, step):
            assert step.emitted[:-1] == self.last.tokens[: len(step.emitted) - 1]  # the draft's own tokens

    full = generate(model, prompt, Recording(4, 0), sampling, 40, set(), torch.Generator().manual_seed(0),
                    SyntheticAcceptance((1.0,)))
    assert full.accept_lengths == [5] * 8  # 4 drafted + the bonus, every step
    sampled = generate(model, prompt, Recording(4, 0), Sampling(1.0), 40, set(), torch.Generator().manual_seed(0),
                       SyntheticAcceptance((1.0,)))
    assert sampled.accept_lengths == [5] * 8


def test_check_refuses_a_synthetic_run_in_one_line(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    code = main(run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k", "--limit", "1",
                         "--temperatures", "0", "--synthetic-acceptance", "0.8,0.6,0.4"))
    assert code == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {tuple(r["synthetic"]) for r in records} == {(0.8, 0.6, 0.4)}
    assert "TIMING-ONLY" in (out / "report" / "speedup_T0.md").read_text().split("\n\n")[1]
    capsys.readouterr()
    assert main(["check", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TIMING-ONLY" in err and "check" in err, err
    code = main(run_args(tiny_target_dir, tmp_path / "bad", "--synthetic-acceptance", "0.8,2"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "rates" in err, err


def test_list_names_the_timing_only_modes(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "TIMING-ONLY" in out and "--synthetic-acceptance" in out and "llama-3.2-1b" in out


def test_every_file_of_a_synthetic_report_says_timing_only(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k", "--limit", "2",
                         "--temperatures", "0", "--synthetic-acceptance", "0.8,0.6,0.4")) == 0
    report = out / "report"
    files = sorted(p for p in report.iterdir() if p.is_file() and not p.name.startswith("."))  # not the lock file
    kinds = {p.suffix for p in files}
    assert {".md", ".tex", ".csv", ".png", ".pdf"} <= kinds, kinds  # tables and plots
    assert any(p.name.startswith("efficiency_") for p in files)
    unmarked = [p.name for p in files if b"TIMING-ONLY" not in p.read_bytes()]  # PNG and PDF: in their metadata
    assert not unmarked
    for table in (p for p in files if p.suffix == ".md" and p.name != "budget.md"):  # in the caption, not only a comment
        assert "TIMING-ONLY" in table.read_text(encoding="utf-8").split("-->\n\n", 1)[1], table.name
    assert "2 questions" in (report / "speedup_T0.md").read_text(encoding="utf-8")  # n in the caption
