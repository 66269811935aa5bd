"""The one training loop for drafter heads over a feature cache: batching, AdamW, checkpoints, resume, held-out eval.

A method supplies a `Trainable` (its module, a loss on a batch, how to save itself); this file knows nothing of
EAGLE or Medusa. The loop is built for small machines that are stopped without warning: it checkpoints every few
minutes (weights, optimizer, position in the data, elapsed time) and a rerun of the same command resumes.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import torch
from safetensors import safe_open
from tqdm import tqdm

from specbench.decode.costs import cpu_description
from specbench.errors import SpecbenchError
from specbench.train.features import FeatureCache, chunk_layers
from specbench.train.names import AUTOCAST_NAMES


@dataclass(frozen=True)
class TrainConfig:
    out: Path
    lr: float = 3e-4
    batch_tokens: int = 4096  # padded tokens per batch
    max_tokens: int = 2_000_000  # stop after this many training positions (non-padding tokens)
    max_hours: float = 0.0  # and/or after this much training time (0 = no limit); counts across resumes
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine decay from lr to lr * min_lr_ratio over max_tokens
    eval_every: int = 200  # steps
    save_minutes: float = 5.0
    heldout: int = 64  # conversations of the first chunk kept out of training, the same ones as the cache grows
    snapshot_tokens: int = 0  # also save the weights every this many positions (snapshots/<tokens>/), 0 = never
    seed: int = 0
    # "bfloat16": each training step's loss runs under torch.autocast (mixed precision, as the official EAGLE
    # trainers train; weights and optimizer stay fp32, held-out evaluation too). None: fp32 throughout.
    autocast: str | None = None
    # The method's own options (`--opt KEY=VALUE`: a draft's layers, where it starts from), recorded in train.json.
    options: tuple[tuple[str, str], ...] = ()


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, n] int64, 0 at padding
    hidden: torch.Tensor  # [B, n, H] fp32
    loss_mask: torch.Tensor  # [B, n] bool: train position t (token t+1 is a reply token)
    valid: torch.Tensor  # [B, n] bool: not padding
    fused: torch.Tensor | None = None  # [B, n, kH] fp32: the cache's fused layer features, when every row has them
    fused_layers: tuple[int, ...] = ()  # the output_hidden_states indices `fused` concatenates

    def to(self, device: torch.device) -> "Batch":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.tokens), move(self.hidden), move(self.loss_mask), move(self.valid), move(self.fused),
                     self.fused_layers)


class Trainable(Protocol):
    module: torch.nn.Module

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss and metrics (metrics are also what the held-out evaluation prints)."""

    def save(self, folder: Path) -> None:
        """Write the trained weights in the method's loadable format."""


@dataclass
class Conversations:
    """Every conversation's tokens and loss mask in memory; the features stay in the cache's files and are read
    per batch (safetensors slices, memory-mapped), so memory does not grow with the cache."""
    tokens: list[torch.Tensor]
    loss_mask: list[torch.Tensor]
    spans: list[tuple[int, int, int]]  # (chunk, start, end) of each conversation
    readers: list  # one open safetensors file per chunk
    layers: list[tuple[int, ...]]  # per chunk: the layers its "fused" features hold (empty: none)

    def __len__(self) -> int:
        return len(self.tokens)

    def features(self, i: int, key: str) -> torch.Tensor:
        chunk, a, b = self.spans[i]
        return self.readers[chunk].get_slice(key)[a:b]

    def width(self, i: int, key: str) -> int:
        """The feature width of conversation i's chunk under `key`, read from the file header."""
        return self.readers[self.spans[i][0]].get_slice(key).get_shape()[-1]


def load_conversations(cache: FeatureCache) -> Conversations:
    chunks = cache.chunks()
    if not chunks:
        raise SpecbenchError(f"feature cache {cache.folder} holds no chunks yet")
    convs = Conversations([], [], [], [], [])
    for c, path in enumerate(chunks):
        reader = safe_open(str(path), "pt")
        convs.readers.append(reader)
        convs.layers.append(chunk_layers(path))
        tokens, loss_mask = reader.get_tensor("tokens"), reader.get_tensor("loss_mask")
        offsets = reader.get_tensor("offsets").tolist()
        for a, b in zip(offsets, offsets[1:]):
            convs.tokens.append(tokens[a:b])
            convs.loss_mask.append(loss_mask[a:b])
            convs.spans.append((c, a, b))
    return convs


