"""Seeded generator of the builtin FrozenLake maps; `python -m userrl.envs.frozenlake.generate` rewrites them.

Like gymnasium's `generate_random_map`, every cell is frozen with probability FROZEN_P and a map is kept
only when a hole-free path joins S and G; unlike it, S and G are placed anywhere and the draws come from
Python's `random.Random`, whose sequence is stable across versions, so `--check` holds everywhere.
Levels: 0 is 4x4 with S and G anywhere, as RAGEN draws its maps (so some paths are one or two moves: a
small model finds the goal by chance, which gives RL a signal), 1 is 5x5 and 2 is 6x6 with S and G at
least the board's side apart in Manhattan distance. Maps are unique across the whole set, so no test map
appears in train.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from userrl.envs.frozenlake.board import goal_distances
from userrl.envs.frozenlake.tasks import BUILTIN_TASKS_PATH, LEVEL_SIZES
from userrl.envs.generate_cli import leveled_main, leveled_tasks, render_item_lines

GENERATOR_SEED = 20250720
PER_LEVEL = 135
TEST_FRACTION = 0.2
FROZEN_P = 0.8
#: Level -> the least Manhattan distance between S and G.
MIN_START_GOAL_DISTANCE: dict[int, int] = {0: 1, 1: 5, 2: 6}


def random_map(size: int, min_distance: int, rnd: random.Random) -> tuple[list[str], int] | None:
    """One random size x size map and its shortest path length; None without holes or a path from S to G."""
    cells = [(r, c) for r in range(size) for c in range(size)]
    while True:
        start, goal = rnd.sample(cells, 2)
        if abs(start[0] - goal[0]) + abs(start[1] - goal[1]) >= min_distance:
            break
    grid = [["F" if rnd.random() < FROZEN_P else "H" for _ in range(size)] for _ in range(size)]
    grid[start[0]][start[1]], grid[goal[0]][goal[1]] = "S", "G"
    desc = ["".join(row) for row in grid]
    shortest = goal_distances(desc).get(start)
    # A lake without holes teaches nothing about them.
    return None if shortest is None or "H" not in "".join(desc) else (desc, shortest)


def generate_level(level: int, count: int, rnd: random.Random, seen: set[tuple[str, ...]]) -> list[dict[str, Any]]:
    """`count` solvable maps of one level not in `seen` (which they join), without ids or splits."""
    out: list[dict[str, Any]] = []
    for _ in range(count * 200):
        if len(out) == count:
            return out
        found = random_map(LEVEL_SIZES[level], MIN_START_GOAL_DISTANCE[level], rnd)
        if found is None or tuple(found[0]) in seen:
            continue
        desc, shortest = found
        seen.add(tuple(desc))
        out.append({"map": desc, "optimal_moves": shortest, "difficulty": level})
    raise RuntimeError(f"level {level}: found only {len(out)} of {count} maps")


def generate_tasks(seed: int = GENERATOR_SEED, per_level: int = PER_LEVEL) -> list[dict[str, Any]]:
    """The whole builtin set: per level, ids fl-<level>-<nnn> and a deterministic 80/20 split."""
    seen: set[tuple[str, ...]] = set()
    return leveled_tasks(
        "fl", LEVEL_SIZES, seed, lambda level, rnd: generate_level(level, per_level, rnd, seen), TEST_FRACTION
    )


def render(tasks: list[dict[str, Any]], seed: int) -> str:
    """The tasks.json text: a small header, then one map per line."""
    return render_item_lines("frozenlake", "tasks", seed, tasks)


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin maps file."""
    return leveled_main(
        argv, __doc__.splitlines()[0], BUILTIN_TASKS_PATH, GENERATOR_SEED, generate_tasks, render,
        PER_LEVEL, "maps per level",
    )


if __name__ == "__main__":
    sys.exit(main())
