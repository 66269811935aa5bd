"""Self-distilled training data in one pass: the target answers many prompts at once, and the same forwards give
the features of every token, so no second prefill is needed.

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
from transformers import DynamicCache, StaticCache

from specbench.decode.sampling import Sampling, target_probs
from specbench.decode.target import LoadedModel, chat_prompt
from specbench.errors import SpecbenchError
from specbench.train.dataset import chunk_path, generation_origin, write_chunk
from specbench.train.features import (
    Conversation,
    read_prompts,
    write_feature_chunk,
    write_json,
    write_manifest,
)

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
    # How the decode loop spends its time (none changes a reply; scripts/figures/distill_batching.py measures them):
    # the static cache grows by this many positions at a time: attention reads every position of the cache, written
    # or not, so one sized for the longest reply from the start would cost those reads at every step;
    cache_block: int = 64
    # finished rows leave the batch once the live ones are at most this share of it: a finished row fed on costs as
    # much as a live one, and dropping rows copies the cache;
    compact_share: float = 0.875
    # a batch (of MIN_SPLIT_ROWS or more) ends before a prompt over this many times its first one's length: every
    # row attends over the left padding up to the batch's longest prompt.
    split_length_ratio: float = 2.0
    chunk_size: int = 256  # conversations per chunk file
    seed: int = 0
    features: Path | None = None  # also write the features of every conversation here
    feature_layers: tuple[int, ...] = ()  # and the concatenated hidden states at these indices ("fused", EAGLE-3)
    shard: tuple[int, int] = (0, 1)  # (i, n): this process answers the chunks whose index is i modulo n


@dataclass
class Row:
    """One conversation being generated."""

    prompt: list[int]
    reply: list[int]
    hidden: list[torch.Tensor]  # one [n, H] block per forward that fed this row's tokens
    fused: list[torch.Tensor]  # one [n, kH] block per forward, with feature layers
    done: bool = False  # its last token has been fed: nothing more to compute for it


def _settings(cfg: DistillConfig, target: LoadedModel) -> dict[str, str]:
    # None of these changes what a conversation holds.
    skip = ("out", "max_prompts", "batch_size", "cache_block", "compact_share", "split_length_ratio", "features",
            "feature_layers", "shard")
    values = {k: str(v) for k, v in asdict(cfg).items() if k not in skip}
    values["vocab_size"] = str(target.model.config.vocab_size)
    return values


@torch.inference_mode()
def answer_batch(target: LoadedModel, prompts: list[list[int]], cfg: DistillConfig, generator: torch.Generator | None,
                 keep_hidden: bool) -> list[Row]:
    """Greedy (or sampled) replies to left-padded prompts, decoded together. A row leaves the batch one forward
    after its last token, so that token's feature is computed too; rows that finish stop costing."""
    model = target.model
    device = model.device
    body, lm_head = model.get_decoder(), model.get_output_embeddings()
    sampling = Sampling(cfg.temperature)
    stops = target.stop_ids
    rows = [Row(p, [], [], []) for p in prompts]
    layers = cfg.feature_layers if keep_hidden else ()

    def fused(out) -> torch.Tensor:  # the whole batch's, one copy to the host per forward
        return torch.cat([out.hidden_states[i] for i in layers], dim=-1).to("cpu", torch.float16)

    longest = max(len(p) for p in prompts)
    total = longest + cfg.reply_tokens + 1
    # A static cache written in place, grown by cfg.cache_block positions once in a while: a DynamicCache copies
    # every layer's keys and values at every step, which costs more than the step's GEMMs at batch 32 on a CPU, and
    # one sized for the longest reply from the start makes attention read unwritten positions. Prompts sit
    # left-padded, so all rows write at one position. Each prompt is prefilled alone (no compute on padding, which a
    # batch of mixed lengths would waste) and its keys and values are copied into its row of the cache.
    config = model.config
    capacity = min(total, longest + cfg.cache_block)
    cache = StaticCache(config=config, max_cache_len=capacity)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache.early_initialization(len(prompts), config.num_key_value_heads, head_dim, model.dtype, device)
    mask = torch.zeros(len(prompts), total, dtype=torch.long, device=device)
    first: list[int] = []
    for j, p in enumerate(prompts):
        mask[j, longest - len(p) :] = 1  # everything after the padding; the causal mask hides the future
        alone = DynamicCache(config=config)
        out = body(input_ids=torch.tensor([p], device=device), cache=alone, use_cache=True,
                   output_hidden_states=bool(layers))
        for static, layer in zip(cache.layers, alone.layers):
            static.keys[j, :, longest - len(p) : longest] = layer.keys[0]
            static.values[j, :, longest - len(p) : longest] = layer.values[0]
        if keep_hidden:
            rows[j].hidden.append(out.last_hidden_state[0].to("cpu", torch.float16))
            if layers:
                rows[j].fused.append(fused(out)[0])
        logits = lm_head(out.last_hidden_state[:, -1]).float()
        first.append(int(logits.argmax(-1)) if sampling.greedy else
                     int(torch.multinomial(target_probs(logits[0], sampling), 1, generator=generator)))
    for layer in cache.layers:
        layer.cumulative_length.fill_(longest)
    written = longest
    for row, token in zip(rows, first):
        row.reply.append(token)
    active = list(range(len(rows)))
    ids = torch.tensor([[row.reply[-1]] for row in rows], device=device)
    positions = torch.tensor([[len(row.prompt)] for row in rows], device=device)
    while active:
        fed = 1
        if written + fed > capacity:
            capacity = min(total, capacity + cfg.cache_block)
            _reshape_cache(cache, None, capacity)
        out = body(input_ids=ids, attention_mask=mask[:, :capacity], position_ids=positions, cache=cache,
                   use_cache=True, cache_position=torch.arange(written, written + fed, device=device),
                   output_hidden_states=bool(layers))
        written += fed
        hidden = out.last_hidden_state
        if keep_hidden:
            step_fused = fused(out) if layers else None
            for j, r in enumerate(active):
                if not rows[r].done:
                    rows[r].hidden.append(hidden[j].to("cpu", torch.float16))
                    if step_fused is not None:
                        rows[r].fused.append(step_fused[j])
        logits = lm_head(hidden[:, -1]).float()
        if sampling.greedy:
            nxt = logits.argmax(-1).tolist()
        else:
            nxt = torch.multinomial(target_probs(logits, sampling), 1, generator=generator)[:, 0].tolist()
        keep: list[int] = []
        for j, r in enumerate(active):
            row = rows[r]
            row.done = row.done or (bool(row.reply) and (row.reply[-1] in stops or len(row.reply) >= cfg.reply_tokens))
            if not row.done:
                row.reply.append(nxt[j])
                keep.append(j)
        if not keep:
            break
        if len(keep) <= cfg.compact_share * len(active):
            # Finished rows stop costing: keep the live rows' cache entries only (on the cache's own tensors).
            index = torch.tensor(keep, device=device)
            _reshape_cache(cache, index, capacity)
            mask = mask.index_select(0, index)
            active = [active[j] for j in keep]
        ids = torch.tensor([[rows[r].reply[-1]] for r in active], device=device)
        positions = torch.tensor([[len(rows[r].prompt) + len(rows[r].reply) - 1] for r in active], device=device)
    return rows


