"""Teacher-forced top-1 accuracy of an EAGLE or EAGLE-3 head on the target's own outputs: the vanilla turns of a run.

The training log's held-out top-1 is measured on the training data's reference replies; this measures the same
quantity on what the target actually writes, which is what decides τ. Usage:
    python scripts/eagle_top1_on_outputs.py RUN_DIR [--head FOLDER] [--question-dir ../shared/data/tasks]
(first turns only; the prompt is rebuilt from the question file through the chat template, as the runner does).
A folder whose config.json has draft_vocab_size is an EAGLE-3 head: its first draft step reads the target's fused
layers, and its guess (over its draft vocabulary, mapped through d2t) is the first token it would draft. Both kinds
are scored on the same positions: position i guesses the token at i + 2.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specbench.methods.eagle import find_head, load_head
from specbench.methods.eagle3.checkpoint import load_head as load_eagle3_head
from specbench.methods.eagle3.head import fused_layers
from specbench.records import read_records, read_run_info
from specbench.target import chat_prompt, load_model


def causal_mask(n: int) -> torch.Tensor:
    return torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))


def eagle_guesses(head, model):
    """full token ids -> the head's guess at every position i of the token at i + 2 (full vocabulary)."""
    lm_head = model.get_output_embeddings().weight.detach()

    def guess(full: list[int]) -> torch.Tensor:
        n = len(full) - 1
        features = model.get_decoder()(input_ids=torch.tensor([full])).last_hidden_state[0]
        tokens = full[head.shift : n + head.shift]
        predicted = head(torch.tensor([tokens]), features[:n].unsqueeze(0), torch.arange(n).unsqueeze(0),
                         causal_mask(n))[0]
        return (predicted @ lm_head.T).argmax(-1)
    return guess


def eagle3_guesses(head, model):
    """The same for an EAGLE-3 head: step 0 at position i reads the fused layers at i and token i + 1."""
    layers = fused_layers(model.config.num_hidden_layers)
    draft_ids = head.draft_to_target()

    def guess(full: list[int]) -> torch.Tensor:
        n = len(full) - 1
        states = model(input_ids=torch.tensor([full]), output_hidden_states=True).hidden_states
        fused = torch.cat([states[i][:, :n] for i in layers], dim=-1)
        hidden = head(torch.tensor([full[1:]]), fused, torch.arange(n).unsqueeze(0), causal_mask(n))
        return draft_ids[head.logits(hidden)[0].argmax(-1)]
    return guess


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--head", type=Path)
    parser.add_argument("--question-dir", type=Path, default=Path("../shared/data/tasks"))
    args = parser.parse_args()
    target_name = read_run_info(args.run_dir)["settings"]["target"]
    target = load_model(target_name)
    folder = args.head or find_head(target_name)
    embedding = target.model.get_input_embeddings().weight.detach()
    is_eagle3 = "draft_vocab_size" in json.loads((folder / "config.json").read_text())
    guess = eagle3_guesses(load_eagle3_head(folder, embedding), target.model) if is_eagle3 else \
        eagle_guesses(load_head(folder, embedding)[0], target.model)
    hits: dict[str, list[int]] = {}
    for record in read_records(args.run_dir):
        if record["method"] != "vanilla" or float(record["temperature"]) != 0.0:
            continue
        questions = args.question_dir / record["task"] / "question.jsonl"
        question = next(q for q in map(json.loads, questions.open()) if str(q["question_id"]) == str(record["question_id"]))
        prompt = chat_prompt(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        full = prompt + record["choices"][0]["token_ids"][0]
        with torch.no_grad():
            guesses = guess(full)[len(prompt) - 1 : len(full) - 2]  # the generated tokens after the first one
        actual = torch.tensor(full[len(prompt) + 1 :])
        task = hits.setdefault(record["task"], [0, 0])
        task[0] += int((guesses == actual).sum())
        task[1] += len(actual)
    print("| task | tokens | top-1 on the target's own outputs |\n| --- | --- | --- |")
    for task, (hit, total) in hits.items():
        print(f"| {task} | {total} | {hit / total:.3f} |")
    hit, total = map(sum, zip(*hits.values()))
    print(f"| all | {total} | {hit / total:.3f} |")


if __name__ == "__main__":
    main()
