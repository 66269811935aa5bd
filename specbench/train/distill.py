"""Self-distilled training data in one pass: the target answers many prompts at once through the engine
(specbench.train.replies), and the same forwards give the features of every token, so no second prefill is needed.

A dataset folder (small enough to commit) holds manifest.json (the generation settings, to refuse mixing) and
chunk_NNNNN.npz files, each with
  tokens   uint16/int32 [N]  whole conversations (chat template, prompt and replies), concatenated
  reply    uint8 [N]         1 where the token was written by the target (a reply token, its stop token included)
  offsets  int64 [S+1]       where each conversation starts and ends
  ids      str [S]           the training prompt's id
  origin   str               where it was generated: device (and GPU name), dtype, torch version. A chunk made on a
                             GPU in fp32 may differ from a CPU's at a near-tie token; it is still the target's text.
A conversation's tokens are exactly the ones the target was fed, so `features_from_dataset` (specbench.train.dataset) rebuilds its
features with one batched prefill on any machine. With `features` set, the features are written at once, from
the generation's own forwards, to a feature cache in `specbench.train.features`' format (same chunk numbering).

Second turns: a share of the conversations get a generic follow-up request (as MT-bench's second turns are) and a
second reply, so the head also sees two-turn conversations.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel, chat_tokens
from specbench.errors import SpecbenchError
from specbench.train.dataset import chunk_path, generation_origin, write_chunk
from specbench.train.features import (
    Conversation,
    read_prompts,
    write_feature_chunk,
    write_json,
    write_manifest,
)
from specbench.train.replies import Reply, answer

FOLLOW_UPS = (
    "Can you make your answer shorter?",
    "Please explain your answer step by step.",
    "Rewrite your previous answer in a more formal tone.",
    "Give one more example.",
    "Summarize your answer in one sentence.",
    "What are the limitations of your answer?",
    "Now explain it to a ten-year-old.",
    "Turn your answer into a bulleted list.",
)

MIN_SPLIT_ROWS = 16  # a batch with fewer rows is never split for length (small batches waste the GEMMs)


@dataclass(frozen=True)
class DistillConfig:
    data: Path  # training prompts, JSONL with "id" and "turns"
    out: Path  # the dataset folder
    target: str
    max_prompts: int = 17146  # a shuffled prefix of the prompts file (any prefix is a sample)
    reply_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy replies
    second_turn_share: float = 0.0  # fraction of conversations that get a follow-up turn
    batch_size: int = 32  # rows decoded at once; only padding depends on it
    # A batch (of MIN_SPLIT_ROWS or more) ends before a prompt over this many times its first one's length: every
    # row's first forward is padded to the batch's longest prompt. It changes no reply.
    split_length_ratio: float = 2.0
    chunk_size: int = 256  # conversations per chunk file
    seed: int = 0
    features: Path | None = None  # also write the features of every conversation here
    feature_layers: tuple[int, ...] = ()  # and the concatenated hidden states at these indices ("fused", EAGLE-3)
    shard: tuple[int, int] = (0, 1)  # (i, n): this process answers the chunks whose index is i modulo n


def _settings(cfg: DistillConfig, target: LoadedModel) -> dict[str, str]:
    # None of these changes what a conversation holds.
    skip = ("out", "max_prompts", "batch_size", "split_length_ratio", "features", "feature_layers", "shard")
    values = {k: str(v) for k, v in asdict(cfg).items() if k not in skip}
    values["vocab_size"] = str(target.model.config.vocab_size)
    return values


def answer_batch(target: LoadedModel, prompts: list[list[int]], cfg: DistillConfig,
                 seeds: list[int] | None, keep_hidden: bool) -> list[Reply]:
    """Replies to prompts decoded together by the engine, each sampled (at T > 0) with its own generator seeded
    by seeds[j], so that a reply depends on its seed alone, not on the batch it was decoded in; with keep_hidden,
    the features of every token from the same forwards."""
    device = target.model.device
    generators = None
    if cfg.temperature > 0:
        generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds or [cfg.seed] * len(prompts)]
    layers = cfg.feature_layers if keep_hidden else None
    return answer(target, prompts, Sampling(cfg.temperature), cfg.reply_tokens, generators, layers)


def length_batches(lengths: list[int], batch_size: int, split_ratio: float = 2.0) -> list[list[int]]:
    """Indices of `lengths` in batches of prompts of similar length: sorted, at most batch_size per batch, and a
    batch of MIN_SPLIT_ROWS or more ends before a prompt over split_ratio times its first one's length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        batch = batches[-1] if batches else None
        if (batch is None or len(batch) >= batch_size
                or (len(batch) >= MIN_SPLIT_ROWS and lengths[i] > split_ratio * lengths[batch[0]])):
            batches.append([i])
        else:
            batch.append(i)
    return batches


