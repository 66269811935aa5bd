"""PARD's reference (github.com/AMD-AGI/PARD: parallel draft, K tokens drafted in ONE forward of the draft model
over the context and K-1 `pard_token` mask tokens), run unchanged on the seeded tiny target: a golden trace of `pard`.

    python pard_reference.py --ref REF_DIR --commit SHA --out TRACE.json [--draft-dir FOLDER | --draft-out FOLDER]

Runs in the reference's own venv (transformers 4.51.3, the version its requirement.txt pins; torch 2.13.0: pard.sh
makes it), never with specbench. REF_DIR holds the reference's `pard/` package as `git archive` gives it (nothing
edited). The code path is the README's "Eval With Transformers+" for PARD-1: `python3 -m pard.infer -c
config/eval/llama3_eval.yaml` runs pard/pard_infer.py's `PardInfer(draft_k, tokens, draft, target, benchmark,
para=True, ...)` and its `eval()`, which loads both models with its `model_init` (AutoModelForCausalLM.from_pretrained
with attn_implementation='eager', and a StaticCache each), sets `forward_gen` (`get_model`), and decodes every prompt
with its `generate(test_datas, model, model_draft, target_cache, draft_cache, tokenizer)`: the loop this trace
records. In para mode each step feeds the draft its uncached tokens plus draft_k - 1 copies of the draft config's
`pard_token` (read by PardInfer.__init__ from the draft's config.json, as AMD's checkpoints carry it), takes the
argmax of the draft's last draft_k logits as the draft, verifies [uncached tokens, draft] with the target at T=0
(argmax), keeps the accepted prefix and the target's next token, rolls the draft's cache back by draft_k - 1 (the
mask slots) and the target's to all kept tokens but the last, and feeds the draft every kept token next step.

What is the reference's own, called as is: PardInfer.__init__ (para=True: pard_token from the draft's config),
PardInfer.model_init (both models and their StaticCaches), PardInfer.generate (the whole decode loop, with its
get_input, speed_logger and cache_mask). What the driver does instead of eval()/get_model(), and why (nothing here
changes a token):
  - get_model() loads with model_init's default device 'cuda' and AutoTokenizer; on this CPU build the driver calls
    model_init itself with device='cpu', torch_dtype=torch.float32 (the reference's bfloat16 is for its GPUs; the
    traces are float32) and max_cache_len, and sets forward_gen = forward for both models, as get_model does with
    nc=True (the reference's default wraps them in torch.compile: same arithmetic, another kernel schedule);
  - eval() reads datas/bmk/*.jsonl and warms up on 8 of them first; the driver calls generate once on the 4 prompts
    (caches are reset for each text, so a warm-up leaves nothing behind);
  - the tokenizer: the tiny target has no text vocabulary, so `tokenizer` is a stand-in that reads a prompt written
    as its token ids ("12 7 140 ..."), applies no chat template (get_input's system and user turns: the user turn's
    text is the prompt), and whose eos_token_id is 100 (the placeholder the target never picks: every prompt runs
    to its budget); its decode() records all_token. get_input calls .cuda() on the ids: the stand-in's ids answer
    .cuda() with the CPU tensor;
  - torch.cuda.synchronize (speed_logger's timing) is a no-op when torch has no CUDA; infer.log = False (the
    reference's own switch) quiets the per-forward speed lines;
  - max_cache_len=512 (the tiny target's context): PardInfer's default is `tokens` (96 here), and its loop also stops
    once the sequence reaches max_cache_len - 32, which at 96 would stop every prompt well short of 96 new tokens
    (its eval configs run tokens=512 with that default).
  - draft_k=12: pard_infer.py's click default and the value of every config/eval/*.yaml (and the README's).

Nothing of the reference is replaced or wrapped. What each step did is read off:
  - forward pre-hooks on each model's decoder (model.model: forward_gen is the bound forward, which runs no hooks of
    the top module; the decoder and lm_head are called as modules): the ids fed and their cache_position; forward
    hooks on each lm_head: the logits (the draft's last K give its argmax = the drafted tokens, and their top-2
    gaps; the target's give its greedy choices);
  - a loguru sink on the reference's own logger ("[accept token num]: N" per step) and generate's frame at its
    return (sys.setprofile: profile['accept_length'] and profile['acc']), so each step's accepted count is the
    reference's own number, checked against the hooks; the stand-in's decode() gives all_token per prompt.

Draft (--draft-dir takes a committed folder; without it one is made here): a 2-layer Llama of the target's shapes
and vocabulary in AMD's published layout (a whole HF causal LM, its own embeddings and lm_head: config.json from
config.save_pretrained with `pard_token` 100 and `spd_type` "pard", as pard_train.py sets them; model.safetensors
float32), started from the target's embedding, lm_head, final norm and layers 0-1, then trained as pard_train.py
trains (`train`: K copies of each sequence, copy 0 its tokens and copies 1..K-1 the pard_token at the same position
ids, the attention mask of its warp_data_collator, labels the next token, COD keeping a share ratio^c (>= min) of
copy c's positions chained to copy c-1's, cross-entropy on hard labels; here the sequences are the target's greedy
continuations of random prompts, labels on the continuation only) so that multi-token accepts happen. Float training
on CPU: ship the written folder with the trace rather than re-derive it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers

HERE = Path(__file__).resolve().parent  # scripts/conformance/ in the checkout; else TINY_TARGET_DIR names it
sys.path.insert(0, os.environ.get("TINY_TARGET_DIR") or str(HERE))
import tiny_target  # noqa: E402
from trace_file import write_trace  # noqa: E402

DRAFT_LAYERS = 2
PARD_TOKEN = tiny_target.PLACEHOLDER  # a token of the vocabulary the target never picks (cf. Llama 3's 128020)
EOS = tiny_target.PLACEHOLDER  # the stand-in tokenizer's eos: never the target's pick, every prompt runs its budget
DRAFT_K = 12  # pard_infer.py's default (-k/--draft_k) and every config/eval/*.yaml's
MAX_CACHE_LEN = tiny_target.CONTEXT


def draft_config() -> transformers.LlamaConfig:
    cfg = tiny_target.config()
    cfg.num_hidden_layers = DRAFT_LAYERS
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "float32"
    cfg.pard_token = PARD_TOKEN  # as pard_train.py: model.config.pard_token = unused_tokenids[0]
    cfg.spd_type = "pard"  # as pard_train.py: model.config.spd_type = 'pard'
    return cfg


def digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def init_from_target(draft, target) -> None:
    """Embedding, lm_head, final norm and decoder layers 0..DRAFT_LAYERS-1 copied from the target (then trained)."""
    draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    draft.lm_head.weight.copy_(target.lm_head.weight)
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    for mine, theirs in zip(draft.model.layers, target.model.layers):
        mine.load_state_dict(theirs.state_dict())


def pard_layout(length: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PARD's training layout for K copies of a sequence of `length` tokens (pard_train.py's warp_data_collator, in
    its terms): flat index t = c * length + j for copy c, position j; position ids j in every copy; query (c, j)
    sees the real tokens (0, i) for i <= j - c (its anchor j - c and before), the masks (c', j - c + c') for
    1 <= c' <= c that share its anchor, and itself (the collator's diagonal, chain and prefix terms; they differ
    only on rows whose anchor is negative, whose labels are dropped). Copy c's label at position j is token j + 1
    (the collator's labels with its first c set to -100, shifted by the loss). Returns position ids [K*n], the
    boolean mask [K*n, K*n], and for each flat index its (copy, position) as [K*n, 2]."""
    copy = torch.arange(k).repeat_interleave(length)
    pos = torch.arange(length).repeat(k)
    anchor = pos - copy
    real = (copy[None, :] == 0) & (pos[None, :] <= anchor[:, None])
    chain = (copy[None, :] >= 1) & (copy[None, :] <= copy[:, None]) & (pos[None, :] - copy[None, :] == anchor[:, None])
    allowed = real | chain | torch.eye(k * length, dtype=torch.bool)
    return pos, allowed, torch.stack([copy, pos], 1)


