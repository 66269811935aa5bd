"""PARD: a draft trained with mask tokens drafts its chain of K tokens in one forward over [context, MASK x (K-1)].
Training's copies see what inference feeds; T=0 output is vanilla's with drafts accepted at depth >= 2 (a tiny draft
trained here on the target's own greedy text), on both shape policies; a batch's rows draft together exactly as each
alone; T>0 samples vanilla's exact joint; `train pard` writes a checkpoint that loads and drafts; a shape target
drafts with a random draft; a missing checkpoint or a bad option is one error line."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specbench.cli import main
from specbench.decode.chain import DraftChain
from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling, target_probs
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.small_draft import small_draft
from specbench.methods.pard.drafter import PardDrafter
from specbench.methods.pard.training import MASK_KEY, PardTrainable, copies, mask_token
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from specbench.train.training import Batch
from tests.conftest import tiny_llama, write_prompts
from tests.stats import goodness_of_fit
from tests.test_options import NO_TARGET, one_error
from tests.test_overhead import needs_default_tokenizer

VOCAB = 64
PROMPTS = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7, 9, 9, 30, 31, 8, 2]]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=3, layers=2, hidden=32, logit_scale=4.0)


@pytest.fixture(scope="module")
def pard(target):
    """A 1-layer PARD draft (K=4) trained for a few hundred steps on the target's greedy continuations of PROMPTS
    (the text it then drafts), distilled from the target's last hidden states as `train pard` does."""
    texts = [p + generate(target, p, VanillaDrafter(), Sampling(), 40, set()).token_ids for p in PROMPTS]
    n = max(map(len, texts))
    tokens = torch.tensor([t + [0] * (n - len(t)) for t in texts])
    valid = torch.tensor([[i < len(t) for i in range(n)] for t in texts])
    with torch.no_grad():
        hidden = target(tokens, output_hidden_states=True).hidden_states[-1]
    draft = small_draft(target, 1)
    trainable = PardTrainable(draft, None, mask_token(VOCAB, None, set()), 4)
    optimizer = torch.optim.Adam([p for p in draft.parameters() if p.requires_grad], lr=0.01)
    torch.manual_seed(0)
    for _ in range(300):
        loss, _ = trainable.loss(Batch(tokens, hidden, valid, valid))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return draft.eval(), trainable.mask


def drafter(pard, runner: ModelRunner, gamma: int = 4) -> PardDrafter:
    draft, mask = pard
    return PardDrafter(draft, gamma, VOCAB, mask, chain=DraftChain.of(runner.drafter_runner(draft)))


def test_copies_let_a_mask_see_its_anchor_and_the_masks_before_it():
    ids, pos, attention = copies(torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.bool), 3, 9)
    assert ids.tolist() == [[5, 6, 7, 9, 9, 9, 9, 9, 9]] and pos.tolist() == [[0, 1, 2] * 3]
    seen = (attention[0, 0] == 0).int().tolist()
    assert seen[2] == [1, 1, 1, 0, 0, 0, 0, 0, 0]  # copy 0: causal
    assert seen[5] == [1, 1, 0, 0, 0, 1, 0, 0, 0]  # copy 1, position 2: anchor 1, then its own mask
    assert seen[8] == [1, 0, 0, 0, 1, 0, 0, 0, 1]  # copy 2, position 2: anchor 0, masks at positions 1 and 2


