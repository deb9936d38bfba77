"""The Tau gym: customer service with τ-bench retail/airline tools and a simulated customer.

Spec: docs/spec/GYMS.md §5.
"""

from userrl.envs.registry import register_gym
from userrl.envs.tau.database import (
    DomainData,
    EpisodeDB,
    builtin_domain,
    find_tau_data_root,
    tau_bench_domain,
)
from userrl.envs.tau.env import TauEnv
from userrl.envs.tau.hashing import state_hash, to_hashable
from userrl.envs.tau.solver import TauSolver
from userrl.envs.tau.tasks import TAU_SYSTEM_PROMPT, TAU_USER_TEMPLATE, load_tau_tasks

register_gym("tau", TauEnv, load_tau_tasks, TauSolver, "userrl/Tau-v0")

__all__ = [
    "TAU_SYSTEM_PROMPT",
    "TAU_USER_TEMPLATE",
    "DomainData",
    "EpisodeDB",
    "TauEnv",
    "TauSolver",
    "builtin_domain",
    "find_tau_data_root",
    "load_tau_tasks",
    "state_hash",
    "tau_bench_domain",
    "to_hashable",
]
