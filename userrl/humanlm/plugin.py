"""HumanLM's plug-in entry point (pyproject: `[project.entry-points."userrl.plugins"] humanlm`).

`register()` adds HumanLM to userrl's registries: the `humanlm` gym and the `user_reply` protocol (their
modules register themselves when this one imports them), the `humanlm` config section, group scorer and task source (the
hierarchy-map curriculum), the `rows` SFT source, the `humanlm` user format and the `train-user` /
`evaluate-user` commands. Registering stays light (no Ray, no torch): the scorer and the task source are
built by factories that import their modules when a run asks for them.
"""

from __future__ import annotations

from typing import Any

from userrl.commands.registry import register_command
from userrl.config import UserRLConfig, register_config_section
from userrl.group_scorers import register_group_scorer
from userrl.humanlm import env, protocol  # noqa: F401 - each registers itself (the gym, the protocol) at import
from userrl.humanlm.commands import COMMANDS
from userrl.humanlm.config import HumanLMConfig
from userrl.humanlm.sft import rows_source
from userrl.humanlm.user import HumanLMUserClient
from userrl.sft import register_sft_source
from userrl.task_sources import register_task_source
from userrl.users import register_user_format

#: The name HumanLM registers its config section, gym, group scorer, task source and user format under.
NAME = "humanlm"


def _group_scorer(config: UserRLConfig) -> Any:
    from userrl.humanlm.scoring import HumanLMGroupScorer

    return HumanLMGroupScorer(config)


def _curriculum(config: UserRLConfig) -> Any:
    """The hierarchy-map curriculum when `humanlm.curriculum` is on, else None (the gyms' mixture)."""
    if not config.humanlm.curriculum:
        return None
    from userrl.humanlm.curriculum_source import CurriculumTaskSource

    return CurriculumTaskSource(config)


def register() -> None:
    """Register HumanLM's gym, protocol, config section, group scorer, task source, SFT source, user format
    and commands."""
    register_config_section(NAME, HumanLMConfig)
    register_group_scorer(NAME, _group_scorer)
    register_task_source(NAME, _curriculum)
    register_sft_source("rows", rows_source)
    register_user_format(NAME, HumanLMUserClient)
    for command in COMMANDS:
        register_command(command)
