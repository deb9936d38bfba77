"""The Travel gym: plan a trip by searching, eliciting hidden preferences and recommending.

Spec: docs/spec/GYMS.md §7.
"""

from userrl.envs.registry import register_gym
from userrl.envs.travel.env import REWARD_PRESETS, TravelEnv
from userrl.envs.travel.schema import Scenario, parse_scenario
from userrl.envs.travel.solver import TravelSolver
from userrl.envs.travel.tasks import (
    TRAVEL_SYSTEM_PROMPT,
    TravelDataUnavailable,
    TravelRow,
    load_travel_tasks,
    read_travel_rows,
)

register_gym("travel", TravelEnv, load_travel_tasks, TravelSolver, "userrl/Travel-v0")

__all__ = [
    "REWARD_PRESETS",
    "TRAVEL_SYSTEM_PROMPT",
    "Scenario",
    "TravelDataUnavailable",
    "TravelEnv",
    "TravelRow",
    "TravelSolver",
    "load_travel_tasks",
    "parse_scenario",
    "read_travel_rows",
]
