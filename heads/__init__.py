"""Trained drafters shipped for the default target, and the data they were trained on (package data)."""
