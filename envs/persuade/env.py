"""PersuadeEnv: argue an opinionated persuadee from "Strongly Agree" to "Strongly Disagree" (docs/spec/GYMS.md §3)."""

from __future__ import annotations

from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, MAX_FEEDBACK_CHARS, MultiTurnEnv, ScalarBox, Task, text_space
from userrl.envs.llm import PersonaUserClient, user_turn_context
from userrl.envs.persuade import roles
from userrl.envs.persuade.roles import FALLBACK_REPLY, PERSUADEE_ROLE, STANCES, stance_index
from userrl.envs.persuade.scripted import scripted_persuadee
from userrl.envs.persuade.tasks import validate_item
from userrl.envs.text import content_words

# Every feedback string of section 3 that is not a persuadee reply, verbatim.
EMPTY_ARGUMENT = "Please make an argument."
EPISODE_FINISHED = "Episode finished."
INVALID_ACTION = "Invalid action. Allowed choice: answer (make an argument)."
#: The reset text; like every reset text it is never shown to the agent (0.3).
WELCOME = "PersuadeGym: the environment strongly agrees with the claim. Argue against it."
GOAL = "Persuade the environment to move from Strongly Agree to Strongly Disagree on the claim."

TOP = len(STANCES) - 1
TITLE_CHARS = 100
REWARD_MODES = ("forward_delta", "best_improvement")


def forward_delta_reward(old: int, new: int) -> float:
    """The original rule: each forward move pays delta / 6 (rounded to 6 decimals); backward moves pay 0."""
    delta = new - old
    if delta <= 0:
        return 0.0
    return 1.0 if delta >= TOP else round(delta / TOP, 6)


def best_improvement_reward(best: int, new: int) -> float:
    """Pay only gains over the best stance reached so far, so the return is at most 1."""
    return round(max(0, new - best) / TOP, 6)


def tracking_score(index: int) -> float:
    """The tracking score of a ladder index: index / 6."""
    return index / TOP


