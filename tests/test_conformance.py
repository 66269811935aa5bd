"""Our methods held step by step to their authors' reference code (issue 81, docs/conformance.md).

Each trace under tests/fixtures/conformance/ was made by running the reference implementation unchanged, in a venv
of its own library versions, on the seeded tiny target of scripts/conformance/tiny_target.py
(scripts/conformance/<method>.sh remakes it). Here our method decodes the same prompts on the same target through
the one decode loop, and every step's draft and accepted length must be the reference's; a difference names the
prompt, the step, both drafts and both accepted lengths. The traces are committed, so this runs offline."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specbench.decode.draft import DecodeContext, StepResult
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.methods.common.static_tree import static_tree
from specbench.methods.medusa.checkpoint import load_heads
from specbench.methods.medusa.drafter import MedusaDrafter
from specbench.methods.pld.drafter import PromptLookupDrafter

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "conformance"


def tiny_target_module():
    spec = importlib.util.spec_from_file_location("tiny_target", ROOT / "scripts" / "conformance" / "tiny_target.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny():
    module = tiny_target_module()
    return module, module.build()


def load_trace(method: str, tiny) -> dict:
    trace = json.loads((TRACES / f"{method}.json").read_text())
    module, model = tiny
    assert module.fingerprint(model) == trace["target"]["fingerprint"], (
        "the tiny target built here is not the one the trace was made on (scripts/conformance/tiny_target.py "
        "changed, or torch draws other numbers): remake the trace")
    return trace


@dataclass
class Step:
    context: int
    draft: list[int]
    accepted: int
    parents: list[int] = field(default_factory=list)


@dataclass
class Recorded:
    steps: list[Step] = field(default_factory=list)


def recording(cls):
    """The drafter class with every verified step written down (the draft as verified, and its accepted length)."""

    class Recording(cls):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.record = Recorded()

        def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
            before = len(ctx.token_ids) - len(step.emitted)
            self.record.steps.append(Step(before, list(step.draft.tokens), len(step.path), list(step.draft.parents)))
            super().accepted(ctx, step)

    return Recording


def differences(run: dict, ours: list[Step], placeholder: int) -> list[str]:
    """Every step where ours is not the reference's. Two things the loops do alike in effect and differently in form:
    the reference drafts one placeholder token when nothing matches (always rejected on this target), where ours
    drafts nothing; and at the end it drafts a whole continuation and caps what it accepts at the budget, where our
    loop cuts the draft to the budget first (drafting past it is pointless). So the reference's draft is compared as
    what our loop verifies of it."""
    end = len(run["prompt"]) + len(run["output"])
    out = []
    for i, ref in enumerate(run["steps"]):
        if i >= len(ours):
            out.append(f"step {i}: the reference went on (context {ref['context']}), ours had stopped")
            break
        if ref["placeholder"]:
            assert ref["draft"] == [placeholder] and ref["accepted"] == 0, f"step {i}: {ref}"
        expected = ([] if ref["placeholder"] else ref["draft"])[: max(end - ref["context"] - 1, 0)]
        mine = ours[i]
        if (mine.context, mine.draft, mine.accepted) != (ref["context"], expected, ref["accepted"]):
            out.append(f"step {i} (context {ref['context']}): the reference drafted {expected} and accepted "
                       f"{ref['accepted']}; ours drafted {mine.draft} at context {mine.context} and accepted "
                       f"{mine.accepted}")
    if len(ours) > len(run["steps"]):
        out.append(f"ours took {len(ours)} steps, the reference {len(run['steps'])}")
    return out


def replay(model, run: dict, drafter, trace: dict) -> list[Step]:
    result = generate(model, run["prompt"], drafter, Sampling(), trace["max_new_tokens"], {trace["target"]["eos"]})
    assert result.token_ids == run["output"], "our tokens are not the reference's (lossless decoding of one target)"
    return drafter.record.steps


def test_pld_reproduces_saxenas_reference_step_by_step(tiny):
    trace = load_trace("pld", tiny)
    module, model = tiny
    settings = trace["reference"]["settings"]
    drafted = 0
    for r, run in enumerate(trace["runs"]):
        drafter = recording(PromptLookupDrafter)(max_ngram=settings["draft_matching_window_size"],
                                                 num_tokens=settings["draft_num_candidate_tokens"])
        steps = replay(model, run, drafter, trace)
        found = differences(run, steps, module.PLACEHOLDER)
        assert not found, f"prompt {r}:\n" + "\n".join(found[:5])
        drafted += sum(s.accepted >= 2 for s in steps)
    assert drafted >= 5  # the trace exercises multi-token accepts, not only one-token steps


def test_the_pld_trace_tells_hfs_rule_from_saxenas(tiny):
    """The same replay under transformers' rule parts from the reference: the trace discriminates the two."""
    trace = load_trace("pld", tiny)
    module, model = tiny
    parted = 0
    for run in trace["runs"]:
        drafter = recording(PromptLookupDrafter)(rule="hf")
        parted += bool(differences(run, replay(model, run, drafter, trace), module.PLACEHOLDER))
    assert parted >= 1


