"""One file per speculative decoding method. Each module lists its methods in METHODS (see specbench.run.registry)."""
