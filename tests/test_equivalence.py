"""The sampled equivalence suite (what `specbench check --sampled` runs on the real target), on a tiny model:
its two-sample test passes a lossless method and has the power to flag the bonus-token bug at T=0.5."""
from __future__ import annotations

import numpy as np
import pytest

from specbench.decode.sampling import Sampling
from specbench.measure.equivalence import compare, detectable_w, homogeneity, sample_prefixes
from specbench.methods.common.draft_model import DraftModelDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.test_distribution import bonus_from_unprocessed_softmax

VOCAB = 12
PROMPT = [3, 7, 1, 5]
SAMPLING = Sampling(temperature=0.5)
SAMPLES = 3000
ALPHA = 0.01 / 3  # Bonferroni over the three positions


@pytest.fixture(scope="module")
def models():
    return tiny_llama(VOCAB, seed=11, layers=1, hidden=16, logit_scale=6.0), tiny_llama(VOCAB, seed=12, layers=1,
                                                                                         hidden=16, logit_scale=6.0)


@pytest.fixture(scope="module")
def vanilla_samples(models):
    return sample_prefixes(models[0], PROMPT, VanillaDrafter(), SAMPLING, 3, SAMPLES, seed=1, stop_ids=set())


def test_homogeneity_pools_rare_tokens_and_separates_distributions():
    rng = np.random.default_rng(0)
    same = homogeneity(rng.choice(5, 2000, p=[.5, .3, .1, .09, .01]), rng.choice(5, 2000, p=[.5, .3, .1, .09, .01]))
    shifted = homogeneity(rng.choice(5, 2000, p=[.5, .3, .1, .09, .01]), rng.choice(5, 2000, p=[.4, .4, .1, .09, .01]))
    assert same[0] > 0.01 and shifted[0] < 1e-6
    assert homogeneity(np.zeros(50, int), np.zeros(50, int)) == (1.0, 1)
    assert 0.05 < detectable_w(3000, 4, 0.01) < 0.1  # the textbook value for df=3 at n=3000 is about 0.07


def test_lossless_sps_passes(models, vanilla_samples):
    drafter = DraftModelDrafter(models[1], gamma=2, vocab_size=VOCAB)
    method = sample_prefixes(models[0], PROMPT, drafter, SAMPLING, 3, SAMPLES, seed=2, stop_ids=set())
    assert min(t.pvalue for t in compare(vanilla_samples, method, ALPHA)) > ALPHA


def test_bonus_from_unprocessed_softmax_is_flagged_at_half_temperature(models, vanilla_samples):
    drafter = DraftModelDrafter(models[1], gamma=2, vocab_size=VOCAB)
    broken = sample_prefixes(models[0], PROMPT, drafter, SAMPLING, 3, SAMPLES, seed=2, stop_ids=set(),
                             verify=bonus_from_unprocessed_softmax)
    tests = compare(vanilla_samples, broken, ALPHA)
    assert min(t.pvalue for t in tests) < ALPHA, [t.pvalue for t in tests]
    # The bug first shows after the first draft run is accepted whole: not at position 0.
    assert tests[0].pvalue > ALPHA
