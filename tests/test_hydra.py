"""Hydra heads on a tiny target: training through the CLI (teacher distillation), the checkpoint round trip, T=0
identity with drafts accepted, and candidates that depend on their drafted prefix (what Medusa's do not)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specbench.cli import main
from specbench.decode.draft import DecodeContext, parse_tree
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.hydra.checkpoint import load_heads, save_heads
from specbench.methods.hydra.drafter import HydraDrafter
from specbench.methods.hydra.head import HydraHeads
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from tests.conftest import write_prompts


@pytest.fixture(scope="module")
def trained(tiny_target_dir, tmp_path_factory) -> Path:
    """Self-distilled token ids (`distill`), then `train hydra` on them. Hard labels here (teacher=0): the tiny
    random target's next-token distributions are nearly uniform and teach little; teacher distillation (the
    default) is tested on exact target states in test_distribution.py."""
    folder = tmp_path_factory.mktemp("hydra_train")
    prompts = write_prompts(folder / "prompts.jsonl", [f"question {i} about the fox" for i in range(24)])
    assert main(["distill", "--target", str(tiny_target_dir), "--data", str(prompts), "--out", str(folder / "data"),
                 "--features", str(folder / "features"), "--prompts", "24", "--reply-tokens", "40"]) == 0
    out = folder / "heads"
    code = main(["train", "hydra", "--target", str(tiny_target_dir), "--dataset", str(folder / "data"),
                 "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "60000", "--lr", "3e-3",
                 "--batch-tokens", "1024", "--opt", "draft_vocab=100", "--opt", "layers=2", "--opt", "teacher=0"])  # two blocks: the non-default path
    assert code == 0
    return out


@pytest.fixture(scope="module")
def trained_prefix(tiny_target_dir, trained) -> Path:
    """`train hydra --opt arch=prefix-mlp` on the same distilled data: Hydra++ as published (the prefix layer, own
    lm_heads with bias), two blocks a head to stay quick."""
    folder = trained.parent
    out = folder / "heads-prefix"
    code = main(["train", "hydra", "--target", str(tiny_target_dir), "--dataset", str(folder / "data"),
                 "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "60000", "--lr", "3e-3",
                 "--batch-tokens", "1024", "--opt", "draft_vocab=100", "--opt", "layers=2", "--opt", "teacher=0",
                 "--opt", "arch=prefix-mlp"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def tiny_target(tiny_target_dir):
    return load_model(str(tiny_target_dir))


def test_training_writes_heads_and_per_head_accuracy(trained):
    heads, vocab = load_heads(trained)
    assert len(heads) == 4 and heads.n_layers == 2 and len(vocab) <= 100
    config = json.loads((trained / "config.json").read_text())
    assert config["grounded_heads"] and config["specbench_teacher_distillation"] is False
    curve = [json.loads(line) for line in (trained / "log.jsonl").read_text().splitlines()]
    assert {"heldout_top1_head1", "heldout_top1_head4"} <= set(curve[-1])
    assert curve[-1]["heldout_top1_head1"] > curve[0]["heldout_top1_head1"]


def test_checkpoint_round_trip_and_bad_folder(tmp_path):
    torch.manual_seed(0)
    heads = HydraHeads(8, 3, 2)
    for p in heads.parameters():
        torch.nn.init.normal_(p)
    save_heads(heads, tmp_path / "h", torch.tensor([3, 1, 2]), teacher=True)
    loaded, vocab = load_heads(tmp_path / "h")
    x = torch.randn(5, 8 * 4)
    assert torch.allclose(loaded(2, x), heads(2, x).half().float(), atol=0.05) and vocab.tolist() == [3, 1, 2]
    assert sorted(k for k in loaded.state_dict() if k.startswith("hydra_mlp.0.0."))[:2] == [
        "hydra_mlp.0.0.linear.bias", "hydra_mlp.0.0.linear.weight"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{}")
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"")
    with pytest.raises(SpecbenchError, match="not a Hydra head folder"):
        load_heads(tmp_path / "bad")


def test_t0_identity_with_drafts_accepted(tiny_target, trained):
    drafter = available_methods()["hydra"].drafter(BuildContext(tiny_target, draft=str(trained)))
    tau, deep = vanillas_tokens_and_acceptance(tiny_target, drafter)
    print(f"hydra: tau on training prompts {tau:.2f}, {deep} steps with two or more drafts accepted")
    assert tau >= 1.5 and deep >= 6  # τ 2.26 and 17 steps when written


def vanillas_tokens_and_acceptance(tiny_target, drafter) -> tuple[float, int]:
    """Vanilla's tokens at T=0 on four new prompts, then four training prompts (the heads must be accepted on
    those): τ on the training prompts and their steps with two or more drafts accepted."""
    tokens = steps = deep = 0
    for i in range(8):
        topic = "dog" if i < 4 else "fox"
        prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": f"question {i % 4} about the {topic}"}])
        expected = generate(tiny_target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(tiny_target.model, prompt, drafter, Sampling(), 30, set())
        assert out.token_ids == expected
        if i >= 4:
            tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
            deep += sum(a >= 3 for a in out.accept_lengths)
    return tokens / steps, deep


def test_hydra_plus_plus_trains_as_published_and_is_accepted_losslessly(tiny_target, trained_prefix):
    """arch=prefix-mlp writes the prefix layer and each head's own lm_head (over the draft vocabulary, with bias),
    loads back as Hydra++, and drafts that the target accepts two or more deep, with vanilla's tokens at T=0."""
    config = json.loads((trained_prefix / "config.json").read_text())
    assert config["hydra_head_arch"] == "prefix-mlp" and config["shared_lm_head"] is False
    heads, vocab = load_heads(trained_prefix, tiny_target.model.config)
    assert heads.arch == "prefix-mlp" and heads.hydra_lm_head[0].weight.shape[0] == len(vocab)
    assert heads.hydra_lm_head[0].bias.abs().sum() > 0  # trained, not left at zero
    drafter = available_methods()["hydra"].drafter(BuildContext(tiny_target, draft=str(trained_prefix)))
    assert drafter.heads.arch == "prefix-mlp" and drafter.lm_head is None
    tau, deep = vanillas_tokens_and_acceptance(tiny_target, drafter)
    print(f"hydra++: tau on training prompts {tau:.2f}, {deep} steps with two or more drafts accepted")
    assert tau >= 1.5 and deep >= 6  # τ 2.93 and 20 steps when written


