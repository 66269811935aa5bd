"""Measurements that load the target: the T=0 identity check (for its logit margins), the T>0 distribution check,
`tune`, and the engine's benchmarks against HF generate (`bench`, its overhead and cost curves)."""