def make_batch(convs: Conversations, indices: list[int]) -> Batch:
    longest = max(len(convs.tokens[i]) for i in indices)
    layers = {convs.layers[convs.spans[i][0]] for i in indices}
    fused_layers = layers.pop() if len(layers) == 1 else ()
    batch = Batch(
        tokens=torch.zeros(len(indices), longest, dtype=torch.long),
        hidden=torch.zeros(len(indices), longest, convs.width(indices[0], "hidden")),
        loss_mask=torch.zeros(len(indices), longest, dtype=torch.bool),
        valid=torch.zeros(len(indices), longest, dtype=torch.bool),
        fused_layers=fused_layers,
    )
    if fused_layers:
        batch.fused = torch.zeros(len(indices), longest, convs.width(indices[0], "fused"))
    for row, i in enumerate(indices):
        n = len(convs.tokens[i])
        batch.tokens[row, :n] = convs.tokens[i]
        batch.hidden[row, :n] = convs.features(i, "hidden").float()
        batch.loss_mask[row, :n] = convs.loss_mask[i].bool()
        batch.valid[row, :n] = True
        if batch.fused is not None:
            batch.fused[row, :n] = convs.features(i, "fused").float()
    return batch


def module_device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device


def epoch_batches(lengths: list[int], indices: list[int], batch_tokens: int, seed: int) -> list[list[int]]:
    """Shuffled batches of similar-length conversations, each within batch_tokens once padded."""
    gen = torch.Generator().manual_seed(seed)
    order = [indices[i] for i in torch.randperm(len(indices), generator=gen).tolist()]
    batches: list[list[int]] = []
    for start in range(0, len(order), 64):  # sort within groups of 64: little padding, still shuffled
        group = sorted(order[start : start + 64], key=lambda i: lengths[i])
        current: list[int] = []
        for i in group:
            if current and (len(current) + 1) * max(lengths[j] for j in current + [i]) > batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def _lr_at(cfg: TrainConfig, step: int, tokens: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, tokens / cfg.max_tokens)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(trainable: Trainable, convs: Conversations, indices: list[int], batch_tokens: int) -> dict[str, float]:
    trainable.module.eval()
    device = module_device(trainable.module)
    totals: dict[str, float] = {}
    weight = 0.0
    for batch_indices in epoch_batches([len(t) for t in convs.tokens], indices, batch_tokens, seed=0):
        batch = make_batch(convs, batch_indices).to(device)
        _, metrics = trainable.loss(batch)
        n = float(batch.loss_mask.sum())
        weight += n
        for k, v in metrics.items():
            totals[k] = totals.get(k, 0.0) + v * n
    trainable.module.train()
    return {k: v / max(weight, 1.0) for k, v in totals.items()}


def log_eval(log, state: dict, metrics: dict[str, float], final: bool = False) -> str:
    """Append one point of the training curve to log.jsonl; returns it as a line for the terminal."""
    record = {"step": state["step"], "tokens": state["tokens"], "hours": round(state["seconds"] / 3600, 4),
              **({"final": True} if final else {}), **{f"heldout_{k}": round(v, 4) for k, v in metrics.items()}}
    log.write(json.dumps(record) + "\n")
    log.flush()
    return " ".join(f"{k}={v}" for k, v in record.items())


# bfloat16 only: float16 would need a gradient scaler against underflow, which the loop does not have.
AUTOCAST_TYPES = {name: getattr(torch, name) for name in AUTOCAST_NAMES}


