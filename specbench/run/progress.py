"""Progress inside a question: the tokens the method decoding now has emitted and their rate, on the questions
bar's postfix (`questions: 0/4 [..., vanilla gsm8k question 1: 37/64 tok, 12.1 tok/s]`), so a slow question on
a busy machine still shows it is moving. Fed by the engine's per-step callback (generate_batch's on_step) and read
by nothing but the display: the clock read here decides nothing that is drafted."""
from __future__ import annotations

import time
from typing import Callable

from tqdm import tqdm

from specbench.run.plan import Job

SHOW_EVERY = 0.5  # seconds between two redraws of the postfix


class TokenProgress:
    """The current method's tokens on the current job, shown on `bar` at most every `every` seconds."""

    def __init__(self, bar: tqdm, every: float = SHOW_EVERY) -> None:
        self.bar, self.every = bar, every
        self.label, self.total, self.tokens = "", 0, 0
        self.started = self.shown = time.monotonic()

    def method(self, name: str, job: Job, budget: int) -> Callable[[int], None]:
        """A method starts on a job: its budget is `budget` tokens per turn of each question. Returns the callback."""
        self.label = f"{name} {job.describe()}"
        self.total = budget * sum(len(q.turns) for q in job.questions)
        self.tokens = 0
        self.started = self.shown = time.monotonic()
        self.bar.set_postfix_str(f"{self.label}: 0/{self.total} tok")
        return self.step

    def step(self, tokens: int) -> None:
        """One engine step emitted `tokens` (all rows together)."""
        self.tokens += tokens
        now = time.monotonic()
        if now - self.shown >= self.every:
            self.shown = now
            self.bar.set_postfix_str(f"{self.label}: {self.tokens}/{self.total} tok, "
                                     f"{self.tokens / max(now - self.started, 1e-9):.1f} tok/s")
