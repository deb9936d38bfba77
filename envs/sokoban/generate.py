"""Seeded generator of the builtin Sokoban rooms; `python -m userrl.envs.sokoban.generate` rewrites them.

Each room is made like gym-sokoban's (which RAGEN uses), by reverse play: a random walk carves the floor
of a walled square, the boxes start on their targets, and the player walks about at random, pulling a
box behind it now and then; every pull undone is a push, so the room the walk ends in can be solved.
Every kept room is still verified with the breadth-first solver (`board.solve`), which also gives its
shortest solution: kept rooms have every box off the targets, some box at least two cells from every
target, and a shortest solution within MOVE_RANGE[level] (so a scripted demonstration fits 16 steps). Draws come from Python's `random.Random`, stable across versions,
so `--check` holds everywhere. Rooms are unique across the whole set, so no test room appears in train.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from userrl.envs.generate_cli import leveled_main, leveled_tasks, render_item_lines
from userrl.envs.sokoban.board import DELTAS, MOVES, Cell, Room, solution_length
from userrl.envs.sokoban.tasks import BUILTIN_TASKS_PATH, LEVELS

GENERATOR_SEED = 20250721
PER_LEVEL = 135
TEST_FRACTION = 0.2
#: Level -> (least, most) moves of the shortest solution.
MOVE_RANGE: dict[int, tuple[int, int]] = {0: (5, 20), 1: (7, 24), 2: (9, 30)}
#: The carved floor covers at least this share of the room's inside.
MIN_FLOOR_SHARE = 0.5
PULL_PROBABILITY = 0.6
_CHANGE_DIRECTION = 0.35


def carve_floor(size: int, rnd: random.Random) -> set[Cell]:
    """Floor cells of a size x size room with walls all round: a random walk over its inside."""
    inside = size - 2
    cell = (rnd.randint(1, inside), rnd.randint(1, inside))
    floor = {cell}
    direction = rnd.choice(MOVES)
    for _ in range(inside * inside * 3):
        if rnd.random() < _CHANGE_DIRECTION:
            direction = rnd.choice(MOVES)
        dr, dc = DELTAS[direction]
        nxt = (cell[0] + dr, cell[1] + dc)
        if 1 <= nxt[0] <= inside and 1 <= nxt[1] <= inside:
            cell = nxt
            floor.add(cell)
        if len(floor) >= inside * inside * 0.85:
            break
    return floor


def reverse_play(floor: set[Cell], size: int, boxes: int, rnd: random.Random) -> Room | None:
    """A room reached from the solved one by random walking and pulling (None when the floor is too small)."""
    cells = sorted(floor)
    if len(cells) < boxes + 1 + 3:
        return None
    targets = rnd.sample(cells, boxes)
    free = [c for c in cells if c not in targets]
    walls = frozenset((r, c) for r in range(size) for c in range(size) if (r, c) not in floor)
    player = rnd.choice(free)
    placed = set(targets)
    for _ in range(rnd.randint(30, 120)):
        move = rnd.choice(MOVES)
        dr, dc = DELTAS[move]
        nxt = (player[0] + dr, player[1] + dc)
        if nxt not in floor or nxt in placed:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in placed and rnd.random() < PULL_PROBABILITY:
            placed.remove(behind)
            placed.add(player)
        player = nxt
    return Room((size, size), walls, frozenset(targets), frozenset(placed), player)


def far_from_targets(room: Room) -> bool:
    """Whether every box is off the targets and some box lies two or more cells from every target."""
    if room.boxes & room.targets:
        return False
    return any(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in room.targets) >= 2 for b in room.boxes)


def generate_level(level: int, count: int, rnd: random.Random, seen: set[tuple[str, ...]]) -> list[dict[str, Any]]:
    """`count` verified rooms of one level not in `seen` (which they join), without ids or splits."""
    size, boxes = LEVELS[level]
    least, most = MOVE_RANGE[level]
    out: list[dict[str, Any]] = []
    for _ in range(count * 400):
        if len(out) == count:
            return out
        floor = carve_floor(size, rnd)
        if len(floor) < MIN_FLOOR_SHARE * (size - 2) ** 2:
            continue
        room = reverse_play(floor, size, boxes, rnd)
        if room is None or not far_from_targets(room):
            continue
        rows = tuple(room.rows())
        if rows in seen:
            continue
        moves = solution_length(room)
        if moves is None or not least <= moves <= most:
            continue
        seen.add(rows)
        out.append({"map": list(rows), "optimal_moves": moves, "difficulty": level})
    raise RuntimeError(f"level {level}: found only {len(out)} of {count} rooms")


def generate_tasks(seed: int = GENERATOR_SEED, per_level: int = PER_LEVEL) -> list[dict[str, Any]]:
    """The whole builtin set: per level, ids sk-<level>-<nnn> and a deterministic 80/20 split."""
    seen: set[tuple[str, ...]] = set()
    return leveled_tasks(
        "sk", LEVELS, seed, lambda level, rnd: generate_level(level, per_level, rnd, seen), TEST_FRACTION
    )


def render(tasks: list[dict[str, Any]], seed: int) -> str:
    """The tasks.json text: a small header, then one room per line."""
    return render_item_lines("sokoban", "tasks", seed, tasks)


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare against) the builtin rooms file."""
    return leveled_main(
        argv, __doc__.splitlines()[0], BUILTIN_TASKS_PATH, GENERATOR_SEED, generate_tasks, render,
        PER_LEVEL, "rooms per level",
    )


if __name__ == "__main__":
    sys.exit(main())
