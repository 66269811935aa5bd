"""T>0: every lossless method samples exactly vanilla's distribution, where it can go wrong.

The joint distribution of the first four tokens after a fixed prompt (vocabulary 12, T=0.7, top_p=0.9) is computed
exactly from the target and compared with what each method emits (chi-square, rare cells pooled). Four tokens,
because stateful drafters (EAGLE's features, Medusa's feature, Lookahead's pool) draft nothing in the first step
(the prefill): the second step then drafts trees of depth 2 (the engine cuts drafts to the remaining budget), so
draft tokens are accepted at depth 2 and bonus tokens are drawn after fully accepted paths. Every test asserts
that this happened often enough for it to have power, and the same test must flag each canary: a bonus token from
the unprocessed softmax on a tree method, a rejected sampled candidate whose q is not removed from the residual,
a rejected one-hot candidate without renormalisation, and Medusa's typical acceptance (lossy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

from specbench.decode.draft import Drafter, parse_tree
from specbench.decode.engine import generate
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling, sample, target_probs
from specbench.decode.verify import (
    RejectionRules,
    Uniforms,
    Verdict,
    VerifyFn,
    rejection_walk,
    residual_after_one_hot,
)
from specbench.methods.common.datastore import Datastore
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain
from specbench.methods.common.feature_tree import FeatureTreeDrafter, TreeSpec
from specbench.methods.common.feature_tree import TreeSpec as FeatureTreeSpec
from specbench.methods.common.options import DEFAULT_NODES
from specbench.methods.common.static_tree import first_paths
from specbench.methods.eagle import EAGLE1_TREE
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle3.checkpoint import head_config as eagle3_config
from specbench.methods.eagle3.drafter import Eagle3FeatureHead
from specbench.methods.eagle3.head import Eagle3Head
from specbench.methods.eagle3.training import Eagle3Trainable, set_draft_vocabulary
from specbench.methods.hydra.drafter import HydraDrafter
from specbench.methods.hydra.training import HydraTrainable, hydra_heads
from specbench.methods.lookahead.drafter import LookaheadDrafter
from specbench.methods.medusa.drafter import MedusaDrafter, typical_verifier
from specbench.methods.medusa.head import MedusaHeads
from specbench.methods.medusa.training import MedusaTrainable
from specbench.methods.pard.drafter import PardDrafter
from specbench.methods.pld.drafter import PromptLookupDrafter
from specbench.methods.recycling import DEFAULT_TREE as RECYCLING_TREE
from specbench.methods.recycling.drafter import RecyclingDrafter
from specbench.methods.rest.drafter import RestDrafter
from specbench.methods.samd.drafter import SamDrafter
from specbench.methods.suffix.drafter import SuffixDrafter
from specbench.methods.swift.drafter import layer_skip_view
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.train.training import Batch
from tests.conftest import tiny_llama
from tests.drafters import ModelTreeDrafter, RandomTreeDrafter
from tests.stats import goodness_of_fit
from tests.test_dflash import distribution_drafter

VOCAB = 12
TOKENS = 4
SAMPLES = 2_500
SAMPLING = Sampling(temperature=0.7, top_p=0.9)
BASE = [3, 7, 1, 5]
PASS_P = 1e-3  # a lossless method fails one seeded run with this probability
FLAG_P = 1e-6  # a canary must be flagged far beyond that
REDUCED = torch.tensor([0, 2, 3, 5, 7, 8, 9])  # a reduced draft vocabulary


@pytest.fixture(scope="module")
def target():
    # Peaked enough that ~40 four-token sequences carry most of the mass (chi-square cells with counts), with
    # top_p cutting real tokens.
    return tiny_llama(VOCAB, seed=21, layers=1, hidden=16, logit_scale=26.0)


@pytest.fixture(scope="module")
def draft_model():
    """The target's weights with a flatter lm_head: q is correlated with p but differs from it, so drafts are
    often accepted several tokens deep and often rejected too."""
    return tiny_llama(VOCAB, seed=21, layers=1, hidden=16, logit_scale=10.0)


@pytest.fixture(scope="module")
def prompt(target) -> list[int]:
    """BASE, the target's greedy continuation, then BASE again: prompt lookup finds BASE's tail earlier and proposes
    what the target wrote after it, so its drafts are often accepted several tokens deep."""
    greedy = generate(target, BASE, VanillaDrafter(), Sampling(), 8, set()).token_ids
    return BASE + greedy + BASE


@pytest.fixture(scope="module")
def exact_joint(target, prompt) -> np.ndarray:
    return joint_of(target, prompt)


def joint_of(target, prompt: list[int]) -> np.ndarray:
    """P(x1..x4) under vanilla sampling with SAMPLING, from the target's own logits: [V, V, V, V]."""
    joint = torch.ones(1, dtype=torch.float64)
    contexts = [[]]
    with torch.no_grad():
        for _ in range(TOKENS):
            rows = torch.tensor([prompt + c for c in contexts])
            p = target_probs(target(rows).logits[:, -1], SAMPLING).double()
            joint = (joint[:, None] * p).reshape(-1)
            contexts = [c + [x] for c in contexts for x in range(VOCAB)]
    return joint.reshape((VOCAB,) * TOKENS).numpy()


