"""The Turtle gym: lateral-thinking puzzles ("turtle soup") graded by a rubric (docs/spec/GYMS.md §8)."""

from userrl.envs.registry import register_gym
from userrl.envs.turtle.env import TurtleEnv
from userrl.envs.turtle.solver import TurtleSolver
from userrl.envs.turtle.tasks import TURTLE_SYSTEM_PROMPT, load_turtle_tasks

register_gym("turtle", TurtleEnv, load_turtle_tasks, TurtleSolver, "userrl/Turtle-v0")

__all__ = ["TURTLE_SYSTEM_PROMPT", "TurtleEnv", "TurtleSolver", "load_turtle_tasks"]