def published_medusa_folder(folder: Path) -> Path:
    """The trace's heads as FasterDecoding publishes Medusa-1 heads: config.json without model_type, under-reporting
    the heads as the uploaded configs do (2 of the file's 5), and the weights file."""
    import shutil

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"base_model_name_or_path": "the/base", "medusa_num_heads": 2,
                                                    "medusa_num_layers": 1}))
    shutil.copy(TRACES / "medusa_heads.safetensors", folder / "medusa_lm_head.safetensors")
    return folder


def tree_differences(run: dict, ours: list[Step], tree: list[tuple[int, ...]]) -> list[str]:
    """Every step where our tree or accepted length is not the reference's (Medusa's and Hydra's loops alike). Our
    first step is the prefill (no features yet: nothing drafted; its bonus token is the reference's first root), so
    our step i + 1 is its step i; its tree's root is that bonus token, and our draft is the other nodes, cut to the
    budget on the last step (where the reference's root, our previous bonus, leaves us one token fewer to emit)."""
    assert ours[0].draft == [] and len(ours) == len(run["steps"]) + 1, (len(ours), len(run["steps"]))
    found = []
    for i, ref in enumerate(run["steps"]):
        mine = ours[i + 1]
        reach = len(run["prompt"]) + len(run["output"]) - mine.context - 1  # the deepest node the budget allows
        expected = [t for t, path in zip(ref["tree_tokens"][1:], tree) if len(path) <= reach]
        accepted = min(ref["accept_length"], max(reach, 0))  # its last step's root was our last bonus token
        if (mine.draft, mine.accepted) != (expected, accepted):
            found.append(f"step {i}: the reference's tree {expected} accepted {accepted}; ours "
                         f"{mine.draft} accepted {mine.accepted}")
    return found


def test_medusa_reproduces_the_reference_trees_and_accepts_step_by_step(tiny, tmp_path):
    """Medusa-1 heads in the published layout (each its own lm_head), the reference's default tree mc_sim_7b_63:
    every step's 63-node tree and accepted length are the reference's (tree_differences says how they line up)."""
    trace = load_trace("medusa", tiny)
    module, model = tiny
    heads, vocab = load_heads(published_medusa_folder(tmp_path / "heads"))
    assert heads.own_lm_heads and len(heads.heads) == trace["heads"]["num_heads"] and vocab is None
    tree = static_tree({"tree": trace["reference"]["settings"]["medusa_choices"], "nodes": 10})
    accepted_deep = 0
    for r, run in enumerate(trace["runs"]):
        assert not any(s["past_pad"] for s in run["steps"])  # the reference's padding quirk never struck here
        drafter = recording(MedusaDrafter)(heads, model.lm_head.weight, None, tree)
        result = generate(model, run["prompt"], drafter, Sampling(), len(run["output"]), {trace["target"]["eos"]})
        assert result.token_ids == run["output"], f"prompt {r}: our tokens are not the reference's"
        found = tree_differences(run, drafter.record.steps, tree)
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        accepted_deep += sum(s.accepted >= 2 for s in drafter.record.steps)
    assert accepted_deep >= 5


def published_hydra_folder(name: str, folder: Path) -> Path:
    """The trace's heads as zankner/Hydra publishes them: its config.json and hydra_lm_head.pt (the one file the
    reference reads), written from the committed safetensors copy."""
    import shutil

    import torch
    from safetensors.torch import load_file

    folder.mkdir()
    shutil.copy(TRACES / f"{name}_heads" / "config.json", folder / "config.json")
    torch.save(load_file(str(TRACES / f"{name}_heads" / "hydra_lm_head.safetensors")), folder / "hydra_lm_head.pt")
    return folder


