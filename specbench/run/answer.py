"""Decoding questions: every turn of a batch of questions through the engine (later turns see the earlier
answers), the per-question seeds every method shares, the context check and the untimed warm-up. The runner
turns what this returns into records."""
from __future__ import annotations

import time
import zlib
from typing import Any, Callable

import torch

from specbench.decode.draft import Drafter
from specbench.decode.engine import context_limit, generate_batch
from specbench.decode.runner import BLOCK_SIZES, round_up
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel, chat_tokens
from specbench.decode.verify import VerifyFn
from specbench.errors import SpecbenchError
from specbench.run.energy import EnergyCounter
from specbench.run.record import Choice
from specbench.run.synthetic import SyntheticAcceptance
from specbench.run.tasks import Question

CAPACITY_STEP = 64  # conversation_capacity rounds up to a multiple of this
TURN_SLACK = 16  # tokens per turn beyond the answer's budget (template, re-tokenised answers)


def question_seed(seed: int, task: str, question_id: Any, turn: int, repeat: int = 0) -> int:
    """The same per-turn seed for every method, independent of run order and process; each repeat draws anew."""
    return zlib.crc32(f"{seed}/{task}/{question_id}/{turn}".encode() + (f"/{repeat}".encode() if repeat else b""))


def answer_questions(
    target: LoadedModel, drafters: list[Drafter], questions: list[Question], task: str, sampling: Sampling,
    max_new_tokens: int, seed: int, repeat: int = 0, on_step: Callable[[int], None] | None = None,
    energy: EnergyCounter | None = None,
    verify: VerifyFn | None = None,
) -> list[Choice]:
    """Decode every turn of the questions, question i with drafters[i]; later turns see the earlier answers. With
    several questions, turn k of all of them is one batch (generate_batch) and each choice also keeps that batch's
    wall time per turn (batch_wall_time), from which throughput is computed. on_step: the engine's progress
    callback (tokens emitted per step), for a display. energy: a counter read before and after each turn's batch
    (its joules go into every row's energy_j). verify: a verifier other than the lossless one (synthetic
    acceptance), which gets each row's seeded generator at every temperature."""
    choices = [Choice(batch_wall_time=[] if len(questions) > 1 else None, energy_j=[] if energy else None)
               for _ in questions]
    messages: list[list[dict[str, str]]] = [[] for _ in questions]
    for turn in range(max(len(q.turns) for q in questions)):
        rows = [i for i, q in enumerate(questions) if turn < len(q.turns)]
        prompts, generators = [], []
        for i in rows:
            messages[i].append({"role": "user", "content": questions[i].turns[turn]})
            prompts.append(chat_tokens(target.tokenizer, messages[i]))
            generator = None
            if not sampling.greedy or verify is not None:
                generator = torch.Generator(device=target.model.device)
                generator.manual_seed(question_seed(seed, task, questions[i].question_id, turn, repeat))
            generators.append(generator)
        counted = energy.read() if energy else []
        started = time.perf_counter()
        results = generate_batch(target.model, prompts, [drafters[i] for i in rows], sampling, max_new_tokens,
                                 target.stop_ids, generators, verify=verify, on_step=on_step, runner=target.runner)
        batch_wall = time.perf_counter() - started  # generate_batch synchronises the device before it returns
        joules = energy.joules(counted, energy.read()) if energy else None
        for i, prompt, result in zip(rows, prompts, results):
            choice = choices[i]
            answer = target.tokenizer.decode(result.token_ids, skip_special_tokens=True)
            messages[i].append({"role": "assistant", "content": answer})
            choice.turns.append(answer)
            choice.new_tokens.append(len(result.token_ids))
            choice.wall_time.append(round(result.wall_time, 6))
            choice.accept_lengths.append(result.accept_lengths)
            choice.decoding_steps.append(len(result.accept_lengths))
            choice.token_ids.append(result.token_ids)
            choice.draft_time.append(round(sum(result.draft_times), 6))
            choice.verify_time.append(round(sum(result.verify_times), 6))
            choice.step_ends.append([round(t, 6) for t in result.step_ends])
            choice.prompt_tokens.append(len(prompt))
            choice.prefill_time.append(round(result.verify_times[0], 6) if result.verify_times else 0.0)
            if choice.energy_j is not None and joules is not None:
                choice.energy_j.append(round(joules, 4))
            choice.stop_reason.append(result.stop_reason)
            if choice.batch_wall_time is not None:
                choice.batch_wall_time.append(round(batch_wall, 6))
    return choices


