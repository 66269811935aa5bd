"""Lookahead decoding (Fu et al. 2024) as its reference code `lade` (hao-ai-lab/LookaheadDecoding) steps: no draft
model; one target forward per step holds
  - the lookahead branch: a Jacobi window of N-1 levels, level 0 holding the root (the last emitted token) and W-1
    cells, the others W cells; cell (l, j) sits l + j positions after the root and sees level 0's columns up to j
    and its own column below it;
  - the verification branch (once the window is full): the n-grams the pool holds under the root, oldest first, up
    to G, merged into a trie. lade counts at most N-2 matched tokens of a guess, so a guess's last token is never
    verified (at most N-1 tokens a step: N-2 guessed and the target's next).
As lade: only level 0 starts filled (W+N-3 tokens drawn from the prompt, with replacement), the first N-2 steps fill
one level each (the prefill included) and verify nothing; after each full step every column (its level-0 cell as
the key, the cells above it and the top level's new output as the n-gram) goes into the pool, and the window moves
one column on, levels down and the top level's outputs on top, whatever was accepted. `prompt_pool=1` also fills
the pool with the prompt's n-grams and, after each step, with n-grams of lade's history of generated tokens as lade
keeps it (its quirk: a step's last token repeated once per token the step emitted). tests/test_conformance.py holds
every step to lade's (docs/conformance.md).

The n-gram pool and the window belong to one generation (one turn): nothing carries over between questions.
Guesses are deterministic, so the engine verifies them losslessly at any temperature (one-hot candidates).

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

OPTIONS = (
    Option("N", 5, "n-gram size (the Jacobi window has N-1 levels)", int, low=3),
    Option("W", 7, "window width: positions guessed ahead per level", int, low=1),
    Option("G", 7, "n-grams kept per key and verified per step (from the pool)", int, low=1),
    Option("prompt_pool", 0, "1: also fill the pool with the prompt's and the history's n-grams (lade's "
           "POOL_FROM_PROMPT)", int, low=0, high=1),
)


METHODS = [MethodInfo("lookahead", "Lookahead decoding as lade steps: Jacobi window (N=5, W=7) + n-gram pool (G=7), "
                      "one forward per step; pool per generation", True,
                      Ref.to("specbench.methods.lookahead.drafter:build"),
                      ("", "N=3:W=2:G=2", "N=3:W=4:G=4", "N=4:W=3:G=3"), OPTIONS)]