def cod_indices(length: int, k: int, ratio: float, ratio_min: float, gen: torch.Generator) -> torch.Tensor:
    """COD (conditional drop-token), as the collator draws it: copy 0 whole; copy c keeps int(n * max(ratio^c, min))
    positions drawn from (copy c-1's kept positions + 1) mod n, so each kept mask's chain to its anchor is kept."""
    keep = torch.zeros(k, length, dtype=torch.bool)
    keep[0] = True
    prev = torch.arange(length)
    for c in range(1, k):
        num = int(length * max(ratio ** c, ratio_min))
        if num == 0:
            break
        chosen = prev[torch.randperm(len(prev), generator=gen)[:num]]
        keep[c, chosen] = True
        prev = (chosen + 1) % length
    return keep.reshape(-1).nonzero(as_tuple=True)[0]


@torch.enable_grad()
def train(draft, target, seed: int, k: int = DRAFT_K, prompts: int = 2048, prompt_len: int = 8, length: int = 88,
          steps: int = 1000, batch: int = 32, ratio: float = 0.7, ratio_min: float = 0.2) -> dict:
    """PARD training (see the module doc) on the target's greedy continuations (`length` tokens) of `prompts` random
    prompts (never the pard_token), all drawn from one generator; every parameter trained (pard_train.py trains the
    whole model, the pard_token's embedding row included). AdamW 3e-3, warmup 50, cosine; CPU float32."""
    gen = torch.Generator().manual_seed(seed + 1)
    V = tiny_target.VOCAB
    starts = torch.randint(0, V, (prompts, prompt_len), generator=gen)
    starts[starts == PARD_TOKEN] = 1
    with torch.no_grad():
        seqs = torch.cat([target.generate(s, attention_mask=torch.ones_like(s), max_new_tokens=length,
                                          do_sample=False, eos_token_id=None, pad_token_id=0)
                          for s in starts.split(512)])
    n = seqs.shape[1]
    pos_all, allowed_all, where_all = pard_layout(n, k)
    lowest = torch.finfo(torch.float32).min
    held = seqs[-64:]
    train_rows = prompts - 64
    draft.train()
    opt = torch.optim.AdamW(draft.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    t0 = time.time()

    def forward(rows: torch.Tensor, idx: torch.Tensor):
        copy, pos = where_all[idx, 0], where_all[idx, 1]
        ids = torch.where(copy[None, :] == 0, rows[:, pos], torch.full_like(rows[:, pos], PARD_TOKEN))
        mask = torch.zeros(len(idx), len(idx)).masked_fill_(~allowed_all[idx][:, idx], lowest)
        logits = draft(input_ids=ids, position_ids=pos_all[idx].expand(len(rows), -1),
                       attention_mask=mask[None, None].expand(len(rows), 1, -1, -1)).logits
        label_pos = pos + 1
        valid = (label_pos < n) & (label_pos >= torch.maximum(copy, torch.full_like(copy, prompt_len)))
        labels = torch.where(valid[None, :], rows[:, label_pos.clamp(max=n - 1)], torch.full_like(rows[:, pos], -100))
        return logits, labels, copy

    for step in range(steps):
        rows = seqs[torch.randint(0, train_rows, (batch,), generator=gen)]
        logits, labels, _ = forward(rows, cod_indices(n, k, ratio, ratio_min, gen))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"train step {step}: loss {float(loss.detach()):.3f} ({time.time() - t0:.0f} s)", file=sys.stderr)
    draft.eval()
    with torch.no_grad():  # held-out top-1 accuracy per depth, every position of every copy
        logits, labels, copy = forward(held, torch.arange(n * k))
        hit = (logits.argmax(-1) == labels) & (labels >= 0)
        top1 = [round(float(hit[:, copy == c].sum() / (labels[:, copy == c] >= 0).sum()), 3) for c in range(k)]
    print(f"held-out top-1 by depth (copy 0..{k - 1}): {top1}", file=sys.stderr)
    return {"top1_by_depth": top1, "train_seconds": round(time.time() - t0, 1)}