def _reshape_cache(cache: StaticCache, rows: torch.Tensor | None, length: int) -> None:
    """Keep only these batch rows of a static cache (all where None) and give it `length` positions, the new ones
    zero (finite: masked positions still enter attention's products), on the cache's own layer tensors."""
    for layer in cache.layers:
        for name in ("keys", "values"):
            states = getattr(layer, name)
            if rows is not None:
                states = states.index_select(0, rows)
            if states.shape[2] < length:
                grown = states.new_zeros(*states.shape[:2], length, states.shape[3])
                grown[:, :, : states.shape[2]] = states
                states = grown
            setattr(layer, name, states)
        layer.batch_size, layer.max_cache_len = layer.keys.shape[0], layer.keys.shape[2]


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
    before = chat_prompt(tokenizer, [{"role": "user", "content": first_user}])
    with_reply = tokenizer.apply_chat_template(
        [{"role": "user", "content": first_user}, {"role": "assistant", "content": first_reply}], tokenize=True)
    with_reply = list(with_reply["input_ids"] if hasattr(with_reply, "keys") else with_reply)
    if prompt2[: len(before)] != before or prompt2[: len(with_reply)] != with_reply:
        return []  # a template that rewrites earlier turns: train on the new reply only
    return [(len(before), len(with_reply))]


