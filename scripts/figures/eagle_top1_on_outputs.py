"""Teacher-forced top-1 accuracy of an EAGLE or EAGLE-3 head on the target's own outputs: the vanilla turns of a run.

The training log's held-out top-1 is measured on the training data's reference replies; this measures the same
quantity on what the target actually writes, which is what decides τ. Usage:
    python scripts/figures/eagle_top1_on_outputs.py RUN_DIR [--head FOLDER] [--question-dir ../shared/data/tasks]
        [--temperature T]
(first turns only; the prompt is rebuilt from the question file through the chat template, as the runner does).
With --temperature T > 0 it reads the run's vanilla turns sampled at T and scores, at each position, the
probability that the target's sample at T equals the head's first guess: the chance that the first draft token
is accepted, since the tree's candidates are the head's top picks and the engine accepts a fixed candidate x with
probability p_T(x).
A folder whose config.json has draft_vocab_size is an EAGLE-3 head: its first draft step reads the target's fused
layers, and its guess (over its draft vocabulary, mapped through d2t) is the first token it would draft. Both kinds
are scored on the same positions: position i guesses the token at i + 2.
With --draft-vocab FOLDER (an EAGLE-3 head) it also splits the positions by whether the token to guess lies in
that head's draft vocabulary: an EAGLE-3 head can never draft the others, so their share bounds its top-1, and the
top-1 of any head on them is what a draft vocabulary that narrow gives up.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from specbench.decode.sampling import Sampling, target_probs
from specbench.decode.target import chat_tokens, load_model
from specbench.methods.eagle.checkpoint import find_head, load_head
from specbench.methods.eagle3.checkpoint import load_head as load_eagle3_head
from specbench.methods.eagle3.head import fused_layers
from specbench.run.records import read_records
from specbench.run.run_info import read_run_info


def causal_mask(n: int) -> torch.Tensor:
    return torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))


def eagle_guesses(head, model):
    """full token ids -> (the head's guess at every position i of the token at i + 2 (full vocabulary), the target's
    logits for that token)."""
    lm_head = model.get_output_embeddings().weight.detach()

    def guess(full: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(full) - 1
        features = model.get_decoder()(input_ids=torch.tensor([full])).last_hidden_state[0]
        tokens = full[head.shift : n + head.shift]
        predicted = head(torch.tensor([tokens]), features[:n].unsqueeze(0), torch.arange(n).unsqueeze(0),
                         causal_mask(n))[0]
        return (predicted @ lm_head.T).argmax(-1), features[1:] @ lm_head.T
    return guess


def eagle3_guesses(head, model):
    """The same for an EAGLE-3 head: step 0 at position i reads the fused layers at i and token i + 1."""
    layers = fused_layers(model.config.num_hidden_layers)
    draft_ids = head.draft_to_target()

    def guess(full: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(full) - 1
        out = model(input_ids=torch.tensor([full]), output_hidden_states=True)
        fused = torch.cat([out.hidden_states[i][:, :n] for i in layers], dim=-1)
        hidden = head(torch.tensor([full[1:]]), fused, torch.arange(n).unsqueeze(0), causal_mask(n))
        return draft_ids[head.logits(hidden)[0].argmax(-1)], out.logits[0, 1:]
    return guess


@dataclass
class Tally:
    """One task's sums over its scored positions."""
    score: float = 0.0  # top-1 hits at T=0; P(sample = guess) at T > 0
    tokens: int = 0
    ceiling: float = 0.0  # the same for a head that always guessed the target's greedy token (T > 0)
    score_in_vocab: float = 0.0  # score on the tokens in --draft-vocab's draft vocabulary
    tokens_in_vocab: int = 0

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--head", type=Path)
    parser.add_argument("--question-dir", type=Path, default=Path("../shared/data/tasks"))
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="score the vanilla turns sampled at this temperature (0: greedy turns, top-1)")
    parser.add_argument("--draft-vocab", type=Path, metavar="FOLDER",
                        help="an EAGLE-3 head: also split the scores by whether the token is in its draft vocabulary")
    args = parser.parse_args()
    if args.temperature < 0:
        raise SystemExit(f"--temperature must be >= 0, got {args.temperature}")
    target_name = read_run_info(args.run_dir).settings["target"]
    target = load_model(target_name)
    folder = args.head or find_head(target_name)
    embedding = target.model.get_input_embeddings().weight.detach()
    is_eagle3 = "draft_vocab_size" in json.loads((folder / "config.json").read_text())
    guess = eagle3_guesses(load_eagle3_head(folder, embedding), target.model) if is_eagle3 else \
        eagle_guesses(load_head(folder, embedding)[0], target.model)
    in_draft_vocab = torch.zeros(embedding.shape[0], dtype=torch.bool)
    if args.draft_vocab:
        in_draft_vocab[load_eagle3_head(args.draft_vocab, embedding).draft_to_target()] = True
    tallies: dict[str, Tally] = {}
    for record in read_records(args.run_dir):
        if record.method != "vanilla" or record.temperature != args.temperature:
            continue
        questions = args.question_dir / record.task / "question.jsonl"
        question = next(q for q in map(json.loads, questions.open()) if str(q["question_id"]) == str(record.question_id))
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        full = prompt + record.choice.token_ids[0]
        with torch.no_grad():
            guesses, target_logits = guess(full)
        span = slice(len(prompt) - 1, len(full) - 2)  # the generated tokens after the first one
        guesses = guesses[span]
        actual = torch.tensor(full[len(prompt) + 1 :])
        task = tallies.setdefault(record.task, Tally())
        if args.temperature > 0:
            sampling = Sampling(args.temperature, record.top_p, record.top_k)
            probs = target_probs(target_logits[span], sampling)  # what vanilla sampled from
            scores = probs.gather(1, guesses.unsqueeze(1))[:, 0]
            task.ceiling += float(probs.max(-1).values.sum())
        else:
            scores = (guesses == actual).float()
        inside = in_draft_vocab[actual]
        task.score += float(scores.sum())
        task.tokens += len(actual)
        task.score_in_vocab += float(scores[inside].sum())
        task.tokens_in_vocab += int(inside.sum())
    if not tallies:
        raise SystemExit(f"{args.run_dir} has no vanilla turns at temperature {args.temperature}")
    columns = ["task", "tokens"]
    if args.temperature == 0:
        columns.append("top-1 on the target's own outputs")
    else:
        columns += [f"P(target's T={args.temperature:g} sample = head's guess), on its own T={args.temperature:g} outputs",
                    "the same for the target's greedy token (ceiling)"]
    if args.draft_vocab:
        columns += ["share of tokens in the draft vocabulary", "score on those tokens", "score on the others"]
    print("| " + " | ".join(columns) + " |\n|" + " --- |" * len(columns))
    tallies["all"] = sum(tallies.values(), Tally())
    for task, t in tallies.items():
        row = [task, str(t.tokens), f"{t.score / t.tokens:.3f}"]
        if args.temperature:
            row.append(f"{t.ceiling / t.tokens:.3f}")
        if args.draft_vocab:
            outside = t.tokens - t.tokens_in_vocab
            row += [f"{t.tokens_in_vocab / t.tokens:.3f}", f"{t.score_in_vocab / max(t.tokens_in_vocab, 1):.3f}",
                    f"{(t.score - t.score_in_vocab) / max(outside, 1):.3f}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
