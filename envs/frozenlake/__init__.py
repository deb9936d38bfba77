"""The FrozenLake gym: RAGEN's text FrozenLake on gymnasium's FrozenLake-v1 dynamics (see env.py)."""

from userrl.envs.frozenlake.env import FrozenLakeEnv
from userrl.envs.frozenlake.solver import FrozenLakeSolver
from userrl.envs.frozenlake.tasks import FROZENLAKE_SYSTEM_PROMPT, load_frozenlake_tasks
from userrl.envs.registry import register_gym

register_gym("frozenlake", FrozenLakeEnv, load_frozenlake_tasks, FrozenLakeSolver, "userrl/FrozenLake-v0")

__all__ = ["FROZENLAKE_SYSTEM_PROMPT", "FrozenLakeEnv", "FrozenLakeSolver", "load_frozenlake_tasks"]
