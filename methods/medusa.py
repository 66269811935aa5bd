"""Medusa (Cai et al. 2024): K extra heads on the target's last hidden state; head k guesses the token k+1 places
ahead. Candidates form a static tree of ranks (node [r1, r2, ...] = head 1's r1-th guess, then head 2's r2-th ...),
so drafting costs K small matrix products and no draft model.

Each head is a residual SiLU block h + SiLU(W h + b) (W zero-initialised) followed by the target's frozen lm_head,
shared by all heads, restricted to the most frequent reply tokens. We share it rather than train K copies: a copy of
SmolLM2's 49k x 576 lm_head per head would be 28M parameters each (four heads: 113M, nearly the target's 135M) and
a full-vocabulary product per head per step, which on this CPU costs more than the heads save.

`medusa` verifies with the engine's lossless rule. `medusa-typical` uses Medusa's typical acceptance (accept a
candidate when the target gives it more than min(0.09, 0.3 * exp(-entropy))): faster at T>0 and NOT lossless.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from specbench.draft import ROOT, DecodeContext, Draft, Drafter, StepResult, parse_tree
from specbench.errors import SpecbenchError
from specbench.features import FeatureCache, draft_vocabulary
from specbench.registry import BuildContext, MethodInfo
from specbench.runtime import RuntimeInfo, frozen_linear, prepare_drafter
from specbench.sampling import Sampling, sample, target_probs
from specbench.target import LoadedModel, shipped_drafters
from specbench.training import Batch, TrainConfig, fit
from specbench.verify import Verdict, verify_greedy

HEADS_DIR = shipped_drafters("medusa")
PACKAGED_HEADS = {"smollm2-135m-instruct": "smollm2-135m-instruct"}
# Sized for a 2-core CPU, where verifying 11 tokens costs ~1.6 forwards of one (Medusa's GPU tree has 63 nodes).
DEFAULT_TREE = "[[0],[1],[2],[0,0],[0,1],[1,0],[0,0,0],[0,0,1],[0,1,0],[0,0,0,0]]"


class ResidualBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)  # starts as the identity: head k begins as the target's own guess

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + F.silu(self.linear(h))


class MedusaHeads(nn.Module):
    """Keys as the official Medusa checkpoints' residual blocks: {k}.0.linear.weight / .bias."""

    def __init__(self, hidden: int, n_heads: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList([nn.Sequential(ResidualBlock(hidden)) for _ in range(n_heads)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [K, ..., H]: each head's predicted lm_head input."""
        return torch.stack([head(h) for head in self.heads])


def save_heads(heads: MedusaHeads, folder: Path, draft_vocab: torch.Tensor | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    hidden = heads.heads[0][0].linear.weight.shape[0]
    config = {"medusa_num_heads": len(heads.heads), "medusa_num_layers": 1, "hidden_size": hidden,
              "shared_lm_head": True}
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in heads.heads.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))


def load_heads(folder: Path) -> tuple[MedusaHeads, torch.Tensor | None]:
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise SpecbenchError(f"{folder} is not a Medusa head folder (config.json + model.safetensors)")
    config = json.loads(config_path.read_text())
    if not isinstance(config.get("hidden_size"), int) or not isinstance(config.get("medusa_num_heads"), int):
        raise SpecbenchError(f"{folder} is not a Medusa head folder (its config.json lacks medusa_num_heads)")
    heads = MedusaHeads(config["hidden_size"], config["medusa_num_heads"])
    try:
        heads.heads.load_state_dict({k: v.float() for k, v in load_file(str(weights)).items()})
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: weights do not match its config ({str(exc).splitlines()[-1].strip()})") from None
    vocab = config.get("specbench_draft_vocab")
    return heads.eval(), None if vocab is None else torch.tensor(vocab, dtype=torch.long)


class MedusaDrafter(Drafter):
    hidden_layers = (-1,)

    def __init__(self, heads: MedusaHeads, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None,
                 tree: list[tuple[int, ...]], verifier=None, runtime: RuntimeInfo | None = None) -> None:
        depth = max(len(p) for p in tree)
        if depth > len(heads.heads):
            raise SpecbenchError(f"the Medusa tree is {depth} deep but there are only {len(heads.heads)} heads")
        self.heads = heads
        device, dtype = heads.heads[0][0].linear.weight.device, heads.heads[0][0].linear.weight.dtype
        vocab = draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])
        self.lm_head = frozen_linear(lm_head.detach()[vocab].to(device, dtype).contiguous(), runtime)
        self.vocab_list = vocab.tolist()
        self.tree = tree
        self.width = max(max(p) for p in tree) + 1
        self.depth = depth
        self.parents = [ROOT if len(p) == 1 else tree.index(p[:-1]) for p in tree]
        self.verifier = verifier
        self.last_feature: torch.Tensor | None = None

    def begin(self, ctx: DecodeContext) -> None:
        self.last_feature = None

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        self.last_feature = step.hidden[-1]  # the feature that predicted the token just emitted last

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        if self.last_feature is None:
            return Draft()
        predicted = self.heads(self.last_feature.to(self.lm_head.weight.dtype))[: self.depth]  # [depth, H]
        guesses = self.lm_head(predicted).topk(self.width, dim=-1).indices.tolist()
        tokens = [self.vocab_list[guesses[len(p) - 1][p[-1]]] for p in self.tree]
        return Draft(tokens, list(self.parents))


