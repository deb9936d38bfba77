"""userrl environments ("gyms"): multi-turn text envs with simulated users. Imports no torch and no ray."""

from userrl.envs.base import MultiTurnEnv, StepResult, Task, parse_action, tool_call_to_action
from userrl.envs.registry import (
    GYMNASIUM_IDS,
    GYMS,
    discover_gyms,
    load_tasks,
    make_env,
    make_solver,
    register_gym,
    solve_episode,
    uses_role_client,
)
from userrl.envs.solving import UngroundedTask

discover_gyms()

__all__ = [
    "GYMNASIUM_IDS",
    "GYMS",
    "MultiTurnEnv",
    "StepResult",
    "Task",
    "UngroundedTask",
    "load_tasks",
    "make_env",
    "make_solver",
    "parse_action",
    "register_gym",
    "solve_episode",
    "tool_call_to_action",
    "uses_role_client",
]