def distill(cfg: DistillConfig, target: LoadedModel, progress: bool = True) -> dict[str, float]:
    """Generate (or resume generating) the dataset; returns throughput figures of this invocation."""
    if not 0 <= cfg.second_turn_share <= 1:
        raise SpecbenchError(f"--second-turn-share must be in [0, 1], got {cfg.second_turn_share}")
    if cfg.reply_tokens <= 0 or cfg.batch_size <= 0 or cfg.temperature < 0:
        raise SpecbenchError("--reply-tokens and --batch-size must be > 0 and --temperature >= 0")
    if cfg.cache_block <= 0 or not 0 <= cfg.compact_share < 1 or cfg.split_length_ratio < 1:
        raise SpecbenchError("cache_block must be > 0, compact_share in [0, 1) and split_length_ratio >= 1")
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
    generator = torch.Generator(device=target.model.device).manual_seed(cfg.seed) if cfg.temperature > 0 else None
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
        if generator is not None:  # each chunk's samples depend on the seed and the chunk alone, not on resumes
            generator.manual_seed(cfg.seed * 1_000_003 + index)
        first_prompts = {i: chat_prompt(tok, [{"role": "user", "content": rows[i]["turns"][0]}]) for i in part}
        first = _answer_all(target, first_prompts, cfg, generator, bar)
        second_prompts, spans = {}, {}
        for i in part:
            if follow[i]:
                text = tok.decode(first[i].reply, skip_special_tokens=True)
                messages = [{"role": "user", "content": rows[i]["turns"][0]}, {"role": "assistant", "content": text},
                            {"role": "user", "content": follow_text[i]}]
                second_prompts[i] = chat_prompt(tok, messages)
                spans[i] = _earlier_reply_span(tok, rows[i]["turns"][0], text, second_prompts[i])
        second = _answer_all(target, second_prompts, cfg, generator, None) if second_prompts else {}
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
                hidden.append(torch.cat(row.hidden))
                fused.extend([torch.cat(row.fused)] if cfg.feature_layers else [])
        if cfg.features is not None:
            write_feature_chunk(cfg.features / f"chunk_{index:05d}.safetensors", convs, hidden, len(part),
                                fused if cfg.feature_layers else None, cfg.feature_layers)
        write_chunk(chunk_path(cfg.out, index), convs, reply_masks, ids, target.model.config.vocab_size, origin)
        bar.set_postfix(new_tok_s=f"{generated / (time.perf_counter() - t_start):.0f}")
    bar.close()
    seconds = time.perf_counter() - t_start
    return {"generated_tokens": generated, "seconds": seconds, "tokens_per_second": generated / max(seconds, 1e-9)}


def _answer_all(target: LoadedModel, prompts: dict[int, list[int]], cfg: DistillConfig,
                generator: torch.Generator | None, bar) -> dict[int, Row]:
    """Replies to many prompts, batched by prompt length (little padding)."""
    keys = list(prompts)
    answers: dict[int, Row] = {}
    for batch in length_batches([len(prompts[i]) for i in keys], cfg.batch_size, cfg.split_length_ratio):
        group = [keys[j] for j in batch]
        for i, row in zip(group, answer_batch(target, [prompts[i] for i in group], cfg, generator,
                                               cfg.features is not None)):
            answers[i] = row
        if bar is not None:
            bar.update(len(group))
    return answers