@torch.no_grad()
def check_layout(draft, seq: list[int], k: int) -> float:
    """The training layout's copy c at position a + c gives the logits of the inference forward over [tokens 0..a,
    pard_token x (K-1)] at position a + c (the reference's draft forward): the largest difference."""
    n = len(seq)
    pos, allowed, where = pard_layout(n, k)
    ids = torch.tensor([seq] + [[PARD_TOKEN] * n] * (k - 1)).reshape(1, -1)
    mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)[None, None]
    train_logits = draft(input_ids=ids, position_ids=pos[None], attention_mask=mask).logits[0]
    worst = 0.0
    for a in (3, n // 2, n - k):
        infer = draft(torch.tensor([seq[: a + 1] + [PARD_TOKEN] * (k - 1)])).logits[0, a:]
        for c in range(k):
            worst = max(worst, float((train_logits[c * n + a + c] - infer[c]).abs().max()))
    return worst


def save_draft(draft, folder: Path) -> None:
    """AMD's published layout: config.json (config.save_pretrained, with pard_token and spd_type) + model.safetensors
    (every weight, float32)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    draft.config.save_pretrained(str(folder))
    save_file({k: v.detach().contiguous() for k, v in draft.state_dict().items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})


class HostIds:
    """The prompt's ids as get_input receives them from the tokenizer; .cuda() is the identity on this CPU run."""

    def __init__(self, ids: torch.Tensor) -> None:
        self.ids = ids

    def cuda(self) -> torch.Tensor:
        return self.ids


class IdTokenizer:
    """Stand-in for the target's tokenizer (the tiny target has none): a prompt is written as its ids; no chat
    template (the user turn's text is the prompt); eos_token_id 100; decode() records what it is given."""
    eos_token_id = EOS

    def __init__(self) -> None:
        self.decoded: list[list[int]] = []

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs) -> str:
        assert not tokenize and add_generation_prompt and messages[-1]["role"] == "user"
        return messages[-1]["content"]

    def __call__(self, texts, add_special_tokens=False, return_tensors="pt"):
        assert not add_special_tokens and return_tensors == "pt"
        return types.SimpleNamespace(input_ids=HostIds(torch.tensor([[int(t) for t in s.split()] for s in texts])))

    def decode(self, ids) -> str:
        self.decoded.append([int(t) for t in ids.tolist()])
        return " ".join(map(str, self.decoded[-1]))


