"""T>0 equivalence on any target: many seeded samples of the first few tokens by vanilla and by a method, and a
two-sample chi-square test of homogeneity per token position (rare tokens pooled so the test is valid).

A lossless method's p-values are uniform; a wrong one is flagged when the smallest p-value falls under alpha
divided by the number of tests (Bonferroni over prompts × positions). Power is stated, not assumed: for the sample
size and the categories seen, the effect (Cohen's w) that the test detects with 80% probability.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.optimize import brentq
from scipy.stats import chi2, chi2_contingency, ncx2
from tqdm import tqdm

from specbench.decode.draft import Drafter
from specbench.decode.engine import generate
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.sampling import Sampling
from specbench.decode.shapes import is_shape
from specbench.decode.target import chat_tokens
from specbench.decode.verify import VerifyFn
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.run.kernel_rule import load_target
from specbench.run.records import environment
from specbench.run.registry import available_methods, select_methods
from specbench.run.tasks import QuestionSelection, resolve_questions

ENDED = -1  # the position after a stop token: a category of its own


@dataclass(frozen=True)
class PositionTest:
    position: int
    pvalue: float
    categories: int  # after pooling
    total_variation: float  # between the two empirical distributions (biased upward by sampling noise)
    detectable_w: float  # Cohen's w detected with 80% power at the per-test level


def sample_prefixes(
    model, prompt: list[int], drafter: Drafter, sampling: Sampling, tokens: int, samples: int, seed: int,
    stop_ids: set[int], verify: VerifyFn | None = None, progress: str | None = None,
) -> np.ndarray:
    """[samples, tokens] token ids, ENDED after a stop; sample i uses generator seed (seed, i)."""
    out = np.full((samples, tokens), ENDED, dtype=np.int64)
    for i in tqdm(range(samples), desc=progress, disable=progress is None, leave=False):
        generator = torch.Generator(device=model.device).manual_seed(seed * 1_000_003 + i)
        ids = generate(model, prompt, drafter, sampling, tokens, stop_ids, generator, verify).token_ids
        out[i, : len(ids)] = ids
    return out


def homogeneity(a: np.ndarray, b: np.ndarray, min_expected: float = 5.0) -> tuple[float, int]:
    """Chi-square two-sample test on categorical samples: (p-value, categories after pooling the rare ones)."""
    values, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    table = np.zeros((2, len(values)))
    np.add.at(table[0], inverse[: len(a)], 1)
    np.add.at(table[1], inverse[len(a):], 1)
    expected_min = table.sum(1).min() * table.sum(0) / table.sum()
    common = expected_min >= min_expected
    pooled = np.concatenate([table[:, common], table[:, ~common].sum(1, keepdims=True)], axis=1)
    pooled = pooled[:, pooled.sum(0) > 0]
    if pooled.shape[1] < 2:
        return 1.0, pooled.shape[1]
    return float(chi2_contingency(pooled, correction=False).pvalue), pooled.shape[1]


def detectable_w(n_total: int, categories: int, alpha: float, power: float = 0.8) -> float:
    """Cohen's w that a chi-square test with (categories - 1) degrees of freedom on n_total observations detects
    with the given power at level alpha (noncentrality n_total * w²)."""
    df = max(categories - 1, 1)
    critical = chi2.ppf(1 - alpha, df)
    return float(brentq(lambda w: ncx2.sf(critical, df, n_total * w * w) - power, 1e-6, 10.0))


def compare(vanilla: np.ndarray, method: np.ndarray, alpha_per_test: float) -> list[PositionTest]:
    tests = []
    for position in range(vanilla.shape[1]):
        a, b = vanilla[:, position], method[:, position]
        pvalue, categories = homogeneity(a, b)
        values = np.union1d(a, b)
        tv = 0.5 * float(np.abs((a[:, None] == values).mean(0) - (b[:, None] == values).mean(0)).sum())
        tests.append(PositionTest(position, pvalue, categories, tv,
                                  detectable_w(len(a) + len(b), categories, alpha_per_test)))
    return tests


@dataclass
class SampledCheckConfig:
    methods: list[str]
    out: Path
    questions: QuestionSelection = field(default_factory=lambda: QuestionSelection(limit=1))  # limit: prompts per task
    samples: int = 300
    tokens: int = 3
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    alpha: float = 0.01  # family-wise, per method
    target: str = DEFAULT_TARGET
    draft: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    seed: int = 0
    method_files: list[Path] = field(default_factory=list)


def run_sampled_check(cfg: SampledCheckConfig) -> tuple[str, bool]:
    """Sample every prompt's first cfg.tokens tokens cfg.samples times with vanilla and with each method; test
    per position; write table.md/.csv to cfg.out. Returns the printable summary and whether no lossless method
    was flagged."""
    if cfg.samples < 20 or cfg.tokens < 1:
        raise SpecbenchError("--samples must be >= 20, and --tokens >= 1")
    if cfg.temperature <= 0:
        raise SpecbenchError("the sampled check needs a temperature > 0 (T=0 is checked token by token on a run)")
    if is_shape(cfg.target):
        raise SpecbenchError(f"the sampled check tests methods against a trained target; {cfg.target} has random "
                             "weights (TIMING-ONLY)")
    sampling = Sampling(cfg.temperature, cfg.top_p, cfg.top_k)
    methods = [m for m in select_methods(cfg.methods, cfg.method_files, cfg.options) if m.name != "vanilla"]
    if not methods:
        raise SpecbenchError("name at least one method besides vanilla to compare with it")
    prompts_text = [(t.name, q) for t, questions in resolve_questions(cfg.questions) for q in questions]
    target = load_target(cfg.target, cfg.device, cfg.dtype)
    build = BuildContext(target, cfg.draft, device=cfg.device, dtype=cfg.dtype,
                         methods=available_methods(cfg.method_files))
    drafters = {m.name: m.drafter(build) for m in methods}
    vanilla = select_methods(["vanilla"])[0].drafter(build)
    tests_per_method = len(prompts_text) * cfg.tokens
    alpha_per_test = cfg.alpha / tests_per_method
    rows = []
    for task, question in tqdm(prompts_text, desc="prompts", unit="prompt"):
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": question.turns[0]}])
        reference = sample_prefixes(target.model, prompt, vanilla, sampling, cfg.tokens, cfg.samples,
                                    cfg.seed * 1000, target.stop_ids, progress="vanilla")
        for index, method in enumerate(methods, start=1):
            samples = sample_prefixes(target.model, prompt, drafters[method.name], sampling, cfg.tokens,
                                      cfg.samples, cfg.seed * 1000 + index, target.stop_ids, progress=method.name)
            for test in compare(reference, samples, alpha_per_test):
                rows.append({"method": method.name, "lossless": method.lossless, "task": task,
                             "question_id": str(question.question_id), "position": test.position,
                             "p_value": test.pvalue, "categories": test.categories,
                             "total_variation": test.total_variation, "detectable_w_80": test.detectable_w})
    frame = pd.DataFrame(rows)
    summary, ok = summarize(frame, cfg, alpha_per_test)
    cfg.out.mkdir(parents=True, exist_ok=True)
    env = environment(str(target.model.device), str(target.model.dtype).replace("torch.", ""))
    origin = [f"command: {' '.join(['python', '-m', 'specbench', *sys.argv[1:]])}",
              f"git commit: {env['git_commit']}; target {cfg.target} on {env['device']} ({env['dtype']}); "
              f"torch {env['torch']}, transformers {env['transformers']}"]
    (cfg.out / "sampled_check.md").write_text("\n".join(f"<!-- {line} -->" for line in origin) + "\n\n" + summary
                                              + "\n\n" + frame.to_markdown(index=False, floatfmt=".3g") + "\n",
                                              encoding="utf-8")
    with (cfg.out / "sampled_check.csv").open("w", encoding="utf-8") as f:
        f.write("".join(f"# {line}\n" for line in origin))
        frame.to_csv(f, index=False)
    return summary, ok


def summarize(frame: pd.DataFrame, cfg: SampledCheckConfig, alpha_per_test: float) -> tuple[str, bool]:
    lines = [f"T={cfg.temperature:g} top_p={cfg.top_p:g} top_k={cfg.top_k}: {cfg.samples} samples per side of the "
             f"first {cfg.tokens} tokens; chi-square two-sample test per position; a method is flagged when a "
             f"p-value < {cfg.alpha:g} / {int(round(cfg.alpha / alpha_per_test))} tests = {alpha_per_test:.2g} "
             f"(Bonferroni). Power: Cohen's w detected with 80% probability is "
             f"{frame['detectable_w_80'].min():.3f}-{frame['detectable_w_80'].max():.3f} here (more samples, smaller w)."]
    ok = True
    for method, part in frame.groupby("method", sort=False):
        lossless = bool(part["lossless"].iloc[0])
        worst = part.loc[part["p_value"].idxmin()]
        flagged = worst["p_value"] < alpha_per_test
        if lossless:
            verdict = "FLAGGED: not vanilla's distribution" if flagged else "OK"
            ok &= not flagged
        else:
            verdict = ("lossy, and the drift is detected" if flagged else "lossy, drift not detected at this size")
        lines.append(f"{method:<20} {'lossless' if lossless else 'lossy':<8} min p {worst['p_value']:.3g} "
                     f"({worst['task']} {worst['question_id']} position {worst['position']}), largest empirical TV "
                     f"{part['total_variation'].max():.3f}  {verdict}")
    return "\n".join(lines), ok