@dataclass
class Sampled:
    counts: np.ndarray
    deep_accepts: int  # draft tokens accepted at depth 2 or more
    full_paths: int  # steps whose accepted path reached a leaf of a non-empty tree (bonus after a full path)


def sample_method(target, prompt, drafter: Drafter, verify: VerifyFn | None = None,
                  runner: ModelRunner | None = None) -> Sampled:
    """SAMPLES generations of TOKENS tokens on the target's runner (None: one of its own shapes for each)."""
    generator = torch.Generator().manual_seed(1234)
    result = Sampled(np.zeros((VOCAB,) * TOKENS), 0, 0)
    for _ in range(SAMPLES):
        out = generate(target, prompt, drafter, SAMPLING, TOKENS, set(), generator, verify, runner)
        result.counts[tuple(out.token_ids)] += 1
        result.deep_accepts += sum(max(0, a - 2) for a, n in zip(out.accept_lengths, out.tree_sizes) if n)
        result.full_paths += sum(out.full_paths)
    return result


# ---------------------------------------------------------------------------------------------- drafters


def eagle_drafter(target, static_tree: bool, runner: ModelRunner | None = None) -> EagleDrafter:
    """A random EAGLE head: over 12 tokens its top-3 trees still cover much of the target's mass. runner: the
    target's, beside which the head drafts (None: one of the head's own)."""
    torch.manual_seed(5)
    head = EagleHead(head_config(target.config))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    spec = TreeSpec(top_k=3, depth=3, total_tokens=8, static_paths=parse_tree(EAGLE1_TREE) if static_tree else None)
    return EagleDrafter(head, target.get_output_embeddings().weight, None, spec, target=runner)


def chained(model, runner: ModelRunner | None, draft_vocab: torch.Tensor | None = None) -> DraftModelDrafter:
    """sps's drafter of gamma 3 with this draft model, its chain beside the target's runner."""
    return DraftModelDrafter(model, 3, VOCAB, draft_vocab, draft_chain(model, runner, draft_vocab))


def fit_for_a_moment(trainable, target, prompt: list[int], lr: float) -> None:
    """150 Adam steps of a drafter's own loss on 48 samples of the target after the prompt (seed 7), with the
    target's last hidden states."""
    generator = torch.Generator().manual_seed(7)
    samples = [prompt + generate(target, prompt, VanillaDrafter(), SAMPLING, 8, set(), generator).token_ids
               for _ in range(48)]
    tokens = torch.tensor(samples)
    with torch.no_grad():
        hidden = target(tokens, output_hidden_states=True).hidden_states[-1]
    ones = torch.ones_like(tokens, dtype=torch.bool)
    optimizer = torch.optim.Adam(trainable.module.parameters(), lr=lr)
    for _ in range(150):
        loss, _ = trainable.loss(Batch(tokens, hidden, ones, ones))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def medusa_drafter(target, prompt: list[int], runner: ModelRunner | None = None) -> MedusaDrafter:
    """Medusa heads trained for a moment on the target's own samples after the prompt (random heads guess the
    token two places ahead so badly that depth 2 is never accepted)."""
    torch.manual_seed(6)
    heads = MedusaHeads(target.config.hidden_size, 4)
    fit_for_a_moment(MedusaTrainable(heads, target.get_output_embeddings().weight, None), target, prompt, 0.03)
    return MedusaDrafter(heads.eval(), target.get_output_embeddings().weight, None, first_paths(DEFAULT_NODES),
                         graphs=runner.drafting_graphs() if runner is not None else None)


