"""Reference rows: transformers' own `generate` on the run's target object (the same weights), timed like every
method, so that each method's speed can be compared with the plain decoder people actually run, not only with our
vanilla. They are not methods (nothing is drafted or verified); `run --reference NAME[,NAME]` adds them:

- hf-compiled: `generate` with a static KV cache (`cache_implementation="static"`, sized once for the run by
  `max_cache_len`) and its decoding forward compiled by torch.compile through generate's own `CompileConfig`
  (transformers' defaults: inductor, mode "reduce-overhead", which captures CUDA graphs on a GPU). Transformers
  compiles automatically only on accelerators; on a CPU the config's `_compile_all_devices` flag (transformers'
  switch for that, used by its own tests) asks for the same compilation. Compiled during the untimed warm-up.
- hf-eager: `generate` with its default dynamic cache, nothing compiled.

Both run transformers' own modules: on a CPU where the run's few-token kernels swapped the target's Linear layers
(specbench.decode.runtime), the stock Linear layers over the same parameters are put back for these rows and the
few-token ones restored after (the same module objects every time, so a compiled graph stays valid). Greedy, or
sampled with the run's temperature, top-p and top-k (every other logits processor of transformers set neutral),
seeded per turn as the methods are; stop ids, max_new_tokens and the context limit as the engine applies them.
Per-token step times come from a streamer (transformers copies each new token to the host per step anyway).
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import torch
from transformers import CompileConfig, GenerationConfig
from transformers.generation.streamers import BaseStreamer

from specbench.decode.engine import context_limit
from specbench.decode.runtime import restore, stock_linears, synchronize
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel, chat_tokens
from specbench.errors import SpecbenchError
from specbench.run.answer import question_seed
from specbench.run.energy import EnergyCounter
from specbench.run.record import Choice
from specbench.run.registry import COMPILED, REFERENCES
from specbench.run.tasks import Question

# Every logits processor transformers would otherwise fill in from the model's generation config, set neutral:
# a reference row samples from the same distribution as the methods (temperature, top-k, top-p only).
NEUTRAL = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
           "eta_cutoff": 0.0, "min_length": 0, "num_beams": 1}


def reference_options(name: str) -> dict[str, Any]:
    """How a reference row decodes (for run.json and its records)."""
    out: dict[str, Any] = {"decoder": REFERENCES[name], "modules": "transformers' own (stock Linear)",
                           "cache": "static" if name == COMPILED else "dynamic"}
    if name == COMPILED:
        config = CompileConfig().to_dict()
        out["compile"] = f"torch.compile {config['backend']}, mode {config['mode']}, fullgraph {config['fullgraph']}"
    return out


class StepTimes(BaseStreamer):
    """Seconds from `started` to each generated token's arrival on the host (the prompt's put is skipped)."""

    def __init__(self, started: float, on_step: Callable[[int], None] | None) -> None:
        self.started, self.on_step, self.ends, self.prompt_seen = started, on_step, [], False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.ends.append(time.perf_counter() - self.started)
        if self.on_step is not None:
            self.on_step(1)

    def end(self) -> None:
        return None


class ReferenceDecoder:
    """One reference row on the run's target: transformers' generate, warmed up, answering questions turn by turn."""

    def __init__(self, target: LoadedModel, name: str, capacity: int) -> None:
        if name not in REFERENCES:
            raise SpecbenchError(f"unknown reference {name}; valid: {', '.join(REFERENCES)}")
        self.target, self.name, self.capacity = target, name, capacity
        self.compiled = name == COMPILED
        model = target.model
        fast = stock_linears(model)  # the stock modules made once, so that a compiled graph sees the same ones
        self.stock = [(name_, model.get_submodule(name_)) for name_, _ in fast]
        restore(model, fast)
        self.compile_config = None
        if self.compiled:
            self.compile_config = CompileConfig()
            if model.device.type != "cuda":
                self.compile_config._compile_all_devices = True  # transformers' own switch to compile off CUDA

    def options(self) -> dict[str, Any]:
        """How the row decodes, for its records: reference_options and the static cache's length."""
        return {**reference_options(self.name), **({"cache_slots": self.capacity} if self.compiled else {})}

    @contextlib.contextmanager
    def stock_modules(self) -> Iterator[None]:
        if not self.stock:
            yield
            return
        fast = [(name, self.target.model.get_submodule(name)) for name, _ in self.stock]
        restore(self.target.model, self.stock)
        try:
            yield
        finally:
            restore(self.target.model, fast)

    def generation_config(self, sampling: Sampling, budget: int) -> GenerationConfig:
        stops = sorted(self.target.stop_ids)
        settings: dict[str, Any] = {**NEUTRAL, "max_new_tokens": budget, "do_sample": not sampling.greedy,
                                    "eos_token_id": stops or None, "pad_token_id": stops[0] if stops else 0}
        if not sampling.greedy:
            settings.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        if self.compiled:
            settings.update(cache_implementation="static", max_cache_len=self.capacity,
                            compile_config=self.compile_config)
        else:
            settings.update(disable_compile=True)
        return GenerationConfig(**settings)

    def generate(self, prompt: list[int], sampling: Sampling, max_new_tokens: int, seed: int | None = None,
                 on_step: Callable[[int], None] | None = None) -> tuple[list[int], float, list[float], str]:
        """(new token ids, wall seconds with the prefill, per-token step ends, stop reason) for one prompt."""
        model = self.target.model
        budget = max(0, min(max_new_tokens, context_limit(model) - len(prompt)))
        reason = "length" if budget == max_new_tokens else "context"
        if budget == 0:
            return [], 0.0, [], reason
        config = self.generation_config(sampling, budget)
        ids = torch.tensor([prompt], device=model.device)
        with self.stock_modules(), torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)  # generate samples from the global generator
            synchronize(model.device)
            started = time.perf_counter()
            streamer = StepTimes(started, on_step)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                 streamer=streamer)
            synchronize(model.device)
            wall = time.perf_counter() - started
        tokens = out[0, len(prompt):].tolist()
        if tokens and tokens[-1] in self.target.stop_ids:
            reason = "eos"
        return tokens, wall, streamer.ends[: len(tokens)], reason

    def warm_up(self, question: Question | None, tokens: int) -> None:
        """One untimed generation (hf-compiled: the compilation, at the run's cache length), output discarded."""
        if question is not None and tokens > 0:
            prompt = chat_tokens(self.target.tokenizer, [{"role": "user", "content": question.turns[0]}])
            self.generate(prompt, Sampling(), tokens)

    def answer(self, question: Question, task: str, sampling: Sampling, max_new_tokens: int, seed: int,
               repeat: int = 0, on_step: Callable[[int], None] | None = None,
               energy: EnergyCounter | None = None) -> Choice:
        """Every turn of one question (later turns see the earlier answers), as a method's Choice: one token per
        target forward (accept lengths all 1), no drafting, the whole time in the target; the prefill's time is the
        first token's arrival (the streamer's first step end). energy: a counter read around each turn, as the
        methods' (specbench.run.answer)."""
        choice, messages = Choice(energy_j=[] if energy else None), []
        for turn, text in enumerate(question.turns):
            messages.append({"role": "user", "content": text})
            prompt = chat_tokens(self.target.tokenizer, messages)
            turn_seed = None if sampling.greedy else question_seed(seed, task, question.question_id, turn, repeat)
            counted = energy.read() if energy else []
            tokens, wall, ends, reason = self.generate(prompt, sampling, max_new_tokens, turn_seed, on_step)
            if energy is not None and choice.energy_j is not None:
                choice.energy_j.append(round(energy.joules(counted, energy.read()), 4))
            answer = self.target.tokenizer.decode(tokens, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": answer})
            choice.turns.append(answer)
            choice.new_tokens.append(len(tokens))
            choice.wall_time.append(round(wall, 6))
            choice.accept_lengths.append([1] * len(tokens))
            choice.decoding_steps.append(len(tokens))
            choice.token_ids.append(tokens)
            choice.draft_time.append(0.0)
            choice.verify_time.append(round(wall, 6))
            choice.step_ends.append([round(t, 6) for t in ends])
            choice.prompt_tokens.append(len(prompt))
            choice.prefill_time.append(round(ends[0], 6) if ends else 0.0)
            choice.stop_reason.append(reason)
        return choice
