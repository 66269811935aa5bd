"""Training data and loops for trained drafters: target features, self-distilled datasets, and the shared fit()."""
