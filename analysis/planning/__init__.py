"""Compute-budget planning: model size, tokens and the fastest parallel layout for a budget."""