@pytest.mark.parametrize("name", ["hydra", "hydra_mlp"])
def test_hydra_reproduces_the_reference_trees_and_accepts_step_by_step(tiny, tmp_path, name):
    """Hydra++ heads (prefix-mlp: the prefix layer, 4-block heads, own lm_heads with bias) and plain grounded MLP
    heads in the published layout, the reference's default tree mc_sim_7b_63: every step's 63-node tree and accepted
    length are the reference's."""
    from specbench.methods.hydra.checkpoint import load_heads as load_hydra
    from specbench.methods.hydra.drafter import HydraDrafter

    trace = load_trace(name, tiny)
    _, model = tiny
    heads, vocab = load_hydra(published_hydra_folder(name, tmp_path / "heads"), model.config)
    assert heads.arch == trace["arch"] and heads.hydra_lm_head is not None and vocab is None
    tree = static_tree({"tree": trace["reference"]["settings"]["hydra_choices"], "nodes": 10})
    assert [list(p) for p in tree] == trace["tree"]["nodes"]
    accepted_deep = 0
    for r, run in enumerate(trace["runs"]):
        assert not any(s["past_pad"] for s in run["steps"])  # the reference's padding quirk never struck here
        drafter = recording(HydraDrafter)(heads, model.get_input_embeddings(), model.lm_head.weight, None, tree)
        result = generate(model, run["prompt"], drafter, Sampling(), len(run["output"]), {trace["target"]["eos"]})
        assert result.token_ids == run["output"], f"prompt {r}: our tokens are not the reference's"
        found = tree_differences(run, drafter.record.steps, tree)
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        accepted_deep += sum(s.accepted >= 2 for s in drafter.record.steps)
    assert accepted_deep >= 5


@pytest.mark.parametrize("trace_name", ["lade", "lade_pool_from_prompt"])
def test_lookahead_reproduces_lade_step_by_step(tiny, trace_name):
    """lade (N=5, W=7, G=7; the second trace with POOL_FROM_PROMPT): every step's window, the guesses verified
    (lade's pool under the root, oldest first), the accepted length and the tokens emitted are lade's, from the same
    first window (Python's random seeded as the reference's driver seeds it). Our step is lade's forward, the prefill
    included; lade verifies each guess whole and counts at most N-2 matches, ours verifies the guesses cut to N-2
    tokens (the same accepts: the rows of a guess's last token are never read); at the end of the budget lade
    emits the whole step and trims it, our loop cuts the draft first."""
    from specbench.methods.lookahead.drafter import LookaheadDrafter

    trace = load_trace(trace_name, tiny)
    _, model = tiny
    settings = trace["reference"]["settings"]

    class Recording(LookaheadDrafter):
        def propose(self, ctx):
            draft = super().propose(ctx)
            self.seen.append({"context": len(ctx.token_ids), "window": [list(w) if w else None for w in self.window],
                              "guesses": [list(g) for g in self.guesses]})
            return draft

        def accepted(self, ctx, step):
            if not self.seen or "emitted" in self.seen[-1]:  # a step our loop drafted nothing for (one token left)
                self.seen.append({"context": len(ctx.token_ids) - len(step.emitted), "window": None, "guesses": None})
            self.seen[-1].update(accepted=len(step.path), emitted=list(step.emitted))
            super().accepted(ctx, step)

    deep = 0
    for r, run in enumerate(trace["runs"]):
        drafter = Recording(settings["LEVEL"], settings["WINDOW_SIZE"], settings["GUESS_SET_SIZE"],
                            bool(settings["POOL_FROM_PROMPT"]), seed=run["seed"])
        drafter.seen = []
        result = generate(model, run["prompt"], drafter, Sampling(), trace["max_new_tokens"], {trace["target"]["eos"]})
        assert result.token_ids == run["output"], f"prompt {r}: our tokens are not lade's"
        assert drafter.seen[0]["window"][0] == run["init_window"], f"prompt {r}: another first window"
        found = [] if len(drafter.seen) == len(run["steps"]) else [f"ours took {len(drafter.seen)} steps, lade {len(run['steps'])}"]
        for i, (ref, mine) in enumerate(zip(run["steps"], drafter.seen)):
            emitted = ref["appended"][: ref.get("kept", len(ref["appended"]))]
            expected = (ref["context_len"], ref["window"], ref["guesses"], min(ref["max_hit"], len(emitted) - 1),
                        emitted)
            got = (mine["context"], mine["window"], mine["guesses"], mine["accepted"], mine["emitted"])
            if mine["window"] is None and len(emitted) == 1 and len(run["output"]) - (ref["context_len"] - len(
                    run["prompt"])) == 1:  # the budget's last token: lade verifies guesses it then trims
                got = (got[0], ref["window"], ref["guesses"], *got[3:])
            if got != expected:
                found.append(f"step {i + 1}: lade {expected}; ours {got}")
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        deep += sum(s["accepted"] >= 2 for s in drafter.seen)
    assert deep >= 5  # multi-token accepts from the pool, not only one-token steps


