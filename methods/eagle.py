"""EAGLE (Li et al. 2024): a one-layer draft head that autoregresses on the target's features.

The head takes concat[embedding of token t+1, feature t] (embedding first), projects it with fc (2H -> H), runs one
LLaMA decoder layer without its input norm, and predicts feature t+1; the target's frozen lm_head turns a feature
into draft logits. The feature is the target's final-norm hidden state, which the engine hands over from the
verification forward, so drafting costs no extra target pass.

`eagle` drafts an EAGLE-2 dynamic tree (expand the top_k best frontier nodes by cumulative draft log-prob for `depth`
steps, keep the total_tokens best nodes); `eagle1` drafts an EAGLE-1 static tree. Candidates are deterministic
top-k picks, verified by the engine's lossless rule at any temperature. The ablation heads (eagle-unshifted,
eagle-feature, eagle-token) change only what the head reads.

Checkpoints use the official EAGLE-1/2 layout (config.json + model.safetensors or pytorch_model.bin with keys
embed_tokens.weight, fc.weight, fc.bias, layers.0.*), so heads move both ways. Ours add two keys to config.json that
official loaders ignore: "specbench_inputs" (the ablation variant) and "specbench_draft_vocab" (the most frequent
reply tokens in the training data, most frequent first: a reduced draft vocabulary keeps the lm_head cheap on CPU).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from specbench.costs import CONTEXT, CostCurve, measure_cost_model
from specbench.runtime import fastest_seconds
from specbench.draft import ROOT, DecodeContext, Draft, Drafter, StepResult, parse_tree
from specbench.errors import SpecbenchError
from specbench.kv import truncate_cache
from specbench.registry import BuildContext, MethodInfo
from specbench.features import FeatureCache, draft_vocabulary
from specbench.target import LoadedModel, shipped_drafters
from specbench.training import Batch, TrainConfig, fit

# What the head reads at position t, by variant: (token offset, uses token, uses feature).
# "shifted" is EAGLE: token t+1 with feature t. The others are the paper's ablations.
INPUTS = {"shifted": (1, True, True), "unshifted": (0, True, True), "feature": (0, False, True), "token": (1, True, False)}
HEAD_CONFIG_KEYS = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
    "max_position_embeddings", "vocab_size", "hidden_act", "rope_parameters", "attention_bias", "mlp_bias",
)
PACKAGED_HEADS = {"smollm2-135m-instruct": "smollm2-135m-instruct"}  # target short name -> folder in heads/
HEADS_DIR = shipped_drafters("eagle")
SAFETENSORS, BIN = "model.safetensors", "pytorch_model.bin"


def head_config(target_config, inputs: str = "shifted") -> LlamaConfig:
    values = {k: getattr(target_config, k) for k in HEAD_CONFIG_KEYS if getattr(target_config, k, None) is not None}
    config = LlamaConfig(**values, num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    config.bias = True
    config.specbench_inputs = inputs
    return config


class EagleHead(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        inputs = getattr(config, "specbench_inputs", "shifted")
        if inputs not in INPUTS:
            raise SpecbenchError(f"unknown EAGLE head inputs {inputs!r}; valid: {', '.join(INPUTS)}")
        self.shift, self.use_token, self.use_feature = INPUTS[inputs]
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(2 * hidden, hidden, bias=getattr(config, "bias", True))
        layer = LlamaDecoderLayer(config, layer_idx=0)
        layer.input_layernorm = nn.Identity()  # EAGLE's layer has no input norm: fc output goes straight in
        self.layers = nn.ModuleList([layer])
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(
        self,
        tokens: torch.Tensor,  # [B, n]
        features: torch.Tensor,  # [B, n, H]
        position_ids: torch.Tensor,  # [B, n]
        attention_mask: torch.Tensor | None,  # [B, 1, n, cached + n] additive, None = see everything
        cache: DynamicCache | None = None,
    ) -> torch.Tensor:
        """Predicted next features [B, n, H]."""
        embedded = self.embed_tokens(tokens)
        if not self.use_token:
            embedded = torch.zeros_like(embedded)
        if not self.use_feature:
            features = torch.zeros_like(features)
        hidden = self.fc(torch.cat([embedded, features.to(embedded.dtype)], dim=-1))
        rope = self.rotary_emb(hidden, position_ids)
        return self.layers[0](hidden, attention_mask=attention_mask, position_ids=position_ids,
                              past_key_values=cache, use_cache=cache is not None, position_embeddings=rope)


# ---------------------------------------------------------------------------------------------- checkpoints


def save_head(head: EagleHead, folder: Path, draft_vocab: torch.Tensor | None, dtype=torch.float16,
              with_embedding: bool = False) -> None:
    """Official layout. The embedding is the target's own, frozen: left out unless asked (official loaders and ours
    take it from the target), which keeps a SmolLM2 head at 9 MB instead of 65 MB."""
    folder.mkdir(parents=True, exist_ok=True)
    source = head.config.to_dict()
    config = {k: source[k] for k in HEAD_CONFIG_KEYS if source.get(k) is not None}
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", bias=head.fc.bias is not None,
                  num_hidden_layers=1, torch_dtype=str(dtype).removeprefix("torch."),
                  specbench_inputs=source.get("specbench_inputs", "shifted"))
    # Older loaders (the official code, transformers 4.x) read rope_theta at the top level.
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()
               if with_embedding or k != "embed_tokens.weight"}
    tmp = folder / (SAFETENSORS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.rename(folder / SAFETENSORS)


def load_head(folder: Path, target_embedding: torch.Tensor | None = None) -> tuple[EagleHead, torch.Tensor | None]:
    """An EAGLE-1/2 head in the official layout. embed_tokens comes from the target when the file lacks it."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise SpecbenchError(f"{folder} has no config.json: not an EAGLE head folder")
    raw = json.loads(config_path.read_text())
    draft_vocab = raw.pop("specbench_draft_vocab", None)
    inputs = raw.pop("specbench_inputs", "shifted")
    bias = raw.pop("bias", True)
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    config.num_hidden_layers = 1
    config._attn_implementation = "sdpa"
    config.bias, config.specbench_inputs = bias, inputs
    if (folder / SAFETENSORS).is_file():
        state = load_file(str(folder / SAFETENSORS))
    elif (folder / BIN).is_file():
        state = torch.load(folder / BIN, map_location="cpu", weights_only=True)
    else:
        raise SpecbenchError(f"{folder} has neither {SAFETENSORS} nor {BIN}")
    head = EagleHead(config)
    if "embed_tokens.weight" not in state:
        if target_embedding is None:
            raise SpecbenchError(f"{folder} has no embed_tokens.weight and no target embedding was given")
        state["embed_tokens.weight"] = target_embedding
    try:
        missing, unexpected = head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    except RuntimeError as exc:  # shapes that do not fit the config
        raise SpecbenchError(f"{folder}: not an EAGLE-1/2 head for this config ({str(exc).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise SpecbenchError(f"{folder}: not an EAGLE-1/2 head (missing {missing}, unexpected {unexpected})")
    return head, None if draft_vocab is None else torch.tensor(draft_vocab, dtype=torch.long)


def find_head(target_name: str, inputs: str = "shifted", ablation: bool = False) -> Path:
    """The shipped head for a target: heads/eagle/<target>/shifted, or one of the four ablation heads (trained on
    the same, smaller budget) in heads/eagle/<target>/ablation/<inputs>."""
    name = PACKAGED_HEADS.get(target_name.lower())
    folder = HEADS_DIR / name / ("ablation" if ablation else "") / inputs if name else None
    if folder is None or not (folder / "config.json").is_file():
        raise SpecbenchError(
            f"no trained EAGLE head ({inputs}) ships for target {target_name!r}: pass --draft HEAD_FOLDER, or train "
            "one with python -m specbench train eagle"
        )
    return folder


# ---------------------------------------------------------------------------------------------- drafting


# Our CPU-sized default for eagle1: 25 nodes, depth 5 (the shape of EAGLE-1's default, our own choice of paths).
EAGLE1_TREE = (
    "[[0],[1],[2],[3],[0,0],[0,1],[0,2],[1,0],[1,1],[2,0],[3,0],[0,0,0],[0,0,1],[0,1,0],[1,0,0],[2,0,0],[0,2,0],"
    "[0,0,0,0],[0,0,0,1],[0,1,0,0],[1,0,0,0],[0,0,0,0,0],[0,0,0,0,1],[0,1,0,0,0],[1,0,0,0,0]]"
)


@dataclass
class TreeSpec:
    top_k: int = 4
    depth: int = 5
    total_tokens: int = 12  # draft nodes kept (the root is the last emitted token, not counted)
    static_paths: list[tuple[int, ...]] | None = None  # set: EAGLE-1 static tree instead of the dynamic one
    # Set: choose the tree size per step (at most total_tokens) from the run's fixed costs: the target's
    # verification curve and the time of one drafting level, both measured when the run started.
    costs: CostCurve | None = None
    level_seconds: float = 0.0


@dataclass
class _Node:
    token: int  # draft-vocabulary index
    parent: int  # node index or ROOT
    depth: int
    score: float  # cumulative draft log-prob
    ancestors: frozenset[int]  # node indices on its path, itself included


AUTO_MAX_TOKENS = 32  # total_tokens=auto chooses each tree's size up to this


class EagleDrafter(Drafter):
    needs_hidden = True

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, tree: TreeSpec):
        self.head = head.eval()
        device = head.fc.weight.device
        # The draft vocabulary's rows of the target's lm_head: draft logits over the most frequent tokens only.
        self.vocab = (draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])).to(device)
        self.lm_head = lm_head.detach()[self.vocab].to(device, head.fc.weight.dtype).contiguous()
        self.vocab_list = self.vocab.tolist()
        self.tree = tree
        self._reset()

    def _reset(self) -> None:
        self.cache = DynamicCache(config=self.head.config)
        self.features: torch.Tensor | None = None  # target features of every cached target position
        self.filled = 0  # head positions in self.cache built from true target features
        self.tree_features: dict[int, torch.Tensor] = {}

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        new = step.hidden.to(self.lm_head.dtype)
        self.features = new if self.features is None else torch.cat([self.features, new])

    def _run(self, tokens: list[int], features: torch.Tensor, positions: list[int], mask: torch.Tensor | None) -> torch.Tensor:
        device = self.lm_head.device
        ids = torch.tensor([tokens], device=device)
        return self.head(ids, features.unsqueeze(0), torch.tensor([positions], device=device), mask, self.cache)[0]

    def _fill(self, ctx: DecodeContext) -> torch.Tensor:
        """Bring the head's cache up to date with the true features; returns the predicted next feature."""
        known = self.features.shape[0]
        shift = self.head.shift
        tokens = ctx.token_ids[self.filled + shift : known + shift]
        n, cached = len(tokens), self.filled
        mask = None
        if n > 1:
            allowed = torch.ones(n, cached + n, dtype=torch.bool).tril(cached)
            mask = _additive(allowed, self.lm_head.dtype, self.lm_head.device)
        out = self._run(tokens, self.features[cached:known], list(range(cached, known)), mask)
        self.filled = known
        return out[-1]

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        if self.features is None:
            return Draft()  # the first step is the prefill: no features yet
        root_feature = self._fill(ctx)
        nodes: list[_Node] = []
        expanded: list[int] = []  # node of each head cache entry after the filled context
        frontier_features = {ROOT: root_feature}

        def expand(parents: list[int], k: int) -> torch.Tensor:
            """Head step for `parents` (ROOT or expanded nodes), returns top-k (log-probs, vocab indices)."""
            feats = torch.stack([frontier_features[p] for p in parents])
            logp = torch.log_softmax(feats @ self.lm_head.T, dim=-1)
            return logp.topk(k, dim=-1)

        def step(group: list[int]) -> None:
            """Run the head on nodes `group`, storing their predicted features."""
            shift = self.head.shift
            root_token = ctx.token_ids[-1]
            tokens = []
            for i in group:
                node = nodes[i]
                if shift:
                    tokens.append(self.vocab_list[node.token])
                else:
                    tokens.append(root_token if node.parent == ROOT else self.vocab_list[nodes[node.parent].token])
            feats = torch.stack([frontier_features[nodes[i].parent] for i in group])
            depth = nodes[group[0]].depth
            allowed = torch.zeros(len(group), self.filled + len(expanded) + len(group), dtype=torch.bool)
            allowed[:, : self.filled] = True
            for row, i in enumerate(group):
                for col, j in enumerate(expanded):
                    allowed[row, self.filled + col] = j in nodes[i].ancestors
                allowed[row, self.filled + len(expanded) + row] = True
            mask = _additive(allowed, self.lm_head.dtype, self.lm_head.device)
            # Every node of a group sits at the same depth, hence the same position.
            out = self._run(tokens, feats, [self.filled + depth - 1] * len(group), mask)
            for row, i in enumerate(group):
                frontier_features[i] = out[row]
            expanded.extend(group)

        def add(parent: int, token: int, score: float) -> int:
            depth = 1 if parent == ROOT else nodes[parent].depth + 1
            ancestors = frozenset() if parent == ROOT else nodes[parent].ancestors
            nodes.append(_Node(token, parent, depth, score, ancestors | {len(nodes)}))
            return len(nodes) - 1

        try:
            if self.tree.static_paths is not None:
                self._static(expand, step, add, nodes)
                keep = list(range(len(nodes)))
            else:
                self._dynamic(expand, step, add, nodes)
                order = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].depth))
                size = self.tree.total_tokens
                if self.tree.costs is not None:
                    size = self._best_size([nodes[i].score for i in order[:size]])
                keep = sorted(order[:size], key=lambda i: (nodes[i].depth, -nodes[i].score))
        finally:
            truncate_cache(self.cache, self.filled)
        new_index = {old: new for new, old in enumerate(keep)}
        # The head's predicted feature under the root and each expanded draft node (for tests and analysis).
        self.tree_features = {new_index.get(i, ROOT): f for i, f in frontier_features.items() if i in new_index or i == ROOT}
        return Draft(
            tokens=[self.vocab_list[nodes[i].token] for i in keep],
            parents=[ROOT if nodes[i].parent == ROOT else new_index[nodes[i].parent] for i in keep],
        )

    def _best_size(self, scores: list[float]) -> int:
        """Nodes to keep (best first) for the most tokens per second. A node is on the accepted path with about
        the probability exp(its cumulative draft log-prob) (EAGLE-2: the draft is well calibrated), so keeping n
        nodes yields about 1 + sum of the first n of those per step, at the cost of drafting (depth levels) plus
        verifying n + 1 tokens. Costs are the run's fixed ones: no clock is read here."""
        draft_seconds = self.tree.level_seconds * self.tree.depth
        best, best_rate, expected = 1, 0.0, 1.0
        for n, score in enumerate(scores, 1):
            expected += math.exp(score)
            rate = expected / (draft_seconds + self.tree.costs.at(n + 1))
            if rate > best_rate:
                best, best_rate = n, rate
        return best

    def _dynamic(self, expand, step, add, nodes: list[_Node]) -> None:
        k = self.tree.top_k
        logp, index = expand([ROOT], k)
        frontier = [add(ROOT, int(t), float(s)) for s, t in zip(logp[0].tolist(), index[0].tolist())]
        for _ in range(self.tree.depth - 1):
            # Auto sizing also stops early: a level can add at most the frontier's acceptance mass in expected
            # tokens, worth one target forward each; skip it when that is less than what the level costs to draft.
            if self.tree.costs is not None:
                mass = sum(math.exp(nodes[i].score) for i in frontier)
                if mass * self.tree.costs.at(1) < self.tree.level_seconds:
                    break
            step(frontier)
            logp, index = expand(frontier, k)
            scores = (torch.tensor([nodes[i].score for i in frontier]).unsqueeze(1) + logp.cpu()).flatten()
            tokens = index.flatten().tolist()
            candidates = [add(frontier[j // k], tokens[j], score) for j, score in enumerate(scores.tolist())]
            best = scores.topk(min(k, len(candidates))).indices.tolist()
            frontier = [candidates[j] for j in best]

    def _static(self, expand, step, add, nodes: list[_Node]) -> None:
        paths = self.tree.static_paths
        width = max(p[-1] for p in paths) + 1
        by_path: dict[tuple[int, ...], int] = {}
        logp, index = expand([ROOT], width)
        for p in (p for p in paths if len(p) == 1):
            by_path[p] = add(ROOT, int(index[0, p[0]]), float(logp[0, p[0]]))
        for depth in range(2, max(len(p) for p in paths) + 1):
            level = [p for p in paths if len(p) == depth]
            parents = sorted({p[:-1] for p in level}, key=lambda p: by_path[p])
            step([by_path[p] for p in parents])
            logp, index = expand([by_path[p] for p in parents], width)
            row_of = {p: r for r, p in enumerate(parents)}
            for p in level:
                r, parent = row_of[p[:-1]], by_path[p[:-1]]
                by_path[p] = add(parent, int(index[r, p[-1]]), nodes[parent].score + float(logp[r, p[-1]]))


@torch.inference_mode()
def measure_level_seconds(head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, top_k: int,
                          repeats: int = 5) -> float:
    """Fastest of a few runs of one dynamic-tree level: the head over top_k nodes after a cached context, then the
    draft logits, log-softmax and top-k of each. Measured once per run (see specbench.costs)."""
    drafter = EagleDrafter(head, lm_head, draft_vocab, TreeSpec(top_k=top_k))
    device, hidden = drafter.lm_head.device, head.config.hidden_size
    gen = torch.Generator().manual_seed(0)
    drafter._run(torch.randint(0, drafter.lm_head.shape[0], (CONTEXT,), generator=gen).tolist(),
                 torch.randn(CONTEXT, hidden, generator=gen).to(device, drafter.lm_head.dtype), list(range(CONTEXT)), None)
    tokens = [0] * top_k
    features = torch.randn(top_k, hidden, generator=gen).to(device, drafter.lm_head.dtype)
    allowed = torch.ones(top_k, CONTEXT + top_k, dtype=torch.bool)
    mask = _additive(allowed, drafter.lm_head.dtype, device)

    def level() -> None:
        out = drafter._run(tokens, features, [CONTEXT] * top_k, mask)
        torch.log_softmax(out @ drafter.lm_head.T, dim=-1).topk(top_k, dim=-1)
        truncate_cache(drafter.cache, CONTEXT)

    return fastest_seconds(level, device, repeats)


def _additive(allowed: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


# ---------------------------------------------------------------------------------------------- training


class EagleTrainable:
    """Loss of the paper: SmoothL1 on the next feature + 0.1 x cross-entropy against the target's distribution,
    uniform noise on input features; positions whose next token is a reply token only."""

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, noise: float = 0.1):
        self.module = head
        self.head = head
        self.lm_head_full = lm_head.detach().float()
        self.draft_vocab = draft_vocab
        self.lm_head = self.lm_head_full if draft_vocab is None else self.lm_head_full[draft_vocab].contiguous()
        self.noise = noise

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1] - 1
        shift = self.head.shift
        features = batch.hidden[:, :-1]
        if self.head.training and self.noise > 0:
            features = features + (torch.rand_like(features) * 2 - 1) * self.noise
        tokens = batch.tokens[:, shift : n + shift]
        valid = batch.valid[:, :n]
        allowed = torch.ones(n, n, dtype=torch.bool).tril() & valid[:, None, :]  # [B, n, n]
        allowed |= torch.eye(n, dtype=torch.bool)  # padding rows see themselves: no row without any key
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
        positions = torch.arange(n).expand(len(tokens), n)
        predicted = self.head(tokens, features, positions, mask)
        train_at = batch.loss_mask[:, :n] & batch.valid[:, 1:]
        predicted, target = predicted[train_at], batch.hidden[:, 1:][train_at]
        feature_loss = F.smooth_l1_loss(predicted, target, reduction="none").mean(-1).mean()
        target_logits, draft_logits = target @ self.lm_head.T, predicted @ self.lm_head.T
        target_p = target_logits.softmax(-1)
        token_loss = -(target_p * draft_logits.log_softmax(-1)).sum(-1).mean()
        metrics = {
            "feature_loss": float(feature_loss.detach()),
            "token_loss": float(token_loss.detach()),
            "top1": float((draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()),
        }
        if not self.head.training and self.draft_vocab is not None:
            full_target = (target @ self.lm_head_full.T).argmax(-1)
            full_draft = (predicted @ self.lm_head_full.T).argmax(-1)
            metrics["top1_full_vocab"] = float((full_draft == full_target).float().mean())
        return feature_loss + 0.1 * token_loss, metrics

    def save(self, folder: Path) -> None:
        save_head(self.head, folder, self.draft_vocab)


# ---------------------------------------------------------------------------------------------- methods


def _build(ctx: BuildContext, inputs: str, static: bool, ablation: bool = False) -> Drafter:
    target = ctx.target.model
    # head=FOLDER (e.g. eagle@head=...) compares heads side by side in one run; --draft sets it for every method.
    chosen = ctx.options.get("head") or ctx.draft
    folder = Path(chosen) if chosen else find_head(ctx.target.name, inputs, ablation)
    head, draft_vocab = load_head(folder, target.get_input_embeddings().weight.detach())
    lm_head = target.get_output_embeddings().weight
    if head.config.hidden_size != lm_head.shape[1] or head.embed_tokens.weight.shape[0] != lm_head.shape[0]:
        raise SpecbenchError(f"EAGLE head {folder} does not fit target {ctx.target.name} (hidden or vocab size)")
    vocab_size = ctx.option("draft_vocab", 0)
    if draft_vocab is not None and vocab_size > 0:
        draft_vocab = draft_vocab[:vocab_size]
    if vocab_size < 0:
        draft_vocab = None  # draft_vocab=-1: the full vocabulary
    head.to(target.device, target.dtype)
    sizing = ctx.options.get("total_tokens", "auto")
    spec = TreeSpec(top_k=ctx.option("top_k", 4), depth=ctx.option("depth", 5),
                    total_tokens=AUTO_MAX_TOKENS if sizing == "auto" else ctx.option("total_tokens", 12))
    if sizing == "auto" and not static:
        costs = ctx.costs or measure_cost_model(target, ctx.target.name)
        spec.costs = costs.verify
        rows = len(draft_vocab) if draft_vocab is not None else lm_head.shape[0]
        key = f"eagle-level:hidden={head.config.hidden_size}:vocab={rows}:top_k={spec.top_k}"
        spec.level_seconds = costs.drafting_cost(key, lambda: measure_level_seconds(head, lm_head, draft_vocab, spec.top_k))
    if static:
        spec.static_paths = parse_tree(ctx.option("tree", EAGLE1_TREE))
    if spec.top_k < 1 or spec.depth < 1 or spec.total_tokens < 1:
        raise SpecbenchError("eagle options top_k, depth and total_tokens must be >= 1")
    return EagleDrafter(head, lm_head, draft_vocab, spec)


METHODS = [
    MethodInfo("eagle", "EAGLE-2: feature-level draft head, dynamic tree (top_k=4, depth=5, total_tokens=auto: sized per step "
               "from this machine's measured verification cost)", True,
               lambda ctx: _build(ctx, "shifted", static=False)),
    MethodInfo("eagle1", "EAGLE-1: the same head, static 25-node tree (--opt tree=JSON paths)", True,
               lambda ctx: _build(ctx, "shifted", static=True)),
] + [
    MethodInfo(f"eagle-{inputs}", f"EAGLE ablation head reading {what}, dynamic tree (the four ablation heads share "
               "one training budget)", True, lambda ctx, inputs=inputs: _build(ctx, inputs, False, ablation=True))
    for inputs, what in [("shifted", "feature + shifted token (EAGLE)"), ("unshifted", "feature + unshifted token"),
                         ("feature", "feature only"), ("token", "token only")]
]


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train an EAGLE head (options: inputs=shifted|unshifted|feature|token, draft_vocab=8192, noise=0.1,
    init=HEAD_FOLDER to fine-tune an existing head, e.g. on self-distilled data; it keeps that head's inputs and
    draft vocabulary)."""
    model = target.model
    embedding = model.get_input_embeddings().weight.detach().float()
    if "init" in options:
        head, draft_vocab = load_head(Path(options["init"]), embedding)
        if "inputs" in options and options["inputs"] != head.config.specbench_inputs:
            raise SpecbenchError(f"init head {options['init']} reads {head.config.specbench_inputs!r}, not {options['inputs']!r}")
    else:
        inputs = options.get("inputs", "shifted")
        if inputs not in INPUTS:
            raise SpecbenchError(f"unknown EAGLE head inputs {inputs!r}; valid: {', '.join(INPUTS)}")
        head = EagleHead(head_config(model.config, inputs))
        head.embed_tokens.weight.data.copy_(embedding)
        draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    lm_head = model.get_output_embeddings().weight
    trainable = EagleTrainable(head, lm_head, draft_vocab, float(options.get("noise", 0.1)))
    return fit(trainable, cache, cfg)


TRAINERS = {"eagle": train}
