"""Target features for drafter training (EAGLE, Medusa): the target's final-norm hidden state at every position of
training conversations, cached on disk in chunks so that extraction resumes after a stop and every head trained
on the same target reuses it.

A cache directory holds manifest.json (settings, to refuse mixing) and chunk_NNNNN.safetensors files, each with
  tokens    int32 [N]     the conversations' token ids, concatenated
  hidden    fp16  [N, H]  the target's lm_head input at each position
  loss_mask uint8 [N]     1 where the NEXT token belongs to an assistant reply (the positions a drafter is trained on)
  offsets   int64 [S+1]   where each conversation starts and ends in the arrays above
  fused     fp16  [N, kH]  optional: the target's hidden states at the output_hidden_states indices the chunk's
                           metadata "layers" lists, concatenated (EAGLE-3's fused features), kept so that its
                           training runs no target forward; `add_layer_features` adds them to any cache.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel, chat_tokens
from specbench.errors import SpecbenchError
from specbench.jsonl import json_lines
from specbench.train.replies import answer

MODES = ("fixed", "self")  # replies: the prompts' references, or written by the target itself (greedy)


@dataclass(frozen=True)
class ExtractConfig:
    data: Path  # a JSONL file of {"id", "turns": [...], "reference": [...]} (../shared/data/train/prompts.jsonl)
    out: Path
    target: str
    mode: str = "fixed"
    max_prompts: int = 4000  # conversations to extract (a shuffled prefix of the file, so any prefix is a sample)
    max_len: int = 512  # tokens per conversation, longer ones are cut
    batch_size: int = 8
    chunk_size: int = 256  # conversations per chunk file
    reply_tokens: int = 256  # self mode: new tokens per generated reply
    seed: int = 0


@dataclass
class Conversation:
    tokens: list[int]
    loss_mask: list[int]


def read_prompts(path: Path, seed: int) -> list[dict]:
    if not path.is_file():
        raise SpecbenchError(f"training prompts {path} not found")
    rows = []
    for number, row in json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("turns"), list) or not row["turns"]:
            raise SpecbenchError(f"{path}:{number}: expected an object with a non-empty list 'turns'")
        rows.append(row)
    random.Random(seed).shuffle(rows)
    return rows


def conversation_tokens(tokenizer, turns: list[str], replies: list[str], max_len: int) -> Conversation:
    """Chat-template tokens of user/assistant turns, with loss_mask[t] = 1 where token t+1 is part of a reply."""
    messages: list[dict[str, str]] = []
    tokens: list[int] = []
    mask: list[int] = []
    for user, reply in zip(turns, replies):
        messages.append({"role": "user", "content": user})
        prefix = chat_tokens(tokenizer, messages, generation_prompt=True)
        messages.append({"role": "assistant", "content": reply})
        full = chat_tokens(tokenizer, messages, generation_prompt=False)
        if prefix[: len(tokens)] != tokens or full[: len(prefix)] != prefix:
            break  # a template that rewrites earlier turns: keep what is consistent
        mask += [0] * (len(prefix) - len(tokens))
        mask += [1] * (len(full) - len(prefix))
        tokens = full
    tokens, mask = tokens[:max_len], mask[:max_len]
    # mask marks reply tokens; shift it so that position t is trained when token t+1 is a reply token.
    return Conversation(tokens, mask[1:] + [0])


class FeatureCache:
    """A folder of feature chunks; `max_chunks` makes it a view of its first chunks only (a fixed share of a cache
    that is still growing, so that heads trained at different times see the same data)."""

    def __init__(self, folder: Path, max_chunks: int | None = None) -> None:
        self.folder = folder
        self.max_chunks = max_chunks

    @property
    def manifest_path(self) -> Path:
        return self.folder / "manifest.json"

    def chunks(self) -> list[Path]:
        return sorted(self.folder.glob("chunk_*.safetensors"))[:self.max_chunks]

    def manifest(self) -> dict:
        if not self.manifest_path.is_file():
            raise SpecbenchError(f"{self.folder} is not a feature cache (no manifest.json): run the extraction first")
        return json.loads(self.manifest_path.read_text())

    def load(self, max_chunks: int | None = None) -> list[dict[str, torch.Tensor]]:
        chunks = self.chunks()[:max_chunks]
        if not chunks:
            raise SpecbenchError(f"feature cache {self.folder} holds no chunks yet")
        return [load_file(str(c)) for c in chunks]


def chunk_layers(chunk: Path) -> tuple[int, ...]:
    """The hidden-state indices the chunk's "fused" tensor holds (empty: it has none)."""
    with safe_open(str(chunk), "pt") as f:
        if "fused" not in f.keys():
            return ()
        return tuple(int(i) for i in (f.metadata() or {}).get("layers", "").split(",") if i)


