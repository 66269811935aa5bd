"""Medusa-style heads on a tiny target: training through the CLI, T=0 identity (lossless and typical), the tree
built from each head's ranks, and typical acceptance flagged lossy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specbench.cli import main
from specbench.decode.draft import Draft, parse_tree
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.medusa.checkpoint import load_heads
from specbench.methods.medusa.drafter import MedusaDrafter, typical_verifier
from specbench.methods.medusa.head import MedusaHeads
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from tests.conftest import write_prompts


@pytest.fixture(scope="module")
def trained(tiny_target_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("medusa_train")
    prompts = write_prompts(folder / "prompts.jsonl", [f"question {i} about the fox" for i in range(24)])
    out = folder / "heads"
    code = main(["train", "medusa", "--target", str(tiny_target_dir), "--data", str(prompts), "--mode", "self",
                 "--prompts", "24", "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "3000",
                 "--lr", "1e-3", "--batch-tokens", "1024", "--opt", "draft_vocab=100"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def tiny_target(tiny_target_dir):
    return load_model(str(tiny_target_dir))


def test_training_writes_heads_and_per_head_accuracy(trained):
    heads, vocab = load_heads(trained)
    assert len(heads.heads) == 4 and len(vocab) <= 100
    curve = [json.loads(line) for line in (trained / "log.jsonl").read_text().splitlines()]
    assert {"heldout_top1_head1", "heldout_top1_head4"} <= set(curve[-1])


@pytest.mark.parametrize("method", ["medusa", "medusa-typical"])
def test_t0_identity(tiny_target, trained, method):
    drafter = available_methods()[method].drafter(BuildContext(tiny_target, draft=str(trained)))
    tokens = steps = 0
    for i in range(8):  # four new prompts, then four training prompts (the heads must be accepted on those)
        topic = "dog" if i < 4 else "fox"
        prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": f"question {i % 4} about the {topic}"}])
        expected = generate(tiny_target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(tiny_target.model, prompt, drafter, Sampling(), 30, set())
        assert out.token_ids == expected
        if i >= 4:
            tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
    print(f"{method}: tau on training prompts {tokens / steps:.2f}")
    assert tokens / steps >= 1.03  # drafts were verified and accepted (τ 1.06 when written)


def published(trained: Path, target, folder: Path, layout: str) -> Path:
    """The trained heads written in a published layout, each head's own lm_head a copy of the target's (the reference
    initialises them so); configs as uploaded (no hidden_size; Medusa-1's under-reporting the heads)."""
    from safetensors.torch import load_file, save_file

    folder.mkdir()
    blocks = {k: v.float() for k, v in load_file(str(trained / "model.safetensors")).items()}
    lm_head = target.model.get_output_embeddings().weight.detach().float()
    count = len({k.split(".")[0] for k in blocks})
    state = {**blocks, **{f"{k}.1.weight": lm_head.clone() for k in range(count)}}
    medusa1 = {"base_model_name_or_path": "the/base", "medusa_num_heads": 2, "medusa_num_layers": 1}
    if layout == "medusa1-pt":
        torch.save(state, folder / "medusa_lm_head.pt")
    elif layout == "medusa1-safetensors":
        save_file(state, str(folder / "medusa_lm_head.safetensors"))
    elif layout == "medusa2-full-model":  # the target's weights and the heads under medusa_head.*
        medusa1 = {**target.model.config.to_dict(), "medusa_num_heads": count, "medusa_num_layers": 1}
        full = {k: v.detach().contiguous() for k, v in target.model.state_dict().items()}
        save_file({**full, **{f"medusa_head.{k}": v for k, v in state.items()}}, str(folder / "model.safetensors"))
    else:  # Medusa's later trainer: residual blocks only, the base lm_head shared
        save_file(blocks, str(folder / "medusa_lm_head.safetensors"))
        medusa1["version"] = "2"
    (folder / "config.json").write_text(json.dumps(medusa1))
    return folder


@pytest.mark.parametrize("layout", ["medusa1-pt", "medusa1-safetensors", "medusa2-full-model", "shared-blocks-only"])
def test_every_published_layout_loads_and_decodes_as_vanilla(tiny_target, trained, tmp_path, layout):
    folder = published(trained, tiny_target, tmp_path / layout, layout)
    heads, vocab = load_heads(folder)
    assert len(heads.heads) == 4 and vocab is None  # counted from the weights, not the config's 2
    assert heads.own_lm_heads == (layout != "shared-blocks-only")
    drafter = available_methods()["medusa"].drafter(BuildContext(tiny_target, draft=str(folder)))
    tokens = steps = 0
    for i in range(4):  # training prompts: the heads must be accepted on those
        prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": f"question {i} about the fox"}])
        expected = generate(tiny_target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(tiny_target.model, prompt, drafter, Sampling(), 30, set())
        assert out.token_ids == expected
        tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
    # Drafts verified and accepted (these small heads reach one level; published-layout heads accepted several
    # levels deep, step for step as the reference: test_conformance.py).
    assert tokens / steps > 1.0


def random_heads(hidden: int, vocab: int, seed: int) -> tuple[MedusaHeads, torch.Tensor]:
    """Three shared-lm_head heads with random blocks, and a random lm_head [vocab, hidden]."""
    torch.manual_seed(seed)
    heads = MedusaHeads(hidden, 3)
    for head in heads.heads:
        torch.nn.init.normal_(head[0].linear.weight)
    return heads, torch.randn(vocab, hidden)


def test_own_lm_heads_that_copy_the_targets_draft_what_shared_heads_draft():
    """The published layout's drafting path (each head through its own lm_head) against the shared one: with every
    own lm_head a copy of the target's, the same trees, so the same verification and, at T>0, the same sampled
    distribution (tests/test_distribution.py checks the shared heads' against vanilla's exact joint)."""
    hidden, vocab = 8, 20
    shared, lm_head = random_heads(hidden, vocab, seed=1)
    own = MedusaHeads(hidden, 3, vocab)
    with torch.no_grad():
        for mine, theirs in zip(own.heads, shared.heads):
            mine[0].load_state_dict(theirs[0].state_dict())
            mine[1].weight.copy_(lm_head)
    tree = parse_tree("[[0],[1],[0,0],[0,1],[1,0],[0,0,0],[2],[0,2]]")
    drafts = []
    for heads in (shared, own):
        drafter = MedusaDrafter(heads, lm_head, None, tree)
        drafts.append([])
        for seed in range(5):
            drafter.last_feature = torch.randn(hidden, generator=torch.Generator().manual_seed(seed))
            draft = drafter.propose(None)
            drafts[-1].append((draft.tokens, draft.parents))
    assert drafts[0] == drafts[1] and own.own_lm_heads and not shared.own_lm_heads


def test_a_medusa_tree_by_name_is_the_references():
    from specbench.methods.common.static_tree import named_trees, static_tree

    tree = static_tree({"tree": "mc_sim_7b_63", "nodes": 10})
    assert len(tree) == 63 and max(map(len, tree)) == 4 and tree == sorted(tree, key=lambda p: (len(p), p))
    assert {"mc_sim_7b_63", "vicuna_7b_stage2", "zephyr_stage2"} <= set(named_trees())
    with pytest.raises(SpecbenchError, match="not one of Medusa's trees"):
        static_tree({"tree": "mc_sim_7b_64", "nodes": 10})


def test_tree_comes_from_each_heads_ranks():
    hidden, vocab = 8, 20
    heads, lm_head = random_heads(hidden, vocab, seed=0)
    tree = parse_tree("[[0],[1],[0,0],[0,1],[1,0],[0,0,0]]")
    drafter = MedusaDrafter(heads, lm_head, None, tree)
    drafter.last_feature = torch.randn(hidden)
    draft = drafter.propose(None)
    ranked = (heads(drafter.last_feature) @ lm_head.T).topk(2, dim=-1).indices.tolist()
    assert draft.parents == [-1, -1, 0, 0, 1, 2]
    assert draft.tokens == [ranked[0][0], ranked[0][1], ranked[1][0], ranked[1][1], ranked[1][0], ranked[2][0]]


def test_typical_acceptance_is_labelled_lossy_and_accepts_by_threshold():
    assert available_methods()["medusa-typical"].lossless is False
    assert available_methods()["medusa"].lossless is True
    # Root row: token 1 has p = 0.6 (accepted), token 2 p = 0.001 (rejected); node 0's row: token 3 p ~ 1.
    logits = torch.full((4, 5), -30.0)
    logits[0, 1], logits[0, 2], logits[0, 0] = 0.0, -6.5, -0.4
    logits[1, 3] = 10.0
    draft = Draft([1, 2, 3], [-1, -1, 0])
    verdict = typical_verifier(0.09, 0.3)(draft, logits, Sampling(temperature=1.0), torch.Generator().manual_seed(0))
    assert verdict.path == [0, 2]