def _reply_mask(prompt_len: int, reply_len: int, earlier: list[tuple[int, int]]) -> list[int]:
    mask = [0] * prompt_len + [1] * reply_len
    for a, b in earlier:
        mask[a:b] = [1] * (b - a)
    return mask


def _earlier_reply_span(tokenizer, first_user: str, first_reply: str, prompt2: list[int]) -> list[tuple[int, int]]:
    """Where the first reply sits in the second turn's prompt (as the chat template re-tokenized it)."""
    before = chat_tokens(tokenizer, [{"role": "user", "content": first_user}])
    with_reply = chat_tokens(tokenizer, [{"role": "user", "content": first_user},
                                         {"role": "assistant", "content": first_reply}], generation_prompt=False)
    if prompt2[: len(before)] != before or prompt2[: len(with_reply)] != with_reply:
        return []  # a template that rewrites earlier turns: train on the new reply only
    return [(len(before), len(with_reply))]


def distill(cfg: DistillConfig, target: LoadedModel, progress: bool = True) -> dict[str, float]:
    """Generate (or resume generating) the dataset; returns throughput figures of this invocation."""
    if not 0 <= cfg.second_turn_share <= 1:
        raise SpecbenchError(f"--second-turn-share must be in [0, 1], got {cfg.second_turn_share}")
    if cfg.reply_tokens <= 0 or cfg.batch_size <= 0 or cfg.temperature < 0:
        raise SpecbenchError("--reply-tokens and --batch-size must be > 0 and --temperature >= 0")
    if cfg.split_length_ratio < 1:
        raise SpecbenchError(f"split_length_ratio must be >= 1, got {cfg.split_length_ratio}")
    if cfg.feature_layers and cfg.features is None:
        raise SpecbenchError("--feature-layers goes with --features")
    shard, shards = cfg.shard
    if not 0 <= shard < shards:
        raise SpecbenchError(f"--shard I/N needs 0 <= I < N, got {shard}/{shards}")
    n_layers = target.model.config.num_hidden_layers
    if any(not 0 <= i <= n_layers for i in cfg.feature_layers):
        raise SpecbenchError(f"--feature-layers are output_hidden_states indices: 0..{n_layers} for this target")
    settings = _settings(cfg, target)
    manifest = cfg.out / "manifest.json"
    if manifest.is_file():
        old = json.loads(manifest.read_text())["settings"]
        changed = sorted(k for k in settings if old.get(k) != settings[k])
        if changed:
            raise SpecbenchError(f"{cfg.out} was generated with other settings ({', '.join(changed)}): use another --out")
    cfg.out.mkdir(parents=True, exist_ok=True)
    write_json(manifest, {"settings": settings, "format": "specbench-distill-1"})
    if cfg.features is not None:
        write_manifest(cfg.features, {"dataset": str(cfg.out), **settings}, target.model.config.hidden_size)

    rows = read_prompts(cfg.data, cfg.seed)[: cfg.max_prompts]
    rng = random.Random(cfg.seed)
    follow = [rng.random() < cfg.second_turn_share for _ in rows]  # fixed per prompt, whatever is resumed
    follow_text = [FOLLOW_UPS[rng.randrange(len(FOLLOW_UPS))] for _ in rows]
    n_chunks = -(-len(rows) // cfg.chunk_size)
    todo = [i for i in range(shard, n_chunks, shards) if not chunk_path(cfg.out, i).is_file()]
    tok = target.tokenizer
    origin = generation_origin(target.model)
    size = lambda i: min(cfg.chunk_size, len(rows) - i * cfg.chunk_size)  # noqa: E731  (conversations in chunk i)
    share = sum(size(i) for i in range(shard, n_chunks, shards))
    left = sum(size(i) for i in todo)
    bar = tqdm(total=share, initial=share - left, unit="conv", disable=not progress,
               desc="distill" if shards == 1 else f"distill {shard}/{shards}")
    t_start, generated = time.perf_counter(), 0
    for index in todo:
        chunk_start = index * cfg.chunk_size
        part = list(range(chunk_start, min(chunk_start + cfg.chunk_size, len(rows))))
        first_prompts = {i: chat_tokens(tok, [{"role": "user", "content": rows[i]["turns"][0]}]) for i in part}
        first = _answer_all(target, first_prompts, cfg, 0, bar)
        second_prompts, spans = {}, {}
        for i in part:
            if follow[i]:
                text = tok.decode(first[i].reply, skip_special_tokens=True)
                messages = [{"role": "user", "content": rows[i]["turns"][0]}, {"role": "assistant", "content": text},
                            {"role": "user", "content": follow_text[i]}]
                second_prompts[i] = chat_tokens(tok, messages)
                spans[i] = _earlier_reply_span(tok, rows[i]["turns"][0], text, second_prompts[i])
        second = _answer_all(target, second_prompts, cfg, 1, None) if second_prompts else {}
        convs, reply_masks, hidden, fused, ids = [], [], [], [], []
        for i in part:
            row = second.get(i, first[i])
            tokens = row.prompt + row.reply
            if len(row.reply) == 0:
                continue
            mask = _reply_mask(len(row.prompt), len(row.reply), spans.get(i, []))
            convs.append(Conversation(tokens, mask[1:] + [0]))
            reply_masks.append(mask)
            ids.append(str(rows[i].get("id", chunk_start + len(ids))))
            generated += len(first[i].reply) + (len(second[i].reply) if i in second else 0)
            if cfg.features is not None:
                hidden.append(row.hidden)
                fused.extend([row.fused] if cfg.feature_layers else [])
        if cfg.features is not None:
            write_feature_chunk(cfg.features / f"chunk_{index:05d}.safetensors", convs, hidden, len(part),
                                fused if cfg.feature_layers else None, cfg.feature_layers)
        write_chunk(chunk_path(cfg.out, index), convs, reply_masks, ids, target.model.config.vocab_size, origin)
        bar.set_postfix(new_tok_s=f"{generated / (time.perf_counter() - t_start):.0f}")
    bar.close()
    seconds = time.perf_counter() - t_start
    return {"generated_tokens": generated, "seconds": seconds, "tokens_per_second": generated / max(seconds, 1e-9)}


def _answer_all(target: LoadedModel, prompts: dict[int, list[int]], cfg: DistillConfig, turn: int,
                bar) -> dict[int, Reply]:
    """Replies to many prompts (keyed by conversation index), batched by prompt length (little padding). At T > 0
    each reply's draws depend on the seed, its conversation and its turn alone, whatever is resumed or batched."""
    keys = list(prompts)
    answers: dict[int, Reply] = {}
    for batch in length_batches([len(prompts[i]) for i in keys], cfg.batch_size, cfg.split_length_ratio):
        group = [keys[j] for j in batch]
        seeds = [cfg.seed * 1_000_003 + 2 * i + turn for i in group]
        for i, row in zip(group, answer_batch(target, [prompts[i] for i in group], cfg, seeds,
                                               cfg.features is not None)):
            answers[i] = row
        if bar is not None:
            bar.update(len(group))
    return answers
