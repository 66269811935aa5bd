"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small LM with the target's tokenizer drafts a
chain of gamma tokens, verified by rejection sampling with its distribution q."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from specbench.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.features import FeatureCache, draft_vocabulary
from specbench.kv import new_cache, truncate_cache
from specbench.registry import BuildContext, MethodInfo
from specbench.runtime import prepare_drafter
from specbench.sampling import sample, target_probs
from specbench.target import LoadedModel, load_model, shipped_drafters
from specbench.training import Batch, TrainConfig, fit


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int,
                 draft_vocab: torch.Tensor | None = None) -> None:
        if gamma < 1:
            raise SpecbenchError(f"sps gamma must be >= 1, got {gamma}")
        self.model, self.gamma, self.vocab_size = model, gamma, vocab_size
        # A draft trained on a reduced vocabulary drafts over those rows of its lm_head only (cheap on a CPU);
        # q is then zero elsewhere, which rejection sampling handles exactly.
        self.draft_vocab = None if draft_vocab is None else draft_vocab.to(model.device)
        self.draft_head = None
        if draft_vocab is not None:
            weight = model.get_output_embeddings().weight.detach()
            self.draft_head = weight[self.draft_vocab].contiguous()
        self._reset()

    def _reset(self) -> None:
        self.cache = new_cache()
        self.cached = 0  # how many of ctx.token_ids the draft cache holds
        self.proposed = 0  # tokens in the last proposal (a generation ending at EOS leaves it unreported)

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    def _forward(self, feed: list[int]) -> torch.Tensor:
        """Draft logits over the target's vocabulary for the token after `feed`."""
        ids = torch.tensor([feed], device=self.model.device)
        if self.draft_head is None:
            out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            return self._logits(out.logits[0, -1].float())
        hidden = self.model.get_decoder()(input_ids=ids, past_key_values=self.cache, use_cache=True)
        reduced = (hidden.last_hidden_state[0, -1] @ self.draft_head.T).float()
        return torch.full((self.vocab_size,), float("-inf"), device=reduced.device).index_put_((self.draft_vocab,), reduced)

    def _logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's vocabulary (the two may pad their embeddings differently)."""
        if logits.shape[-1] >= self.vocab_size:
            return logits[..., : self.vocab_size]
        pad = logits.new_full((self.vocab_size - logits.shape[-1],), float("-inf"))
        return torch.cat([logits, pad])

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        feed = ctx.token_ids[self.cached :]
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for _ in range(self.gamma):
            logits = self._forward(feed)
            self.cached += len(feed)
            if ctx.sampling.greedy:
                token = int(logits.argmax())
            else:
                q = target_probs(logits, ctx.sampling)
                token = sample(q, ctx.generator)
                dists.append(q)
            tokens.append(token)
            feed = [token]
        self.proposed = len(tokens)
        return Draft.chain(tokens, torch.stack(dists) if dists else None)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if not self.proposed:
            return
        # The cache holds the context plus every drafted token but the last; keep the ones the target accepted.
        context_len = self.cached - (self.proposed - 1)
        self.cached = context_len + min(len(step.emitted) - 1, self.proposed - 1)
        truncate_cache(self.cache, self.cached)
        self.proposed = 0


# Small drafts trained here share the target's embedding and lm_head (frozen), so only their own layers are saved.
SHARED_KEY = "specbench_shared_embedding"
DRAFTS_DIR = shipped_drafters("sps")
PACKAGED_DRAFTS = {"smollm2-135m-instruct": "smollm2-135m-instruct"}


def small_draft(target: PreTrainedModel, layers: int) -> LlamaForCausalLM:
    """A Llama with the target's width and `layers` decoder layers, started from the target's first layers, final
    norm, embedding and lm_head (the last two frozen and shared)."""
    t = target.config
    config = LlamaConfig(
        vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        num_hidden_layers=layers, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads, rms_norm_eps=t.rms_norm_eps,
        max_position_embeddings=t.max_position_embeddings, rope_parameters=t.rope_parameters,
        tie_word_embeddings=False, bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id,
    )
    draft = LlamaForCausalLM(config)
    body = target.get_decoder()
    with torch.no_grad():
        for mine, theirs in zip(draft.model.layers, body.layers):
            mine.load_state_dict(theirs.state_dict())
        draft.model.norm.load_state_dict(body.norm.state_dict())
    share_embeddings(draft, target)
    return draft


def share_embeddings(draft: PreTrainedModel, target: PreTrainedModel) -> None:
    draft.model.embed_tokens.weight = target.get_input_embeddings().weight
    draft.lm_head.weight = target.get_output_embeddings().weight
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)


