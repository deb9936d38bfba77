"""Observation-grounded demonstrations (issue #14): every committing action a scripted solver demonstrates
must follow from what the agent saw, never from the hidden state the solver is privileged to know.

Each gym's solver is replayed over every builtin train task (scripted users, seeded), and an independent
checker, written here, reads the transcript only (the task's prompt messages and each step's choice,
content and feedback) and checks that every committing action is derivable from it. Where a checker needs
to *interpret* the transcript the way a careful agent would (Travel: which shown options violate a stated
preference; Persuade: whether an argument quotes the persuadee's unseen essay), it uses the hidden data
only to grade that reading, never to decide what the agent may use. The grounded demonstrations must still
succeed on most tasks. Success rates on builtin train tasks, before (solvers answering from hidden state)
and after:

| gym | before | after |
|---|---|---|
| intention | 48/48, return 3.02 | unchanged (already grounded: it only asks questions) |
| persuade | 35/35 | 35/35 (attributions to the unseen essay rewritten) |
| search | 120/120 | 120/120 (answer read from the search results) |
| tau | 64/64 | 64/64 (original tau-bench: 477/500 train, 125/165 test grounded, all of them solved) |
| telepathy | 119/119 | 119/119 (the name is confirmed by a Yes before it is guessed) |
| travel | 192/192 best, return 8.73 | 192/192 best, return 8.73 (choice = cheapest shown option meeting the replies) |
| turtle | 41/41 | 41/41 at 1.0 (story = the confirmed points; original stories: 370/423 grounded, mean 0.63) |
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from userrl.envs import Task, UngroundedTask, load_tasks, make_env, make_solver
from userrl.envs.search.tasks import builtin_prompt as search_prompt
from userrl.envs.solving import play_episode
from userrl.envs.tau.solver import TauSolver
from userrl.envs.text import content_words

Step = tuple[str, str, str, float]


@dataclass
class Transcript:
    """What the agent saw: the prompt messages, then (choice, content, feedback) per step."""

    prompt: list[dict[str, str]]
    steps: list[Step]

    def seen_before(self, i: int) -> str:
        """The prompt and the feedback of every step before step i."""
        return "\n".join([m["content"] for m in self.prompt] + [s[2] for s in self.steps[:i]])


def play(gym: str, task: Task, seed: int, **env_kwargs: Any) -> Transcript | None:
    """One demonstration of the gym's solver (None when the solver refuses the task as ungrounded)."""
    env = make_env(gym, **env_kwargs)
    try:
        steps = play_episode(env, task, make_solver(gym, task, np.random.default_rng(seed)))
    except UngroundedTask:
        return None
    finally:
        env.close()
    return Transcript(task.prompt, steps)


