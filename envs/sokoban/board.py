"""Sokoban rooms as text: the symbols, the rules of a move, rendering, parsing a board back, a BFS solver.

Symbols (RAGEN's): # wall, _ floor, O target, X box, √ box on a target, P player, S player on a target.
Data files store a room as rows of symbols without spaces; the agent sees the cells separated by one
space, the top row first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from userrl.envs.moves import MAX_MOVES_PER_TURN, parse_moves  # noqa: F401 - this gym's names

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"
SYMBOLS = frozenset({WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET})
MOVES: tuple[str, ...] = ("up", "down", "left", "right")
DELTAS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

Cell = tuple[int, int]

#: What one move did: the player walked, bumped into a wall, pushed a box, or could not push it.
MOVED, BUMPED, PUSHED, BLOCKED = "moved", "bumped", "pushed", "blocked"


def _shift(cell: Cell, move: str) -> Cell:
    return cell[0] + DELTAS[move][0], cell[1] + DELTAS[move][1]


@dataclass(frozen=True)
class Room:
    """A Sokoban position: the fixed walls and targets, the boxes and the player."""

    size: tuple[int, int]
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell

    @property
    def solved(self) -> bool:
        """Whether every box stands on a target."""
        return self.boxes <= self.targets

    def free(self, cell: Cell) -> bool:
        """Whether cell is inside the room, not a wall and holds no box."""
        r, c = cell
        inside = 0 <= r < self.size[0] and 0 <= c < self.size[1]
        return inside and cell not in self.walls and cell not in self.boxes

    def move(self, move: str) -> tuple[Room, str]:
        """The room after one move and what happened (MOVED, BUMPED, PUSHED or BLOCKED)."""
        nxt = _shift(self.player, move)
        if nxt in self.boxes:
            beyond = _shift(nxt, move)
            if not self.free(beyond):
                return self, BLOCKED
            return Room(self.size, self.walls, self.targets, (self.boxes - {nxt}) | {beyond}, nxt), PUSHED
        if not self.free(nxt):
            return self, BUMPED
        return Room(self.size, self.walls, self.targets, self.boxes, nxt), MOVED

    def rows(self) -> list[str]:
        """The room as rows of symbols, without spaces (the data-file form)."""
        out = []
        for r in range(self.size[0]):
            row = []
            for c in range(self.size[1]):
                cell, on_target = (r, c), (r, c) in self.targets
                if cell in self.walls:
                    row.append(WALL)
                elif cell in self.boxes:
                    row.append(BOX_ON_TARGET if on_target else BOX)
                elif cell == self.player:
                    row.append(PLAYER_ON_TARGET if on_target else PLAYER)
                else:
                    row.append(TARGET if on_target else FLOOR)
            out.append("".join(row))
        return out

    def render(self) -> str:
        """The room as the agent sees it: symbols separated by spaces, one line per row."""
        return "\n".join(" ".join(row) for row in self.rows())


def read_rows(rows: Sequence[Sequence[str]]) -> Room:
    """The room written as rows of symbols (strings, or lists of one-symbol cells); ValueError when malformed."""
    if not rows or len({len(r) for r in rows}) != 1 or not len(rows[0]):
        raise ValueError("a room needs rows of equal, non-zero length")
    cells = {(r, c): x for r, row in enumerate(rows) for c, x in enumerate(row)}
    if set(cells.values()) - SYMBOLS:
        raise ValueError(f"unknown symbols {sorted(set(cells.values()) - SYMBOLS)}; use # _ O X √ P S")
    players = [cell for cell, x in cells.items() if x in (PLAYER, PLAYER_ON_TARGET)]
    if len(players) != 1:
        raise ValueError(f"a room needs exactly one player (P or S), found {len(players)}")
    boxes = frozenset(cell for cell, x in cells.items() if x in (BOX, BOX_ON_TARGET))
    targets = frozenset(cell for cell, x in cells.items() if x in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET))
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"a room needs as many targets as boxes, at least one (boxes {len(boxes)}, "
                         f"targets {len(targets)})")
    walls = frozenset(cell for cell, x in cells.items() if x == WALL)
    return Room((len(rows), len(rows[0])), walls, targets, boxes, players[0])


def parse_board(text: str) -> Room | None:
    """The last room written in text (space-separated rows of symbols), or None when it holds none."""
    blocks: list[list[list[str]]] = [[]]
    for line in text.split("\n"):
        cells = line.strip().split(" ")
        if line.strip() and all(x in SYMBOLS for x in cells):
            blocks[-1].append(cells)
        elif blocks[-1]:
            blocks.append([])
    for block in reversed(blocks):
        try:
            return read_rows(block)
        except ValueError:
            continue
    return None


def successors(room: Room) -> Iterable[tuple[str, Room]]:
    """(move, room after it) for every move that changes the position (a walk or a push)."""
    for move in MOVES:
        after, outcome = room.move(move)
        if outcome in (MOVED, PUSHED):
            yield move, after


def solve(room: Room, max_states: int = 200_000) -> list[str] | None:
    """A shortest solution in moves (breadth-first over positions); [] when solved, None when none is found."""
    if room.solved:
        return []
    start = (room.player, room.boxes)
    parent: dict[tuple[Cell, frozenset[Cell]], tuple[tuple[Cell, frozenset[Cell]], str] | None] = {start: None}
    queue = deque([room])
    while queue and len(parent) <= max_states:
        current = queue.popleft()
        key = (current.player, current.boxes)
        for move, after in successors(current):
            nkey = (after.player, after.boxes)
            if nkey in parent:
                continue
            parent[nkey] = (key, move)
            if after.solved:
                path = []
                step: tuple[tuple[Cell, frozenset[Cell]], str] | None = parent[nkey]
                while step is not None:
                    path.append(step[1])
                    step = parent[step[0]]
                return path[::-1]
            queue.append(after)
    return None


def solution_length(room: Room) -> int | None:
    """The fewest moves that solve room (None when no solution is found)."""
    path = solve(room)
    return None if path is None else len(path)