def test_dflash_reproduces_zlabs_drafts_and_accepts_step_by_step(tiny):
    """A draft in z-lab's published layout (Qwen3 layers with q/k norms, target_layer_ids, a mask token of the
    target's vocabulary, block 16): every step's 15 drafted tokens and accepted length are z-lab's. Our first step
    is the prefill (its token is z-lab's first_token), so our step i + 1 is its step i; our loop cuts the block to
    the budget on the last steps (z-lab drafts whole blocks and trims the output), and stops where z-lab runs one
    more step with the budget already filled."""
    from specbench.decode.runner import ModelRunner
    from specbench.methods.dflash.drafter import DFlashDrafter
    from specbench.methods.dflash.training import load_dflash

    trace = load_trace("dflash", tiny)
    module, model = tiny
    draft = load_dflash(TRACES / "dflash_drafter", model)
    settings = trace["reference"]["settings"]
    assert draft.block_size == settings["block_size"] and draft.mask_token == settings["mask_token_id"]
    assert draft.target_layers == tuple(i + 1 for i in settings["target_layer_ids"])
    deep = 0
    for r, run in enumerate(trace["runs"]):
        budget = trace["max_new_tokens"]
        drafter = recording(DFlashDrafter)(draft, draft.block_size, ModelRunner(draft, fixed_shapes=False))
        result = generate(model, run["prompt"], drafter, Sampling(), budget, {module.PLACEHOLDER})
        assert result.token_ids == run["output"], f"prompt {r}: our tokens are not z-lab's"
        n = len(run["prompt"])
        steps = [s for s in run["steps"] if s["start"] + 1 - n < budget]  # z-lab's extra step past a full budget
        ours = drafter.record.steps
        assert ours[0].draft == [] and len(ours) == len(steps) + 1, (len(ours), len(steps))
        found = []
        for i, ref in enumerate(steps):
            mine = ours[i + 1]
            reach = n + budget - mine.context - 1
            expected = (ref["start"] + 1, ref["draft"][:reach], min(ref["accepted"], reach))
            if (mine.context, mine.draft, mine.accepted) != expected:
                found.append(f"step {i} (start {ref['start']}): z-lab drafted {expected[1]} and accepted "
                             f"{expected[2]}; ours drafted {mine.draft} at context {mine.context} and accepted "
                             f"{mine.accepted}")
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        deep += sum(s.accepted >= 2 for s in ours)
    assert deep >= 5


def sibling_lists(tokens: list[int], parents: list[int], root: int) -> dict[tuple[int, ...], list[int]]:
    """A tree as {path of tokens from the root: its children's tokens in order}: what a tree is, whatever order its
    nodes are listed in across parents (EAGLE-2's reference lists a depth by flat index: parent's frontier rank, then
    child rank; ours by score; both list a node's children best first)."""
    path = {-1: (root,)}
    children: dict[tuple[int, ...], list[int]] = {}
    for i, (token, parent) in enumerate(zip(tokens, parents)):
        path[i] = path[parent] + (token,)
        children.setdefault(path[parent], []).append(token)
    return children


def replay_after_prefill(trace: dict, model, make_drafter, compare, budget: int | None = None) -> int:
    """Our drafter (make_drafter(): the one for the next prompt) on each prompt of a trace whose reference drafts
    only after the prefill: our first step is the prefill (nothing drafted; its token is the reference's first), so
    our step i + 1 is the reference's step i. compare(i, ref_step, our_step, reach) names a difference or returns
    None; reach is the deepest draft token our loop keeps (it cuts the last draft to the budget, where the reference
    overruns it). budget: the new tokens our loop decodes (default: as many as the reference emitted). Returns the
    steps that accepted two drafted tokens or more."""
    deep = 0
    for r, run in enumerate(trace["runs"]):
        drafter = make_drafter()
        drafter.record = Recorded()
        n = budget or len(run["output"])
        result = generate(model, run["prompt"], drafter, Sampling(), n, {trace["target"]["eos"]})
        assert result.token_ids == run["output"][:n], f"prompt {r}: our tokens are not the reference's"
        ours = drafter.record.steps
        assert ours[0].draft == [] and len(ours) == len(run["steps"]) + 1, (len(ours), len(run["steps"]))
        end = len(run["prompt"]) + n
        found = [f"step {i}: {text}" for i, ref in enumerate(run["steps"])
                 if (text := compare(i, ref, ours[i + 1], end - ours[i + 1].context - 1)) is not None]
        assert not found, f"prompt {r}:\n" + "\n".join(found[:2])
        deep += sum(s.accepted >= 2 for s in ours)
    return deep


