"""The product commands around the core loop: `userrl evaluate`, `sweep`, `report`, `export`, `play`.

The core (rollout, env runners, learners, the Algorithm) lives in `userrl/` itself; these modules only use it.
"""