def hydra_drafter(target, prompt: list[int], runner: ModelRunner | None = None, arch: str = "mlp") -> HydraDrafter:
    """Hydra heads trained for a moment on the target's own samples after the prompt, by teacher distillation from
    the target's exact distributions (Hydra++'s objective, the default of `train hydra`); arch=prefix-mlp: Hydra++
    as published (the prefix layer's state per generation, own lm_heads with bias)."""
    torch.manual_seed(10)
    heads = hydra_heads(target.config, arch, 4, 2, target.get_output_embeddings().weight, None)
    trainable = HydraTrainable(heads, target.get_input_embeddings(), target.get_output_embeddings().weight, None)
    fit_for_a_moment(trainable, target, prompt, 0.01)
    return HydraDrafter(heads.eval(), target.get_input_embeddings(), target.get_output_embeddings().weight, None,
                        first_paths(DEFAULT_NODES), graphs=runner.drafting_graphs() if runner is not None else None)


def eagle3_drafter(target, prompt: list[int], runner: ModelRunner | None = None) -> FeatureTreeDrafter:
    """An EAGLE-3 head trained for a moment with the training-time test on the target's own samples after the
    prompt, drafting over a reduced vocabulary (d2t/t2d) that leaves some of the target's tokens out."""
    torch.manual_seed(8)
    head = Eagle3Head(eagle3_config(target.config, VOCAB - 2))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    set_draft_vocabulary(head, torch.tensor([t for t in range(VOCAB) if t not in (4, 10)]))
    generator = torch.Generator().manual_seed(9)
    samples = [prompt + generate(target, prompt, VanillaDrafter(), SAMPLING, 8, set(), generator).token_ids
               for _ in range(48)]
    tokens = torch.tensor(samples)
    ones = torch.ones_like(tokens, dtype=torch.bool)
    trainable = Eagle3Trainable(head, target, steps=3)
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=0.03)
    for _ in range(150):
        loss, _ = trainable.loss(Batch(tokens, torch.zeros(*tokens.shape, 1), ones, ones))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return FeatureTreeDrafter(Eagle3FeatureHead(head.eval(), target.config.num_hidden_layers),
                              FeatureTreeSpec(top_k=3, depth=3, total_tokens=8), runner)


def samples_store(target, prompt: list[int], with_prompt: bool = True) -> Datastore:
    """A datastore of 48 texts the target sampled after the prompt, each with the prompt in front (retrieval finds
    the prompt's tail in each) or alone (matches stay short, so a fallback drafts too)."""
    generator = torch.Generator().manual_seed(11)
    texts = [(prompt if with_prompt else []) + generate(target, prompt, VanillaDrafter(), SAMPLING, 8, set(),
                                                         generator).token_ids for _ in range(48)]
    return Datastore.of([np.array(t) for t in texts])


@dataclass(frozen=True)
class Case:
    build: Callable  # (target, draft_model, prompt, the target's runner) -> Drafter
    min_deep: int = 0  # power floors over SAMPLES samples
    min_full: int = 0


