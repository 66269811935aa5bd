"""Teacher-forced top-1 accuracy of an EAGLE head on the target's own outputs: the vanilla turns of a run.

The training log's held-out top-1 is measured on the training data's reference replies; this measures the same
quantity on what the target actually writes, which is what decides τ. Usage:
    python scripts/eagle_top1_on_outputs.py RUN_DIR [--head FOLDER] [--question-dir ../shared/data/tasks]
(first turns only; the prompt is rebuilt from the question file through the chat template, as the runner does).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specbench.methods.eagle import find_head, load_head
from specbench.records import read_records, read_run_info
from specbench.target import chat_prompt, load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--head", type=Path)
    parser.add_argument("--question-dir", type=Path, default=Path("../shared/data/tasks"))
    args = parser.parse_args()
    target_name = read_run_info(args.run_dir)["settings"]["target"]
    target = load_model(target_name)
    head, _ = load_head(args.head or find_head(target_name), target.model.get_input_embeddings().weight.detach())
    lm_head = target.model.get_output_embeddings().weight.detach()
    hits: dict[str, list[int]] = {}
    for record in read_records(args.run_dir):
        if record["method"] != "vanilla" or float(record["temperature"]) != 0.0:
            continue
        questions = args.question_dir / record["task"] / "question.jsonl"
        question = next(q for q in map(json.loads, questions.open()) if str(q["question_id"]) == str(record["question_id"]))
        prompt = chat_prompt(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        full = prompt + record["choices"][0]["token_ids"][0]
        n = len(full) - 1
        with torch.no_grad():
            features = target.model.get_decoder()(input_ids=torch.tensor([full])).last_hidden_state[0]
            causal = torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
            tokens = full[head.shift : n + head.shift]
            predicted = head(torch.tensor([tokens]), features[:n].unsqueeze(0), torch.arange(n).unsqueeze(0), causal)[0]
        # Position i predicts the token at i + 2; score the generated tokens after the first one.
        guesses = (predicted[len(prompt) - 1 : n - 1] @ lm_head.T).argmax(-1)
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
