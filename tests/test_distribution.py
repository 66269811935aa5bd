"""T>0: the joint distribution of the first two tokens under every verifier equals vanilla sampling's, computed
exactly from the target (T=0.7, top_p=0.9, vocabulary of 12). A verifier that samples the bonus token from the
unprocessed distribution (the official EAGLE bug until 2025) must fail the same test."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from methods.eagle import EAGLE1_TREE, EagleDrafter, EagleHead, TreeSpec, head_config
from methods.lookahead import LookaheadDrafter
from methods.medusa import DEFAULT_TREE, MedusaDrafter, MedusaHeads
from methods.sps import DraftModelDrafter
from methods.vanilla import VanillaDrafter
from specbench.draft import parse_tree
from specbench.engine import generate
from specbench.sampling import Sampling, sample, target_probs
from specbench.verify import Verdict, rejection_walk
from tests.conftest import tiny_llama
from tests.drafters import ModelTreeDrafter, RandomTreeDrafter

VOCAB = 12
SAMPLES = 20_000
SAMPLING = Sampling(temperature=0.7, top_p=0.9)
PROMPT = [3, 7, 1, 5]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=11, layers=1, hidden=16, logit_scale=6.0)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_llama(VOCAB, seed=12, layers=1, hidden=16, logit_scale=6.0)


@pytest.fixture(scope="module")
def exact_joint(target) -> np.ndarray:
    """P(x1, x2) under vanilla sampling with SAMPLING, from the target's own logits."""
    with torch.no_grad():
        p1 = target_probs(target(torch.tensor([PROMPT])).logits[0, -1], SAMPLING)
        contexts = torch.tensor([PROMPT + [x] for x in range(VOCAB)])
        p2 = target_probs(target(contexts).logits[:, -1], SAMPLING)
    return (p1[:, None] * p2).double().numpy()


def broken_bonus_verify(draft, logits, sampling, generator):
    """Accepts like the real verifier but draws the bonus after a fully accepted branch from softmax(logits)."""
    walk = rejection_walk(draft, target_probs(logits, sampling), generator)
    if walk.rejected_all:
        return Verdict(walk.path, sample(walk.residual, generator))
    return Verdict(walk.path, sample(logits[walk.end_row].float().softmax(-1), generator))


def joint_counts(target, drafter, verify=None) -> np.ndarray:
    generator = torch.Generator().manual_seed(1234)
    counts = np.zeros((VOCAB, VOCAB))
    for _ in range(SAMPLES):
        x1, x2 = generate(target, PROMPT, drafter, SAMPLING, 2, set(), generator, verify).token_ids
        counts[x1, x2] += 1
    return counts


def goodness_of_fit(counts: np.ndarray, joint: np.ndarray) -> float:
    expected = joint.ravel() / joint.sum() * counts.sum()  # joint is float32-accurate; renormalise
    observed = counts.ravel()
    assert observed[expected == 0].sum() == 0, "a token pair vanilla can never produce was sampled"
    big = expected >= 5  # pool the rare cells so the chi-square approximation holds
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)


def eagle_drafter(target, static: bool) -> EagleDrafter:
    """A random EAGLE head: with 12 tokens its top-k trees still cover most of the target's mass."""
    torch.manual_seed(5)
    head = EagleHead(head_config(target.config))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    spec = TreeSpec(top_k=3, depth=3, total_tokens=6, static_paths=parse_tree(EAGLE1_TREE) if static else None)
    return EagleDrafter(head, target.get_output_embeddings().weight, None, spec)


def medusa_drafter(target) -> MedusaDrafter:
    torch.manual_seed(6)
    heads = MedusaHeads(target.config.hidden_size, 4)
    for head in heads.heads:
        torch.nn.init.normal_(head[0].linear.weight, std=0.3)
    return MedusaDrafter(heads, target.get_output_embeddings().weight, None, parse_tree(DEFAULT_TREE))


DRAFTERS = {
    "vanilla": lambda t, d: VanillaDrafter(),
    "chain-with-q (sps)": lambda t, d: DraftModelDrafter(d, gamma=2, vocab_size=VOCAB),
    "chain-with-q, reduced draft vocabulary (sps)": lambda t, d: DraftModelDrafter(
        d, gamma=2, vocab_size=VOCAB, draft_vocab=torch.tensor([0, 2, 3, 5, 7, 8, 9])),
    "tree-one-hot": lambda t, d: ModelTreeDrafter(d, width=2, sampled=False),
    "tree-sampled-q": lambda t, d: ModelTreeDrafter(d, width=2, sampled=True),
    "random-trees-one-hot": lambda t, d: RandomTreeDrafter(VOCAB, seed=3),
    "eagle (dynamic tree)": lambda t, d: eagle_drafter(t, static=False),
    "eagle1 (static tree)": lambda t, d: eagle_drafter(t, static=True),
    "medusa": lambda t, d: medusa_drafter(t),
    "lookahead": lambda t, d: LookaheadDrafter(3, 3, 3),
}


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_sampled_pairs_match_vanilla(target, draft_model, exact_joint, name):
    counts = joint_counts(target, DRAFTERS[name](target, draft_model))
    assert goodness_of_fit(counts, exact_joint) > 1e-3


def test_target_distribution_is_not_trivial(exact_joint):
    # The test has power only if top-p cuts something and several pairs are likely.
    assert (exact_joint > 0.01).sum() >= 6 and (exact_joint == 0).sum() > 0


def test_bonus_from_unprocessed_softmax_is_caught(target, draft_model, exact_joint):
    drafter = DraftModelDrafter(draft_model, gamma=2, vocab_size=VOCAB)
    counts = joint_counts(target, drafter, verify=broken_bonus_verify)
    with pytest.raises(AssertionError):
        assert goodness_of_fit(counts, exact_joint) > 1e-3
