"""TravelEnv (docs/spec/GYMS.md §7) on a hand-written fixture scenario: feedback, rewards, presets, scripted
roles, the llm path with a fake RoleClient, termination, spaces and fuzzing."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

import userrl.envs.travel  # noqa: F401  (registers "travel" and userrl/Travel-v0)
from userrl.envs import Task
from userrl.envs.llm import RoleCall
from userrl.envs.travel import env as tenv
from userrl.envs.travel import roles
from userrl.envs.travel.env import TravelEnv
from userrl.envs.travel.schema import parse_scenario
from userrl.envs.travel.tasks import builtin_prompt

# ---------------------------------------------------------------- the fixture scenario (schema of section 7)


def _hotel(oid: str, cls: str, cost: int, rating: float, amenities: list[str]) -> dict[str, Any]:
    return {
        "id": oid,
        "name": f"Hotel {oid}",
        "room": {"Deluxe King": 2},
        "cost": {"Deluxe King": cost},
        "rating": rating,
        "amenities": amenities,
        "service": {},
        "type": cls,
        "reason": f"{cls} option",
    }


def _flight(oid: str, cls: str, cost: int, path: list[str], amenities: list[str]) -> dict[str, Any]:
    legs = len(path) - 1
    return {
        "id": oid,
        "path": path,
        "time": [7.0, 2.0, 1.5][: 2 * legs - 1],
        "company": ["Delta"] * legs,
        "flight_number": [f"DL{100 + i}" for i in range(legs)],
        "cost": cost,
        "amenities": amenities,
        "service": {},
        "type": cls,
        "reason": f"{cls} option",
    }


POOL_IMPLICIT = "I swim every morning before breakfast, wherever I am."
RATING_IMPLICIT = "I only trust places that guests really love."
STOPS_IMPLICIT = "Changing planes always stresses me out."
WIFI_IMPLICIT = "I must answer work emails during the whole flight."

FIXTURE: dict[str, Any] = {
    "scenario": "The traveller is a teacher flying from Boston to Paris with a friend.",
    "dimensions": ["hotel", "flight"],
    "wanted_num": 2,
    "initial_description": (
        "I need a one-way flight from Boston to Paris on May 3rd for 2 passengers, and a hotel in Paris from "
        "May 3rd to May 6th for 2 guests."
    ),
    "hotel": {
        "preferences": [
            ["hotel", "swimming pool", "The hotel must have a swimming pool.", POOL_IMPLICIT],
            [
                "hotel",
                "guest rating",
                "The hotel needs a guest rating of at least 8.",
                RATING_IMPLICIT,
                "extra",
            ],
            ["hotel", "ignored entry"],
        ],
        "options": {
            "correct": [
                _hotel("H11", "correct", 500, 8.5, ["pool"]),
                _hotel("H4", "correct", 650, 9.0, ["pool"]),
            ],
            "wrong": [
                _hotel("H2", "wrong", 300, 8.2, []),
                _hotel("H7", "wrong", 420, 7.0, ["pool"]),
                _hotel("H9", "wrong", 700, 6.5, ["pool"]),
            ],
            "noise": [_hotel("H5", "noise", 200, 5.0, []), _hotel("H6", "noise", 250, 6.0, ["spa"])],
        },
        "arguments": {"city": "Paris", "check_in": "May 3rd", "check_out": "May 6th", "guests": 2},
        "correct_ids": ["H4", "H11"],
        "best_id": "H11",
    },
    "flight": {
        "preferences": [
            ["flight", "number of stops", "I only want a direct flight with no stops.", STOPS_IMPLICIT],
            ["flight", "onboard wifi", "Free wifi on board is a must.", WIFI_IMPLICIT],
        ],
        "options": {
            "correct": [
                _flight("F3", "correct", 400, ["BOS", "CDG"], ["wifi"]),
                _flight("F8", "correct", 550, ["BOS", "CDG"], ["wifi", "meal"]),
            ],
            "wrong": [
                _flight("F1", "wrong", 300, ["BOS", "JFK", "CDG"], ["wifi"]),
                _flight("F2", "wrong", 350, ["BOS", "CDG"], []),
            ],
            "noise": [_flight("F5", "noise", 250, ["BOS", "LHR", "CDG"], [])],
        },
        "arguments": {"origin": "Boston", "destination": "Paris", "date": "May 3rd", "passengers": 2},
        "correct_ids": ["F3", "F8"],
        "best_id": "F3",
    },
}
FIXTURE_ID = "flight:2-1|hotel:2-1"
HOTEL_SEARCH = "[search] hotel in Paris, check in May 3rd, check out May 6th, 2 guests"
FLIGHT_SEARCH = "[search] flight from Boston to Paris on May 3rd for 2 passengers"
ASK_POOL = "[action] Is a swimming pool important to you?"
ASK_RATING = "[action] What guest rating should the hotel have at least?"
ASK_STOPS = "[action] For the flight, how many stops are fine?"
SMALL_TALK = "[action] Hello, nice to meet you."
SUFFIX = tenv.CHOICE_RECORDED


def make_task(scenario: dict[str, Any] | None = None, key: str = FIXTURE_ID) -> Task:
    raw = copy.deepcopy(scenario or FIXTURE)
    data = {"id": key, "subset": "22", "scenario": raw, "best_ids": ["H11", "F3"]}
    return Task("travel", key, builtin_prompt(FIXTURE["initial_description"]), data)


def started(**kwargs: Any) -> TravelEnv:
    env = TravelEnv(make_task(), **kwargs)
    env.reset()
    return env


def feedback(env: TravelEnv, action: str) -> str:
    return env.step(action)[0]["feedback"]


def option_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()[1:]]


# ---------------------------------------------------------------- schema and reset


def test_fixture_parses_with_numbered_preferences() -> None:
    sc = parse_scenario(FIXTURE_ID, FIXTURE)
    assert [(p.pid, p.dimension, p.subcategory) for p in sc.preferences] == [
        ("P1", "hotel", "swimming pool"),
        ("P2", "hotel", "guest rating"),
        ("P3", "flight", "number of stops"),
        ("P4", "flight", "onboard wifi"),
    ]
    assert sc.best_ids == ["H11", "F3"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.update(dimensions=["hotel", "boat"]), "dimensions"),
        (lambda s: s.pop("flight"), "no 'flight' object"),
        (lambda s: s["hotel"].update(best_id="H2"), "best_id"),
        (lambda s: s["hotel"]["options"]["wrong"][0].update(id="F77"), "not H<digits>"),
        (lambda s: s["hotel"]["options"]["noise"][0].update(id="H11"), "duplicate option id"),
        (lambda s: s["flight"].update(arguments=["Boston"]), "'arguments' must be an object"),
        (lambda s: s.update(initial_description=None), "initial_description"),
    ],
)
def test_bad_scenarios_are_refused_at_load(mutate: Callable[[dict], Any], message: str) -> None:
    bad = copy.deepcopy(FIXTURE)
    mutate(bad)
    with pytest.raises(ValueError, match=re.escape(message)):
        TravelEnv(make_task(bad))
    with pytest.raises(ValueError, match="scenario"):
        TravelEnv(Task("travel", "k", builtin_prompt("x"), {"id": "k"}))


def test_reset_observation_and_info() -> None:
    env = TravelEnv(make_task())
    obs, info = env.reset()
    assert obs == {
        "feedback": FIXTURE["initial_description"],
        "task_description": FIXTURE["scenario"],
        "goal": tenv.GOAL,
        "step_count": 0,
        "episode_complete": False,
        "total_preferences": 4,
        "remaining_preferences": 4,
        "elicitation_ratio": 0.0,
        "active_elicited_preferences": 0,
        "passive_elicited_preferences": 0,
        "last_reward": 0.0,
    }
    assert info["task_id"] == FIXTURE_ID and len(info["preferences_summary"]) == 4
    assert info["preferences_summary"][0] == "hotel-swimming pool: The hotel must have a swimming pool...."
    for key in ("conversation_history", "elicited_preferences", "newly_elicited_preferences", "choices"):
        assert info[key] == []
    assert {"raw_action", "action_history", "total_reward", "error", "lm_calls"} <= set(info)


# ---------------------------------------------------------------- search


def test_correct_search_lists_the_options_without_type_and_reason() -> None:
    env = started()
    obs, reward, terminated, truncated, info = env.step(HOTEL_SEARCH)
    head = obs["feedback"].splitlines()[0]
    assert head == (
        "Your search request is correct. Options for hotel (name, room (types with capacity), cost (per room "
        "type, whole stay, USD), rating (0-10), amenities, service):"
    )
    options = option_lines(obs["feedback"])
    assert sorted(o["id"] for o in options) == ["H11", "H2", "H4", "H5", "H6", "H7", "H9"]
    assert all("type" not in o and "reason" not in o for o in options)
    assert options[0] == {k: v for k, v in next(
        o for cls in FIXTURE["hotel"]["options"].values() for o in cls if o["id"] == options[0]["id"]
    ).items() if k not in ("type", "reason")}  # fmt: skip
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["unsearched_aspects"] == ["flight"] and info["search_times"] == 1
    assert info["conversation_history"][0] == {
        "role": "agent",
        "content": HOTEL_SEARCH.removeprefix("[search] "),
        "note": "search: correct (hotel)",
    }
    assert feedback(env, FLIGHT_SEARCH).startswith(
        "Your search request is correct. Options for flight (path (airports, including layovers), time "
        "(alternating flight and layover hours), company per leg, flight_number per leg, cost (USD, economy), "
        "amenities (free), service (paid extras)):\n{"
    )


def test_repeated_search() -> None:
    env = started(reward_preset="eval")
    assert env.step(HOTEL_SEARCH)[1] == 0.2
    obs, reward, *_ = env.step(HOTEL_SEARCH)
    assert (obs["feedback"], reward) == (
        "You have already searched hotel; refer to the earlier results.",
        0.0,
    )


@pytest.mark.parametrize(
    "request_text",
    [
        "hotel in Paris from May 3rd to May 6th",  # an argument missing
        "hotel in Rome from May 3rd to May 6th for 2 guests",  # a wrong value
        "something in Paris from May 3rd to May 6th for 2 guests",  # no aspect named
        "hotel and flight from Boston to Paris, May 3rd to May 6th, 2 guests",  # two aspects
        "apartment in Paris from May 3rd to May 6th for 2 guests",  # an aspect the trip does not have
        "",
    ],
)
def test_search_refine(request_text: str) -> None:
    obs, reward, *_ = started(reward_preset="eval").step(f"[search] {request_text}")
    assert (obs["feedback"], reward) == (
        "Please refine your request: match the user's needs, search one aspect at a time, and give exactly "
        "the required arguments.",
        0.0,
    )


def test_every_fifth_search_fails_deliberately() -> None:
    env = started(reward_preset="eval")
    results = [env.step("[search] hotel in Rome") for _ in range(4)]
    assert all(r[0]["feedback"].startswith("Please refine") for r in results)
    obs, reward, *_ = env.step(HOTEL_SEARCH)  # the 5th search fails even though it is correct
    assert (obs["feedback"], reward) == (
        "The search backend is having temporary issues. Please try again later.",
        0.0,
    )
    assert env.step(HOTEL_SEARCH)[1] == 0.2  # the 6th goes through
    for _ in range(3):
        env.step("[search] nothing")
    assert feedback(env, FLIGHT_SEARCH) == tenv.SEARCH_BACKEND_ISSUE  # the 10th


@pytest.mark.parametrize(("interval", "fails"), [(0, []), (2, [2, 4]), (1, [1, 2, 3, 4])])
def test_search_failure_interval_is_configurable(interval: int, fails: list[int]) -> None:
    env = started(search_failure_interval=interval)
    got = [i + 1 for i in range(4) if feedback(env, "[search] x") == tenv.SEARCH_BACKEND_ISSUE]
    assert got == fails


# ---------------------------------------------------------------- option lists


def test_option_lists_are_truncated_and_seeded() -> None:
    env = started(wrong_choice_number=1, noise_choice_number=1)
    ids = [o["id"] for o in option_lines(feedback(env, HOTEL_SEARCH))]
    assert len(ids) == 4 and {"H11", "H4"} <= set(ids)
    assert len(set(ids) & {"H2", "H7", "H9"}) == 1 and len(set(ids) & {"H5", "H6"}) == 1
    env = started(wrong_choice_number=None, noise_choice_number=None)
    assert len(option_lines(feedback(env, HOTEL_SEARCH))) == 7

    def order(seed: int, key: str = FIXTURE_ID) -> list[str]:
        env = TravelEnv(make_task(key=key), seed=seed, wrong_choice_number=2)
        env.reset()
        return [o["id"] for o in option_lines(feedback(env, HOTEL_SEARCH))]

    assert order(1) == order(1)
    assert len({tuple(order(s)) for s in range(8)}) > 1
    assert len({tuple(order(1, key=f"flight:2-{k}|hotel:2-1")) for k in range(8)}) > 1


def test_default_truncation_is_ten_wrong_and_five_noise() -> None:
    big = copy.deepcopy(FIXTURE)
    wrong, noise = big["hotel"]["options"]["wrong"], big["hotel"]["options"]["noise"]
    wrong += [_hotel(f"H{20 + i}", "wrong", 900, 5.0, []) for i in range(10)]
    noise += [_hotel(f"H{40 + i}", "noise", 900, 5.0, []) for i in range(6)]
    env = TravelEnv(make_task(big))
    env.reset()
    ids = {o["id"] for o in option_lines(feedback(env, HOTEL_SEARCH))}
    assert len(ids) == 2 + 10 + 5 and {"H11", "H4"} <= ids


# ---------------------------------------------------------------- answers and termination


def test_best_then_best_terminates() -> None:
    env = started()
    obs, reward, terminated, _, info = env.step("[answer] H11")
    assert (obs["feedback"], reward, terminated) == (
        "H11 is the best option for this aspect." + SUFFIX,
        1.0,
        False,
    )
    assert info["choices"] == [{"option_id": "H11", "aspect": "hotel", "verdict": "best"}]
    obs, reward, terminated, truncated, _ = env.step("[answer]  f3 ")
    assert (obs["feedback"], reward, terminated, truncated) == (
        "F3 is the best option for this aspect." + SUFFIX,
        1.0,
        True,
        False,
    )
    assert obs["episode_complete"] is True


def test_correct_and_wrong_choices() -> None:
    env = started()
    obs, reward, *_ = env.step("[answer] H4")
    assert (obs["feedback"], reward) == (
        "H4 satisfies the preferences but is not the best option." + SUFFIX,
        0.8,
    )
    obs, reward, terminated, *_ = env.step("[answer] F2")
    assert (obs["feedback"], reward, terminated) == (
        "F2 does not satisfy the preferences." + SUFFIX,
        0.0,
        True,
    )


def test_a_wrong_choice_still_ends_the_episode_once_every_aspect_has_a_choice() -> None:
    env = started()
    assert env.step("[answer] H999")[1:3] == (0.0, False)
    assert env.step("[answer] F8")[1:3] == (0.8, True)


def test_one_choice_per_aspect() -> None:
    env = started()
    env.step("[answer] H2")
    obs, reward, terminated, *_ = env.step("[answer] H11")
    assert (obs["feedback"], reward, terminated) == (
        "You have already made a recommendation for this aspect. Continue with the other aspects.",
        0.0,
        False,
    )


@pytest.mark.parametrize("content", ["H11, F3", "H11,", "H11 F3", "H11/F3", "h11 and f3"])
def test_only_one_id_per_answer(content: str) -> None:
    env = started()
    obs, reward, *_, info = env.step(f"[answer] {content}")
    assert (obs["feedback"], reward) == ("Please recommend only one option at a time.", 0.0)
    assert info["choices"] == [] and env.step("[answer] H11")[1] == 1.0  # nothing was recorded


@pytest.mark.parametrize("content", ["", "hotel", "H11.", "X5", "11", "H", "Option H11", "H-11"])
def test_invalid_option_id(content: str) -> None:
    obs, reward, *_ = started().step(f"[answer] {content}")
    assert (obs["feedback"], reward) == ("Invalid option id. Recommend exactly one id such as H11.", 0.0)


def test_an_id_of_an_aspect_the_trip_lacks_is_wrong_and_blocks_its_letter() -> None:
    env = started()
    obs, reward, terminated, _, info = env.step("[answer] A3")
    assert (obs["feedback"], reward, terminated) == (
        "A3 does not satisfy the preferences." + SUFFIX,
        0.0,
        False,
    )
    assert info["choices"] == [{"option_id": "A3", "aspect": None, "verdict": "wrong"}]
    assert feedback(env, "[answer] A4") == tenv.ASPECT_ALREADY_CHOSEN


def test_answer_rewards_are_clipped_and_configurable() -> None:
    env = started(wrong_choice_penalty=0.5, choice_best_reward=2.0, choice_correct_reward=0.3)
    assert env.step("[answer] F1")[1] == 0.0  # -0.5 clipped to 0
    assert env.step("[answer] H11")[1] == 1.0  # 2.0 clipped to 1
    env = started(choice_correct_reward=0.3)
    assert env.step("[answer] F8")[1] == 0.3


def test_answering_an_aspect_drops_its_preferences() -> None:
    env = started()
    obs, *_ = env.step("[answer] H11")
    assert obs["remaining_preferences"] == 4  # dropped preferences are not "elicited"
    obs, reward, *_, info = env.step(ASK_POOL)
    assert reward == 0.0 and obs["feedback"] == roles.SCRIPTED_NATURAL_REPLY
    assert [s.split(":")[0] for s in info["preferences_summary"]] == [
        "flight-number of stops",
        "flight-onboard wifi",
    ]


def test_finish_and_invalid_actions() -> None:
    env = started()
    assert env.step("hello")[:3] == (
        dict(env._last_obs, feedback="Invalid action. Allowed choices: search, action, answer."),
        0.0,
        False,
    )
    assert feedback(env, "[Answer] H11") == tenv.INVALID_ACTION
    env.step(ASK_POOL)
    obs, reward, terminated, truncated, _ = env.step("[finish]")
    assert (obs["feedback"], reward, terminated, truncated) == (
        "Episode finished. You elicited 1 of 4 preferences.",
        0.0,
        True,
        False,
    )
    assert feedback(env, "[answer] H11") == "The episode has already ended."


def test_truncation_at_max_steps() -> None:
    env = started(max_steps=3)
    results = [env.step(SMALL_TALK) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    env = started(max_steps=2)
    env.step("[answer] H11")
    assert env.step("[answer] F3")[2:4] == (True, False)  # terminating on the last step is not truncation


# ---------------------------------------------------------------- utterances (scripted backend)


def test_type2_elicits_the_preference() -> None:
    env = started()
    obs, reward, terminated, _, info = env.step(ASK_POOL)
    assert (obs["feedback"], reward, terminated) == (POOL_IMPLICIT, 0.8, False)
    assert obs["active_elicited_preferences"] == 1 and obs["remaining_preferences"] == 3
    assert obs["elicitation_ratio"] == 0.25 and obs["last_reward"] == 0.8
    assert [p["id"] for p in info["newly_elicited_preferences"]] == ["P1"]
    assert info["elicited_preferences"][0]["how"] == "active"
    assert info["conversation_history"][-2]["note"] == "elicited P1 (active)"
    assert info["conversation_history"][-1] == {"role": "user", "content": POOL_IMPLICIT, "note": ""}
    # The same preference cannot be elicited twice.
    obs, reward, *_ = env.step(ASK_POOL)
    assert (obs["feedback"], reward) == (roles.SCRIPTED_NATURAL_REPLY, 0.0)


@pytest.mark.parametrize(("preset", "reward"), [("train", 0.8), ("eval", 0.6)])
def test_type2_reward_follows_the_preset(preset: str, reward: float) -> None:
    obs, got, *_ = started(reward_preset=preset).step(ASK_RATING)
    assert (obs["feedback"], got, obs["last_reward"]) == (RATING_IMPLICIT, reward, reward)


@pytest.mark.parametrize(
    ("utterance", "reply"),
    [
        ("[action] What about the parking?", tenv.TYPE3_REPLY),
        ("[action] Do you care about the price?", tenv.TYPE3_REPLY),
        ("[action] Any requirements for the trip?", tenv.TYPE4_REPLY),
        ("[action] Tell me anything you like.", tenv.TYPE4_REPLY),
        ("[action] Do you prefer anything", tenv.TYPE4_REPLY),
        ("[action] What about the parking", roles.SCRIPTED_NATURAL_REPLY),  # no "?": not type 3
        (SMALL_TALK, "I don't have anything specific in mind about that."),
    ],
)
def test_non_preference_utterances(utterance: str, reply: str) -> None:
    env = started()
    obs, reward, *_ = env.step(utterance)
    assert (obs["feedback"], reward) == (reply, 0.0)
    assert env.nonpreference_times == 1


def test_type3_and_type4_wording() -> None:
    assert tenv.TYPE3_REPLY == (
        "Good question, but I don't have a specific preference about that, or I already told you. Could you "
        "ask about other specifics?"
    )
    assert (
        tenv.TYPE4_REPLY
        == "That question is too general for me. Could you ask about something more concrete?"
    )


def test_proactive_elicitation_after_three_non_preference_turns() -> None:
    env = started()
    for _ in range(3):
        assert feedback(env, SMALL_TALK) == roles.SCRIPTED_NATURAL_REPLY
    obs, reward, _, _, info = env.step(SMALL_TALK)
    (pref,) = info["newly_elicited_preferences"]
    assert obs["feedback"] == "By the way, " + pref["implicit_elicitation"] and reward == 0.0
    assert pref["how"] == "passive" and obs["passive_elicited_preferences"] == 1
    assert obs["remaining_preferences"] == 3 and env.nonpreference_times == 0
    assert feedback(env, SMALL_TALK) == roles.SCRIPTED_NATURAL_REPLY  # the counter restarted


def test_proactive_pick_uses_the_env_rng() -> None:
    def picked(seed: int) -> str:
        env = started(seed=seed)
        for _ in range(3):
            env.step(SMALL_TALK)
        return env.step("[action] Any requirements?")[4]["newly_elicited_preferences"][0]["id"]

    assert picked(3) == picked(3)
    assert len({picked(s) for s in range(12)}) > 1


def test_a_type2_turn_resets_the_counter_and_an_empty_pool_stops_proactive_reveals() -> None:
    env = started(elicitation_interval=2)
    env.step(SMALL_TALK)
    env.step(ASK_POOL)
    assert env.nonpreference_times == 0
    env.step(SMALL_TALK)
    env.step(SMALL_TALK)
    assert feedback(env, SMALL_TALK).startswith("By the way, ")
    env.available_prefs.clear()
    for _ in range(4):
        assert feedback(env, SMALL_TALK) == roles.SCRIPTED_NATURAL_REPLY


def test_scripted_type_judge_ties_go_to_the_lowest_id() -> None:
    sc = parse_scenario(FIXTURE_ID, FIXTURE)
    assert roles.scripted_type_judge("hotel swimming pool guest rating", sc.preferences) == (2, "P1")
    assert roles.scripted_type_judge("guest rating hotel swimming", sc.preferences) == (2, "P2")
    assert roles.scripted_type_judge("direct flight wifi", sc.preferences) == (2, "P3")
    assert roles.scripted_type_judge("pool?", sc.preferences) == (1, None)  # one shared word is not enough


def test_scripted_search_judge_keyword_table() -> None:
    sc = parse_scenario(FIXTURE_ID, FIXTURE)
    judge = roles.scripted_search_judge
    assert judge("Book FLIGHTS from boston to PARIS on may 3rd, 2 seats", sc) == roles.SearchJudgement(
        "True", "flight"
    )
    assert judge("I want to fly from Boston to Paris on May 3rd, 2 people", sc).label == "True"
    assert judge("plane Boston Paris May 3rd 2", sc).label == "True"
    assert judge("flight Boston Paris May 3rd", sc) == roles.SearchJudgement("False", "flight")
    assert judge("airline hotel Boston Paris May 3rd 2", sc) == roles.SearchJudgement("N/A", None)
    assert judge("rent a car in Paris", sc) == roles.SearchJudgement("False", "rental_car")
    assert judge("dinner in Paris", sc) == roles.SearchJudgement("False", "restaurant")
    assert judge("an airbnb or a flat in Paris", sc) == roles.SearchJudgement("False", "apartment")
    assert roles.named_aspects("Can we dine and eat? lunch") == ["restaurant"]
    assert roles.named_aspects("hotels, apartments") == ["hotel", "apartment"]
    assert roles.argument_texts({"a": [1, 2.0, 2.5, True, None, "X"]}) == ["1", "2", "2.5", "true", "X"]


# ---------------------------------------------------------------- presets, scaling, configuration


def test_reward_presets_and_overrides() -> None:
    assert tenv.REWARD_PRESETS == {
        "train": {"search_correct_reward": 0.0, "preference_correct_reward": 0.8},
        "eval": {"search_correct_reward": 0.2, "preference_correct_reward": 0.6},
    }
    env = started(reward_preset="eval", search_correct_reward=0.5)
    assert (env.search_correct_reward, env.preference_correct_reward) == (0.5, 0.6)
    with pytest.raises(ValueError, match="reward_preset"):
        TravelEnv(make_task(), reward_preset="test")


def test_reward_scale_and_step_penalty() -> None:
    env = started(reward_scale=2.0, step_penalty=0.1)
    assert env.step(ASK_POOL)[1] == pytest.approx(1.5)
    assert env.step(SMALL_TALK)[1] == pytest.approx(-0.1)
    assert started(step_penalty=0.1, normalize_rewards=True).step(SMALL_TALK)[1] == 0.0


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="search_failure_interval"):
        TravelEnv(search_failure_interval=-1)
    with pytest.raises(ValueError, match="elicitation_interval"):
        TravelEnv(elicitation_interval=0)
    with pytest.raises(ValueError, match="wrong_choice_number"):
        TravelEnv(wrong_choice_number=1.5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        TravelEnv(search_reward=1.0)


# ---------------------------------------------------------------- the llm backend with a fake RoleClient


class FakeLLM:
    """Returns canned raw JSON objects per role (None = every attempt failed) through the real validators."""

    def __init__(self, replies: dict[str, list[Any]]) -> None:
        self.replies = {role: list(values) for role, values in replies.items()}
        self.calls: list[tuple[str, str, str, dict[str, Any]]] = []

    async def complete_json(
        self, role: str, system: str, user: str, validate: Callable[[dict[str, Any]], Any], **kwargs: Any
    ) -> tuple[Any, RoleCall]:
        self.calls.append((role, system, user, kwargs))
        raw = self.replies[role].pop(0)
        try:
            value = None if raw is None else validate(raw)
        except (ValueError, KeyError, TypeError):
            value = None
        return value, RoleCall(role, 1 if value is not None else 3, value is not None, 0.01)

    async def complete_text(self, role: str, system: str, user: str, **kwargs: Any) -> tuple[Any, RoleCall]:
        raise AssertionError("travel roles are JSON roles")


def llm_env(replies: dict[str, list[Any]], **kwargs: Any) -> tuple[TravelEnv, FakeLLM]:
    fake = FakeLLM(replies)
    env = TravelEnv(make_task(), backend="openai", llm=fake, **kwargs)
    env.reset()
    return env, fake


def test_llm_search_judge() -> None:
    env, fake = llm_env(
        {
            "search_judge": [
                {"alignment_judgement": "True", "alignment_aspect": "Hotel"},
                {"alignment_judgement": True, "alignment_aspect": "hotel"},
                {"alignment_judgement": "n/a"},
                {"alignment_judgement": "True", "alignment_aspect": "car rental"},
                None,
            ]
        },
        reward_preset="eval",
    )
    obs, reward, _, _, info = env.step("[search] anything")
    assert obs["feedback"].startswith("Your search request is correct. Options for hotel") and reward == 0.2
    assert info["lm_calls"] == [{"role": "search_judge", "attempts": 1, "ok": True, "latency_s": 0.01}]
    role, system, user, kwargs = fake.calls[0]
    assert system == roles.SEARCH_JUDGE_SYSTEM and kwargs == {"max_tokens": 2048, "temperature": 0.0}
    assert user.startswith("Agent's search request:\nanything\n") and '"check_in": "May 3rd"' in user
    assert 'Aspect: flight\n{\n    "origin": "Boston"' in user
    assert feedback(env, "[search] again") == "You have already searched hotel; refer to the earlier results."
    assert feedback(env, "[search] x") == tenv.SEARCH_REFINE
    assert feedback(env, "[search] x") == tenv.SEARCH_REFINE  # rental_car is not an aspect of this trip
    obs, reward, *_, info = env.step("[search] x")  # 5th search: deliberate failure, no judge call
    assert obs["feedback"] == tenv.SEARCH_BACKEND_ISSUE and info["lm_calls"] == []
    obs, reward, *_, info = env.step("[search] x")  # judge failed: the backend-issue fallback
    assert (obs["feedback"], reward) == (tenv.SEARCH_BACKEND_ISSUE, 0.0)
    assert info["lm_calls"][0]["ok"] is False and info["lm_calls"][0]["attempts"] == 3


def test_llm_type2_and_reveal() -> None:
    env, fake = llm_env(
        {
            "type_judge": [{"type": "2", "preference_id": "p2"}],
            "preference_reveal": [{"thought": "hint", "response": "  Only the best-loved places for me. "}],
        }
    )
    obs, reward, _, _, info = env.step("[action] What should the rating be?")
    assert (obs["feedback"], reward) == ("Only the best-loved places for me.", 0.8)
    assert [c["role"] for c in info["lm_calls"]] == ["type_judge", "preference_reveal"]
    assert [p["id"] for p in info["newly_elicited_preferences"]] == ["P2"]
    type_user, reveal_system, reveal_user = fake.calls[0][2], fake.calls[1][1], fake.calls[1][2]
    assert "P1 | hotel | The hotel must have a swimming pool." in type_user
    assert "Agent's latest utterance:\nWhat should the rating be?" in type_user
    assert reveal_system == roles.PREFERENCE_REVEAL_SYSTEM
    assert "Preference to convey: The hotel needs a guest rating of at least 8." in reveal_user
    assert f"Implicit hint: {RATING_IMPLICIT}" in reveal_user


def test_llm_fallbacks() -> None:
    env, fake = llm_env(
        {
            "type_judge": [
                {"type": 2, "preference_id": "P9"},  # unavailable id: type 1
                None,  # judge failed: type 1
                {"type": 7},  # invalid type: retried, then fallback type 1
                {"type": 2, "preference_id": "P3"},
                {"type": 3, "preference_id": None},
            ],
            "natural_reply": [{"thought": "t", "response": "Sure."}, {"response": ""}, {"thought": "only"}],
            "preference_reveal": [None],
            "proactive_reveal": [{"thought": "t", "response": "Also, I like swimming."}],
        }
    )
    assert feedback(env, "[action] a") == "Sure."
    assert feedback(env, "[action] b") == roles.REPLY_FALLBACK
    assert feedback(env, "[action] c") == "Sorry, I didn't quite get that. Could you ask again?"
    # The reveal failed, but the preference still counts as elicited, with its reward.
    obs, reward, *_, info = env.step("[action] d")
    assert (obs["feedback"], reward) == (roles.REPLY_FALLBACK, 0.8)
    assert [p["id"] for p in info["newly_elicited_preferences"]] == ["P3"]
    assert env.nonpreference_times == 0
    for _ in range(3):
        env.nonpreference_times += 1
    obs, reward, *_, info = env.step("[action] e")  # type 3, but the proactive rule comes first
    assert (obs["feedback"], reward) == ("Also, I like swimming.", 0.0)
    assert [c["role"] for c in info["lm_calls"]] == ["type_judge", "proactive_reveal"]
    assert fake.calls[-1][1] == roles.PROACTIVE_REVEAL_SYSTEM


def test_llm_type3_and_type4_need_no_reply_call() -> None:
    env, _ = llm_env({"type_judge": [{"type": 3}, {"type": "4", "preference_id": None}]})
    assert env.step("[action] a")[4]["lm_calls"][0]["role"] == "type_judge"
    assert feedback(env, "[action] b") == tenv.TYPE4_REPLY


def test_role_backends_mix_scripted_and_llm() -> None:
    fake = FakeLLM({"natural_reply": [{"thought": "", "response": "Hi!"}]})
    env = TravelEnv(make_task(), llm=fake, role_backends={"natural_reply": "openai"})
    env.reset()
    assert feedback(env, SMALL_TALK) == "Hi!"
    assert feedback(env, ASK_POOL) == POOL_IMPLICIT  # the type judge and reveal stay scripted
    assert [c[0] for c in fake.calls] == ["natural_reply"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"alignment_judgement": "TRUE ", "alignment_aspect": "Rental Car"}, ("True", "rental_car")),
        ({"alignment_judgement": "yes", "alignment_aspect": "car-rental"}, ("True", "rental_car")),
        ({"alignment_judgement": False, "alignment_aspect": None}, ("False", None)),
        ({"alignment_judgement": "N/A", "alignment_aspect": ""}, ("N/A", None)),
        ({"alignment_judgement": "no", "alignment_aspect": "Hotel"}, ("False", "hotel")),
    ],
)
def test_search_judgement_validator(reply: dict[str, Any], expected: tuple[str, str | None]) -> None:
    assert roles.validate_search_judgement(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        {},
        {"alignment_judgement": "maybe"},
        {"alignment_judgement": None},
        {"alignment_judgement": "True"},
        {"alignment_judgement": "True", "alignment_aspect": 3},
    ],
)
def test_search_judgement_validator_rejects(reply: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        roles.validate_search_judgement(reply)


def test_type_and_reply_validators() -> None:
    assert roles.validate_type_judgement({"type": 2, "preference_id": " p4 "}) == (2, "P4")
    assert roles.validate_type_judgement({"type": "3"}) == (3, None)
    assert roles.validate_type_judgement({"type": 2.0, "preference_id": 4}) == (2, None)
    for bad in ({}, {"type": True}, {"type": "two"}, {"type": 5}, {"type": 1.5}, {"type": None}):
        with pytest.raises((ValueError, KeyError, TypeError)):
            roles.validate_type_judgement(bad)
    assert roles.validate_reply({"thought": "x", "response": " ok "}) == "ok"
    for bad in ({}, {"response": None}, {"response": "  "}, {"response": ["a"]}):
        with pytest.raises((ValueError, KeyError, TypeError)):
            roles.validate_reply(bad)


def test_the_elicitation_ratio_space_is_a_fraction() -> None:
    space = started().observation_space["elicitation_ratio"]
    assert space.contains(0.5) and not space.contains(1.5) and not space.contains(True)


def test_training_plays_the_train_preset_and_userrl_evaluate_the_eval_preset() -> None:
    """GYMS §0.9: the config's env.reward_preset reaches training's gyms, evaluation.reward_preset and
    evaluation.show_reward_in_feedback replace them in `userrl evaluate`'s episodes."""
    from userrl.commands.evaluate import fingerprint, standalone_config
    from userrl.config import load_config
    from userrl.env_runner_group import env_kwargs
    from userrl.rollout import RolloutLimits

    config = load_config(None, ["env.gyms=[{name: travel}]", "env.show_reward_in_feedback=true"])
    evaluated = standalone_config(config, config.env.gyms)
    for cfg, reward, shown in ((config, 0.8, True), (evaluated, 0.6, False)):
        (kwargs,) = env_kwargs(cfg).values()
        obs, got, *_ = started(**kwargs).step(ASK_RATING)
        assert got == reward and RolloutLimits.from_config(cfg, 0.0).show_reward_in_feedback is shown
    assert fingerprint(evaluated, "m")["reward_preset"] == "eval"
    with pytest.raises(ValueError, match="unknown reward preset 'test'; valid: train, eval"):
        load_config(None, ["evaluation.reward_preset=test"])
