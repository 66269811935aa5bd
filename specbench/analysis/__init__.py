"""Reading runs: tables, reports and plots, Spec-Bench export, the T=0 identity check, the T>0 distribution check,
and the engine's benchmarks against HF generate."""