def reference_class(ref: Path):
    sys.path.insert(0, str(ref))
    from pard.pard_infer import PardInfer  # noqa: E402  (the reference, as is)
    return PardInfer


def decode_all(infer, prompts: list[list[int]], tokens: int) -> tuple[list[dict], dict]:
    """Run the reference's generate on every prompt (one call, as eval() does) and split what was observed."""
    from loguru import logger
    from pard import pard_infer as ref_module
    model, draft = infer.model, infer.model_draft
    K = infer.draft_k
    calls: list[dict] = []  # in call order: {"who": "draft"|"target", ids, cache_position, logits}
    accept_logged: list[int] = []
    ret: dict = {}

    def pre(who):
        def hook(module, args, kwargs):
            calls.append({"who": who, "ids": kwargs["input_ids"][0].tolist(),
                          "cache_position": kwargs["cache_position"].tolist(),
                          "position_ids": kwargs.get("position_ids")})
        return hook

    def head(module, args, output):
        calls[-1]["logits"] = output[0].detach().clone()

    def sink(message):
        text = message.record["message"]
        if text.startswith("[accept token num]: "):
            accept_logged.append(int(text.split(": ")[1]))

    generate_code = ref_module.PardInfer.generate.__code__

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is generate_code:
            p = frame.f_locals["profile"]
            ret.update(accept_length=[int(a) for a in p["accept_length"]], acc=[int(a) for a in p["acc"]])

    hooks = [model.model.register_forward_pre_hook(pre("target"), with_kwargs=True),
             draft.model.register_forward_pre_hook(pre("draft"), with_kwargs=True),
             model.lm_head.register_forward_hook(head), draft.lm_head.register_forward_hook(head)]
    sink_id = logger.add(sink, level="INFO")
    tokenizer = IdTokenizer()
    infer.tokenizer = tokenizer
    texts = [" ".join(map(str, p)) for p in prompts]
    sys.setprofile(profile)
    try:
        infer.generate(texts, model, draft, infer.target_cache, infer.draft_cache, tokenizer=tokenizer)
    finally:
        sys.setprofile(None)
        logger.remove(sink_id)
        for h in hooks:
            h.remove()
    assert len(tokenizer.decoded) == len(prompts)
    assert accept_logged == ret["accept_length"], "the logged accept counts are profile['accept_length']"
    assert all(c["position_ids"] is None for c in calls), "position ids come from cache_position"

    # split into steps: each step is one draft forward then one target forward
    assert len(calls) % 2 == 0 and all(calls[i]["who"] == "draft" and calls[i + 1]["who"] == "target"
                                       for i in range(0, len(calls), 2))
    step_pairs = [(calls[i], calls[i + 1]) for i in range(0, len(calls), 2)]
    runs, s_i, acc_i = [], 0, 0
    for r, prompt in enumerate(prompts):
        n = len(prompt)
        all_token = tokenizer.decoded[r]
        assert all_token[:n] == prompt
        seq = list(prompt)
        draft_cached = 0  # what the reference's draft cache holds of seq (its draft_cache_length after rollback)
        steps = []
        while True:
            d, v = step_pairs[s_i]
            context = len(seq)
            if not steps:
                assert d["cache_position"][0] == 0 and v["cache_position"][0] == 0, "a prompt starts on empty caches"
            fed_real, masks = d["ids"][: len(d["ids"]) - (K - 1)], d["ids"][len(d["ids"]) - (K - 1):]
            assert masks == [infer.pard_token[0]] * (K - 1) == [PARD_TOKEN] * (K - 1)
            assert d["cache_position"] == list(range(draft_cached, draft_cached + len(d["ids"])))
            assert fed_real == seq[draft_cached:], "the draft is fed every token its cache lacks, then the masks"
            draft_logits = d["logits"][-K:]
            draft_tokens = draft_logits.argmax(-1).tolist()
            top2 = draft_logits.topk(2, -1).values
            # the target verifies what its cache lacks (the prompt at first, then the last kept token), then the draft
            target_cached = v["cache_position"][0]
            assert target_cached == (0 if not steps else context - 1)
            assert v["ids"] == seq[target_cached:] + draft_tokens
            assert v["cache_position"] == list(range(target_cached, target_cached + len(v["ids"])))
            post = v["logits"][-K - 1:].argmax(-1).tolist()
            acc = 0
            while acc < K and draft_tokens[acc] == post[acc]:
                acc += 1
            assert acc + 1 == ret["accept_length"][s_i], "the reference's own accept count"
            assert ret["acc"][acc_i:acc_i + acc + (acc < K)] == [1] * acc + [0] * (acc < K)
            acc_i += acc + (acc < K)
            appended = draft_tokens[:acc] + [post[acc]]
            steps.append({
                "context": context,  # tokens before the step (prompt + kept): total_token_lenght
                "draft_fed": {"start": draft_cached, "tokens": len(fed_real), "masks": K - 1},  # draft forward
                "draft": draft_tokens,  # argmax of the draft's last K logits (last fed token, K-1 masks)
                "target_fed": {"start": target_cached, "tokens": context - target_cached},  # before the draft
                "target_argmax": post,  # the target's greedy token after the context and after each drafted token
                "accepted": acc,  # drafted tokens accepted
                "accept_length": acc + 1,  # as the reference records it (profile['accept_length']: + bonus)
                "appended": appended,
                "draft_top2_gaps": [round(float(g), 4) for g in top2[:, 0] - top2[:, 1]],
            })
            draft_cached = context  # after cache_mask(draft_cache_length - (K - 1)): the context before this step
            seq += appended
            s_i += 1
            if len(seq) - n >= tokens:
                break
        assert seq == all_token, "the reference's all_token"
        runs.append({"prompt": prompt, "output": seq[n:n + tokens], "generated": len(seq) - n, "steps": steps})
    assert s_i == len(step_pairs) and acc_i == len(ret["acc"])
    return runs, ret


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", type=Path, required=True, help="folder holding the reference's pard/ package")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--draft-dir", type=Path, default=None,
                   help="load the draft from this folder (the committed fixture) instead of making one")
    p.add_argument("--draft-out", type=Path, default=None, help="write the draft folder made here")
    p.add_argument("--seed", type=int, default=tiny_target.SEED + 31)
    p.add_argument("--train-steps", type=int, default=1000)
    p.add_argument("--work", type=Path, default=None, help="where the target's folder goes (default: a temp dir)")
    args = p.parse_args()
    torch.set_num_threads(1)
    PardInfer = reference_class(args.ref)
    import tempfile

    target = tiny_target.build().requires_grad_(False)
    fingerprint = tiny_target.fingerprint(target)
    training = None
    if args.draft_dir is not None:
        folder = args.draft_dir
        recipe = (f"folder {folder.name}/ (made by this script with --draft-out: the target's embedding, lm_head, final "
                  f"norm and layers 0..{DRAFT_LAYERS - 1}, then PARD-trained; its sha256 below)")
        if (folder / "training.json").is_file():  # what the making run measured (held-out top-1 by depth, ...)
            training = json.loads((folder / "training.json").read_text())
    else:
        assert args.draft_out is not None, "--draft-out FOLDER: where the draft made here goes"
        folder = args.draft_out
        torch.manual_seed(args.seed)
        fresh = transformers.LlamaForCausalLM(draft_config())
        init_from_target(fresh, target)
        if args.train_steps > 0:
            training = train(fresh, target, args.seed, steps=args.train_steps)
        probe = tiny_target.greedy(target, tiny_target.prompts()[0], 40)
        training = {**(training or {}), "layout_check_max_abs_diff": check_layout(fresh, tiny_target.prompts()[0] +
                                                                                  probe, DRAFT_K)}
        assert training["layout_check_max_abs_diff"] < 1e-4, training
        save_draft(fresh, folder)
        os.chmod(folder / "model.safetensors", 0o644)
        recipe = (f"the target's embedding, lm_head, final norm and layers 0..{DRAFT_LAYERS - 1}, then PARD-trained "
                  f"{args.train_steps} steps (K={DRAFT_K} copies, COD 0.7/0.2, CE on the target's greedy "
                  f"continuations)")
        (folder / "training.json").write_text(json.dumps(training, indent=1) + "\n")

    work = args.work or Path(tempfile.mkdtemp(prefix="pard-ref-"))
    target_dir = work / "tiny-target"
    target.save_pretrained(str(target_dir), safe_serialization=True)

    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None  # speed_logger's timing; there is no device to wait for
    infer = PardInfer(draft_k=DRAFT_K, tokens=args.tokens, draft=str(folder), target=str(target_dir),
                      benchmark="tiny", para=True, nc=True, maxtune=False, max_cache_len=MAX_CACHE_LEN,
                      model_serie="llama3")
    infer.log = False
    # as get_model(nc=True), on the CPU in float32
    infer.model, infer.target_cache = infer.model_init(str(target_dir), torch_dtype=torch.float32,
                                                       max_cache_len=infer.max_cache_len, device="cpu")
    infer.model_draft, infer.draft_cache = infer.model_init(str(folder), torch_dtype=torch.float32,
                                                            max_cache_len=infer.max_cache_len, device="cpu")
    infer.model.forward_gen = infer.model.forward
    infer.model_draft.forward_gen = infer.model_draft.forward
    infer.model.eval()
    infer.model_draft.eval()
    assert tiny_target.fingerprint(infer.model) == fingerprint, "the target as model_init loads it"
    assert infer.pard_token[0] == PARD_TOKEN and infer.model_draft.config.spd_type == "pard"
    assert infer.model.config._attn_implementation == "eager" == infer.model_draft.config._attn_implementation
    state = {k: v.detach().clone() for k, v in infer.model_draft.state_dict().items()}

    t0 = time.time()
    prompts = tiny_target.prompts()
    runs, _ = decode_all(infer, prompts, args.tokens)
    elapsed = time.time() - t0
    for run in runs:
        run["greedy_matches"] = run["output"] == tiny_target.greedy(target, run["prompt"], args.tokens)
    gap = min(tiny_target.margins(target, r["prompt"] + r["output"], len(r["prompt"])) for r in runs)
    steps = [s for r in runs for s in r["steps"]]
    compared = [g for s in steps for g in s["draft_top2_gaps"][:s["accepted"] + 1]]
    trace = {
        "method": "pard",
        "reference": {"repository": "github.com/AMD-AGI/PARD", "commit": args.commit,
                      "code": "pard/pard_infer.py: PardInfer(para=True).model_init, PardInfer.generate (the loop of "
                              "eval(), as `python3 -m pard.infer -c config/eval/llama3_eval.yaml` runs it)",
                      "settings": {"temperature": 0.0, "draft_k": DRAFT_K, "para": True, "pard_token": PARD_TOKEN,
                                   "tokens": args.tokens, "max_cache_len": MAX_CACHE_LEN, "nc": True,
                                   "dtype": "float32", "attn_implementation": "eager", "eos_token_id": EOS,
                                   "model_serie": "llama3"}},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "target": {"recipe": "scripts/conformance/tiny_target.py", "fingerprint": fingerprint, "eos": EOS},
        "drafter": {"recipe": recipe, "seed": args.seed, "layers": DRAFT_LAYERS, "pard_token": PARD_TOKEN,
                    "spd_type": "pard", "sha256": digest(state), "files": ["config.json", "model.safetensors"],
                    **({"training": training} if training else {})},
        "smallest_top2_gap": round(gap, 4),
        "smallest_draft_top2_gap_compared": min(compared),  # up to the first rejected drafted position
        "drafted_pard_token": sum(PARD_TOKEN in s["draft"] for s in steps),
        "max_new_tokens": args.tokens,
        "runs": runs,
    }
    write_trace(args.out, trace)  # a line per run
    hist: dict[int, int] = {}
    for s in steps:
        hist[s["accepted"]] = hist.get(s["accepted"], 0) + 1
    print(f"{args.out}: {len(runs)} prompts, {len(steps)} steps {[len(r['steps']) for r in runs]} ({elapsed:.1f} s), "
          f"draft_k {DRAFT_K}, mean accepted {sum(s['accepted'] for s in steps) / len(steps):.2f} (accept_length "
          f"{sum(s['accept_length'] for s in steps) / len(steps):.2f}), accepted histogram "
          f"{dict(sorted(hist.items()))}, generated {[r['generated'] for r in runs]}, drafted pard_token "
          f"{trace['drafted_pard_token']}, smallest top-2 gap {gap:.3f} (draft, compared {min(compared):.3f}), "
          f"greedy matches {[r['greedy_matches'] for r in runs]}")


if __name__ == "__main__":
    main()