def test_training_sees_what_inference_feeds(target):
    """Copy c at position p of the training forward is the inference forward over tokens 0..p-c and c masks."""
    draft = small_draft(target, 1)
    tokens = torch.randint(0, VOCAB - 1, (1, 10))
    ids, pos, attention = copies(tokens, torch.ones(1, 10, dtype=torch.bool), 4, VOCAB - 1)
    with torch.no_grad():
        trained = draft.model(input_ids=ids, position_ids=pos, attention_mask=attention).last_hidden_state[0]
        for c, p in [(0, 9), (1, 4), (2, 5), (3, 9)]:
            fed = torch.cat([tokens[:, : p - c + 1], torch.full((1, c), VOCAB - 1)], dim=1)
            assert torch.allclose(trained[c * 10 + p], draft.model(input_ids=fed).last_hidden_state[0, -1], atol=1e-5)


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_t0_is_vanillas_output_with_deep_accepts(target, pard, fixed_shapes):
    deep = forwards = steps = 0
    for p in PROMPTS:
        expected = generate(target, p, VanillaDrafter(), Sampling(), 40, set()).token_ids
        runner = ModelRunner(target, fixed_shapes)
        mine = drafter(pard, runner)
        chain_runner = mine.chain.runner
        calls = []
        chain_runner.forward = lambda *a, _f=chain_runner.forward: calls.append(1) or _f(*a)  # count draft forwards
        out = generate(target, p, mine, Sampling(), 40, set(), runner=runner)
        assert out.token_ids == expected
        deep += sum(a >= 3 for a in out.accept_lengths)  # two draft tokens or more accepted
        forwards, steps = forwards + len(calls), steps + len(out.accept_lengths)
    print(f"pard: {deep} steps accepted at depth >= 2 of {steps}")
    assert deep >= 3
    assert forwards <= steps  # one draft forward per step, whatever K


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_a_batch_of_three_drafts_as_each_alone(target, pard, fixed_shapes):
    alone = [generate(target, p, drafter(pard, ModelRunner(target, fixed_shapes)), Sampling(), 30, set(),
                      runner=ModelRunner(target, fixed_shapes)) for p in PROMPTS]
    runner = ModelRunner(target, fixed_shapes)
    chain = drafter(pard, runner).chain
    rows = [drafter(pard, runner) for _ in PROMPTS]
    for row in rows:
        row.chain = chain  # one chain: every row in one draft forward
    together = generate_batch(target, PROMPTS, rows, Sampling(), 30, set(), runner=runner)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.accept_lengths for g in together] == [g.accept_lengths for g in alone]


def test_t_above_0_samples_vanillas_joint():
    """The first three tokens after a prompt (vocabulary 12, T=0.7, top_p=0.9): their exact joint from the target
    against 1,000 pard generations (chi-square), drafts accepted at depth >= 2 often enough to have power. The draft
    is the target with a flatter lm_head reading token 11 as its (untrained) mask: each position's q differs from p."""
    vocab, sampling, prompt = 12, Sampling(temperature=0.7, top_p=0.9), [3, 7, 1, 5, 3, 7]
    target = tiny_llama(vocab, seed=21, layers=1, hidden=16, logit_scale=26.0)
    draft = tiny_llama(vocab, seed=21, layers=1, hidden=16, logit_scale=10.0)
    joint, contexts = torch.ones(1, dtype=torch.float64), [[]]
    with torch.no_grad():
        for _ in range(3):
            p = target_probs(target(torch.tensor([prompt + c for c in contexts])).logits[:, -1], sampling).double()
            joint = (joint[:, None] * p).reshape(-1)
            contexts = [c + [x] for c in contexts for x in range(vocab)]
    counts, deep = np.zeros((vocab,) * 3), 0
    generator = torch.Generator().manual_seed(1234)
    made = PardDrafter(draft, 3, vocab, mask_token=11)
    for _ in range(1000):
        out = generate(target, prompt, made, sampling, 3, set(), generator)
        counts[tuple(out.token_ids)] += 1
        deep += sum(a >= 3 for a in out.accept_lengths)
    print(f"pard T>0: {deep} of 1000 generations accepted two drafts")
    assert deep >= 80  # 174 when written
    assert goodness_of_fit(counts, joint.reshape((vocab,) * 3).numpy()) > 1e-3


