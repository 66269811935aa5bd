"""Layer-skip self-speculation (SWIFT: Xia et al. 2024, "SWIFT: On-the-Fly Self-Speculative Decoding for LLM
Inference Acceleration"; the same idea as Draft & Verify, Zhang et al. 2024): the target drafts for itself with some
of its decoder layers skipped (specbench.decode.self_draft: shared weights, a cache of the drafter's own), a chain of
gamma tokens verified with the layer-skipped model's distribution q, so it is lossless at every temperature.

Which layers: skip=I,J,... explicitly, else ratio=R of them spread evenly over the middle (layer 0, the last layer and
the first layer of each attention kind are kept). SWIFT chooses its layer set by an on-the-fly Bayesian search
during decoding; here the layer set is chosen before the run, by the tuning rule on a development split (`tune`),
like every other method's settings: nothing that decides what is drafted reads the clock. Training-free.
"""
from __future__ import annotations

from specbench.decode.draft import Drafter
from specbench.decode.self_draft import evenly_skipped, layer_skip_view
from specbench.errors import SpecbenchError
from specbench.method import BuildContext, MethodInfo, Option
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain


def skipped_layers(ctx: BuildContext) -> list[int]:
    config = ctx.target.model.get_decoder().config
    if ctx.option("skip") is not None:
        try:
            return sorted({int(i) for i in ctx.option("skip").split(",") if i.strip()})
        except ValueError:
            raise SpecbenchError(f"skip={ctx.option('skip')!r}: expected comma-separated layer indices") from None
    return evenly_skipped(config, ctx.option("ratio"))


def build(ctx: BuildContext) -> Drafter:
    model = ctx.target.model
    view = layer_skip_view(model, skipped_layers(ctx))
    vocab = model.get_output_embeddings().weight.shape[0]
    # The view's cache has a slot for every layer of the target (its layers keep their indices).
    chain = draft_chain(view, ctx.target.runner, layers=model.get_decoder().config.num_hidden_layers)
    return DraftModelDrafter(view, ctx.option("gamma"), vocab, chain=chain)


OPTIONS = (
    Option("ratio", 0.2, "share of the decoder layers skipped, spread evenly over the middle", float, low=0, high=1),
    Option("skip", None, "the skipped layers, comma-separated indices (overrides ratio)"),
    Option("gamma", 2, "tokens drafted per step (a chain)", int, low=1),
)


METHODS = [MethodInfo("swift", "SWIFT (Xia et al. 2024): the target drafts for itself with 20% of its layers skipped "
                      "(ratio=R or skip=I,J,...), a chain of gamma=2 tokens; training-free", True, build,
                      ("", "ratio=0.1:gamma=2", "ratio=0.2:gamma=1", "ratio=0.3:gamma=3"), OPTIONS)]