def autocast_type(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    if name not in AUTOCAST_TYPES:
        raise SpecbenchError(f"--autocast {name!r}: use one of {', '.join(AUTOCAST_TYPES)}")
    return AUTOCAST_TYPES[name]


def write_provenance(cfg: TrainConfig, cache: FeatureCache, conversations: int) -> None:
    """train.json beside the weights: the training settings, the data (the feature cache's settings, its chunks
    and conversations) and the machine, for the budget table of every report that decodes with these weights."""
    (cfg.out / "train.json").write_text(json.dumps({
        "settings": {k: v if isinstance(v, (int, float, bool)) or v is None else str(v) for k, v in asdict(cfg).items()
                     if k not in ("out", "options")},
        "options": dict(cfg.options),
        "data": {"features": str(cache.folder), "chunks": len(cache.chunks()), "conversations": conversations,
                 **cache.manifest().get("settings", {})},
        "machine": {"cpu": cpu_description(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
    }, indent=1), encoding="utf-8")


def train_step(trainable: Trainable, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], batch: Batch,
               device_type: str, autocast_dtype: torch.dtype | None) -> dict[str, float]:
    """One optimizer step: the loss under autocast (when set), backward, gradient values clipped at 0.5, AdamW."""
    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        loss, metrics = trainable.loss(batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_value_(params, 0.5)
    optimizer.step()
    return metrics


def fit(trainable: Trainable, cache: FeatureCache, cfg: TrainConfig) -> dict[str, float]:
    """Train until max_tokens or max_hours; resume from cfg.out/checkpoint.pt when present. Returns the last eval."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    convs = load_conversations(cache)
    heldout = list(range(min(cfg.heldout, len(convs) // 10)))
    train = list(range(len(heldout), len(convs)))
    if not train:
        raise SpecbenchError(f"feature cache {cache.folder} has too few conversations to train on")
    lengths = [len(t) for t in convs.tokens]
    params = [p for p in trainable.module.parameters() if p.requires_grad]
    device = module_device(trainable.module)  # batches go where the module trains (the target's device)
    autocast_dtype = autocast_type(cfg.autocast)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    state = {"step": 0, "epoch": 0, "batch": 0, "tokens": 0, "seconds": 0.0}
    checkpoint = cfg.out / "checkpoint.pt"
    settings = {k: str(v) for k, v in asdict(cfg).items() if k not in ("out", "max_tokens", "max_hours", "snapshot_tokens", "options")}
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["settings"] != settings:
            raise SpecbenchError(f"{checkpoint} was trained with other settings: use another --out or the same ones")
        trainable.module.load_state_dict(saved["module"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"resuming at step {state['step']}, {state['tokens']} tokens, {state['seconds'] / 3600:.2f} h")
    if state["step"] == 0:
        write_provenance(cfg, cache, len(convs))
    log = (cfg.out / "log.jsonl").open("a")

    def save() -> None:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"module": trainable.module.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
                    "settings": settings}, tmp)
        tmp.rename(checkpoint)
        trainable.save(cfg.out)

    def done() -> bool:
        over_time = cfg.max_hours > 0 and state["seconds"] >= cfg.max_hours * 3600
        return state["tokens"] >= cfg.max_tokens or over_time

    last_eval: dict[str, float] = {}
    if state["step"] == 0:  # the curve starts from the untrained head
        log_eval(log, state, evaluate(trainable, convs, heldout, cfg.batch_tokens))
    last_save = time.monotonic()
    bar = tqdm(total=cfg.max_tokens, initial=min(state["tokens"], cfg.max_tokens), desc="train", unit="tok",
               unit_scale=True)
    trainable.module.train()
    while not done():
        batches = epoch_batches(lengths, train, cfg.batch_tokens, cfg.seed + state["epoch"])
        while state["batch"] < len(batches) and not done():
            t0 = time.monotonic()
            batch = make_batch(convs, batches[state["batch"]]).to(device)
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(cfg, state["step"], state["tokens"])
            metrics = train_step(trainable, optimizer, params, batch, device.type, autocast_dtype)
            n_tokens = int(batch.valid.sum())
            state["step"] += 1
            state["batch"] += 1
            state["tokens"] += n_tokens
            state["seconds"] += time.monotonic() - t0
            bar.update(n_tokens)
            bar.set_postfix({k: f"{v:.3f}" for k, v in metrics.items()})
            if cfg.snapshot_tokens and state["tokens"] // cfg.snapshot_tokens > (state["tokens"] - n_tokens) // cfg.snapshot_tokens:
                # Snapshots make the curve measurable by decoding too (τ against training positions), not only top-1.
                trainable.save(cfg.out / "snapshots" / f"{state['tokens'] // cfg.snapshot_tokens * cfg.snapshot_tokens}")
            if state["step"] % cfg.eval_every == 0:
                bar.write(log_eval(log, state, evaluate(trainable, convs, heldout, cfg.batch_tokens)))
            if time.monotonic() - last_save > cfg.save_minutes * 60:
                save()
                last_save = time.monotonic()
        if state["batch"] >= len(batches):
            state["epoch"] += 1
            state["batch"] = 0
    bar.close()
    last_eval = evaluate(trainable, convs, heldout, cfg.batch_tokens)
    print(log_eval(log, state, last_eval, final=True))
    log.close()
    save()
    return last_eval
