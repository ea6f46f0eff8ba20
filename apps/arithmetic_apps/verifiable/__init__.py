"""Tasks with a verifier, for pass@k and RL rewards: HumanEval (run in the
`sandbox`) and seeded arithmetic word problems (checked exactly)."""
