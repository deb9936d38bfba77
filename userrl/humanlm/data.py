"""HumanLM rows from our gyms' scripted users (issue 17, item 1), the shipped JSONL, and a parquet loader.

Each gym's scripted user has hidden state we know exactly, so some latent fields get a ground truth.
Conversations are played with the gym's scripted solver on the agent's side, some of its turns replaced by
weaker ones (seeded) so that the user's replies and states vary. Every user reply becomes one row: the
context is the conversation before it, and the reply is the ground truth. Roles follow docs/spec/ALGORITHMS.md §5.2 for
assistant-chat data: the agent's turns stay `assistant` messages, the user's turns are `user` messages
(the simulated user, HUMAN, writes the next `user` turn; `flip_roles` gives the other convention).

Ground truth per gym (fields not listed have none; the scripted judge then uses the real reply):

* persuade: `stance` = "<label> toward the claim \"<claim>\"; moved from <old label>" (or "; unchanged"),
  from the env's stance ladder before and after the turn; `value` = the five criteria of the scripted
  rubric (what the persuadee rewards); `goal` = "acknowledge the point and reconsider my position" when the
  rubric moved it, else "hold my position", plus one "ask for ..." per hint it gave; `communication` =
  the reply's fixed structure (a verdict sentence, then the hints as short requests).
* intention: `stance` = "prefers <option> for <detail>" for the detail the reply answers (none for the
  off-topic reply); `value` = the hidden details by importance ("<HIGH details> matter most; then ...");
  `goal` = "state my preference for <detail>" or "steer the assistant back to my request";
  `communication` = the reply's fixed structure.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from userrl.envs.base import Task, tool_call_to_action
from userrl.envs.llm import user_turn_context
from userrl.envs.registry import load_tasks, make_env, make_solver
from userrl.envs.text import content_words
from userrl.humanlm.row import Row

DATA_DIR = Path(__file__).resolve().parent / "data"
GYMS: tuple[str, ...] = ("persuade", "intention")
SPLITS: tuple[str, ...] = ("train", "test")
SEED = 17
#: At most this many agent turns per conversation (the scripted persuadee gives in after three good ones).
MAX_TURNS = {"persuade": 4, "intention": 5}
#: The chance that a solver's turn is replaced by a weaker one.
WEAK_TURN_P = {"persuade": 0.45, "intention": 0.3}
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "reward_model", "extra_info")

_OFF_TOPIC = (
    "Honestly, I would rather talk about what you had for breakfast this morning.",
    "What is your favourite colour, and why do you like it?",
    "Let me tell you about my weekend trip to the lake instead.",
)


# ---------------------------------------------------------------- persuade


def _persuade_turn(text: str, earlier: Sequence[str], rng: np.random.Generator) -> str:
    """A weaker argument: the first sentence only, a repeat, or off-topic."""
    kinds = ["short", "off_topic"] + (["repeat"] if earlier else [])
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "repeat":
        return earlier[-1]
    if kind == "short":
        return text.split(". ")[0].rstrip(".") + "."
    return _OFF_TOPIC[int(rng.integers(len(_OFF_TOPIC)))]


def _persuade_states(claim: str, old: str, new: str, rubric: Any) -> dict[str, str]:
    from userrl.envs.persuade.scripted import HINTS, MAX_HINTS

    hints = [name for name, _ in HINTS if not getattr(rubric, name)][:MAX_HINTS]
    asks = {
        "evidence": "ask for evidence",
        "rebuttal": "ask them to address my argument",
        "relevance": "say the argument is off-topic",
        "substance": "ask them to develop their reasoning",
        "novelty": "say they are repeating themselves",
    }
    moved = rubric.delta > 0
    goal = ["acknowledge the point and reconsider my position" if moved else "hold my position"]
    tone = "polite concession" if moved else "polite refusal"
    structure = "one verdict sentence, then short requests" if hints else "one short verdict sentence"
    return {
        "stance": f'{new} toward the claim "{claim}"; '
        + (f"moved from {old}" if new != old else "unchanged"),
        "value": "arguments should be relevant, evidence-backed, address mine, developed and new",
        "goal": "; ".join(goal + [asks[h] for h in hints]),
        "communication": f"brief {tone}; {structure}",
    }


def persuade_conversation(
    task: Task, rng: np.random.Generator, env_seed: int
) -> list[tuple[list[dict], str, dict]]:
    """One recorded Persuade conversation: per persuadee reply, (context messages, reply, latent states)."""
    from userrl.envs.persuade.roles import STANCES
    from userrl.envs.persuade.scripted import score_argument

    claim, essay = task.data["claim"], task.data["argument"]
    topic = frozenset(content_words(claim + " " + essay))
    env = make_env("persuade", backend="scripted", max_steps=MAX_TURNS["persuade"], seed=env_seed)
    solver = make_solver("persuade", task, rng, env.max_steps)
    env.reset(options={"task": task})
    exchanges: list[tuple[str, str]] = []
    earlier: list[str] = []
    out = []
    feedback: str | None = None
    for _ in range(MAX_TURNS["persuade"]):
        choice, content = solver.next_action(feedback)
        if choice == "finish":
            break
        if rng.random() < WEAK_TURN_P["persuade"]:
            content = _persuade_turn(content, earlier, rng)
        old = env.stance
        obs, _, terminated, truncated, _ = env.step(tool_call_to_action(choice, content))
        feedback = obs["feedback"]
        rubric = score_argument(content, topic, earlier)
        if env.stance != min(len(STANCES) - 1, old + rubric.delta):  # the recomputed hidden state must agree
            raise RuntimeError(f"persuade {task.item_key}: the recomputed rubric disagrees with the env")
        out.append(
            (
                user_turn_context(essay, exchanges, content),
                feedback,
                _persuade_states(claim, STANCES[old], STANCES[env.stance], rubric),
            )
        )
        exchanges.append((content, feedback))
        earlier.append(content)
        if terminated or truncated:
            break
    return out


# ---------------------------------------------------------------- intention


def _intention_value(details: Sequence[Mapping[str, Any]]) -> str:
    levels = sorted({d["importance"] for d in details}, reverse=True)
    groups = [
        " and ".join(d["description"].lower() for d in details if d["importance"] == lvl) for lvl in levels
    ]
    return "; ".join([f"{groups[0]} matter most"] + [f"then {g}" for g in groups[1:]][:2])


def _intention_states(
    reply: str, details: Sequence[Mapping[str, Any]], picks: Sequence[int]
) -> dict[str, str]:
    from userrl.envs.intention.scripted import DETAIL_REPLY

    states = {"value": _intention_value(details)}
    for detail, pick in zip(details, picks, strict=True):
        option = detail["options"][pick].strip()
        if reply == DETAIL_REPLY.format(description=detail["description"].strip().lower(), option=option):
            states["stance"] = f"prefers {option} for {detail['description'].lower()}"
            states["goal"] = f"state my preference for {detail['description'].lower()}"
            states["communication"] = "brief, first person; one sentence naming my choice"
            return states
    states["goal"] = "steer the assistant back to my request"
    states["communication"] = "brief and polite; says it is unsure, then asks for a specific question"
    return states


def intention_conversation(
    task: Task, rng: np.random.Generator, env_seed: int, moves: Sequence[tuple[str, str]] | None = None
) -> tuple[str, list[tuple[list[dict], str, dict]]]:
    """One recorded Intention conversation: the persona, and per user reply (context, reply, latent states).

    The agent's side is the gym's solver with some turns made weaker (seeded), or `moves`, (choice, content)
    per turn as an agent played them, replayed against the scripted user (`userrl.humanlm.cotrain`)."""
    env = make_env("intention", backend="scripted", max_steps=MAX_TURNS["intention"], seed=env_seed)
    solver = make_solver("intention", task, rng, env.max_steps) if moves is None else None
    env.reset(options={"task": task})
    record = task.data
    details = record["missing_details"]
    picks = list(env._option_picks)  # the scripted user's hidden preferences, drawn at reset
    exchanges: list[tuple[str, str]] = []
    out = []
    feedback: str | None = None
    for turn in range(MAX_TURNS["intention"] if moves is None else min(len(moves), MAX_TURNS["intention"])):
        if solver is not None:
            choice, content = solver.next_action(feedback)
        else:
            choice, content = moves[turn]
        if choice == "finish":
            break
        if solver is not None and rng.random() < WEAK_TURN_P["intention"]:
            content = _OFF_TOPIC[int(rng.integers(len(_OFF_TOPIC)))]
        obs, _, terminated, truncated, _ = env.step(tool_call_to_action(choice, content))
        feedback = obs["feedback"]
        out.append((user_turn_context(record["task"], exchanges, content), feedback,
                    _intention_states(feedback, details, picks)))
        exchanges.append((content, feedback))
        if terminated or truncated:
            break
    from userrl.envs.intention.roles import persona_prompt
    from userrl.envs.intention.tasks import details_of

    return persona_prompt(record["task"], record["category"], details_of(record), picks), out


# ---------------------------------------------------------------- rows


def seed_of(seed: int, gym: str, key: str) -> int:
    """A conversation's seed from the rows' seed, its gym and a key (its task's, or more)."""
    # crc32, not hash(): stable across processes (PYTHONHASHSEED).
    return zlib.crc32(f"{seed}:{gym}:{key}".encode())


def gym_rows(gym: str, split: str, seed: int = SEED) -> list[Row]:
    """Every row of one gym and split (the gym's own task split, so train and test share no task)."""
    if gym not in GYMS:
        raise ValueError(f"no HumanLM data for gym {gym!r}; gyms: {list(GYMS)}")
    rows = []
    for task in sorted(load_tasks(gym, split), key=lambda t: t.item_key):
        task_seed = seed_of(seed, gym, task.item_key)
        rng = np.random.default_rng(task_seed)
        if gym == "persuade":
            from userrl.envs.persuade.roles import persona_prompt

            persona, turns = persona_prompt(task.data["claim"]), persuade_conversation(task, rng, task_seed)
        else:
            persona, turns = intention_conversation(task, rng, task_seed)
        rows += conversation_rows(gym, task, split, persona, turns)
    return rows


def conversation_rows(gym: str, task: Task, split: str, persona: str, turns: Sequence[tuple[list[dict], str, dict]],
                      source: str = "", conversation: str = "") -> list[Row]:
    """One row per user reply of a recorded conversation (`conversation` tells apart several of one task)."""
    rows = []
    for turn, (context, reply, states) in enumerate(turns, start=1):
        extra = {"gym": gym, "task_id": task.item_key, "split": split, "turn": turn,
                 **({"source": source, "conversation": conversation} if source else {})}
        rows.append(
            Row(
                prompt=({"role": "system", "content": persona}, *context),
                ground_truth=reply,
                persona=persona,
                target_id=":".join(p for p in (gym, task.item_key, conversation, str(turn)) if p),
                data_source=f"userrl_{gym}" + (f"_{source}" if source else ""),
                latent_states=states,
                extra=extra,
            )
        )
    return rows


def data_path(gym: str, split: str, root: Path = DATA_DIR) -> Path:
    """Where the shipped rows of one gym and split live."""
    return root / f"{gym}_{split}.jsonl"


def render_jsonl(rows: Iterable[Row]) -> str:
    """Rows as JSONL, one HumanLM record per line."""
    return "".join(json.dumps(r.to_record(), ensure_ascii=False) + "\n" for r in rows)


def load_rows(split: str, gyms: Iterable[str] = GYMS, root: Path = DATA_DIR) -> list[Row]:
    """The shipped rows of a split (python -m userrl.humanlm.generate writes them)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    rows = []
    for gym in gyms:
        path = data_path(gym, split, root)
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; run python -m userrl.humanlm.generate")
        rows += read_jsonl(path)
    return rows


def read_jsonl(path: str | Path) -> list[Row]:
    """Rows from a JSONL file of HumanLM records."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}: line {n} is not JSON ({exc})") from None
                rows.append(Row.from_record(record, f"{path}: line {n}"))
    return rows


def load_parquet(
    path: str | Path, *, skip_bad_rows: bool = False, on_skip: Callable[[str], None] | None = None
) -> list[Row]:
    """Rows from a HumanLM-format parquet file (columns prompt, reward_model, extra_info; data_source optional).

    A missing column raises ValueError naming it; a malformed row raises, or with skip_bad_rows is dropped
    and reported through on_skip.
    """
    import polars as pl

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such parquet file")
    frame = pl.read_parquet(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing} of the HumanLM format; it has {frame.columns} "
            f"(needs {list(REQUIRED_COLUMNS)}, with reward_model.ground_truth the real reply)"
        )
    rows = []
    for i, record in enumerate(frame.iter_rows(named=True)):
        try:
            rows.append(Row.from_record(record, f"{path}: row {i}"))
        except ValueError as exc:
            if not skip_bad_rows:
                raise
            if on_skip is not None:
                on_skip(str(exc))
    return rows


def flip_roles(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The other convention: the simulated user's turns as `assistant`, the agent's as `user` (system kept)."""
    swap = {"user": "assistant", "assistant": "user"}
    return [{"role": swap.get(m["role"], m["role"]), "content": m["content"]} for m in messages]
