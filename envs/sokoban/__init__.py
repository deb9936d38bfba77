"""The Sokoban gym: RAGEN's text Sokoban in small generated rooms (see env.py)."""

from userrl.envs.registry import register_gym
from userrl.envs.sokoban.env import SokobanEnv
from userrl.envs.sokoban.solver import SokobanSolver
from userrl.envs.sokoban.tasks import SOKOBAN_SYSTEM_PROMPT, load_sokoban_tasks

register_gym("sokoban", SokobanEnv, load_sokoban_tasks, SokobanSolver, "userrl/Sokoban-v0")

__all__ = ["SOKOBAN_SYSTEM_PROMPT", "SokobanEnv", "SokobanSolver", "load_sokoban_tasks"]
