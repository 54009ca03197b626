"""`python -m experiments.train`: one training run — config, corpus, optimizer, jitted steps,
checkpoints, metrics and the loop that ties them together (`loop.run`)."""