def answer_question(
    target: LoadedModel, drafter: Drafter, question: Question, task: str, sampling: Sampling,
    max_new_tokens: int, seed: int, repeat: int = 0,
) -> Choice:
    """Decode every turn of one question; later turns see the earlier answers."""
    return answer_questions(target, [drafter], [question], task, sampling, max_new_tokens, seed, repeat)[0]


def conversation_capacity(target: LoadedModel, questions: list[Question], budget: int) -> int:
    """Cache slots the longest conversation can need: every user turn, and each answer at its full budget (plus
    slack), rounded up to CAPACITY_STEP and cut to the model's context."""
    longest = 0
    for q in questions:
        messages = [m for turn in q.turns for m in ({"role": "user", "content": turn},
                                                    {"role": "assistant", "content": ""})]
        longest = max(longest, len(chat_tokens(target.tokenizer, messages)) + len(q.turns) * (budget + TURN_SLACK))
    return min(round_up(longest, CAPACITY_STEP), context_limit(target.model))


def check_prompts_fit(target: LoadedModel, questions: dict[str, list[Question]], budgets: dict[str, int]) -> None:
    limit = context_limit(target.model)
    for task, qs in questions.items():
        for q in qs:
            length = len(chat_tokens(target.tokenizer, [{"role": "user", "content": q.turns[0]}]))
            if length + budgets[task] > limit:
                raise SpecbenchError(
                    f"{task} question {q.question_id}: prompt of {length} tokens + {budgets[task]} new tokens "
                    f"exceeds the model's context of {limit}"
                )


def warm_up(target: LoadedModel, drafters: dict[str, Drafter], question: Question | None, tokens: int,
            batch_sizes: tuple[int, ...] = (1,), verify: VerifyFn | None = None) -> None:
    """Untimed generations per method and batch size, on forks of its drafter (a drafter whose state outlives a
    generation, as suffix's and recycling's at scope=run, learns nothing from them), their outputs discarded: one of
    `tokens` tokens with the run's verifier (verify: synthetic acceptance's, else the lossless one), so that no
    method's first timed question pays for lazy initialisation (allocator, kernels, caches); and with fixed shapes
    every drafting shape a step can take (warm_up_shapes), so that none is first met, and captured, while timed."""
    if question is None or tokens <= 0:
        return
    prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": question.turns[0]}])
    for drafter in drafters.values():
        for size in sorted(set(batch_sizes)):
            warm_generation(target, drafter, [prompt] * size, tokens, verify)
            if target.runner.fixed_shapes:
                warm_up_shapes(target, drafter, prompt, size, verify)


def warm_generation(target: LoadedModel, drafter: Drafter, prompts: list[list[int]], tokens: int,
                    verify: VerifyFn | None) -> list[int]:
    """One untimed generation on forks of the drafter (each row's generator seeded by its row); each row's most
    tokens emitted in one step."""
    generators = [torch.Generator(device=target.model.device).manual_seed(b) for b in range(len(prompts))]
    results = generate_batch(target.model, prompts, [drafter.fork() for _ in prompts], Sampling(), tokens,
                             target.stop_ids, generators, verify=verify, runner=target.runner)
    return [max(result.accept_lengths, default=0) for result in results]


def warm_up_shapes(target: LoadedModel, drafter: Drafter, prompt: list[int], rows: int,
                   verify: VerifyFn | None) -> None:
    """Every drafting shape of `rows` rows at fixed shapes (bucketed by tokens, specbench.decode.runner): a drafter's
    first forward after the prefill reads the prompt (one short generation per prompt-length bucket, the prompt cut
    or repeated to it), and each later one the tokens the last step accepted (one per accept-length bucket, forced by
    a verifier that accepts exactly that many drafted tokens a step: synthetic acceptance at rates 1, ..., 1, 0, the
    drafts' own tokens; stopped once the drafter drafts no deeper)."""
    for length in BLOCK_SIZES:
        warm_generation(target, drafter, [(prompt * length)[:length]] * rows, 3, verify)
    for accepted in (size - 1 for size in BLOCK_SIZES):
        forced = SyntheticAcceptance((1.0,) * accepted + (0.0,))
        if min(warm_generation(target, drafter, [prompt] * rows, accepted + 3, forced)) - 1 < accepted:
            break
