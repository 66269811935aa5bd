"""Lookahead decoding (Fu et al. 2024): no draft model. One target forward per step holds
  - the verification branch: up to G n-grams from a pool, keyed by the last emitted token, merged into a trie;
  - the lookahead branch: a Jacobi window of W columns x (N-1) levels, whose greedy outputs refine the window and
    fill the pool with new n-grams.
Cell (level l, column i) sits l + i + 1 positions after the root and attends to level 0's columns 0..i and to its
own column's lower levels: the path it continues is root, level-0 tokens up to column i, then its column upwards.
After the forward, each column read bottom to top plus its top output is an N-gram for the pool, and every cell
takes the output that predicted its position (a Jacobi step).

The n-gram pool and the window belong to one generation (one turn): nothing carries over between questions.
Guesses are deterministic, so the engine verifies them losslessly at any temperature (one-hot candidates).

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

OPTIONS = (
    Option("N", 5, "n-gram size (the Jacobi window has N-1 levels)", int, low=2),
    Option("W", 7, "window width: positions guessed ahead per level", int, low=1),
    Option("G", 7, "n-grams verified per step (from the pool)", int, low=1),
)


METHODS = [MethodInfo("lookahead", "Lookahead decoding: Jacobi window (N=5, W=7) + n-gram pool (G=7), one forward "
                      "per step; pool per generation", True, Ref.to("specbench.methods.lookahead.drafter:build"),
                      ("", "N=3:W=2:G=2", "N=3:W=4:G=4", "N=4:W=3:G=3"), OPTIONS)]
