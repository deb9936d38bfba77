"""The Intention gym: clarify a vague request by uncovering its hidden missing details (docs/spec/GYMS.md §2)."""

from userrl.envs.intention.env import IntentionEnv, base_reward, max_return
from userrl.envs.intention.solver import IntentionSolver
from userrl.envs.intention.tasks import (
    INTENTION_SYSTEM_PROMPT,
    INTENTION_USER_TEMPLATE,
    Detail,
    load_intention_tasks,
)
from userrl.envs.registry import register_gym

register_gym("intention", IntentionEnv, load_intention_tasks, IntentionSolver, "userrl/Intention-v0")

__all__ = [
    "INTENTION_SYSTEM_PROMPT",
    "INTENTION_USER_TEMPLATE",
    "Detail",
    "IntentionEnv",
    "IntentionSolver",
    "base_reward",
    "load_intention_tasks",
    "max_return",
]