def replay_trees(trace: dict, model, make_drafter) -> int:
    """An EAGLE-2-style trace (replay_after_prefill): every step's tree (as a tree: each node's children in order,
    and which of the reference's candidates each node is) and accepted length must be the reference's."""
    flat: list[list[int]] = []  # per step of the current prompt: the flat indices of the candidates ours kept

    def with_flat_index():
        drafter = make_drafter()
        flat.clear()
        propose = drafter.propose

        def remember(ctx):
            draft = propose(ctx)
            if drafter.last_search is not None and draft.tokens:
                _, _, row, kept, size = drafter.last_search
                flat.append(kept[row, :size].tolist())
            return draft

        drafter.propose = remember
        return drafter

    def compare(i, ref, mine, reach):
        root = ref["tree_tokens"][0]
        keep = [j for j, d in enumerate(ref["depths"][1:]) if d <= reach]
        number = {j: n for n, j in enumerate(keep)}
        expected = sibling_lists([ref["tree_tokens"][1 + j] for j in keep],
                                 [-1 if ref["parents"][1 + j] == 0 else number[ref["parents"][1 + j] - 1]
                                  for j in keep], root)
        accepted = min(ref["accept_length"], max(reach, 0))
        got = sibling_lists(mine.draft, mine.parents, root)
        if (got, mine.accepted) != (expected, accepted) or (
                len(keep) == len(ref["flat_index"]) and sorted(flat[i]) != ref["flat_index"]):
            return f"the reference's tree {expected} accepted {accepted}; ours {got} accepted {mine.accepted}"
        return None

    return replay_after_prefill(trace, model, with_flat_index, compare)


def kept_to_reach(draft: list[int], parents: list[int], reach: int) -> tuple[list[int], list[int]]:
    """A reference's draft as far as our loop may reach: its nodes of depth <= reach, parents renumbered."""
    depth: list[int] = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    keep = [j for j, d in enumerate(depth) if d <= reach]
    number = {j: n for n, j in enumerate(keep)}
    return [draft[j] for j in keep], [-1 if parents[j] < 0 else number[parents[j]] for j in keep]


def paper_tree(method: str, presets: dict, settings: dict):
    """The method's preset `paper` as a TreeSpec, checked against the reference's settings (its total_token counts
    the root; its depth the forwards after the first level)."""
    from specbench.method import parse_options
    from specbench.methods.common.feature_tree import TreeSpec

    paper = {k: int(v) for k, v in parse_options(f"{method}@" + presets["paper"]).items()}
    assert (paper["top_k"], paper["depth"], paper["total_tokens"]) == (
        settings["top_k"], settings["depth"] + 1, settings["total_token"] - 1)
    return TreeSpec(top_k=paper["top_k"], depth=paper["depth"], total_tokens=paper["total_tokens"])


def test_eagle2_reproduces_the_reference_trees_and_accepts_step_by_step(tiny):
    """An EAGLE-1/2 head in the published layout (config.json + weights: embed_tokens, fc with bias, layers.0.*
    without input norm; the target's lm_head), EAGLE-2's dynamic tree at the settings of the reference's evaluation
    scripts (total_token=60 counting the root, depth=5 forwards after the first, top_k=10; our preset `paper`):
    every step's 59 drafted nodes (tokens, parents, which of the 510 candidates each is) and accepted length are
    the reference's (replay_trees)."""
    from specbench.methods.eagle import PAPER
    from specbench.methods.eagle.checkpoint import load_head
    from specbench.methods.eagle.drafter import EagleDrafter

    trace = load_trace("eagle", tiny)
    _, model = tiny
    tree = paper_tree("eagle", PAPER, trace["reference"]["settings"])
    head, vocab = load_head(TRACES / "eagle_head")
    assert vocab is None
    assert replay_trees(trace, model, lambda: recording(EagleDrafter)(head, model.lm_head.weight, None, tree)) >= 5