@pytest.fixture(scope="module")
def trained(tiny_target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pard_train")
    prompts = write_prompts(folder / "prompts.jsonl", [f"tell me {i} things about the lazy dog" for i in range(24)])
    out = folder / "pard"
    code = main(["train", "pard", "--target", str(tiny_target_dir), "--data", str(prompts), "--mode", "self",
                 "--prompts", "24", "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "3000",
                 "--batch-tokens", "1024", "--opt", "init=scratch", "--opt", "layers=1", "--opt", "draft_vocab=120"])
    assert code == 0
    return out


def test_train_pard_writes_a_checkpoint_that_loads_and_drafts(tiny_target_dir, trained):
    config = json.loads((trained / "config.json").read_text())
    assert config[MASK_KEY] not in config["specbench_draft_vocab"]
    target = load_model(str(tiny_target_dir))
    made = available_methods()["pard"].drafter(BuildContext(target, draft=str(trained)))
    assert made.mask_token == config[MASK_KEY] and made.draft_vocab is not None
    tokens = steps = 0
    for i in range(4):  # training prompts
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": f"tell me {i} things about the lazy dog"}])
        expected = generate(target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(target.model, prompt, made, Sampling(), 30, set())
        assert out.token_ids == expected
        tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
    print(f"pard: tau on training prompts {tokens / steps:.2f}")
    assert tokens / steps > 1.0  # drafts were accepted


def amd_layout(trained, target, folder):
    """The trained draft as AMD publishes PARD drafts (amd/PARD-*): a whole causal LM with its tokenizer, its config
    naming the mask id as pard_token (and spd_type)."""
    from specbench.methods.pard.training import load_pard

    draft, _, mask = load_pard(trained, target.model)
    draft.config.pard_token, draft.config.spd_type = mask, "pard"
    draft.save_pretrained(folder)
    target.tokenizer.save_pretrained(folder)
    return folder, mask


def test_amds_published_layout_loads_as_pard_and_is_refused_by_sps(tiny_target_dir, trained, tmp_path):
    target = load_model(str(tiny_target_dir))
    folder, mask = amd_layout(trained, target, tmp_path / "PARD-tiny")
    made = available_methods()["pard"].drafter(BuildContext(target, draft=str(folder)))
    assert isinstance(made, PardDrafter) and made.mask_token == mask and made.draft_vocab is None
    tokens = steps = 0
    for i in range(4):
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": f"tell me {i} things about the lazy dog"}])
        expected = generate(target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(target.model, prompt, made, Sampling(), 30, set())
        assert out.token_ids == expected
        tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
    assert tokens / steps > 1.0  # drafts were accepted
    for draft in (folder, trained):  # a PARD draft under sps would draft one token at a time: another method
        with pytest.raises(SpecbenchError, match="is a PARD draft .* run it with --methods pard"):
            available_methods()["sps"].drafter(BuildContext(target, draft=str(draft)))


def test_without_a_checkpoint_pard_says_how_to_train_one(tiny_target_dir, tmp_path):
    target = load_model(str(tiny_target_dir))
    with pytest.raises(SpecbenchError, match="train pard"):
        available_methods()["pard"].drafter(BuildContext(target))
    (tmp_path / "config.json").write_text(json.dumps({"specbench_shared_embedding": True}))  # an sps draft
    with pytest.raises(SpecbenchError, match="not a PARD draft"):
        available_methods()["pard"].drafter(BuildContext(target, draft=str(tmp_path)))


@needs_default_tokenizer
def test_a_shape_target_drafts_with_a_random_draft_of_spss_shape():
    target = load_model("shape:tiny-llama")
    made = available_methods()["pard"].drafter(BuildContext(target))
    assert isinstance(made, PardDrafter) and "TIMING-ONLY" in made.trained_from
    assert made.model.config.num_hidden_layers == 2 and made.mask_token not in target.stop_ids
    out = generate(target.model, [1, 2, 3], made, Sampling(), 8, set())
    assert out.token_ids == generate(target.model, [1, 2, 3], VanillaDrafter(), Sampling(), 8, set()).token_ids


def test_a_bad_option_is_one_error_line(capsys, tmp_path):
    error = one_error(capsys, ["run", "--methods", "pard@gamma=0", "--target", NO_TARGET, "--out", str(tmp_path)])
    assert "option gamma=0 for pard: expected int >= 1" in error