def demos(gym: str) -> list[tuple[Task, Transcript | None]]:
    return [(task, play(gym, task, i)) for i, task in enumerate(load_tasks(gym, "train"))]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether the words of phrase occur consecutively among those of text."""
    p = words(phrase)
    return bool(p) and f" {' '.join(p)} " in f" {' '.join(words(text))} "


def is_yes(feedback: str) -> bool:
    first = words(feedback)[:1]
    return first == ["yes"]


# ---------------------------------------------------------------- the checkers (transcript only)


def check_search(task: Task, t: Transcript) -> None:
    """An answer must be written in the results of an earlier search; a query names only known things."""
    for i, (choice, content, _, _) in enumerate(t.steps):
        results = [s[2] for s in t.steps[:i] if s[0] == "search"]
        if choice == "answer":
            assert any(contains_phrase(r, content) for r in results), (task.item_key, content)
        if choice == "search":
            for name in re.findall(r"\b[A-Z][A-Za-z0-9'-]*", content):
                assert contains_phrase(t.seen_before(i), name), (task.item_key, content, name)


GENERIC_QUESTION_WORDS = content_words("entity thing something thinking guess answer")


def check_telepathy(task: Task, t: Transcript) -> None:
    """A guess must name what an earlier question named and the oracle confirmed with a Yes."""
    for i, (choice, content, _, _) in enumerate(t.steps):
        if choice != "answer":
            continue
        guess = content_words(content)
        confirmed = [
            content_words(q) - GENERIC_QUESTION_WORDS
            for c, q, fb, _ in t.steps[:i]
            if c == "action" and is_yes(fb)
        ]
        assert guess and any(guess <= q for q in confirmed), (task.item_key, content)


def check_turtle(task: Task, t: Transcript) -> None:
    """Every sentence of a story must restate a question the host confirmed (or a point it revealed)."""
    for i, (choice, content, _, _) in enumerate(t.steps):
        if choice != "answer":
            continue
        confirmed = [content_words(q) for c, q, fb, _ in t.steps[:i] if c == "action" and is_yes(fb)]
        revealed = [content_words(line) for s in t.steps[:i] if s[0] == "answer" for line in s[2].split("\n")]
        for sentence in re.split(r"(?<=[.!?])\s+", content.strip()):
            claim = content_words(sentence)
            assert claim and any(claim <= c for c in confirmed + revealed), (task.item_key, sentence)


def check_intention(task: Task, t: Transcript) -> None:
    """Intention has nothing to answer: every step is a clarifying question, or the final finish."""
    for i, (choice, content, _, _) in enumerate(t.steps):
        assert choice in ("action", "finish"), (task.item_key, choice)
        if choice == "action":
            assert content.rstrip().endswith("?"), (task.item_key, content)
        else:
            assert i == len(t.steps) - 1


_ATTRIBUTION = re.compile(
    r"\byou (?:argue|claim|mention|compare|say|said|point to|cite|state|hold|note)(?: that)?\s+"
    r"(\"[^\"]+\"|[^,.;:]+)",
    re.IGNORECASE,
)
_UNSEEN_REFERENCE = re.compile(r"\byou (?:list|describe|mention|cite|leave out|worry|care|want)\b", re.IGNORECASE)


_SUPPORTERS_VIEW = re.compile(r"\bsupporters of this view \w+(?: that)? [^,.;:]*", re.IGNORECASE)


def check_persuade(task: Task, t: Transcript) -> None:
    """An argument may quote, and say the other side holds, only what the transcript shows; it never
    repeats the persuadee's unseen essay (no 6-word run of it that the transcript does not show), except
    where it rebuts a point it explicitly gives to the claim's supporters in general (choosing which
    common argument to rebut is strategy, which privilege may choose)."""
    essay = words(str(task.data["argument"]))
    essay_runs = {" ".join(essay[j : j + 6]) for j in range(len(essay) - 5)}
    for i, (choice, content, _, _) in enumerate(t.steps):
        if choice not in ("answer", "action"):
            continue
        seen = t.seen_before(i)
        for quoted in re.findall(r'"([^"]+)"', content):
            assert contains_phrase(seen, quoted.rstrip(".")), (task.item_key, quoted)
        for said in _ATTRIBUTION.findall(content):
            assert content_words(said) <= content_words(seen), (task.item_key, said)
        assert not _UNSEEN_REFERENCE.search(content), (task.item_key, content)
        argument = words(_SUPPORTERS_VIEW.sub(" | ", content))
        seen_words = f" {' '.join(words(seen))} "
        for j in range(len(argument) - 5):
            run = " ".join(argument[j : j + 6])
            assert run not in essay_runs or f" {run} " in seen_words, (task.item_key, run)


def _violated(option: dict[str, Any]) -> set[str]:
    """The preference subcategories a hidden option record violates (its generator label)."""
    if option["type"] == "correct":
        return set()
    if option["type"] == "wrong":
        return {re.fullmatch(r"violates the (.+) preference", option["reason"]).group(1)}  # type: ignore[union-attr]
    return set(option["reason"].removeprefix("violates ").split(", "))


def check_travel(task: Task, t: Transcript) -> None:
    """Searches use the traveller's own words; a recommendation is a shown option that meets every
    preference stated in an earlier reply, and every cheaper shown option breaks one of them."""
    scenario = task.data["scenario"]
    prompt = t.seen_before(0)
    shown: dict[str, list[dict[str, Any]]] = {}
    stated: dict[str, list[list[str]]] = {d: [] for d in scenario["dimensions"]}
    for choice, content, feedback, _ in t.steps:
        if choice == "search":
            values = re.split(r"; ", content.split(": ", 1)[1])
            for part in values:
                for value in part.split(": ", 1)[1].split(", "):
                    assert value in prompt, (task.item_key, value)
            if feedback.startswith("Your search request is correct."):
                aspect = re.match(r".*Options for (\w+) \(", feedback).group(1)  # type: ignore[union-attr]
                shown[aspect] = [json.loads(line) for line in feedback.split("\n")[1:]]
        elif choice == "action":
            # A preference counts as stated once its traveller's words appear in a reply.
            for aspect in stated:
                stated[aspect] += [p for p in scenario[aspect]["preferences"] if p[3] in feedback]
        elif choice == "answer":
            letter_aspect = {"F": "flight", "H": "hotel", "A": "apartment", "C": "rental_car", "R": "restaurant"}
            aspect = letter_aspect[content[0]]
            assert aspect in shown and content in [o["id"] for o in shown[aspect]], (task.item_key, content)
            records = {o["id"]: o for group in scenario[aspect]["options"].values() for o in group}
            said = {p[1] for p in stated[aspect]}
            need = [int(re.search(r"(\d+) people", p[2]).group(1)) for p in stated[aspect] if p[1] == "room capacity"]  # type: ignore[union-attr]

            def cost(option: dict[str, Any], aspect: str = aspect, need: list[int] = need) -> float:
                if aspect == "hotel":
                    rooms = [c for r, c in option["cost"].items() if all(option["room"][r] >= n for n in need)]
                    return min(rooms) if rooms else float("inf")
                return option["expectation"] if aspect == "restaurant" else option["cost"]

            assert not _violated(records[content]) & said, (task.item_key, content, said)
            for option in shown[aspect]:
                if cost(option) < cost(records[content]):
                    assert _violated(records[option["id"]]) & said, (task.item_key, content, option["id"])


_ID_TOKENS = re.compile(r"#W\d+|\b\d{10}\b|\b[a-z]+_[a-z]+_\d{4}\b|\b(?:credit_card|gift_card|paypal)_\d+\b|\d+\.\d\d\b")


def _numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))]


def _leaves(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, k)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v, key)]
    return [(key, value)]


def check_tau(task: Task, t: Transcript) -> None:
    """A tool call uses a tool the catalogue showed and argument values the customer stated or a tool
    returned; a message to the customer names only ids and amounts seen before."""
    for i, (choice, content, _, _) in enumerate(t.steps):
        seen = " ".join(t.seen_before(i).lower().split())
        if choice == "answer":
            call = json.loads(content)
            assert f"- {call['name']}:" in seen, (task.item_key, call["name"])
            for key, value in _leaves(call["arguments"]):
                if value is None or isinstance(value, bool) or key in ("summary", "thought") or value == "":
                    continue
                if isinstance(value, int | float):
                    assert float(value) in _numbers(seen), (task.item_key, key, value)
                else:
                    assert " ".join(str(value).lower().split()) in seen, (task.item_key, key, value)
        elif choice == "action":
            for token in _ID_TOKENS.findall(content):
                assert token.lower() in seen, (task.item_key, token)


CHECKERS: dict[str, Callable[[Task, Transcript], None]] = {
    "intention": check_intention,
    "persuade": check_persuade,
    "search": check_search,
    "tau": check_tau,
    "telepathy": check_telepathy,
    "travel": check_travel,
    "turtle": check_turtle,
}


def succeeded(gym: str, t: Transcript) -> bool:
    """Whether a demonstration reached its gym's goal."""
    total = sum(s[3] for s in t.steps)
    if gym == "intention":
        return total > 0
    if gym == "travel":
        return all("is the best option" in s[2] for s in t.steps if s[0] == "answer") and total > 0
    return total >= 0.999


