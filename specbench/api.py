"""The Python API: the objects the command line uses, driven from a script or a notebook.

    import specbench
    target = specbench.load_target("smollm2-135m-instruct")
    method = specbench.load_method("eagle", target, total_tokens=8)
    result = specbench.generate(target, method, "What is 7 * 8?", max_new_tokens=64, temperature=0.0)
    print(result.text, result.tau)

A text prompt gets the target's chat template, as `run` builds a question's first turn; a list of token ids is used
as it is. A list of prompts decodes as one batch (one target forward per step verifies every row's draft). The
engine, drafters and verification are the CLI's own, so `run` and this emit the same tokens on the same settings.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from specbench.decode.draft import Drafter
from specbench.decode.engine import generate_batch
from specbench.decode.names import Runtime
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel, chat_tokens
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.run.kernel_rule import load_target as load_on_this_machine
from specbench.run.load import LoadMeter, session_start
from specbench.run.registry import available_methods, select_methods
from specbench.run.synthetic import SyntheticAcceptance

Prompt = str | Sequence[int]


@dataclass
class Result:
    text: str  # the new tokens, decoded without special tokens
    token_ids: list[int]  # new tokens only
    accept_lengths: list[int]  # tokens emitted per target forward (the bonus token included)
    wall_time: float  # seconds, prefill included
    draft_time: float  # seconds in the drafter
    verify_time: float  # seconds in target forwards and verification
    stop_reason: str  # "eos", "length" or "context"

    @property
    def tau(self) -> float:
        """Mean accepted length: tokens per target forward."""
        return len(self.token_ids) / max(1, len(self.accept_lengths))


def load_target(name: str, device: str | None = None, dtype: str | None = None,
                runtime: Runtime | str = "auto", threads: int | None = None) -> LoadedModel:
    """A target by short name (see `list`'s targets), HF id, local folder or .gguf file; `runtime`: a Runtime
    (kernels and graphs) or one of its single names (specbench.decode.names.RUNTIME_NAMES). `threads`: torch's
    threads for this process; None decides as `run` does (OMP_NUM_THREADS when set, else one thread when other work
    holds the CPUs, said once on stderr, else the usable cores)."""
    torch.set_num_threads(session_start(LoadMeter(), threads, "as the target loaded")[1])
    return load_on_this_machine(name, device, dtype, runtime)


def load_method(name: str, target: LoadedModel, draft: str | None = None,
                method_files: Sequence[Path] = (), **options: object) -> Drafter:
    """A method's drafter by name (any of `list`, or of `method_files`), its options as keywords (as --opt)."""
    info = select_methods([name], method_files)[0]
    return info.drafter(BuildContext(target, draft, options, methods=available_methods(method_files)))


def generate(target: LoadedModel, method: Drafter, prompt: Prompt | list[Prompt], max_new_tokens: int = 256,
             temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
             synthetic: list[float] | None = None) -> Result | list[Result]:
    """Decode one prompt (a Result) or a list of prompts as one batch (a list of Results, row i seeded seed + i).
    synthetic: TIMING ONLY, accept drafts at these per-position rates instead of verifying them (as run
    --synthetic-acceptance; specbench.run.synthetic)."""
    single = isinstance(prompt, str) or (len(prompt) > 0 and isinstance(prompt[0], int))
    prompts = [prompt] if single else list(prompt)
    if not prompts:
        raise SpecbenchError("generate needs at least one prompt")
    ids = [chat_tokens(target.tokenizer, [{"role": "user", "content": p}]) if isinstance(p, str) else [int(t) for t in p]
           for p in prompts]
    try:
        sampling = Sampling(temperature, top_p, top_k)
    except ValueError as exc:
        raise SpecbenchError(str(exc)) from None
    verify = SyntheticAcceptance(tuple(synthetic)) if synthetic else None
    generators = None
    if not sampling.greedy or verify is not None:
        generators = [torch.Generator(device=target.model.device).manual_seed(seed + i) for i in range(len(ids))]
    rows = [method] + [method.fork() for _ in ids[1:]]
    out = generate_batch(target.model, ids, rows, sampling, max_new_tokens, target.stop_ids, generators, verify,
                         runner=target.runner)
    results = [Result(target.tokenizer.decode(g.token_ids, skip_special_tokens=True), g.token_ids, g.accept_lengths,
                      g.wall_time, sum(g.draft_times), sum(g.verify_times), g.stop_reason) for g in out]
    return results[0] if single else results
