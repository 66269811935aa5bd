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
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from specbench.costs import measure_cost_model
from specbench.draft import Drafter, parse_tree
from specbench.errors import SpecbenchError
from specbench.feature_tree import AUTO_MAX_TOKENS, FeatureTreeDrafter, TreeSpec, measure_level_seconds
from specbench.registry import BuildContext, MethodInfo
from specbench.runtime import RuntimeInfo, frozen_linear, prepare_drafter
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
# The default head's folder within a target's folder: `shifted` was the first recipe, `self-t0` the same stage 1
# fine-tuned on more of the target's own replies, `self-t0-6m` on more of them for three times as long,
# `self-t0-all` continues it on all of them, and `self-t0-12m`, trained from scratch on all of them for 12M
# positions, is the best of them on the target's own text (README).
DEFAULT_HEAD = "self-t0-12m"
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


def find_head(target_name: str, ablation_inputs: str | None = None) -> Path:
    """The shipped head for a target: heads/eagle/<target>/<DEFAULT_HEAD>, or one of the four ablation heads
    (trained on the same, smaller budget) in heads/eagle/<target>/ablation/<ablation_inputs>."""
    name = PACKAGED_HEADS.get(target_name.lower())
    inputs = ablation_inputs or "shifted"
    within = Path("ablation", ablation_inputs) if ablation_inputs else Path(DEFAULT_HEAD)
    folder = HEADS_DIR / name / within if name else None
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


class EagleFeatureHead:
    """An EagleHead as specbench.feature_tree sees it: it reads the target's final-norm hidden state, and the
    target's own lm_head (restricted to the draft vocabulary) turns a predicted feature into draft logits."""

    hidden_layers = (-1,)

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None,
                 runtime: RuntimeInfo | None = None) -> None:
        self.head = head.eval()
        self.shift = head.shift
        self.device, self.dtype = head.fc.weight.device, head.fc.weight.dtype
        self.feature_size = head.config.hidden_size
        vocab = (draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])).to(self.device)
        self.lm_head = frozen_linear(lm_head.detach()[vocab].to(self.device, self.dtype).contiguous(), runtime)
        self.target_ids = vocab.tolist()

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.head.config)

    def run(self, tokens, features, positions, mask, cache):
        return self.head(tokens[None], features[None], positions[None], mask, cache)[0]

    def draft_logits(self, predicted):
        return self.lm_head(predicted)


class EagleDrafter(FeatureTreeDrafter):
    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, tree: TreeSpec,
                 runtime: RuntimeInfo | None = None):
        super().__init__(EagleFeatureHead(head, lm_head, draft_vocab, runtime), tree)


# ---------------------------------------------------------------------------------------------- training


class EagleTrainable:
    """Loss of the paper: SmoothL1 on the next feature + 0.1 x cross-entropy against the target's distribution,
    uniform noise on input features; positions whose next token is a reply token only."""

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, noise: float = 0.1):
        self.module = head
        self.head = head
        self.lm_head_full = lm_head.detach().float()
        self.draft_vocab = draft_vocab
        self.lm_head = (self.lm_head_full if draft_vocab is None
                        else self.lm_head_full[draft_vocab.to(lm_head.device)].contiguous())
        self.noise = noise

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1] - 1
        shift = self.head.shift
        features = batch.hidden[:, :-1]
        if self.head.training and self.noise > 0:
            features = features + (torch.rand_like(features) * 2 - 1) * self.noise
        tokens = batch.tokens[:, shift : n + shift]
        valid = batch.valid[:, :n]
        device = features.device
        allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril() & valid[:, None, :]  # [B, n, n]
        allowed |= torch.eye(n, dtype=torch.bool, device=device)  # padding rows see themselves: no row without any key
        mask = torch.zeros(allowed.shape, device=device).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
        positions = torch.arange(n, device=device).expand(len(tokens), n)
        predicted = self.head(tokens, features, positions, mask)
        train_at = batch.loss_mask[:, :n] & batch.valid[:, 1:]
        predicted, target = predicted[train_at], batch.hidden[:, 1:][train_at]
        feature_loss = F.smooth_l1_loss(predicted.float(), target, reduction="none").mean(-1).mean()
        with torch.autocast(device.type, enabled=False):  # under mixed precision the target's side stays fp32
            target_logits = target @ self.lm_head.T
        draft_logits = (predicted @ self.lm_head.T).float()
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


def _build(ctx: BuildContext, static: bool, ablation_inputs: str | None = None) -> Drafter:
    target = ctx.target.model
    # head=FOLDER (e.g. eagle@head=...) compares heads side by side in one run; --draft sets it for every method.
    chosen = ctx.options.get("head") or ctx.draft
    folder = Path(chosen) if chosen else find_head(ctx.target.name, ablation_inputs)
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
    prepare_drafter(head, ctx.target.runtime)
    sizing = ctx.options.get("total_tokens", "auto")
    spec = TreeSpec(top_k=ctx.option("top_k", 4), depth=ctx.option("depth", 5),
                    total_tokens=AUTO_MAX_TOKENS if sizing == "auto" else ctx.option("total_tokens", 12))
    if sizing == "auto" and not static:
        costs = ctx.costs or measure_cost_model(target, ctx.target.name)
        spec.costs = costs.verify
        rows = len(draft_vocab) if draft_vocab is not None else lm_head.shape[0]
        key = f"eagle-level:hidden={head.config.hidden_size}:vocab={rows}:top_k={spec.top_k}"
        spec.level_seconds = costs.drafting_cost(
            key, lambda: measure_level_seconds(EagleFeatureHead(head, lm_head, draft_vocab, ctx.target.runtime),
                                               spec.top_k))
    if static:
        spec.static_paths = parse_tree(ctx.option("tree", EAGLE1_TREE))
    if spec.top_k < 1 or spec.depth < 1 or spec.total_tokens < 1:
        raise SpecbenchError("eagle options top_k, depth and total_tokens must be >= 1")
    return EagleDrafter(head, lm_head, draft_vocab, spec, ctx.target.runtime)


METHODS = [
    MethodInfo("eagle", "EAGLE-2: feature-level draft head, dynamic tree (top_k=4, depth=5, total_tokens=auto: sized per step "
               "from this machine's measured verification cost)", True,
               lambda ctx: _build(ctx, static=False)),
    MethodInfo("eagle1", "EAGLE-1: the same head, static 25-node tree (--opt tree=JSON paths)", True,
               lambda ctx: _build(ctx, static=True)),
] + [
    MethodInfo(f"eagle-{inputs}", f"EAGLE ablation head reading {what}, dynamic tree (the four ablation heads share "
               "one training budget)", True, lambda ctx, inputs=inputs: _build(ctx, False, ablation_inputs=inputs))
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
    head.to(lm_head.device)  # trained in fp32 on the target's device
    trainable = EagleTrainable(head, lm_head, draft_vocab, float(options.get("noise", 0.1)))
    return fit(trainable, cache, cfg)


TRAINERS = {"eagle": train}
