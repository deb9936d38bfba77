"""Users as managed parts of the rollout (issue 33, item 1): per-episode seeds, the user model and cost on
every trajectory, the reply cache, and requests sent again when a user replica died."""

import asyncio

import pytest
import ray
from test_llm_client import Reply, ScriptedServer
from test_user_backends import LinesPolicy

from userrl.actors.env_runner import EnvRunner, EpisodeSpec
from userrl.coordinator import user_metrics
from userrl.engines.base import GenerationOutput
from userrl.envs import load_tasks
from userrl.envs.llm import RoleCall, UserModel, attempt_seed
from userrl.envs.openai_client import LLMConfig, OpenAIRoleClient
from userrl.envs.reply_cache import ReplyCache
from userrl.rollout import RolloutLimits, request_seed
from userrl.trajectory import Trajectory, read_parquet, write_parquet
from userrl.user_session import UserSession, configured_user_model, user_session
from userrl.users import ReplicaRoleClient


class SeedRecorder:
    """A user backend that answers every call with its seed."""

    user_model = UserModel("recorder", 3)

    def __init__(self):
        self.seeds: list[int | None] = []

    async def complete_text(self, role, system, user, *, max_tokens=None, temperature=None, seed=None):
        self.seeds.append(seed)
        return str(seed), RoleCall(role, 1, True, 0.0, requests=1, tokens=7)

    async def complete_json(self, role, system, user, validate, *, max_tokens=None, temperature=None, seed=None):
        return await self.complete_text(role, system, user, seed=seed)


def _play(session: UserSession, turns: list[int], calls_per_turn: int) -> list[str]:
    async def play() -> list[str]:
        replies = []
        for turn in turns:
            session.turn = lambda turn=turn: turn
            for _ in range(calls_per_turn):
                replies.append((await session.complete_text("user", "s", "u"))[0])
        return replies

    return asyncio.run(play())


def test_a_sessions_seeds_come_from_the_episode_seed_its_group_the_turn_and_the_call_index():
    backend = SeedRecorder()
    one = _play(UserSession(backend, 7, "it3-g0"), [0, 1, 2], 2)
    other = _play(UserSession(backend, 7, "it3-g0"), [0, 1, 2], 2)  # another episode of the same group
    oracle = [str(request_seed(7, f"it3-g0/user{k}", turn)) for turn in (0, 1, 2) for k in (0, 1)]
    assert one == other == oracle
    assert len(set(oracle)) == len(oracle)
    assert _play(UserSession(backend, 7, "it3-g1"), [0], 1) != oracle[:1]  # another group samples anew
    assert _play(UserSession(backend, 8, "it3-g0"), [0], 1) != oracle[:1]  # and another run seed


def test_a_session_sums_its_calls_and_records_them_on_the_trajectory():
    session = UserSession(SeedRecorder(), 0, "g")
    _play(session, [0, 1], 2)
    traj = session.record(Trajectory("u", "g", "tau", "k"))
    assert (traj.user_model, traj.user_version) == ("recorder", 3)
    assert (traj.user_requests, traj.user_tokens, traj.user_cache_hits, traj.user_resent) == (4, 28, 0, 0)
    assert traj.user_wait_s > 0


class Replica:
    """A stand-in replica: answers with fixed token ids; fails `dead` times first as a dead Ray actor would."""

    def __init__(self, tokenizer, text="hello there", dead=0):
        self.ids = tokenizer.encode(text, add_special_tokens=False)
        self.dead, self.requests = dead, []

    async def generate(self, request):
        self.requests.append(request)
        if self.dead:
            self.dead -= 1
            raise ray.exceptions.RayActorError()
        return GenerationOutput(list(self.ids), [0.0] * len(self.ids), "stop")


