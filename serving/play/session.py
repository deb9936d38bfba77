"""Playground episodes: a real gym (scripted simulated user) driven turn by turn from the /play page.

Each episode is `userrl.rollout.run_episode` itself, running as a background task: its `generate`
callback waits for the person's next command, which is either "let the served model take this turn"
(the request goes to the model deployment unchanged) or "use my action" (rendered in the model's
protocol and handed back as if sampled). So turn budgets, parsing, tool messages and stop rules are
the rollout's, and an agent turn on the page is exactly a rollout turn.
"""

from __future__ import annotations

import asyncio
import difflib
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi.responses import FileResponse, JSONResponse, Response

from userrl.commands.play import pick_task
from userrl.engines.base import GenerationOutput, GenerationRequest
from userrl.envs import GYMS, MultiTurnEnv, StepResult, Task, load_tasks, make_env
from userrl.rollout import RolloutLimits, TokenPolicy, run_episode
from userrl.serving.protocol import APIError

STATIC = Path(__file__).parent
_STATIC_TYPES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
CHOICES = ["action", "search", "answer", "finish"]


def static_file(name: str) -> Response:
    """One of the page's files (a fixed list: nothing else under the folder is served)."""
    if name not in _STATIC_TYPES:
        return JSONResponse(APIError(404, f"no file {name!r}", code="not_found").body(), status_code=404)
    return FileResponse(STATIC / name, media_type=_STATIC_TYPES[name])


class _RecordingEnv:
    """The episode's env, noting each step's action and result for the page."""

    def __init__(self, env: MultiTurnEnv, on_step: Callable[[str, StepResult], None]):
        self.env, self.on_step = env, on_step

    def reset(self, **kwargs: Any) -> Any:
        return self.env.reset(**kwargs)

    async def astep(self, action: str) -> StepResult:
        result = await self.env.astep(action)
        self.on_step(action, result)
        return result

    def close(self) -> None:
        self.env.close()


class PlayEpisode:
    """One episode advanced by commands from the page."""

    def __init__(self, task: Task, engine: Any, generate: Callable[[GenerationRequest], Awaitable[GenerationOutput]],
                 limits: RolloutLimits, seed: int):
        self.id = uuid.uuid4().hex[:12]
        self.task, self.engine, self.generate, self.limits = task, engine, generate, limits
        self.turns: list[dict[str, Any]] = []
        self.total = 0.0
        self.trajectory = None
        self.lock = asyncio.Lock()
        self._commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._idle = asyncio.Event()
        env = _RecordingEnv(make_env(task.gym, task), self._on_step)
        self._runner = asyncio.get_running_loop().create_task(
            run_episode(env, task, TokenPolicy(engine.chat, self._turn), limits, uid=self.id, group_id=self.id,
                        seed=seed))
        self._runner.add_done_callback(self._finished)

    def _finished(self, runner: asyncio.Task) -> None:
        if not runner.cancelled() and runner.exception() is None:
            self.trajectory = runner.result()
        self._idle.set()

    @property
    def done(self) -> bool:
        """Whether the episode has ended."""
        return self._runner.done()

    async def _turn(self, request: GenerationRequest) -> GenerationOutput:
        """run_episode's `generate`: wait for the page's command, then take the turn it asks for."""
        self._idle.set()
        command = await self._commands.get()
        if command["by"] == "agent":
            output = await self.generate(request)
        else:
            tokenizer = self.engine.tokenizer
            text = self.engine.chat.render_action(command["choice"], command["content"])
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.convert_tokens_to_ids(tokenizer.eos_token)]
            output = GenerationOutput(ids, [0.0] * len(ids), "stop")
        text = self.engine.tokenizer.decode(output.token_ids, skip_special_tokens=True)
        self.turns.append({"index": len(self.turns), "by": command["by"], "text": text, "action": None,
                           "feedback": None, "reward": None, "finish_reason": output.finish_reason})
        return output

    def _on_step(self, action: str, result: StepResult) -> None:
        self.total += float(result.reward)
        self.turns[-1].update({"action": action, "feedback": str(result.observation.get("feedback", "")),
                               "reward": float(result.reward), "total_reward": self.total,
                               "terminated": bool(result.terminated), "truncated": bool(result.truncated)})

    async def wait_idle(self) -> None:
        """Until the episode waits for a command or has ended."""
        await self._idle.wait()

    async def step(self, command: dict[str, Any]) -> None:
        """Hand one command to the episode and wait until it has been played."""
        async with self.lock:
            if self.done:
                raise APIError(409, "this episode is over; start a new one", code="episode_over")
            self._idle.clear()
            await self._commands.put(command)
            await self._idle.wait()

    def close(self) -> None:
        """Stop the episode's task (its env is closed by run_episode)."""
        self._runner.cancel()

    def view(self) -> dict[str, Any]:
        """Everything the page shows."""
        traj = self.trajectory
        return {
            "id": self.id, "gym": self.task.gym, "task_id": self.task.item_key, "split": self.task.split,
            "prompt": self.task.prompt, "turns": self.turns, "total_reward": self.total, "done": self.done,
            "stop_reason": traj.stop_reason if traj is not None else None,
            "error": traj.error if traj is not None and traj.aborted else None,
            "max_turns": self.limits.max_turns, "protocol": self.engine.protocol.name,
        }


