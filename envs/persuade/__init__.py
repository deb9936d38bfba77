"""The Persuade gym: argue an opinionated persuadee off its stance on a claim (docs/spec/GYMS.md §3)."""

from userrl.envs.persuade.env import (
    PersuadeEnv,
    best_improvement_reward,
    forward_delta_reward,
    tracking_score,
)
from userrl.envs.persuade.roles import STANCES, stance_index
from userrl.envs.persuade.solver import PersuadeSolver
from userrl.envs.persuade.tasks import PERSUADE_SYSTEM_PROMPT, PERSUADE_USER_TEMPLATE, load_persuade_tasks
from userrl.envs.registry import register_gym

register_gym("persuade", PersuadeEnv, load_persuade_tasks, PersuadeSolver, "userrl/Persuade-v0")

__all__ = [
    "PERSUADE_SYSTEM_PROMPT",
    "PERSUADE_USER_TEMPLATE",
    "STANCES",
    "PersuadeEnv",
    "PersuadeSolver",
    "best_improvement_reward",
    "forward_delta_reward",
    "load_persuade_tasks",
    "stance_index",
    "tracking_score",
]
