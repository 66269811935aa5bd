"""An external method for the plugin tests (and the README's example): drafts what followed the last token the
last time it occurred in the text (a bigram lookup), up to four tokens. It imports only specbench's public pieces."""
from specbench.method import BuildContext, DecodeContext, Draft, Drafter, MethodInfo, Option


class BigramDrafter(Drafter):
    def __init__(self, length: int) -> None:
        self.length = length

    def propose(self, ctx: DecodeContext) -> Draft:
        ids = ctx.token_ids
        for start in range(len(ids) - 2, -1, -1):  # the latest earlier occurrence of the last token
            if ids[start] == ids[-1]:
                return Draft.chain(ids[start + 1 : start + 1 + self.length])
        return Draft()


def build(ctx: BuildContext) -> Drafter:
    return BigramDrafter(ctx.option("length"))


METHODS = [MethodInfo("bigram", "drafts what followed the last token earlier in the text (an example plugin)", True,
                      build, ("", "length=2"),
                      (Option("length", 4, "the most tokens drafted", int, low=1),))]
