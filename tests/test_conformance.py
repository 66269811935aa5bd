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
            self.record.steps.append(Step(before, list(step.draft.tokens), len(step.path)))
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


def test_medusa_reproduces_the_reference_trees_and_accepts_step_by_step(tiny, tmp_path):
    """Medusa-1 heads in the published layout (each its own lm_head), the reference's default tree mc_sim_7b_63:
    every step's 63-node tree and accepted length are the reference's. Our first step is the prefill (no features
    yet: nothing drafted; its bonus token is the reference's first root), so our step i + 1 is its step i; its
    tree's root is that bonus token, and our draft is the other 63 nodes, cut to the budget on the last step (where
    the reference's root, our previous bonus, leaves us one token fewer to emit)."""
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
        ours = drafter.record.steps
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
        assert not found, f"prompt {r}:\n" + "\n".join(found[:3])
        accepted_deep += sum(s.accepted >= 2 for s in ours)
    assert accepted_deep >= 5