def save_small_draft(draft: LlamaForCausalLM, folder: Path, draft_vocab: torch.Tensor | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = draft.config.to_dict()
    config[SHARED_KEY] = True
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    own = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in draft.state_dict().items()
           if k not in ("model.embed_tokens.weight", "lm_head.weight")}
    save_file(own, str(folder / "model.safetensors"))


def load_small_draft(folder: Path, target: PreTrainedModel) -> tuple[LlamaForCausalLM, torch.Tensor | None]:
    raw = json.loads((folder / "config.json").read_text())
    vocab = raw.pop("specbench_draft_vocab", None)
    raw.pop(SHARED_KEY, None)
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    if config.hidden_size != target.config.hidden_size or config.vocab_size != target.config.vocab_size:
        raise SpecbenchError(f"draft {folder} does not fit the target (hidden or vocabulary size)")
    draft = LlamaForCausalLM(config)
    share_embeddings(draft, target)
    missing, unexpected = draft.load_state_dict({k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()},
                                                strict=False)
    if unexpected or set(missing) - {"model.embed_tokens.weight", "lm_head.weight"}:
        raise SpecbenchError(f"{folder}: weights do not match its config")
    draft.to(target.device, target.dtype).eval()
    return draft, None if vocab is None else torch.tensor(vocab, dtype=torch.long)


def _is_small_draft(folder: Path) -> bool:
    config = folder / "config.json"
    return config.is_file() and json.loads(config.read_text()).get(SHARED_KEY, False)


class SmallDraftTrainable:
    """Distillation: cross-entropy of the draft against the target's next-token distribution (from the cached
    features), over the draft vocabulary, on reply positions."""

    def __init__(self, draft: LlamaForCausalLM, draft_vocab: torch.Tensor) -> None:
        self.module = draft
        self.draft_vocab = draft_vocab
        weight = draft.lm_head.weight.detach().float()
        self.lm_head = weight if draft_vocab is None else weight[draft_vocab.to(weight.device)].contiguous()

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        hidden = self.module.model(input_ids=batch.tokens, attention_mask=batch.valid.long()).last_hidden_state
        train_at = batch.loss_mask & batch.valid
        draft_logits = hidden[train_at] @ self.lm_head.T
        target_logits = batch.hidden[train_at] @ self.lm_head.T
        loss = -(target_logits.softmax(-1) * draft_logits.log_softmax(-1)).sum(-1).mean()
        top1 = (draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()
        return loss, {"kd_loss": float(loss.detach()), "top1": float(top1)}

    def save(self, folder: Path) -> None:
        save_small_draft(self.module, folder, self.draft_vocab)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train a small draft LM for sps (options: layers=2, draft_vocab=8192) by distillation from cached features."""
    draft = small_draft(target.model, int(options.get("layers", 2)))
    draft.to(target.model.device)  # trained on the target's device (its embedding and lm_head are the target's)
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    return fit(SmallDraftTrainable(draft, draft_vocab), cache, cfg)


def build(ctx: BuildContext) -> Drafter:
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    gamma = ctx.option("gamma", 4)
    folder = Path(ctx.draft) if ctx.draft else None
    if folder is None and ctx.target.name.lower() in PACKAGED_DRAFTS:
        folder = DRAFTS_DIR / PACKAGED_DRAFTS[ctx.target.name.lower()]
    if folder is not None and _is_small_draft(folder):
        draft_model, draft_vocab = load_small_draft(folder, ctx.target.model)
        prepare_drafter(draft_model, ctx.target.runtime)
        return DraftModelDrafter(draft_model, gamma, vocab, draft_vocab)
    if not ctx.draft:
        raise SpecbenchError("sps needs a draft model: --draft NAME_OR_PATH (an HF causal LM with the target's tokenizer)")
    # The draft runs on the target's runtime (stock when the target is stock).
    runtime = ctx.target.runtime.name if ctx.target.runtime and ctx.target.runtime.swapped_linears else "stock"
    draft = load_model(ctx.draft, ctx.device, ctx.dtype, runtime)
    if draft.tokenizer.get_vocab() != ctx.target.tokenizer.get_vocab():
        raise SpecbenchError(f"--draft {ctx.draft} has a different tokenizer from the target {ctx.target.name}")
    return DraftModelDrafter(draft.model, gamma, vocab)


METHODS = [MethodInfo("sps", "speculative sampling: a small draft LM proposes gamma=4 tokens (--draft, or the "
                       "2-layer draft trained here for the default target)", True, build)]

TRAINERS = {"sps-draft": train}
