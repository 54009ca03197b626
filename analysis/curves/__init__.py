"""Loss-curve laws (loss against step under a learning-rate schedule) and their fits."""
