"""`python -m experiments.rl`: GRPO-family RL fine-tuning on verifiable tasks, built on the
training core (`experiments.train`): tasks, the policy-gradient algorithms, the jitted RL step,
warm start, evaluation and the loop (`loop.run`)."""