def test_eagle3_reproduces_the_reference_trees_and_accepts_step_by_step():
    """An EAGLE-3 head in the published layout (config.json with draft_vocab_size; midlayer.*, fc over the three
    fused layers, norm, its own lm_head over a 96-token draft vocabulary, d2t, t2d; the target's embedding), on the
    8-layer tiny target, at the reference's own defaults (EaModel.from_pretrained: total_token=60, depth=7,
    top_k=10; our preset `paper`): every step's 59-node tree and accepted length are the reference's
    (replay_trees), the draft ids mapped to target ids through d2t as the reference maps them."""
    from specbench.methods.common.feature_tree import FeatureTreeDrafter
    from specbench.methods.eagle3 import PAPER
    from specbench.methods.eagle3.checkpoint import load_head
    from specbench.methods.eagle3.drafter import Eagle3FeatureHead

    module = tiny_target_module()
    layers = json.loads((TRACES / "eagle3.json").read_text())["target"]["layers"]
    model = module.build(layers)
    trace = load_trace("eagle3", (module, model))
    settings = trace["reference"]["settings"]
    tree = paper_tree("eagle3", PAPER, settings)
    head = load_head(TRACES / "eagle3_head", model.model.embed_tokens.weight)
    assert head.config.draft_vocab_size == settings["draft_vocab_size"] < head.config.vocab_size
    adapter = Eagle3FeatureHead(head, layers)
    assert list(adapter.hidden_layers) == settings["fused_layers"]
    assert replay_trees(trace, model, lambda: recording(FeatureTreeDrafter)(adapter, tree)) >= 5


def test_eagle1_reproduces_the_reference_static_trees_and_accepts_step_by_step(tiny):
    """EAGLE-1 (SafeAILab/EAGLE's last EAGLE-1 code): the EAGLE-2 trace's head in the published layout, the
    reference's default tree (choices.mc_sim_7b_63: 25 paths of child ranks, our preset `paper` of eagle1): every
    step's 25 drafted tokens, in the order of the sorted paths, and its accepted length are the reference's. Our
    first step is the prefill (its token is the reference's first root), so our step i + 1 is its step i; on the
    last step our loop cuts the tree to the budget (the reference overruns it)."""
    from specbench.decode.draft import parse_tree
    from specbench.method import parse_options
    from specbench.methods.common.feature_tree import TreeSpec
    from specbench.methods.eagle import PAPER_STATIC
    from specbench.methods.eagle.checkpoint import load_head
    from specbench.methods.eagle.drafter import EagleDrafter

    trace = load_trace("eagle1", tiny)
    _, model = tiny
    settings = trace["reference"]["settings"]
    paths = parse_tree(parse_options("eagle1@" + PAPER_STATIC["paper"])["tree"])
    assert [list(p) for p in paths] == settings["paths"], "preset paper is not the reference's default tree"
    parents = settings["parents"]
    head, vocab = load_head(TRACES / "eagle_head")
    assert vocab is None

    def compare(i, ref, mine, reach):
        # our context holds the root (the step's first token, not yet in the target's cache); the reference's not
        expected = kept_to_reach(ref["tree_tokens"][1:], parents, reach)
        accepted = min(ref["accept_length"], max(reach, 0))
        if (mine.context - 1, mine.draft, mine.parents, mine.accepted) != (ref["context"], *expected, accepted):
            return (f"(context {ref['context']}): the reference drafted {expected[0]} and accepted {accepted}; ours "
                    f"drafted {mine.draft} (parents {mine.parents}) at context {mine.context} and accepted "
                    f"{mine.accepted}")
        return None

    def drafter():
        return recording(EagleDrafter)(head, model.lm_head.weight, None, TreeSpec(static_paths=paths))

    assert replay_after_prefill(trace, model, drafter, compare) >= 5


def sps_steps(run: dict) -> list[tuple[int, list[int], int]]:
    return [(s["context"], s["draft"], s["accepted"]) for s in run["steps"]]


def sps_run(trace: dict, model, draft, run: dict, gamma: int, schedule: str) -> list[tuple[int, list[int], int]]:
    """Our sps drafter (as methods/sps/drafter.py builds it for an HF causal LM) on the trace's draft: its steps."""
    from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain

    vocab = model.get_output_embeddings().weight.shape[0]
    drafter = recording(DraftModelDrafter)(draft, gamma, vocab, chain=draft_chain(draft, None), schedule=schedule)
    result = generate(model, run["prompt"], drafter, Sampling(), trace["max_new_tokens"], {trace["target"]["eos"]})
    assert result.token_ids == run["output"], "our tokens are not the reference's"
    return [(s.context, s.draft, s.accepted) for s in drafter.record.steps]


