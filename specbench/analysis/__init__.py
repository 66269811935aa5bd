"""Reading runs: tables, reports, plots, the budget table and the Spec-Bench export. Nothing here loads a model or
decodes (tests/test_architecture.py holds it to that); what does is specbench.measure."""
