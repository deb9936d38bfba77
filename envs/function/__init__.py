"""The Function gym: guess a hidden arithmetic function f(a, b, c, d) (docs/spec/GYMS.md §1)."""

from userrl.envs.function.env import FunctionEnv
from userrl.envs.function.safe_eval import EvaluationError, Formula, RuleError
from userrl.envs.function.solver import FunctionSolver
from userrl.envs.function.tasks import FUNCTION_SYSTEM_PROMPT, FUNCTION_USER_MESSAGE, load_function_tasks
from userrl.envs.registry import register_gym

register_gym("function", FunctionEnv, load_function_tasks, FunctionSolver, "userrl/Function-v0")

__all__ = [
    "FUNCTION_SYSTEM_PROMPT",
    "FUNCTION_USER_MESSAGE",
    "EvaluationError",
    "Formula",
    "FunctionEnv",
    "FunctionSolver",
    "RuleError",
    "load_function_tasks",
]