#: gym -> (least share of train tasks with a grounded demonstration, least share of those that succeed).
EXPECTED = {
    "intention": (1.0, 1.0),
    "persuade": (1.0, 1.0),
    "search": (1.0, 1.0),
    "tau": (1.0, 1.0),
    "telepathy": (1.0, 1.0),
    "travel": (1.0, 1.0),
    "turtle": (1.0, 1.0),
}


@pytest.mark.parametrize("gym", sorted(CHECKERS))
def test_every_demonstrated_commitment_follows_from_the_transcript(gym: str) -> None:
    played = demos(gym)
    grounded = [(task, t) for task, t in played if t is not None]
    for task, t in grounded:
        CHECKERS[gym](task, t)
    wins = sum(succeeded(gym, t) for _, t in grounded)
    least_grounded, least_wins = EXPECTED[gym]
    assert len(grounded) >= least_grounded * len(played), (gym, len(grounded), len(played))
    assert wins >= least_wins * len(grounded), (gym, wins, len(grounded))


# ---------------------------------------------------------------- the checkers catch answers from hidden state


def test_checkers_reject_answers_from_hidden_state() -> None:
    search = load_tasks("search", "train")[1]
    t = Transcript(search.prompt, [("answer", search.data["answer"], "Correct! Your answer is right.", 1.0)])
    with pytest.raises(AssertionError):
        check_search(search, t)
    entity = load_tasks("telepathy", "train")[0]
    t = Transcript(entity.prompt, [("action", "Is it a mammal?", "Yes", 0.0), ("answer", entity.data["title"], "", 1.0)])
    with pytest.raises(AssertionError):
        check_telepathy(entity, t)
    story = load_tasks("turtle", "train")[0]
    t = Transcript(story.prompt, [("answer", story.data["bottom"], "", 1.0)])
    with pytest.raises(AssertionError):
        check_turtle(story, t)
    claim = load_tasks("persuade", "train")[0]
    t = Transcript(claim.prompt, [("answer", claim.data["counterarguments"][0], "", 0.3)])
    with pytest.raises(AssertionError):
        check_persuade(claim, t)
    trip = load_tasks("travel", "train")[0]
    aspect = trip.data["scenario"]["dimensions"][0]
    t = Transcript(trip.prompt, [("answer", trip.data["scenario"][aspect]["best_id"], "", 1.0)])
    with pytest.raises(AssertionError):
        check_travel(trip, t)
    order = load_tasks("tau", "train")[0]
    write = order.data["actions"][-1]
    call = json.dumps({"name": write["name"], "arguments": write["kwargs"]})
    t = Transcript(order.prompt, [("search", "tools", make_env("tau", order).unwrapped._tools_info, 0.0), ("answer", call, "", 0.0)])
    with pytest.raises(AssertionError):
        check_tau(order, t)


