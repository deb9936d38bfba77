"""HumanLM (docs/spec/ALGORITHMS.md §5.2): train user simulators on judge-scored latent states. Plain modules, no Ray, no torch.

fields.py (the hierarchy), row.py (a data row), data.py (rows from our gyms, JSONL, parquet),
generate.py (writes the shipped rows), format.py (modes, prompts, parsing), judge.py (judges, aggregation),
curriculum.py (the optional hierarchy map), curriculum_source.py (the sequential mode's task source over it).
"""

from userrl.humanlm.curriculum import HierarchyMap
from userrl.humanlm.fields import FIELD_NAMES, FIELDS, RESPONSE, Field
from userrl.humanlm.format import (
    MODES,
    STOP_STRINGS,
    Parsed,
    TaskItem,
    UserReplyTask,
    parse_flexible,
    parse_strict,
    valid_rates,
)
from userrl.humanlm.judge import FieldStats, GroupScore, OpenAIJudge, ScriptedJudge, make_judge, score_group
from userrl.humanlm.row import Row

__all__ = [
    "FIELDS",
    "FIELD_NAMES",
    "MODES",
    "RESPONSE",
    "STOP_STRINGS",
    "Field",
    "FieldStats",
    "GroupScore",
    "HierarchyMap",
    "OpenAIJudge",
    "Parsed",
    "Row",
    "ScriptedJudge",
    "TaskItem",
    "UserReplyTask",
    "make_judge",
    "parse_flexible",
    "parse_strict",
    "score_group",
    "valid_rates",
]