class PlayManager:
    """The episodes of the /play page (kept in memory, oldest dropped first)."""

    def __init__(self, engine: Any, generate: Callable[[GenerationRequest], Awaitable[GenerationOutput]],
                 settings: Any, max_model_len: int):
        self.engine, self.generate, self.settings = engine, generate, settings
        self.limits = RolloutLimits(max_turns=settings.max_turns, max_new_tokens=settings.max_new_tokens,
                                    max_model_len=max_model_len, max_response_len=max_model_len, temperature=0.0)
        self.episodes: OrderedDict[str, PlayEpisode] = OrderedDict()
        self._tasks: dict[tuple[str, str], list[Task]] = {}

    def gyms(self, model_name: str) -> dict[str, Any]:
        """The gyms on offer, the splits, the action choices and the served model."""
        return {"model": model_name, "protocol": self.engine.protocol.name, "gyms": sorted(GYMS),
                "splits": ["test", "train"], "choices": CHOICES}

    def _tasks_of(self, gym: str, split: str) -> list[Task]:
        if gym not in GYMS:
            close = difflib.get_close_matches(gym, list(GYMS), n=1)
            raise APIError(400, f"unknown gym {gym!r}" + (f"; did you mean {close[0]!r}?" if close else
                           f"; one of {', '.join(sorted(GYMS))}"), param="gym")
        if split not in ("train", "test"):
            raise APIError(400, f"split must be 'train' or 'test', not {split!r}", param="split")
        if (gym, split) not in self._tasks:
            self._tasks[(gym, split)] = load_tasks(gym, split=split)
        return self._tasks[(gym, split)]

    async def start(self, body: Any) -> dict[str, Any]:
        """Start an episode: {gym, split?, task_id?, seed?}; returns its view once it waits for turn 1."""
        if not isinstance(body, dict) or not isinstance(body.get("gym"), str):
            raise APIError(400, "the body must be a JSON object with a 'gym' name", param="gym")
        seed = body.get("seed", 0)
        # numpy's generators take non-negative seeds only; bool is an int to Python, not to the client.
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise APIError(400, "seed must be an integer from 0 to 2**63 - 1", param="seed")
        for key in ("split", "task_id"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise APIError(400, f"{key} must be a string", param=key)
        tasks = self._tasks_of(body["gym"], body.get("split") or "test")
        try:
            task = pick_task(tasks, body.get("task_id") or None, None, seed)
        except ValueError as error:
            raise APIError(400, str(error), param="task_id") from None
        episode = PlayEpisode(task, self.engine, self.generate, self.limits, seed)
        self.episodes[episode.id] = episode
        while len(self.episodes) > self.settings.max_episodes:
            self.episodes.popitem(last=False)[1].close()
        await episode.wait_idle()
        return episode.view()

    async def step(self, episode_id: str, body: Any) -> dict[str, Any]:
        """One turn: {"by": "agent"} or {"by": "person", "choice": ..., "content": ...}."""
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise APIError(404, f"no episode {episode_id!r} (episodes are kept in memory; start a new one)",
                           param="episode_id")
        if not isinstance(body, dict) or body.get("by") not in ("agent", "person"):
            raise APIError(400, "the body must be {\"by\": \"agent\"} or {\"by\": \"person\", \"choice\": ..., "
                           "\"content\": ...}", param="by")
        if body["by"] == "person":
            if body.get("choice") not in CHOICES:
                raise APIError(400, f"choice must be one of {', '.join(CHOICES)}", param="choice")
            if not isinstance(body.get("content", ""), str):
                raise APIError(400, "content must be a string", param="content")
            body = {"by": "person", "choice": body["choice"], "content": body.get("content", "")}
        await episode.step(body)
        return episode.view()