# ---------------------------------------------------------------- what cannot be grounded is not demonstrated


def test_search_refuses_a_question_its_results_never_answer() -> None:
    question = "Who was president in the year Citibank was founded?"
    task = Task("search", "x", search_prompt(question), {"id": "x", "question": question, "answer": "James Madison"})
    assert play("search", task, 0) is None
    # The oracle stub puts the answer into the results: then the same question is answered from them.
    t = play("search", task, 0, search_backend="scripted")
    assert t is not None and t.steps[-1][:2] == ("answer", "James Madison")
    check_search(task, t)


def test_telepathy_refuses_a_name_the_oracle_did_not_confirm() -> None:
    task = load_tasks("telepathy", "train")[0]
    solver = make_solver("telepathy", task, np.random.default_rng(0))
    questions = len(solver.plan) - 1
    for _ in range(questions):
        solver.next_action("No")
    with pytest.raises(UngroundedTask, match="oracle answered 'No'"):
        solver.next_action("No")


def test_turtle_tells_only_the_confirmed_points() -> None:
    task = load_tasks("turtle", "train")[0]
    solver = make_solver("turtle", task, np.random.default_rng(0))
    actions = [solver.next_action(None)]
    replies = iter(["Yes", "No"] * 20)
    while actions[-1][0] == "action":
        actions.append(solver.next_action(next(replies)))
    assert actions[-1][0] == "answer" and actions[-1][1] == solver.story() and solver.confirmed
    solver = make_solver("turtle", task, np.random.default_rng(0))
    action = solver.next_action(None)
    with pytest.raises(UngroundedTask):
        while action[0] == "action":
            action = solver.next_action("No")


def test_tau_refuses_a_task_it_cannot_ground_within_its_steps() -> None:
    task = next(t for t in load_tasks("tau", "train") if "items" in t.item_key)
    with pytest.raises(UngroundedTask, match="nothing within the steps left"):
        play_episode(make_env("tau", max_steps=6), task, TauSolver(task, np.random.default_rng(0), max_steps=6))


def test_travel_refuses_replies_it_cannot_read() -> None:
    task = load_tasks("travel", "train")[0]
    scenario = json.loads(json.dumps(task.data["scenario"]))
    aspect = scenario["dimensions"][0]
    scenario[aspect]["preferences"][0][3] = "You know what I mean."
    with pytest.raises(UngroundedTask, match="cannot read"):
        make_solver("travel", Task("travel", task.item_key, task.prompt, dict(task.data, scenario=scenario)),
                    np.random.default_rng(0))