def write_feature_chunk(path: Path, convs: list[Conversation], hidden: list[torch.Tensor], rows: int,
                        fused: list[torch.Tensor] | None = None, layers: tuple[int, ...] = ()) -> None:
    offsets = [0]
    for c in convs:
        offsets.append(offsets[-1] + len(c.tokens))
    tensors = {
        "tokens": torch.tensor([t for c in convs for t in c.tokens], dtype=torch.int32),
        "loss_mask": torch.tensor([m for c in convs for m in c.loss_mask], dtype=torch.uint8),
        "hidden": torch.cat(hidden).to(torch.float16),
        "offsets": torch.tensor(offsets, dtype=torch.int64),
    }
    if fused is not None:
        tensors["fused"] = torch.cat(fused).to(torch.float16)
    tmp = path.with_suffix(".tmp")
    metadata = {"rows": str(rows), **({"layers": ",".join(map(str, layers))} if fused is not None else {})}
    save_file(tensors, str(tmp), metadata=metadata)
    tmp.rename(path)  # a chunk is either whole or absent, whatever the moment of a stop


def write_json(path: Path, value: dict) -> None:
    """Whole or absent: a process reading it while another (a distill shard) writes it never sees half a file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)


def write_manifest(folder: Path, settings: dict[str, str], hidden_size: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "manifest.json", {"settings": settings, "hidden_size": hidden_size})


def _text_length(row: dict) -> int:
    return sum(len(t) for t in row["turns"] + (row.get("reference") or []))


def _rows_in(chunk: Path) -> int:
    with safe_open(str(chunk), "pt") as f:
        return int((f.metadata() or {}).get("rows", 0))


def target_features(target: LoadedModel, batch: list[list[int]]) -> list[torch.Tensor]:
    """Final-norm hidden states [len, H] of each sequence, from one padded forward of the target's body."""
    return target_layer_features(target, batch, ())[0]