def typical_verifier(threshold: float, alpha: float):
    """Medusa's typical acceptance (lossy at T > 0): a node is accepted when the target gives it more than
    min(threshold, alpha * exp(-entropy)) at its parent; the deepest such path wins; then one token is sampled."""

    def verify(draft: Draft, logits: torch.Tensor, sampling: Sampling, generator) -> Verdict:
        if sampling.greedy or not draft:
            return verify_greedy(draft, logits) if sampling.greedy else Verdict([], sample(
                target_probs(logits[0], sampling), generator))
        probs = target_probs(logits, sampling)
        entropy = -torch.special.xlogy(probs, probs).sum(-1)
        limit = torch.minimum(torch.full_like(entropy, threshold), alpha * torch.exp(-entropy))
        ok: list[bool] = []
        best: list[int] = []
        depth: list[int] = []
        for i, (token, parent) in enumerate(zip(draft.tokens, draft.parents)):
            row = parent + 1
            passes = bool(probs[row, token] > limit[row]) and (parent == ROOT or ok[parent])
            ok.append(passes)
            depth.append(1 if parent == ROOT else depth[parent] + 1)
            if passes and (not best or depth[i] > depth[best[-1]]):
                best = [i]
        path: list[int] = []
        if best:
            node = best[0]
            while node != ROOT:
                path.insert(0, node)
                node = draft.parents[node]
        end_row = path[-1] + 1 if path else 0
        return Verdict(path, sample(probs[end_row], generator))

    return verify


class MedusaTrainable:
    """Cross-entropy of head k against the data's token k+1 places ahead of the next one, weighted 0.8^k, over the
    draft vocabulary (targets outside it are skipped)."""

    def __init__(self, heads: MedusaHeads, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None) -> None:
        self.module = heads
        vocab = draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])
        self.draft_vocab = draft_vocab
        vocab = vocab.to(lm_head.device)
        self.lm_head = lm_head.detach().float()[vocab].contiguous()
        self.to_draft = torch.full((lm_head.shape[0],), -1, dtype=torch.long, device=lm_head.device)
        self.to_draft[vocab] = torch.arange(len(vocab), device=lm_head.device)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1]
        total = torch.zeros((), device=batch.hidden.device)
        metrics: dict[str, float] = {}
        for k, head in enumerate(self.module.heads):
            span = n - 2 - k  # positions t with a target token at t + 2 + k
            if span <= 0:
                break
            targets = self.to_draft[batch.tokens[:, 2 + k :]]
            train_at = batch.loss_mask[:, 1 + k : 1 + k + span] & batch.valid[:, 2 + k :] & (targets >= 0)
            if not train_at.any():
                continue
            logits = head(batch.hidden[:, :span][train_at]) @ self.lm_head.T
            loss = F.cross_entropy(logits, targets[train_at])
            total = total + 0.8**k * loss
            metrics[f"top1_head{k + 1}"] = float((logits.argmax(-1) == targets[train_at]).float().mean())
        return total, metrics

    def save(self, folder: Path) -> None:
        save_heads(self.module, folder, self.draft_vocab)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train Medusa heads (options: heads=4, draft_vocab=8192) on a feature cache (the EAGLE one is reused)."""
    model = target.model
    heads = MedusaHeads(model.config.hidden_size, int(options.get("heads", 4)))
    heads.to(model.get_output_embeddings().weight.device)  # trained in fp32 on the target's device
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    return fit(MedusaTrainable(heads, model.get_output_embeddings().weight, draft_vocab), cache, cfg)


def _build(ctx: BuildContext, typical: bool) -> Drafter:
    chosen = ctx.options.get("head") or ctx.draft  # medusa@head=FOLDER compares heads side by side in one run
    if chosen:
        folder = Path(chosen)
    else:
        name = PACKAGED_HEADS.get(ctx.target.name.lower())
        folder = HEADS_DIR / name if name else None
        if folder is None or not (folder / "config.json").is_file():
            raise SpecbenchError(f"no trained Medusa heads ship for target {ctx.target.name!r}: pass --draft "
                                 "HEADS_FOLDER, or train them with python -m specbench train medusa")
    heads, vocab = load_heads(folder)
    lm_head = ctx.target.model.get_output_embeddings().weight
    if heads.heads[0][0].linear.weight.shape[0] != lm_head.shape[1]:
        raise SpecbenchError(f"Medusa heads {folder} do not fit target {ctx.target.name} (hidden size)")
    heads.to(lm_head.device, lm_head.dtype)
    prepare_drafter(heads, ctx.target.runtime)
    verifier = typical_verifier(ctx.option("threshold", 0.09), ctx.option("alpha", 0.3)) if typical else None
    return MedusaDrafter(heads, lm_head, vocab, parse_tree(ctx.option("tree", DEFAULT_TREE)), verifier,
                         ctx.target.runtime)


METHODS = [
    MethodInfo("medusa", "Medusa-style heads (4, shared frozen lm_head), 10-node tree, lossless verification", True,
               lambda ctx: _build(ctx, typical=False)),
    MethodInfo("medusa-typical", "Medusa heads with typical acceptance (threshold 0.09, alpha 0.3): LOSSY at T>0",
               False, lambda ctx: _build(ctx, typical=True)),
]

TRAINERS = {"medusa": train}
