"""The target's own replies, decoded by the engine (the one generation loop), with the hidden states of every token
of each conversation when asked: what `distill` and `features --mode self` train on."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.engine import generate_batch
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel


class Recorder(Drafter):
    """Drafts nothing (every step emits the target's own next token) and keeps, in fp16 on the host, the hidden
    states the engine hands back after each step."""

    def __init__(self, layers: tuple[int, ...]) -> None:
        self.hidden_layers = layers
        self.blocks: list[torch.Tensor] = []

    def begin(self, ctx: DecodeContext) -> None:
        self.blocks = []

    def propose(self, ctx: DecodeContext) -> Draft:
        return Draft()

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if step.hidden is not None:
            self.blocks.append(step.hidden.to("cpu", torch.float16))


@dataclass
class Reply:
    prompt: list[int]
    reply: list[int]  # ends with a stop id, or at the token budget
    hidden: torch.Tensor | None = None  # [len(prompt) + len(reply), H] after the final norm (fp16, host)
    fused: torch.Tensor | None = None  # [same, k * H] the states at the feature layers, concatenated; None without


def answer(target: LoadedModel, prompts: list[list[int]], sampling: Sampling, max_new_tokens: int,
           generators: list[torch.Generator | None] | None = None,
           feature_layers: tuple[int, ...] | None = None) -> list[Reply]:
    """Every prompt's reply, decoded together (one row each). feature_layers None: token ids only; () the final
    hidden state of every token, the last one included; (i, ...) also the output_hidden_states at those indices."""
    layers = () if feature_layers is None else (-1, *feature_layers)
    recorders = [Recorder(layers) for _ in prompts]
    generations = generate_batch(target.model, prompts, recorders, sampling, max_new_tokens, target.stop_ids,
                                 generators, feed_last=bool(layers))
    size = target.model.config.hidden_size
    replies = []
    for prompt, generation, recorder in zip(prompts, generations, recorders):
        states = torch.cat(recorder.blocks) if layers else None
        replies.append(Reply(prompt, generation.token_ids, None if states is None else states[:, :size],
                             states[:, size:] if feature_layers else None))
    return replies
