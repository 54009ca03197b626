"""RL scaling: sigmoid laws of reward against RL compute, per-run curves, fits and the RL report
section (`python -m analysis fit-rl`, `python -m analysis rl-report`)."""