def test_sps_reproduces_spec_benchs_drafts_and_accepts_step_by_step(tiny):
    """Spec-Bench's SpS (transformers 4.37.1's assisted generation: num_assistant_tokens 5 on the "heuristic"
    schedule) with a 2-layer draft LM in the HF layout, against `sps@preset=paper` (gamma=5:schedule=heuristic):
    every step's context, draft (cut to the budget alike: the reference asks the assistant for min(n, max_length -
    len - 1), our loop cuts to remaining - 1; with one token left neither drafts) and accepted count are the
    reference's."""
    from transformers import LlamaForCausalLM

    from specbench.methods.sps import PAPER

    trace = load_trace("sps", tiny)
    _, model = tiny
    settings = trace["reference"]["settings"]
    assert (settings["num_assistant_tokens"], settings["num_assistant_tokens_schedule"]) == (5, "heuristic")
    assert PAPER["paper"] == "gamma=5:schedule=heuristic"
    draft = LlamaForCausalLM.from_pretrained(str(TRACES / "sps_draft"), dtype=model.dtype).eval()
    assert trace["drafted_eos"] == 0  # the assistant's early stop at eos (ours drafts through it) never struck
    deep = 0
    for r, run in enumerate(trace["runs"]):
        ours = sps_run(trace, model, draft, run, 5, "heuristic")
        found = [f"step {i}: the reference (context, draft, accepted) {ref}; ours {mine}"
                 for i, (ref, mine) in enumerate(zip(sps_steps(run), ours)) if ref != mine]
        if len(ours) != len(run["steps"]):
            found.append(f"ours took {len(ours)} steps, the reference {len(run['steps'])}")
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        deep += sum(accepted >= 2 for _, _, accepted in ours)
    assert deep >= 5  # multi-token accepts, not only one-token steps


def test_the_sps_trace_tells_the_schedule_from_a_fixed_gamma(tiny):
    """sps's default (a fixed gamma: 4, or the reference's first 5) parts from the reference on every prompt, in how
    many tokens it drafts (the tokens and outputs are the same)."""
    from transformers import LlamaForCausalLM

    trace = load_trace("sps", tiny)
    _, model = tiny
    draft = LlamaForCausalLM.from_pretrained(str(TRACES / "sps_draft"), dtype=model.dtype).eval()
    for gamma in (4, 5):
        for run in trace["runs"]:
            assert sps_run(trace, model, draft, run, gamma, "fixed") != sps_steps(run)


def pard_drafter(tiny, gamma: int):
    """Our pard drafter on the trace's draft, as methods/pard/drafter.py's build makes it for AMD's published layout
    (a whole causal LM whose config.json names its pard_token; no reduced vocabulary, the draft's own chain): a
    maker of fresh drafters, and the mask token."""
    import torch
    from transformers import LlamaForCausalLM

    from specbench.methods.common.draft_model import draft_chain
    from specbench.methods.common.small_draft import is_small_draft, mask_token_of
    from specbench.methods.pard.drafter import PardDrafter

    module, model = tiny
    folder = TRACES / "pard_draft"
    mask = mask_token_of(folder)
    assert not is_small_draft(folder) and mask == module.PLACEHOLDER
    draft = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    return lambda: recording(PardDrafter)(draft, gamma, vocab, mask, None, draft_chain(draft, None)), mask


def test_pard_reproduces_amds_drafts_and_accepts_step_by_step(tiny):
    """A PARD draft in AMD's published layout (a 2-layer Llama causal LM of the target's vocabulary, config.json
    naming pard_token 100 and spd_type "pard"), draft_k 12 as AMD's pard_infer.py defaults (`pard@preset=paper`):
    every step's 12 drafted tokens (one draft forward over the tokens its cache lacks and 11 pard_tokens at the
    positions after them) and accepted count are the reference's. Both loops draft from the prompt at the first
    step (the target's prefill verifies it). The reference drafts whole draft_k blocks to the end and overruns the
    budget (its output is the first max_new_tokens); our loop cuts the last drafts to the budget, so its draft is
    compared as far as ours may reach."""
    from specbench.methods.pard import PAPER

    trace = load_trace("pard", tiny)
    _, model = tiny
    settings = trace["reference"]["settings"]
    assert PAPER["paper"] == f"gamma={settings['draft_k']}"
    make, mask = pard_drafter(tiny, settings["draft_k"])
    assert mask == settings["pard_token"]
    budget = trace["max_new_tokens"]
    deep = 0
    for r, run in enumerate(trace["runs"]):
        drafter = make()
        result = generate(model, run["prompt"], drafter, Sampling(), budget, {trace["target"]["eos"]})
        assert result.token_ids == run["output"], f"prompt {r}: our tokens are not AMD's"
        n, ours = len(run["prompt"]), drafter.record.steps
        assert len(ours) == len(run["steps"]), (len(ours), len(run["steps"]))
        found = []
        for i, (ref, mine) in enumerate(zip(run["steps"], ours)):
            reach = max(n + budget - ref["context"] - 1, 0)
            expected = (ref["context"], ref["draft"][:reach], min(ref["accepted"], reach))
            if (mine.context, mine.draft, mine.accepted) != expected:
                found.append(f"step {i} (context {ref['context']}): AMD drafted {expected[1]} and accepted "
                             f"{expected[2]}; ours drafted {mine.draft} at context {mine.context} and accepted "
                             f"{mine.accepted}")
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        deep += sum(s.accepted >= 2 for s in ours)
    assert deep >= 5  # multi-token accepts, not only one-token steps


