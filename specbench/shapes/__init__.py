"""Model shapes for `--target shape:NAME` (specbench.decode.shapes): public config.json values, no weights."""
