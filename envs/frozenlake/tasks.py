"""FrozenLake task sets: our own generated maps ("builtin"); the original UserRL data has no FrozenLake."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.frozenlake.board import find_letter, goal_distances, render_board
from userrl.envs.loading import (
    item_id_of,
    load_leveled_tasks,
    source_loader,
    system_user_prompt,
)

GYM = "frozenlake"

#: The system message of builtin tasks: the game and its choice only (the chat layer adds the format).
FROZENLAKE_SYSTEM_PROMPT = (
    "You are playing FrozenLake. Walk across a frozen lake to the goal without falling into a hole.\n"
    "The board is a grid, top row first. Symbols: P you, _ frozen ice, O hole, G goal "
    "(X: you fell into a hole, √: you are on the goal).\n"
    "Choices:\n"
    "- action: one to three moves, each up, down, left or right, separated by commas, for example: "
    "right, down. The moves are made in order.\n"
    "You get the new board after every action. Reaching G wins and ends the game; falling into a hole "
    "ends it. A move off the edge leaves you in place. On slippery ice a move can go sideways; the "
    "feedback says where you went. Your steps are limited."
)
FROZENLAKE_USER_TEMPLATE = "The lake:\n{board}\nReach the goal G."

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"
#: Difficulty level -> board size (level 0: 4x4, level 1: 5x5, level 2: 6x6).
LEVEL_SIZES: dict[int, int] = {0: 4, 1: 5, 2: 6}
DIFFICULTY_LEVELS = tuple(LEVEL_SIZES)


def builtin_prompt(desc: Sequence[str]) -> list[dict[str, str]]:
    """The [system, user] prompt of a map: the user message shows its board with the player at S."""
    board = render_board(desc, find_letter(desc, "S"))
    return system_user_prompt(FROZENLAKE_SYSTEM_PROMPT, FROZENLAKE_USER_TEMPLATE.format(board=board))


def check_map(desc: Any, where: str) -> list[str]:
    """desc as a list of rows; ValueError unless it is a rectangular S/F/H/G map, one S, one G, solvable."""
    if not isinstance(desc, list) or not desc or not all(isinstance(r, str) and r for r in desc):
        raise ValueError(f"{where}: 'map' must be a non-empty list of non-empty strings")
    if len({len(r) for r in desc}) != 1 or set("".join(desc)) - set("SFHG"):
        raise ValueError(f"{where}: 'map' must be rectangular with letters S, F, H and G only")
    flat = "".join(desc)
    if flat.count("S") != 1 or flat.count("G") != 1:
        raise ValueError(f"{where}: 'map' needs exactly one S and one G")
    if find_letter(desc, "S") not in goal_distances(desc):
        raise ValueError(f"{where}: 'map' has no hole-free path from S to G")
    return list(desc)


def validate_record(raw: Any, where: str) -> dict[str, Any]:
    """One map item (id, map, optimal_moves); ValueError names where and the id."""
    item_id = item_id_of(raw, where)
    desc = check_map(raw.get("map"), f"{where}: item {item_id!r}")
    shortest = goal_distances(desc)[find_letter(desc, "S")]
    if raw.get("optimal_moves") != shortest:
        raise ValueError(f"{where}: item {item_id!r} has optimal_moves {raw.get('optimal_moves')!r}, not {shortest}")
    return {"id": item_id, "map": desc, "optimal_moves": shortest}


def load_builtin_tasks(
    split: str = "train", difficulty: int | Sequence[int] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own generated maps (frozenlake/data/tasks.json) of one split, optionally of some levels."""
    return load_leveled_tasks(GYM, Path(path) if path is not None else BUILTIN_TASKS_PATH, split, difficulty,
                              DIFFICULTY_LEVELS, validate_record, lambda record: builtin_prompt(record["map"]))


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """The original UserRL data holds no FrozenLake tasks: always a ValueError."""
    raise ValueError("the original UserRL data has no FrozenLake tasks; use source 'builtin'")


#: load_frozenlake_tasks(split, source, data_root, difficulty=None): the registry's loader.
load_frozenlake_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("difficulty",))