def test_a_replica_client_sends_each_attempt_with_its_own_seed_and_counts_it(tokenizer):
    replica = Replica(tokenizer, "not json")
    client = ReplicaRoleClient([replica], tokenizer, attempts=3, temperature=1.0, user_model=UserModel("sim"))
    value, call = asyncio.run(client.complete_json("judge", "s", "u", dict, seed=100))
    assert value is None and not call.ok and call.attempts == 3
    assert [r.seed for r in replica.requests] == [100, 101, 102] == [attempt_seed(100, k) for k in (1, 2, 3)]
    assert (call.requests, call.tokens, call.cache_hits) == (3, 3 * len(replica.ids), 0)
    # Greedy (the client's default, or the call's temperature 0): the same tokens would come back, so once.
    value, call = asyncio.run(client.complete_json("judge", "s", "u", dict, seed=100, temperature=0.0))
    assert value is None and not call.ok and call.attempts == 1 and len(replica.requests) == 4


def test_a_request_whose_replica_died_is_sent_again_with_the_same_seed(tokenizer):
    replica = Replica(tokenizer, dead=2)
    client = ReplicaRoleClient([replica], tokenizer, user_model=UserModel("sim"))
    text, call = asyncio.run(client.complete_text("user", "s", "u", seed=5))
    assert text == "hello there" and call.ok and call.attempts == 1  # not a failed attempt: the same one, again
    assert call.resent == 2 and call.requests == 1
    assert [r.seed for r in replica.requests] == [5, 5, 5]


def test_a_replica_that_stays_down_fails_the_attempt(tokenizer):
    client = ReplicaRoleClient([Replica(tokenizer, dead=100)], tokenizer, attempts=1, replica_wait_s=0.0)
    text, call = asyncio.run(client.complete_text("user", "s", "u", seed=5))
    assert text is None and not call.ok and call.resent == 0 and call.requests == 1


def test_the_reply_cache_answers_repeats_once_and_keeps_the_newest():
    asked = []

    async def run():
        cache = ReplyCache(size=2)

        def ask(key):
            async def produce():
                asked.append(key)
                await asyncio.sleep(0.01)
                return f"reply {key}"
            return lambda: produce()

        together = await asyncio.gather(cache.get("a", ask("a")), cache.get("a", ask("a")))
        again = await cache.get("a", ask("a"))
        await cache.get("b", ask("b"))
        await cache.get("c", ask("c"))  # evicts a, the least recently used
        evicted = await cache.get("a", ask("a"))
        return together, again, evicted, len(cache)

    together, again, evicted, size = asyncio.run(run())
    assert together == [("reply a", False), ("reply a", True)]  # asked once while in flight
    assert again == ("reply a", True) and evicted == ("reply a", False)
    assert asked == ["a", "b", "c", "a"] and size == 2


def test_the_reply_cache_keeps_no_failure():
    calls = []

    async def run():
        cache = ReplyCache()

        async def fail():
            calls.append("fail")
            raise ValueError("bad")

        async def succeed():
            calls.append("ok")
            return "fine"

        with pytest.raises(ValueError):
            await cache.get("k", fail)
        return await cache.get("k", succeed)

    assert asyncio.run(run()) == ("fine", False) and calls == ["fail", "ok"]


def test_a_cached_replica_client_answers_a_repeat_without_the_replica(tokenizer):
    replica = Replica(tokenizer)
    client = ReplicaRoleClient([replica], tokenizer, user_model=UserModel("sim"), cache=ReplyCache())

    async def run():
        first = await client.complete_text("user", "s", "u", seed=1)
        repeat = await client.complete_text("user", "s", "u", seed=1)
        reseeded = await client.complete_text("user", "s", "u", seed=2)
        unseeded = await client.complete_text("user", "s", "u")  # never cached: not a function of its key
        return first, repeat, reseeded, unseeded

    first, repeat, reseeded, unseeded = asyncio.run(run())
    assert first[0] == repeat[0] == "hello there"
    assert (first[1].cache_hits, repeat[1].cache_hits, repeat[1].tokens) == (0, 1, 0)
    assert reseeded[1].cache_hits == 0 and unseeded[1].cache_hits == 0
    assert len(replica.requests) == 3


