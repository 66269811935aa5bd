"""The decode core: the engine's one generation loop, the drafter contract, lossless verification, sampling, the
KV cache, attention layouts, the target's runtime and loading, and what a forward costs. It imports nothing of
specbench outside this package but specbench.errors, and never a method."""