LOSSLESS = {
    "vanilla": Case(lambda t, d, p, r: VanillaDrafter()),
    "sps (chain with q)": Case(lambda t, d, p, r: chained(d, r), 600, 600),
    "sps, reduced draft vocabulary": Case(lambda t, d, p, r: chained(d, r, REDUCED), 400, 400),
    "pld": Case(lambda t, d, p, r: PromptLookupDrafter(), 500, 300),
    "tree, one-hot candidates": Case(lambda t, d, p, r: ModelTreeDrafter(d, width=2, sampled=False), 600, 600),
    "tree, candidates sampled from q": Case(lambda t, d, p, r: ModelTreeDrafter(d, width=2, sampled=True), 500, 600),
    "random trees": Case(lambda t, d, p, r: RandomTreeDrafter(VOCAB, seed=3), 25, 200),
    "eagle (dynamic tree)": Case(lambda t, d, p, r: eagle_drafter(t, False, r), 50, 300),
    "eagle1 (static tree)": Case(lambda t, d, p, r: eagle_drafter(t, True, r), 50, 400),
    # eagle-hass is eagle's drafter with another training objective: its head here is the same random one
    "eagle-hass (eagle's drafter)": Case(lambda t, d, p, r: eagle_drafter(t, False, r), 50, 300),
    "pard (K tokens from one forward, mask id 11)": Case(
        lambda t, d, p, r: PardDrafter(d, 3, VOCAB, 11, chain=draft_chain(d, r)), 400, 1000),
    "dflash (a draft trained for a moment; deterministic blocks)": Case(
        lambda t, d, p, r: distribution_drafter(t, p, SAMPLING, r), 300, 300),
    "medusa": Case(lambda t, d, p, r: medusa_drafter(t, p, r), 300, 400),
    # The 1-layer target has no layer swift may skip: its view is the target itself, so this checks the view's own
    # cache and q (tests/test_swift.py tests a 4-layer target with layers skipped). 5000 deep accepts and 2500 full
    # paths when written.
    "swift (layer-skip view, nothing to skip on 1 layer)": Case(
        lambda t, d, p, r: chained(layer_skip_view(t, []), r), 2500, 1250),
    # 1731 deep accepts and 1915 full paths when written (p 0.09).
    "hydra": Case(lambda t, d, p, r: hydra_drafter(t, p, r), 850, 950),
    # 1746 deep accepts and 1947 full paths when written (p 0.32).
    "hydra++ (prefix-mlp, own lm_heads)": Case(lambda t, d, p, r: hydra_drafter(t, p, r, "prefix-mlp"), 1500, 1650),
    "eagle3 (reduced draft vocabulary)": Case(lambda t, d, p, r: eagle3_drafter(t, p, r), 400, 1100),
    # lade guesses only once its window is warm (N - 2 steps, the prefill one of them): within the four sampled
    # tokens only the prompt fills the pool, and one guessed token is all the budget leaves room to accept (1,075
    # full paths when written); its depth >= 2 acceptance is asserted at T=0 (test_families.py, test_conformance.py).
    "lookahead (prompt_pool=1)": Case(lambda t, d, p, r: LookaheadDrafter(4, 4, 4, prompt_pool=True), 0, 500),
    # The matrix fills over the samples (3,568 deep accepts and 1,800 full paths when written).
    "recycling (matrix kept across generations)": Case(
        lambda t, d, p, r: RecyclingDrafter(VOCAB, parse_tree(RECYCLING_TREE), "run"), 1500, 800),
    # Cleared every generation: within four tokens only one-token drafts can be filled (775 full paths when written);
    # its depth >= 2 acceptance is asserted at T=0 (test_recycling.py, test_batch.py).
    "recycling (matrix per generation)": Case(
        lambda t, d, p, r: RecyclingDrafter(VOCAB, parse_tree(RECYCLING_TREE), "generation"), 0, 350),
    # The prompt repeats BASE, so the generation's own tree drafts from the first draft on; the global tree grows with
    # every sample's output. Floors about half of what was measured when written (deep accepts, full paths):
    # suffix run 1328/1933 and generation 723/1426 (its first draft follows the prefill token, as the reference's),
    # rest 2625/1942, samd 1704/1199.
    "suffix (trees kept across generations)": Case(lambda t, d, p, r: SuffixDrafter(scope="run", factor=4.0), 650, 950),
    "suffix (tree per generation)": Case(lambda t, d, p, r: SuffixDrafter(scope="generation", factor=4.0), 350, 700),
    "rest (datastore of the target's samples)": Case(
        lambda t, d, p, r: RestDrafter(samples_store(t, p), max_tokens=8), 1300, 950),
    "samd (recycling fallback)": Case(lambda t, d, p, r: SamDrafter(
        samples_store(t, p), RecyclingDrafter(VOCAB, parse_tree(RECYCLING_TREE), "generation")), 850, 600),
    # The continuations alone: EAGLE drafts about a quarter of the steps (126 of 498 in 200 samples when written);
    # 1794 deep accepts and 1010 full paths when written.
    "samd-eagle (EAGLE fallback)": Case(lambda t, d, p, r: SamDrafter(
        samples_store(t, p, with_prompt=False), eagle_drafter(t, False, r)), 900, 500),
}