def test_candidates_depend_on_their_prefix():
    """The head of depth 2 is called once per expanded depth-1 node, on [h, e(root), e(that node's token)]: the two
    children of different parents differ although Medusa would give both the same ranks."""
    torch.manual_seed(0)
    hidden, vocab = 8, 20
    heads = HydraHeads(hidden, 3)
    for p in heads.parameters():
        torch.nn.init.normal_(p)
    embed = torch.nn.Embedding(vocab, hidden)
    lm_head = torch.randn(vocab, hidden)
    tree = parse_tree("[[0],[1],[0,0],[1,0],[0,0,0]]")
    drafter = HydraDrafter(heads, embed, lm_head, None, tree)
    drafter.last_feature = torch.randn(hidden)
    draft = drafter.propose(DecodeContext([5, 7], 1, Sampling(), None))
    h, e = drafter.last_feature, embed.weight
    first = (heads(0, torch.cat([h, e[7]])) @ lm_head.T).topk(2).indices.tolist()
    under = [int((heads(1, torch.cat([h, e[7], e[t]])) @ lm_head.T).argmax()) for t in first]
    deepest = int((heads(2, torch.cat([h, e[7], e[first[0]], e[under[0]]])) @ lm_head.T).argmax())
    assert draft.parents == [-1, -1, 0, 1, 2]
    assert draft.tokens == [first[0], first[1], under[0], under[1], deepest]
    assert under[0] != under[1]  # with these weights the prefix changes the guess


def test_the_report_says_what_the_heads_were_trained_on(trained, tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", f"hydra@head={trained}:nodes=4,pld", "--tasks", "gsm8k", "--limit", "1",
                 "--max-new-tokens", "8", "--temperatures", "0"]) == 0
    rows = {line.split(" | ")[0].strip("| "): line for line in (out / "report" / "budget.md").read_text().splitlines()
            if line.startswith("| ")}
    train = json.loads((trained / "train.json").read_text())
    assert train["settings"]["max_tokens"] == 60000 and train["data"]["conversations"] > 0
    hydra = rows[f"hydra@head={trained}:nodes=4"]
    final = json.loads((trained / "log.jsonl").read_text().splitlines()[-1])
    assert str(trained) in hydra and f"{final['tokens'] / 1e6:.2f}M" in hydra and "nodes=4" in hydra
    assert "conversations" in hydra and "fp32" in hydra
    assert "training-free" in rows["pld"] and "training-free" in rows["vanilla"]


@pytest.mark.parametrize("change, message", [
    ({"hydra_head_arch": "cross-attn"}, "hydra_head_arch 'cross-attn' is not read here"),
    ({"grounded_heads": False}, "grounded_heads is false"),
    ({"hidden_state_offset": 1}, "hidden_state_offset=1"),
])
def test_published_configs_the_reference_cannot_run_are_refused_in_one_line(tmp_path, change, message):
    """The published layout (config.json without hidden_size + hydra_lm_head.pt) loads (tests/test_conformance.py
    decodes with it); configs the published heads never use are refused by name."""
    heads = HydraHeads(8, 2, 1, vocab=20)
    folder = tmp_path / "published"
    folder.mkdir()
    config = {"hydra_num_heads": 2, "hydra_num_layers": 1, "hydra_head_arch": "mlp", "grounded_heads": True,
              "hidden_state_offset": 0}
    torch.save({k: v for k, v in heads.state_dict().items()}, folder / "hydra_lm_head.pt")
    (folder / "config.json").write_text(json.dumps(config))
    loaded, vocab = load_heads(folder)
    assert loaded.hydra_lm_head is not None and loaded.arch == "mlp" and vocab is None
    assert torch.equal(loaded.hydra_lm_head[1].bias, heads.hydra_lm_head[1].bias)
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(SpecbenchError, match=message):
        load_heads(folder)
