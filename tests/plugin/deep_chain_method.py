"""A method for the replay tests (tests/test_profiles.py): drafts `length` copies of the last token at every step,
so that under synthetic acceptance every step tests every position up to that depth (a copy of the last token is
never a stop id: the turn would have ended). Not lossless in any useful sense: it exists to be replayed."""
from specbench.method import BuildContext, DecodeContext, Draft, Drafter, MethodInfo, Option


class DeepChainDrafter(Drafter):
    def __init__(self, length: int) -> None:
        self.length = length

    def propose(self, ctx: DecodeContext) -> Draft:
        return Draft.chain([ctx.token_ids[-1]] * self.length)


def build(ctx: BuildContext) -> Drafter:
    return DeepChainDrafter(ctx.option("length"))


METHODS = [MethodInfo("deepchain", "drafts the last token `length` times (a replay test's drafter)", True, build,
                      ("",), (Option("length", 6, "tokens drafted at every step", int, low=1),))]
