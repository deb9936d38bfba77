"""Sokoban task sets: our own generated rooms ("builtin"); the original UserRL data has no Sokoban."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userrl.envs.base import Task
from userrl.envs.loading import (
    item_id_of,
    load_leveled_tasks,
    source_loader,
    system_user_prompt,
)
from userrl.envs.sokoban.board import Room, read_rows

GYM = "sokoban"

#: The system message of builtin tasks: the game and its choice only (the chat layer adds the format).
SOKOBAN_SYSTEM_PROMPT = (
    "You are playing Sokoban. Push every box onto a target.\n"
    "The board is a grid, top row first. Symbols: # wall, _ floor, O target, X box, √ box on a target, "
    "P you, S you on a target.\n"
    "Walking into a box pushes it one cell, if the cell behind it is floor or a target. You cannot pull "
    "boxes, so a box pushed into a corner or along a wall may be stuck for good.\n"
    "Choices:\n"
    "- action: one to three moves, each up, down, left or right, separated by commas, for example: "
    "right, down. The moves are made in order.\n"
    "You get the new board after every action. The game is won and ends when every box is on a target. "
    "Your steps are limited."
)
SOKOBAN_USER_TEMPLATE = "The room:\n{board}\n{goal}"
GOAL_ONE = "Push the box onto the target."
GOAL_MANY = "Push all {n} boxes onto the targets."

BUILTIN_TASKS_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"
#: Difficulty level -> (room size with its walls, boxes): 6x6 with one box, 7x7 with one, 7x7 with two.
LEVELS: dict[int, tuple[int, int]] = {0: (6, 1), 1: (7, 1), 2: (7, 2)}
DIFFICULTY_LEVELS = tuple(LEVELS)


def builtin_prompt(room: Room) -> list[dict[str, str]]:
    """The [system, user] prompt of a room: the user message shows its board."""
    n = len(room.boxes)
    goal = GOAL_ONE if n == 1 else GOAL_MANY.format(n=n)
    return system_user_prompt(SOKOBAN_SYSTEM_PROMPT, SOKOBAN_USER_TEMPLATE.format(board=room.render(), goal=goal))


def check_room(rows: Any, where: str) -> Room:
    """The room of a task's rows; ValueError unless it is well formed and not already solved.

    Solvability is not searched here (loading stays cheap); the generator verifies it with `solve`, and
    the tests check every shipped room.
    """
    if not isinstance(rows, list) or not rows or not all(isinstance(r, str) for r in rows):
        raise ValueError(f"{where}: 'map' must be a non-empty list of strings")
    try:
        room = read_rows(rows)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if room.solved:
        raise ValueError(f"{where}: the room is already solved")
    return room


def validate_record(raw: Any, where: str) -> dict[str, Any]:
    """One room item (id, map, optimal_moves); ValueError names where and the id."""
    item_id = item_id_of(raw, where)
    check_room(raw.get("map"), f"{where}: item {item_id!r}")
    moves = raw.get("optimal_moves")
    if isinstance(moves, bool) or not isinstance(moves, int) or moves < 1:
        raise ValueError(f"{where}: item {item_id!r} needs a positive integer 'optimal_moves'")
    return {"id": item_id, "map": list(raw["map"]), "optimal_moves": moves}


def load_builtin_tasks(
    split: str = "train", difficulty: int | Sequence[int] | None = None, path: str | Path | None = None
) -> list[Task]:
    """Our own generated rooms (sokoban/data/tasks.json) of one split, optionally of some levels."""
    return load_leveled_tasks(GYM, Path(path) if path is not None else BUILTIN_TASKS_PATH, split, difficulty,
                              DIFFICULTY_LEVELS, validate_record, lambda record: builtin_prompt(read_rows(record["map"])))


def load_userrl_tasks(split: str, data_root: str | Path) -> list[Task]:
    """The original UserRL data holds no Sokoban tasks: always a ValueError."""
    raise ValueError("the original UserRL data has no Sokoban tasks; use source 'builtin'")


#: load_sokoban_tasks(split, source, data_root, difficulty=None): the registry's loader.
load_sokoban_tasks = source_loader(GYM, load_builtin_tasks, load_userrl_tasks, builtin_only=("difficulty",))