class PersuadeEnv(MultiTurnEnv):
    """The Persuade gym: each argument may move the persuadee's stance; forward moves pay."""

    gym_name: ClassVar[str] = "persuade"
    allowed_choices: ClassVar[tuple[str, ...]] = ("answer",)
    normalize_rewards_default: ClassVar[bool] = True
    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = roles.ROLES

    def _configure(self, *, reward_mode: str = "forward_delta") -> None:
        """Gym keyword: the reward mode (persuade.reward_mode)."""
        # Persuade has no preset-specific settings (docs/spec/GYMS.md §0.9): both presets play identically.
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"unknown reward_mode {reward_mode!r}; use one of {list(REWARD_MODES)}")
        self.reward_mode = reward_mode

    def _observation_fields(self) -> dict[str, spaces.Space]:
        score = ScalarBox()
        return {
            "statement_title": text_space(TITLE_CHARS),
            "statement_text": text_space(MAX_FEEDBACK_CHARS),
            "goal": text_space(len(GOAL)),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
            "current_score": score,
            "best_score": score,
            "current_stance": text_space(max(len(s) for s in STANCES)),
        }

    def _load_task(self, task: Task) -> None:
        data = dict(task.data)
        data.setdefault("id", task.item_key)
        record = validate_item(data, f"persuade task {task.item_key!r}")
        self._claim = record["claim"]
        self._argument = record["argument"]
        # Relevance (c1) compares against the claim and the persuadee's own opening argument.
        self._topic_words = frozenset(content_words(self._claim + " " + self._argument))

    # ------------------------------------------------------------------ episode state

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        self.stance = 0
        self.best = 0
        self.dialogue: list[tuple[str, str]] = []
        self._history: list[dict[str, Any]] = []
        return WELCOME, self._extra_obs(), self._gym_info(0, 0, 0.0, None, None)

    def _extra_obs(self) -> dict[str, Any]:
        return {
            "statement_title": self._claim[:TITLE_CHARS],
            "statement_text": self._claim,
            "goal": GOAL,
            "current_score": tracking_score(self.stance),
            "best_score": tracking_score(self.best),
            "current_stance": STANCES[self.stance],
        }

    def _gym_info(
        self, old: int, new: int, reward: float, reply: dict[str, Any] | None, success: bool | None
    ) -> dict[str, Any]:
        return {
            "initial_stance": STANCES[0],
            "stance_change": f"{STANCES[old]} -> {STANCES[new]}",
            "step_reward": reward,
            "conversation_history": [dict(turn) for turn in self._history],
            "json_response": reply,
            "judge_success": success,
        }

    def _no_argument(
        self, feedback: str, terminated: bool = False
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        return (
            feedback,
            0.0,
            terminated,
            self._extra_obs(),
            self._gym_info(self.stance, self.stance, 0.0, None, None),
        )

    # ------------------------------------------------------------------ steps

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        if choice in ("answer", "action"):
            if not content:
                return self._no_argument(EMPTY_ARGUMENT)
            return await self._argue(content)
        if choice == "finish":
            return self._no_argument(EPISODE_FINISHED, terminated=True)
        return self._no_argument(INVALID_ACTION)

    async def _argue(self, argument: str) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        old, best_before = self.stance, self.best
        reply = await self._persuadee(argument)
        success = reply is not None
        if reply is None:
            feedback, new, json_response = FALLBACK_REPLY, old, None
        else:
            index = stance_index(reply.stance)
            feedback, json_response = reply.response, reply.as_dict()
            # A valid reply with an unknown label still answers the agent, but leaves the stance alone.
            new = old if index is None else index
        if self.reward_mode == "forward_delta":
            base = forward_delta_reward(old, new)
        else:
            base = best_improvement_reward(best_before, new)
        # The spec pays exactly 0 after a failed model call: no step penalty for an outage of the persuadee.
        reward = self.shaped_reward(base, self.step_penalty) if success else 0.0
        self.stance, self.best = new, max(best_before, new)
        self.dialogue.append((argument, feedback))
        self._history.append({"argument": argument, "response": feedback, "stance": STANCES[new]})
        info = self._gym_info(old, new, reward, json_response, success)
        return feedback, reward, new == TOP, self._extra_obs(), info

    def persona_view(self, argument: str) -> tuple[str, list[dict[str, str]]]:
        """What a persona-prompted persuadee simulator sees before replying to `argument`: its persona and the conversation
        (the essay it opened with, each argument and reply, the new argument), as in the recorded rows."""
        return roles.persona_prompt(self._claim), user_turn_context(self._argument, self.dialogue, argument)

    async def _persuadee(self, argument: str) -> roles.PersuadeeReply | None:
        """The persuadee's reply to the latest argument; None when the model failed (fallback applies)."""
        earlier = [a for a, _ in self.dialogue]
        if self.role_backends[PERSUADEE_ROLE] == "scripted":
            reply, _ = scripted_persuadee(argument, self._topic_words, earlier, self.stance)
            return reply
        assert self.llm is not None  # the base refuses a model backend without a client
        if isinstance(self.llm, PersonaUserClient):  # a user simulator: its persona and the conversation
            values, call = await self.llm.complete_user(PERSUADEE_ROLE, *self.persona_view(argument),
                                                        ("stance", "response"))
            self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
            if values is None:
                return None
            # A stance block that names no label is an unknown label: the stance stays (as for the JSON reply).
            stance = roles.stance_in_text(values["stance"]) or values["stance"]
            return roles.PersuadeeReply("", values["response"], stance)
        message = roles.persuadee_message(
            self._claim, self._argument, STANCES[self.stance], self.dialogue, argument
        )
        value, call = await self.llm.complete_json(
            PERSUADEE_ROLE, roles.PERSUADEE_SYSTEM_PROMPT, message, roles.validate_persuadee
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        return value
