"""TurtleEnv: uncover the hidden story behind a lateral-thinking puzzle (docs/spec/GYMS.md §8)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from userrl.envs.base import Task
from userrl.envs.oracle import OracleEnv
from userrl.envs.text import content_words
from userrl.envs.turtle import roles

# Every feedback string of section 8, verbatim (the oracle's fallback comes from userrl.envs.oracle).
COVERED_HEADER = "Your story covers these key points:"
MORE_TWISTS = "There may be more twists to uncover."
NOTHING_COVERED = "Your story does not cover any of the key points yet."
COVERED_COUNT = "Your story covers {k} of {n} key points."
GRADER_FAILED = "Your story could not be evaluated. Try again."
INVALID_ACTION = "Invalid action. Allowed choices: action (a yes/no question), answer (your full story)."
#: The reset text; like every reset text it is never shown to the agent (§0.3).
WELCOME = "TurtleGym: the puzzle is ready. Ask yes/no questions, then tell the full hidden story."
GOAL = "Uncover the hidden story behind the surface and tell it in full."

#: Termination tolerance: rubric weights that sum to 1 - 1e-16 must still allow a perfect story (Decisions).
SUCCESS_TOLERANCE = 1e-9
ROLES = ("oracle", "grader")


class TurtleEnv(OracleEnv):
    """The Turtle gym: ask yes/no questions about a puzzle's hidden story, then tell it; a rubric grades it."""

    gym_name: ClassVar[str] = "turtle"
    role_names: ClassVar[tuple[str, ...]] = ROLES
    oracle_role: ClassVar[str] = roles.ORACLE_ROLE
    oracle_system_prompt: ClassVar[str] = roles.ORACLE_SYSTEM_PROMPT
    welcome: ClassVar[str] = WELCOME
    invalid_action: ClassVar[str] = INVALID_ACTION
    task_fields: ClassVar[tuple[str, ...]] = ("story_title", "story_text", "goal")

    def _configure(
        self,
        *,
        success_threshold: float = 1.0,
        reveal_covered_statements: bool = True,
        oracle_history_turns: int = 0,
    ) -> None:
        """Gym keywords: the success threshold, the feedback flag and the oracle's history length."""
        if not math.isfinite(success_threshold) or not 0.0 < success_threshold <= 1.0:
            raise ValueError(f"success_threshold must be in (0, 1], got {success_threshold!r}")
        self._configure_oracle(oracle_history_turns)
        self.success_threshold = float(success_threshold)
        self.reveal_covered_statements = bool(reveal_covered_statements)

    def _load_task(self, task: Task) -> None:
        data = task.data
        try:
            title, surface, bottom = str(data["title"]), str(data["surface"]), str(data["bottom"])
            statements = [str(r["statement"]) for r in data["rubric"]]
            weights = [float(r["weight"]) for r in data["rubric"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"turtle task {task.item_key!r}: data needs title, surface, bottom and "
                f"rubric [{{statement, weight}}] ({exc!r})"
            ) from exc
        if not statements or not all(math.isfinite(w) and w >= 0 for w in weights):
            raise ValueError(f"turtle task {task.item_key!r}: the rubric needs statements with weights >= 0")
        self._title, self._surface, self._bottom = title, surface, bottom
        self._statements, self._weights = statements, weights
        surface_words = content_words(surface)
        self._surface_words, self._bottom_words = surface_words, content_words(bottom)
        self._statement_keys = [roles.statement_keys(s, surface_words) for s in statements]

    # ------------------------------------------------------------------ episode state

    def _reset_task_state(self) -> None:
        self.judge_history: list[dict[str, Any]] = []

    def _task_observation(self) -> dict[str, Any]:
        return {"story_title": self._title, "story_text": self._surface, "goal": GOAL}

    def _task_info(self) -> dict[str, Any]:
        return {
            "total_criteria": len(self._statements),
            "ground_truth": self._bottom,
            "judge_history": copy.deepcopy(self.judge_history),
        }

    # ------------------------------------------------------------------ roles

    def _scripted_answer(self, question: str) -> str:
        return roles.scripted_oracle(question, self._surface_words, self._bottom_words)

    def _oracle_user_message(self, question: str, history: Sequence[tuple[str, str]]) -> str:
        return roles.oracle_user_message(self._surface, self._bottom, question, history)

    async def _grade(self, story: str) -> list[dict[str, Any]] | None:
        """Per-statement {statement, thought, score} from the grader role, or None when it failed."""
        if not story.strip():
            # An empty story covers nothing; no model call is spent on it.
            return [{"statement": s, "thought": "", "score": 0.0} for s in self._statements]
        if self.role_backends["grader"] == "scripted":
            scores = roles.scripted_grade(self._statement_keys, story)
            return [
                {"statement": s, "thought": "", "score": x}
                for s, x in zip(self._statements, scores, strict=True)
            ]
        user = roles.grader_user_message(self._surface, self._bottom, story, self._statements)
        graded, call = await self.llm.complete_json(
            roles.GRADER_ROLE, roles.GRADER_SYSTEM_PROMPT, user, roles.grader_validator(self._statements)
        )
        self.record_lm_call(call.role, call.attempts, call.ok, call.latency_s)
        return graded

    async def _judge_answer(self, story: str) -> tuple[str, float, bool]:
        graded = await self._grade(story)
        self.judge_success = graded is not None
        if graded is None:
            overall, feedback = 0.0, GRADER_FAILED
        else:
            scores = [g["score"] for g in graded]
            # Summed in rubric order like the original, so float error below 1.0 stays (hence the tolerance).
            overall = min(1.0, sum(w * s for w, s in zip(self._weights, scores, strict=True)))
            feedback = self._coverage_feedback(scores)
        reward = self._score(overall, None if graded is None else {"scores": graded, "overall": overall})
        self.judge_history.append(
            {
                "step": self.step_count,
                "story": story,
                "scores": graded,
                "overall": overall,
                "success": graded is not None,
            }
        )
        solved = graded is not None and overall >= self.success_threshold - SUCCESS_TOLERANCE
        return feedback, reward, solved

    def _coverage_feedback(self, scores: list[float]) -> str:
        """The gym's own feedback: the fully covered statements (or their count); the model's is ignored."""
        covered = [s for s, x in zip(self._statements, scores, strict=True) if x == 1.0]
        if not covered:
            return NOTHING_COVERED
        if not self.reveal_covered_statements:
            return COVERED_COUNT.format(k=len(covered), n=len(self._statements))
        return "\n".join([COVERED_HEADER, *(f"- {s}" for s in covered), MORE_TWISTS])
