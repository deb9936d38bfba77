"""The Telepathy gym: twenty questions about a hidden entity (docs/spec/GYMS.md §6)."""

from userrl.envs.registry import register_gym
from userrl.envs.telepathy.env import TelepathyEnv
from userrl.envs.telepathy.solver import TelepathySolver
from userrl.envs.telepathy.tasks import TELEPATHY_SYSTEM_PROMPT, load_telepathy_tasks

register_gym("telepathy", TelepathyEnv, load_telepathy_tasks, TelepathySolver, "userrl/Telepathy-v0")

__all__ = [
    "TELEPATHY_SYSTEM_PROMPT",
    "TelepathyEnv",
    "TelepathySolver",
    "load_telepathy_tasks",
]
