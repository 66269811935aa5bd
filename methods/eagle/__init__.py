"""EAGLE (Li et al. 2024): a one-layer draft head that autoregresses on the target's features.

The head takes concat[embedding of token t+1, feature t] (embedding first), projects it with fc (2H -> H), runs one
LLaMA decoder layer without its input norm, and predicts feature t+1; the target's frozen lm_head turns a feature
into draft logits. The feature is the target's final-norm hidden state, which the engine hands over from the
verification forward, so drafting costs no extra target pass.

`eagle` drafts an EAGLE-2 dynamic tree (expand the top_k best frontier nodes by cumulative draft log-prob for `depth`
steps, keep the total_tokens best nodes); `eagle1` drafts an EAGLE-1 static tree. Candidates are deterministic
top-k picks, verified by the engine's lossless rule at any temperature. The ablation heads (eagle-unshifted,
eagle-feature, eagle-token) change only what the head reads. `eagle-hass` drafts as `eagle` with a head trained
with HASS's objective (`train eagle --objective hass`, methods/eagle/objective.py), found under its own name.

Checkpoints use the official EAGLE-1/2 layout (config.json + model.safetensors or pytorch_model.bin with keys
embed_tokens.weight, fc.weight, fc.bias, layers.0.*), so heads move both ways. Ours add two keys to config.json that
official loaders ignore: "specbench_inputs" (the ablation variant), "specbench_draft_vocab" (the most frequent
reply tokens in the training data, most frequent first: a reduced draft vocabulary keeps the lm_head cheap on CPU)
and "specbench_objective" (what the head was trained with: EAGLE's or HASS's objective and its settings).
"""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref, preset_option
from specbench.methods.common.options import HEAD, tree_options

BUILD = "specbench.methods.eagle.drafter:build"  # drafter.py: the drafter, imported (with torch) when one is built
OBJECTIVES = ("eagle", "hass")  # the training objectives (objective.py), the default first

# Our CPU-sized default for eagle1: 25 nodes, depth 5 (the shape of EAGLE-1's default, our own choice of paths).
EAGLE1_TREE = (
    "[[0],[1],[2],[3],[0,0],[0,1],[0,2],[1,0],[1,1],[2,0],[3,0],[0,0,0],[0,0,1],[0,1,0],[1,0,0],[2,0,0],[0,2,0],"
    "[0,0,0,0],[0,0,0,1],[0,1,0,0],[1,0,0,0],[0,0,0,0,0],[0,0,0,0,1],[0,1,0,0,0],[1,0,0,0,0]]"
)

# EAGLE-1's own default tree: eagle/model/choices.py's mc_sim_7b_63 at SafeAILab/EAGLE 2320d52 (the last EAGLE-1
# code, before EAGLE-2), the tree EaModel.eagenerate and its evaluation scripts use: 25 paths of ranks, depth 5 (not
# Medusa's tree of the same name, which has 63 nodes).
EAGLE1_PAPER_TREE = (
    "[[0],[1],[2],[3],[0,0],[0,1],[0,2],[1,0],[1,1],[2,0],[2,1],[3,0],[0,0,0],[0,0,1],[0,0,2],[0,1,0],[0,1,1],[0,2,0],"
    "[0,2,1],[1,0,0],[0,0,0,0],[0,0,0,1],[0,0,0,2],[0,0,0,0,0],[0,0,0,0,1]]"
)
PAPER_STATIC = {"paper": f"tree={EAGLE1_PAPER_TREE}"}

DRAFT_VOCAB = Option("draft_vocab", 0, "draft vocabulary rows used: 0 the head's own, N its N most frequent, -1 the "
                     "target's whole vocabulary", int, low=-1)
# The settings of the EAGLE-2 reference's evaluation scripts (gen_ea_answer_*.py at SafeAILab/EAGLE bfeb532, the
# EAGLE-2 release: total_token=60 counting the root, depth=5 forwards after the first level, top_k=10; its
# from_pretrained default is total_token=59) in this tree's terms; held to the reference by
# tests/test_conformance.py.
PAPER = {"paper": "top_k=10:depth=6:total_tokens=59"}
DYNAMIC = (HEAD, DRAFT_VOCAB, *tree_options(depth=5), preset_option(PAPER))
TREE_SIZES = ("", "total_tokens=4", "total_tokens=8", "total_tokens=16")  # what `tune` tries for eagle and eagle-hass
STATIC = (HEAD, DRAFT_VOCAB, Option("tree", EAGLE1_TREE, "the static tree, as JSON paths of ranks"),
          preset_option(PAPER_STATIC))

METHODS = [
    MethodInfo("eagle", "EAGLE-2: feature-level draft head, dynamic tree (top_k=4, depth=5, total_tokens=auto: sized per step "
               "from this machine's measured verification cost)", True,
               Ref.to(BUILD, static=False), TREE_SIZES, DYNAMIC, presets=PAPER),
    MethodInfo("eagle1", "EAGLE-1: the same head, static 25-node tree (--opt tree=JSON paths)", True,
               Ref.to(BUILD, static=True), options=STATIC, presets=PAPER_STATIC),
    MethodInfo("eagle-hass", "EAGLE-2's drafting with a head trained with HASS's objective (Zhang et al. 2025: top-K "
               "distillation and context alignment; train eagle --objective hass)", True,
               Ref.to(BUILD, static=False, hass=True), TREE_SIZES, DYNAMIC, presets=PAPER),
] + [
    MethodInfo(f"eagle-{inputs}", f"EAGLE ablation head reading {what}, dynamic tree (the four ablation heads share "
               "one training budget)", True, Ref.to(BUILD, static=False, ablation_inputs=inputs),
               options=DYNAMIC, presets=PAPER)
    for inputs, what in [("shifted", "feature + shifted token (EAGLE)"), ("unshifted", "feature + unshifted token"),
                         ("feature", "feature only"), ("token", "token only")]
]

TRAINERS = {"eagle": Ref.to("specbench.methods.eagle.training:train")}
OBJECTIVES_OF = {"eagle": OBJECTIVES}  # what `train METHOD --objective NAME` accepts