@torch.inference_mode()
def target_layer_features(target: LoadedModel, batch: list[list[int]],
                          layers: tuple[int, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Final-norm hidden states [len, H] of each sequence and, for `layers`, the concatenated hidden states
    [len, kH] at those output_hidden_states indices (None without layers): one padded forward of the body."""
    model = target.model
    longest = max(len(s) for s in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    attention = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
    # The decoder body alone: its last_hidden_state is the lm_head input, and skipping the lm_head saves a third.
    out = model.get_decoder()(input_ids=ids.to(model.device), attention_mask=attention.to(model.device),
                              output_hidden_states=bool(layers))
    hidden = out.last_hidden_state.float().cpu()
    finals = [hidden[row, : len(seq)] for row, seq in enumerate(batch)]
    if not layers:
        return finals, [None] * len(batch)
    fused = torch.cat([out.hidden_states[i] for i in layers], dim=-1).to("cpu", torch.float16)
    return finals, [fused[row, : len(seq)] for row, seq in enumerate(batch)]


def self_replies(target: LoadedModel, turns: list[list[str]], max_new_tokens: int) -> list[str]:
    """The target's own greedy replies to each conversation's first turn (decoded together by the engine)."""
    tokenizer = target.tokenizer
    prompts = [chat_tokens(tokenizer, [{"role": "user", "content": t[0]}]) for t in turns]
    stop = target.stop_ids
    replies = []
    for row in answer(target, prompts, Sampling(), max_new_tokens):
        tokens = row.reply[:-1] if row.reply and row.reply[-1] in stop else row.reply
        replies.append(tokenizer.decode(tokens, skip_special_tokens=True))
    return replies


def extract(cfg: ExtractConfig, target: LoadedModel) -> FeatureCache:
    """Extract (or resume extracting) features for the first cfg.max_prompts usable prompts."""
    if cfg.mode not in MODES:
        raise SpecbenchError(f"unknown data mode {cfg.mode!r}; valid: {', '.join(MODES)}")
    cache = FeatureCache(cfg.out)
    # batch_size changes only padding, not what a cache holds, so a resumed extraction may use another one.
    settings = {k: str(v) for k, v in asdict(cfg).items() if k not in ("out", "max_prompts", "batch_size")}
    if cache.manifest_path.is_file():
        old = cache.manifest()["settings"]
        changed = sorted(k for k in settings if old.get(k) != settings[k])
        if changed:
            raise SpecbenchError(f"{cfg.out} was extracted with other settings ({', '.join(changed)}): use another --features")
    write_manifest(cfg.out, settings, target.model.config.hidden_size)

    rows = read_prompts(cfg.data, cfg.seed)
    if cfg.mode == "fixed":
        rows = [r for r in rows if isinstance(r.get("reference"), list) and len(r["reference"]) == len(r["turns"])]
    rows = rows[: cfg.max_prompts]
    chunks = cache.chunks()
    if chunks and _rows_in(chunks[-1]) < cfg.chunk_size and len(rows) > (len(chunks) - 1) * cfg.chunk_size + _rows_in(chunks[-1]):
        chunks.pop().unlink()  # a short last chunk from a smaller --max-prompts: redo it whole
    start = len(chunks) * cfg.chunk_size
    bar = tqdm(total=len(rows), initial=min(start, len(rows)), desc=f"features ({cfg.mode})", unit="conv")
    for chunk_start in range(start, len(rows), cfg.chunk_size):
        # Sorted by length within a chunk, so that batches carry little padding.
        chunk_rows = sorted(rows[chunk_start : chunk_start + cfg.chunk_size], key=_text_length)
        convs: list[Conversation] = []
        hidden: list[torch.Tensor] = []
        t0, n_tokens = time.perf_counter(), 0
        for i in range(0, len(chunk_rows), cfg.batch_size):
            group = chunk_rows[i : i + cfg.batch_size]
            if cfg.mode == "self":
                replies = self_replies(target, [r["turns"] for r in group], cfg.reply_tokens)
                dialogues = [([r["turns"][0]], [reply]) for r, reply in zip(group, replies)]
            else:
                dialogues = [(r["turns"], r["reference"]) for r in group]
            batch = [conversation_tokens(target.tokenizer, t, rep, cfg.max_len) for t, rep in dialogues]
            batch = [c for c in batch if sum(c.loss_mask) > 0]
            if batch:
                for conv, feats in zip(batch, target_features(target, [c.tokens for c in batch])):
                    convs.append(conv)
                    hidden.append(feats)
                    n_tokens += len(conv.tokens)
            bar.update(len(group))
            bar.set_postfix(tok_s=f"{n_tokens / (time.perf_counter() - t0):.0f}")
        if not convs:
            raise SpecbenchError(f"no conversation among prompts {chunk_start}-{chunk_start + len(chunk_rows) - 1} has "
                                 f"a reply token within --max-len {cfg.max_len}: raise --max-len")
        write_feature_chunk(cfg.out / f"chunk_{chunk_start // cfg.chunk_size:05d}.safetensors", convs, hidden, len(chunk_rows))
    bar.close()
    return cache


def prefill_features(target: LoadedModel, seqs: list[list[int]], layers: tuple[int, ...], batch_size: int,
                     progress=None) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """target_layer_features for many sequences, batched by length (little padding), returned in their order;
    `progress(tokens)` is called after each batch."""
    order = sorted(range(len(seqs)), key=lambda j: len(seqs[j]))
    finals: list[torch.Tensor | None] = [None] * len(seqs)
    fused: list[torch.Tensor | None] = [None] * len(seqs)
    for start in range(0, len(order), batch_size):
        group = order[start : start + batch_size]
        batch_finals, batch_fused = target_layer_features(target, [seqs[j] for j in group], layers)
        for j, final, layer_feats in zip(group, batch_finals, batch_fused):
            finals[j], fused[j] = final, layer_feats
        if progress is not None:
            progress(sum(len(seqs[j]) for j in group))
    return finals, fused


def add_layer_features(cache: FeatureCache, target: LoadedModel, layers: tuple[int, ...], batch_size: int = 8) -> None:
    """Give every chunk of the cache the "fused" features of `layers` (one batched prefill of its conversations;
    chunks that already hold those layers are kept, each rewritten whole or not at all)."""
    todo = [c for c in cache.chunks() if chunk_layers(c) != tuple(layers)]
    if not todo:
        return
    bar = tqdm(total=len(todo), desc=f"features (layers {','.join(map(str, layers))})", unit="chunk")
    for path in todo:
        with safe_open(str(path), "pt") as f:
            data = {k: f.get_tensor(k) for k in f.keys() if k != "fused"}
            rows = int((f.metadata() or {}).get("rows", 0))
        offsets = data["offsets"].tolist()
        spans = list(zip(offsets, offsets[1:]))
        fused = prefill_features(target, [data["tokens"][a:b].tolist() for a, b in spans], layers, batch_size)[1]
        convs = [Conversation(data["tokens"][a:b].tolist(), data["loss_mask"][a:b].tolist()) for a, b in spans]
        hidden = [data["hidden"][a:b] for a, b in spans]
        write_feature_chunk(path, convs, hidden, rows, fused, layers)
        bar.update(1)
    bar.close()


def frequent_reply_tokens(cache: FeatureCache, size: int, always: set[int]) -> torch.Tensor:
    """The `size` most frequent reply tokens of a cache (the tokens a drafter must predict), most frequent first;
    `always` (the stop tokens) are kept whatever their count. Drafters score these rows of the lm_head only."""
    targets = []
    for chunk in cache.chunks():  # tokens and masks only: the features may not fit in memory
        with safe_open(str(chunk), "pt") as f:
            tokens, loss_mask = f.get_tensor("tokens"), f.get_tensor("loss_mask")
        targets.append(tokens[1:].long()[loss_mask[:-1].bool()])
    if not targets:
        raise SpecbenchError(f"feature cache {cache.folder} holds no chunks yet")
    targets = torch.cat(targets)
    counts = torch.bincount(targets)
    for t in always:
        if t < len(counts):
            counts[t] = counts.max() + 1
    order = counts.argsort(descending=True)
    return order[: min(size, int((counts > 0).sum()))]


def draft_vocabulary(cache: FeatureCache, folder: Path, size: int, always: set[int]) -> torch.Tensor | None:
    """A training run's reduced vocabulary (None for size <= 0), fixed at its first start in folder/draft_vocab.pt
    so that a resumed run trains the same one even if the cache has grown."""
    saved = folder / "draft_vocab.pt"
    if saved.is_file():
        return torch.load(saved)
    if size <= 0:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    vocab = frequent_reply_tokens(cache, size, always)
    torch.save(vocab, saved)
    return vocab
