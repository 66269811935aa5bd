"""The goodness-of-fit measure shared by the distribution tests."""
from __future__ import annotations

import numpy as np
from scipy.stats import chisquare


def goodness_of_fit(counts: np.ndarray, joint: np.ndarray) -> float:
    """p-value of the chi-square test of observed counts against an exact distribution (rare cells pooled); 0 when a
    sequence of probability zero was observed."""
    joint = np.asarray(joint, dtype=np.float64)
    expected = joint.ravel() / joint.sum() * counts.sum()
    observed = counts.ravel()
    if observed[expected == 0].sum():
        return 0.0  # a sequence vanilla can never produce
    big = expected >= 5  # pool the rare cells so the chi-square approximation holds
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)