def test_the_openai_backend_sends_the_seed_counts_tokens_and_caches():
    server = ScriptedServer()
    server.default = Reply(content="Sure.")
    server.start()
    try:
        config = LLMConfig(base_url=server.base_url, api_key="local", model="sim", attempts=1)
        client = OpenAIRoleClient(config, ReplyCache())

        async def run():
            asked = await client.complete_text("user", "s", "u", seed=11)
            again = await client.complete_text("user", "s", "u", seed=11)
            return asked, again

        (text, call), (again, cached) = asyncio.run(run())
    finally:
        server.stop()
    assert text == again == "Sure." and client.user_model == UserModel("sim", 0)
    assert [r["seed"] for r in server.requests] == [11]  # the repeat came from the cache
    assert (call.requests, call.tokens, call.cache_hits) == (1, 5, 0)  # the server's usage.completion_tokens
    assert (cached.requests, cached.tokens, cached.cache_hits) == (1, 0, 1)


def test_an_env_runner_seeds_its_episodes_users_and_records_them(tiny_model, tokenizer):
    """Through a real HTTP endpoint: the customer's requests carry the group's seeds; the trajectory names
    the user model and what its calls cost."""
    server = ScriptedServer()
    server.default = Reply(content="I need to change my flight.")
    server.start()
    try:
        task = load_tasks("tau", split="test")[0]
        episodes = [EpisodeSpec(task, "u0", "g0"), EpisodeSpec(task, "u1", "g0")]
        lines = ["[action] How can I help?", "[action] Which one?", "[finish]"]
        runs = []
        for spec in episodes:
            runner = EnvRunner(tiny_model, "bracket", RolloutLimits(max_turns=3), [LinesPolicy(tokenizer, lines)],
                               {"tau": {"backend": "openai"}}, user_backend="openai",
                               llm={"base_url": server.base_url, "api_key": "local", "model": "sim"})
            runs.append(asyncio.run(runner.run([spec], seed=4))[0])
    finally:
        server.stop()
    seeds = [r["seed"] for r in server.requests]
    oracle = [request_seed(4, "g0/user0", turn) for turn in (0, 1)]
    assert seeds == oracle + oracle  # both episodes of the group: the same seeds, turn by turn
    for traj in runs:
        assert not traj.aborted, traj.error
        assert (traj.user_model, traj.user_version, traj.user_requests, traj.user_tokens) == ("sim", 0, 2, 10)


def test_user_fields_survive_parquet(tmp_path):
    traj = Trajectory("u", "g", "tau", "k", user_model="smollm2-135m", user_version=2, user_requests=3,
                      user_cache_hits=1, user_tokens=40, user_resent=1, user_wait_s=0.5)
    (back,) = read_parquet(write_parquet([traj], tmp_path / "t.parquet"))
    assert back == traj


def test_user_metrics_add_up_the_episodes():
    trajectories = [Trajectory("a", "g", "tau", "k", user_requests=4, user_cache_hits=1, user_tokens=30,
                               user_resent=2, user_wait_s=1.5),
                    Trajectory("b", "g", "tau", "k", aborted=True, user_requests=2, user_cache_hits=2,
                               user_tokens=0, user_wait_s=0.25)]
    assert user_metrics(trajectories) == {"rollout/user_tokens": 30.0, "rollout/user_requests": 6.0,
                                          "rollout/user_requests_resent": 2.0, "rollout/user_cache_hit_rate": 0.5,
                                          "time/user_s": 1.75}
    assert user_metrics(trajectories, "eval")["eval/user_wait_s"] == 1.75
    assert user_metrics([Trajectory("c", "g", "function", "k")]) == {}  # scripted users: nothing to say


def test_the_configured_user_model_names_the_backends_model():
    assert configured_user_model("local", "smollm2-135m", {}) == UserModel("smollm2-135m", 0)
    assert configured_user_model("openai", "smollm2-135m", {"model": "qwen3-32b"}) == UserModel("qwen3-32b", 0)
    assert configured_user_model("scripted", "smollm2-135m", {}) is None


def test_the_session_keeps_a_persona_clients_interface():
    from userrl.envs.llm import PersonaUserClient

    class Persona(SeedRecorder):
        async def complete_user(self, role, persona, context, fields, seed=None):
            return {"response": str(seed)}, RoleCall(role, 1, True, 0.0)

    assert isinstance(user_session(Persona(), 0, "g"), PersonaUserClient)
    assert not isinstance(user_session(SeedRecorder(), 0, "g"), PersonaUserClient)