@pytest.mark.parametrize("name", list(LOSSLESS))
def test_lossless_method_samples_vanillas_joint(target, draft_model, prompt, exact_joint, name):
    case, runner = LOSSLESS[name], ModelRunner(target, fixed_shapes=False)
    assert_lossless(case, sample_method(target, prompt, case.build(target, draft_model, prompt, runner), runner=runner),
                    exact_joint)


def assert_lossless(case: Case, result: Sampled, exact_joint: np.ndarray) -> None:
    """The samples fit vanilla's joint, with power: draft tokens were accepted deep in the tree, and bonus tokens
    drawn after fully accepted paths, at least as often as the case's floors."""
    assert result.deep_accepts >= case.min_deep, f"only {result.deep_accepts} draft tokens accepted at depth >= 2"
    assert result.full_paths >= case.min_full, f"only {result.full_paths} fully accepted paths"
    assert goodness_of_fit(result.counts, exact_joint) > PASS_P


# ---------------------------------------------------------------------------------------------- canaries


def bonus_from_unprocessed_softmax(draft, logits, sampling, generator) -> Verdict:
    """The official EAGLE bug until 2025: the bonus after a fully accepted path from softmax(logits)."""
    walk = rejection_walk(draft, target_probs(logits, sampling), Uniforms(Uniforms.draw(len(draft), generator).tolist()))
    if walk.rejected_all:
        return Verdict(walk.path, sample(walk.residual, generator))
    return Verdict(walk.path, sample(logits[walk.end_row].float().softmax(-1), generator))


def with_rules(rules: RejectionRules) -> VerifyFn:
    def verify(draft, logits, sampling, generator) -> Verdict:
        walk = rejection_walk(draft, target_probs(logits, sampling), Uniforms(Uniforms.draw(len(draft), generator).tolist()), rules)
        return Verdict(walk.path, sample(walk.residual, generator))

    return verify


# A rejected sampled candidate leaves p as it was (q never subtracted from the residual); x still leaves q.
q_not_removed = with_rules(RejectionRules(after_sampled=lambda p, q, x: (p, residual_after_one_hot(q, x))))


def _zero_without_renormalising(p: torch.Tensor, x: int) -> torch.Tensor:
    zeroed = p.clone()
    zeroed[x] = 0.0
    return zeroed if float(zeroed.sum()) > 0 else p  # (torch.multinomial renormalises the final draw itself)


# A rejected one-hot candidate is zeroed but p is not renormalised: later siblings are accepted too rarely.
not_renormalised = with_rules(RejectionRules(after_one_hot=_zero_without_renormalising))

CANARIES = {
    "eagle, bonus from the unprocessed softmax": (lambda t, d, p: eagle_drafter(t, static_tree=False),
                                                  bonus_from_unprocessed_softmax),
    "sps, bonus from the unprocessed softmax": (lambda t, d, p: DraftModelDrafter(d, gamma=3, vocab_size=VOCAB),
                                                bonus_from_unprocessed_softmax),
    "sampled tree, q not removed from the residual": (lambda t, d, p: ModelTreeDrafter(d, width=2, sampled=True),
                                                      q_not_removed),
    "one-hot tree, no renormalisation": (lambda t, d, p: ModelTreeDrafter(d, width=2, sampled=False), not_renormalised),
    "medusa-typical (lossy)": (lambda t, d, p: medusa_drafter(t, p), typical_verifier(0.09, 0.3)),
}


@pytest.mark.parametrize("name", list(CANARIES))
def test_the_same_test_flags_each_canary(target, draft_model, prompt, exact_joint, name):
    build, verify = CANARIES[name]
    result = sample_method(target, prompt, build(target, draft_model, prompt), verify)
    assert goodness_of_fit(result.counts, exact_joint) < FLAG_P


def test_target_distribution_is_not_trivial(exact_joint):
    # The test has power only if top-p cuts something and many sequences are likely.
    assert (exact_joint > 0.005).sum() >= 20 and exact_joint.max() < 0.5 and (exact_joint == 0).sum() > 0