def test_the_pard_trace_tells_draft_k_from_our_default_gamma(tiny):
    """pard's default gamma=4 on the same draft parts from the trace (the reference drafts draft_k=12): the trace
    tells the number of drafted tokens apart, not only the tokens."""
    trace = load_trace("pard", tiny)
    _, model = tiny
    make, _ = pard_drafter(tiny, 4)
    for run in trace["runs"]:
        drafter = make()
        generate(model, run["prompt"], drafter, Sampling(), trace["max_new_tokens"], {trace["target"]["eos"]})
        assert [s.draft for s in drafter.record.steps] != [s["draft"] for s in run["steps"]]


def test_suffix_reproduces_arctic_inferences_drafts_and_accepts_step_by_step(tiny):
    """SuffixDecoding's reference (arctic-inference's SuffixDecodingCache, driven as vLLM's proposer drives it):
    one drafter for the four prompts in turn (scope=run: the global tree holds the earlier outputs and the current
    one as it grows), every step's draft (tokens and parents, in the reference's order) and accepted length are the
    reference's. Our first step is the prefill, which drafts nothing there as here; on the last step our loop cuts
    the draft to the budget (the reference's is compared as far as ours may reach)."""
    from specbench.methods.suffix.drafter import SuffixDrafter

    trace = load_trace("suffix", tiny)
    _, model = tiny
    s = trace["reference"]["settings"]
    assert (s["max_spec_offset"], s["use_tree_spec"], s["max_cached_requests"]) == (0.0, True, -1)
    drafter = recording(SuffixDrafter)(depth=s["max_tree_depth"], factor=s["max_spec_factor"],
                                       min_prob=s["min_token_prob"], max_tokens=s["max_spec_tokens"], scope="run")

    def compare(i, ref, mine, reach):
        expected = (*kept_to_reach(ref["draft"], ref["parents"], reach), min(ref["accepted"], max(reach, 0)))
        if (mine.context, mine.draft, mine.parents, mine.accepted) != (ref["context"], *expected):
            return (f"(context {ref['context']}): the reference drafted {expected[0]} (parents {expected[1]}) and "
                    f"accepted {expected[2]}; ours drafted {mine.draft} (parents {mine.parents}) at context "
                    f"{mine.context} and accepted {mine.accepted}")
        return None

    # one drafter for the run: the global tree carries the earlier outputs into the next prompt
    assert replay_after_prefill(trace, model, lambda: drafter, compare, trace["max_new_tokens"]) >= 5


def test_suffix_speculates_as_arctic_inference_where_ties_decide():
    """The reference's speculate on crafted texts of a 4-token vocabulary (many equal counts and equal path
    probabilities, a budget of 6): our tree and speculation (methods/suffix/tree.py) give the same draft, token for
    token and in the same order, and the same score; the local tree (prompt + response) drafts unless the global
    one (the response) scores higher, as SuffixDecodingCache.speculate chooses."""
    from specbench.methods.suffix.tree import SuffixTree, speculate

    trace = json.loads((TRACES / "suffix.json").read_text())
    probes = trace["probe_settings"]
    found, branching = [], 0
    for n, case in enumerate(trace["probes"]):
        text, depth = case["text"], probes["max_tree_depth"]
        local, run = SuffixTree(depth), SuffixTree(depth)
        local.extend(text[:40])
        local.extend(text[40:])
        run.extend(text[40:])
        own, other = (speculate(tree, case["context"], probes["max_spec_tokens"], probes["max_spec_factor"],
                                probes["min_token_prob"]) for tree in (local, run))
        best = own if own.score >= other.score else other
        if (best.tokens, best.parents, float(best.score)) != (case["draft"], case["parents"], case["score"]):
            found.append(f"case {n}: the reference drafted {case['draft']} (parents {case['parents']}, score "
                         f"{case['score']}); ours {best.tokens} (parents {best.parents}, score {best.score})")
        branching += len(set(case["parents"])) < len(case["parents"])
    assert not found, "\n".join(found[:3])
    assert branching >= 20
