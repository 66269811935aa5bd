"""One YAML definition per task: where its questions come from, how rows become chat turns, its token budget."""
