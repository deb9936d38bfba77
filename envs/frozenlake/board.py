"""FrozenLake boards as text: the symbols, rendering, parsing a rendered board back, moves and shortest paths.

A map is gymnasium's `desc`: rows of S (start), F (frozen), H (hole) and G (goal). The agent sees it
rendered with one symbol per cell, cells separated by one space, the top row first:

    P you        _ frozen ice (the start cell too, once you leave it)
    O hole       G goal
    X you, fallen into a hole      √ you, on the goal
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from userrl.envs.moves import MAX_MOVES_PER_TURN, parse_moves  # noqa: F401 - this gym's names

PLAYER, FROZEN, HOLE, GOAL, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "_", "O", "G", "X", "√"
#: gymnasium's desc letter -> the symbol of that cell without the player on it.
TERRAIN_SYMBOL = {"S": FROZEN, "F": FROZEN, "H": HOLE, "G": GOAL}
#: The moves in gymnasium's action order (0 left, 1 down, 2 right, 3 up).
MOVES: tuple[str, ...] = ("left", "down", "right", "up")
DELTAS: dict[str, tuple[int, int]] = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
_BOARD_SYMBOLS = frozenset({PLAYER, FROZEN, HOLE, GOAL, PLAYER_IN_HOLE, PLAYER_ON_GOAL})

Cell = tuple[int, int]


def step_cell(cell: Cell, move: str, size: tuple[int, int]) -> Cell:
    """The cell a move leads to; a move off the edge stays in place (as in gymnasium)."""
    (r, c), (dr, dc) = cell, DELTAS[move]
    nr, nc = r + dr, c + dc
    return (nr, nc) if 0 <= nr < size[0] and 0 <= nc < size[1] else cell


def render_board(desc: Sequence[str], player: Cell) -> str:
    """The board as the agent sees it: one symbol per cell, space-separated, one line per row."""
    lines = []
    for r, row in enumerate(desc):
        cells = []
        for c, letter in enumerate(row):
            if (r, c) == player:
                cells.append(PLAYER_IN_HOLE if letter == "H" else PLAYER_ON_GOAL if letter == "G" else PLAYER)
            else:
                cells.append(TERRAIN_SYMBOL[letter])
        lines.append(" ".join(cells))
    return "\n".join(lines)


@dataclass(frozen=True)
class Lake:
    """A board read back from text: terrain rows (F, H, G) and the player's cell."""

    rows: tuple[str, ...]
    player: Cell

    @property
    def size(self) -> tuple[int, int]:
        """(rows, columns)."""
        return len(self.rows), len(self.rows[0])

    @property
    def goal(self) -> Cell | None:
        """The goal's cell (None when the board shows none)."""
        return next(((r, c) for r, row in enumerate(self.rows) for c, x in enumerate(row) if x == "G"), None)


def _board_row(line: str) -> list[str] | None:
    cells = line.strip().split(" ")
    return cells if cells and all(x in _BOARD_SYMBOLS for x in cells) else None


def parse_board(text: str) -> Lake | None:
    """The last board written in text (rows of symbols), or None when it holds no well-formed board."""
    blocks: list[list[list[str]]] = [[]]
    for line in text.split("\n"):
        row = _board_row(line)
        if row is None:
            if blocks[-1]:
                blocks.append([])
        else:
            blocks[-1].append(row)
    for block in reversed(blocks):
        if not block or len({len(r) for r in block}) != 1:
            continue
        players = [(r, c) for r, row in enumerate(block) for c, x in enumerate(row) if x not in "_OG"]
        if len(players) != 1:
            continue
        pr, pc = players[0]
        symbol = block[pr][pc]
        rows = []
        for r, row in enumerate(block):
            letters = ["F" if x == FROZEN else "H" if x == HOLE else "G" if x == GOAL else "F" for x in row]
            if r == pr:
                letters[pc] = {PLAYER_IN_HOLE: "H", PLAYER_ON_GOAL: "G"}.get(symbol, "F")
            rows.append("".join(letters))
        return Lake(tuple(rows), (pr, pc))
    return None


def goal_distances(rows: Sequence[str]) -> dict[Cell, int]:
    """Fewest moves from each non-hole cell to the goal, over non-hole cells (unreachable cells are absent)."""
    size = (len(rows), len(rows[0]))
    goal = next(((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x == "G"), None)
    if goal is None:
        return {}
    dist, queue = {goal: 0}, deque([goal])
    while queue:
        cell = queue.popleft()
        for move in MOVES:
            # Moves are reversible between non-hole cells, so a neighbour's distance is one more.
            nxt = step_cell(cell, move, size)
            if nxt not in dist and rows[nxt[0]][nxt[1]] != "H":
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def optimal_moves(rows: Sequence[str], start: Cell) -> list[str]:
    """The moves of `start` that begin a shortest hole-free path to the goal (empty when none exists)."""
    dist = goal_distances(rows)
    if start not in dist or dist[start] == 0:
        return []
    size = (len(rows), len(rows[0]))
    return [m for m in MOVES if dist.get(step_cell(start, m, size), -1) == dist[start] - 1]


def find_letter(rows: Sequence[str], letter: str) -> Cell:
    """The cell of the first `letter` in rows (ValueError when absent)."""
    for r, row in enumerate(rows):
        c = row.find(letter)
        if c >= 0:
            return r, c
    raise ValueError(f"no {letter!r} on the map")
