"""TauEnv: customer service with τ-bench tools and a simulated customer (docs/spec/GYMS.md §5)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from gymnasium import spaces

from userrl.envs.base import BOOL_SPACE, INVALID_TOOL_CALL, MAX_FEEDBACK_CHARS, MultiTurnEnv, Task, text_space
from userrl.envs.tau.customer import (
    FALLBACK_REPLY,
    GREETING,
    STOP_TOKEN,
    CustomerFacts,
    ScriptedCustomer,
    clean_reply,
    customer_messages,
)
from userrl.envs.tau.database import DomainData, EpisodeDB
from userrl.envs.tau.parsing import INVALID_TOOL_FORMAT, parse_tool_call
from userrl.envs.tau.reward import TauOutcome, evaluate, missing_outputs
from userrl.envs.tau.tasks import resolve_domain_data, validate_task_data
from userrl.envs.tau.tools import (
    ERROR_PREFIX,
    catalogue_text,
    offered_tools,
    replay_actions,
    run_tool,
    unknown_action,
)

# Every feedback string of section 5, verbatim.
TOOLS_ALREADY_SHOWN = "The tool list was already provided above."
SEARCH_UNSUPPORTED = "Only 'tools' and 'help' are supported for search."
SEARCH_UNSUPPORTED_WITH_POLICY = "Only 'tools', 'help' and 'policy' are supported for search."
NO_POLICY = "No policy text is available for this domain."
INVALID_ACTION = "Invalid action. Allowed choices: search, action, answer."
EPISODE_FINISHED = "Episode finished."
HELP_TEXT = (
    "How to work in TauGym:\n"
    "- Use `action` to talk to the customer: ask for the details you need and confirm changes with them.\n"
    '- Use `answer` with one tool call as JSON, {"name": tool_name, "arguments": {...}}, to use an '
    "internal tool (`tool_name: {...}` also works).\n"
    "- Use `search` with `tools` to see the tools and their arguments."
)
#: The customer-simulator role name in info["lm_calls"].
CUSTOMER_ROLE = "customer"
#: What `customer_failure` may be: the fallback reply (docs/spec/GYMS.md §5) or the end of the episode
#: (MUA-RL, docs/spec/ALGORITHMS.md §5.1).
CUSTOMER_FAILURE_MODES = ("fallback", "end")
#: The feedback of a step whose customer gave no reply under customer_failure="end".
CUSTOMER_GONE = "The customer did not reply; the conversation has ended."
#: The system message of a native-tools episode on a database that ships without its policy text.
NATIVE_SYSTEM_FALLBACK = (
    "You are a customer-service agent. Help the customer with the tools you have: identify them first, get "
    "an explicit yes before changing anything, and tell them the facts they ask for."
)


class TauEnv(MultiTurnEnv):
    """The Tau gym: serve a simulated customer with the domain's tools; reward 1 for the gold end state."""

    gym_name: ClassVar[str] = "tau"
    allowed_choices: ClassVar[tuple[str, ...]] = ("search", "action", "answer")
    normalize_rewards_default: ClassVar[bool] = False
    uses_role_client: ClassVar[bool] = True
    role_names: ClassVar[tuple[str, ...]] = (CUSTOMER_ROLE,)
    exposes_tools: ClassVar[bool] = True
    # MUA-RL's episode (docs/spec/ALGORITHMS.md §5.1): a customer that fails or stays silent ends the
    # conversation.
    native_tools_kwargs: ClassVar[Mapping[str, Any]] = {"customer_failure": "end"}

    def _configure(
        self,
        *,
        tau_data_root: str | Path | None = None,
        user_temperature: float = 0.0,
        expose_policy: bool = False,
        customer_failure: str = "fallback",
    ) -> None:
        """Gym keywords: the τ-bench folder, the simulator's temperature, policy access, a silent customer."""
        # Tau's reward is the same in both presets (docs/spec/GYMS.md §0.9).
        if customer_failure not in CUSTOMER_FAILURE_MODES:
            raise ValueError(
                f"customer_failure must be one of {list(CUSTOMER_FAILURE_MODES)}, got {customer_failure!r}"
            )
        self.tau_data_root = tau_data_root
        self.user_temperature = float(user_temperature)
        self.expose_policy = bool(expose_policy)
        self.customer_failure = customer_failure

    def _observation_fields(self) -> dict[str, spaces.Space]:
        return {
            "instruction": text_space(MAX_FEEDBACK_CHARS),
            "tools_info": text_space(MAX_FEEDBACK_CHARS),
            "step_count": self.count_space(),
            "episode_complete": BOOL_SPACE,
        }

    def _load_task(self, task: Task) -> None:
        data = validate_task_data(task.data, f"tau task {task.item_key!r}")
        domain = resolve_domain_data(data, self.tau_data_root)
        tools = offered_tools(data["domain"], data["tools"])
        unknown = sorted({a["name"] for a in data["actions"]} - set(tools))
        if unknown:
            raise ValueError(f"tau task {task.item_key!r}: gold actions use tools it does not offer: {unknown}")
        # Build the hash caches now rather than inside the first step (once per process).
        domain.warm()
        self._data: dict[str, Any] = data
        self._domain: DomainData = domain
        self._tools = tools
        self._tools_info = catalogue_text(data["domain"], data["tools"])

    # ------------------------------------------------------------------ native tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The task's τ-bench tools (the domain's, or the easy tier's few) as OpenAI-style function schemas, in
        upstream's advertised order."""
        return [tool.schema() for tool in self._tools.values()]

    def native_prompt(self) -> list[dict[str, str]]:
        """The domain policy as the system message, then the customer's recorded first message.

        MUA-RL's episode opening (docs/spec/ALGORITHMS.md §5.1).
        """
        # The recorded `obs` (not a fresh simulator opening) keeps every member of a GRPO group identical.
        policy = self._domain.policy()
        system = policy.strip() if policy and policy.strip() else NATIVE_SYSTEM_FALLBACK
        return [{"role": "system", "content": system}, {"role": "user", "content": self._data["obs"].strip()}]

    # ------------------------------------------------------------------ episode state

    def _reset_impl(self) -> tuple[str, dict[str, Any], dict[str, Any]]:
        data = self._data
        self.db = EpisodeDB(self._domain)
        self.responds: list[str] = []
        self.dialogue: list[tuple[str, str]] = [("agent", GREETING), ("customer", data["obs"])]
        self.tools_shown = False
        self.outcome: TauOutcome | None = None
        self.end_reason: str | None = None
        self.tool_calls = 0
        self.invalid_tool_calls = 0
        self.tool_errors = 0
        self.customer_failures = 0
        self.step_tool_call: dict[str, Any] | None = None
        self.customer: ScriptedCustomer | None = None
        if self.role_backends[CUSTOMER_ROLE] == "scripted":
            user = (
                self.db.get("users", data["user_id"]) if self.db.contains("users", data["user_id"]) else None
            )
            facts = CustomerFacts.from_task(data["user_id"], user, data["actions"])
            self.customer = ScriptedCustomer(data["instruction"], facts)
        # The reset text is never shown to the agent (its prompt already holds the customer's opening).
        return f"TauGym: the customer says: {data['obs']}", self._extra_obs(), self._gym_info()

    def _extra_obs(self) -> dict[str, Any]:
        return {"instruction": self._data["instruction"], "tools_info": self._tools_info}

    def _gym_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self._data["id"],
            "task_category": self._data["domain"],
            "tau_reward": self.outcome.reward if self.outcome else 0.0,
            "end_reason": self.end_reason,
            "tool_calls": self.tool_calls,
            "invalid_tool_calls": self.invalid_tool_calls,
            "tool_errors": self.tool_errors,
            "customer_failures": self.customer_failures,
            # This step's tool call (MultiTurnEnv.exposes_tools): {"name", "error"}, None when it called none.
            "tool_call": self.step_tool_call,
            "db_match": None,
            "outputs_match": None,
            "missing_outputs": None,
            "agent_hash": None,
            "gold_hash": None,
        }
        if self.outcome is not None:
            info.update(self.outcome.as_info())
        return info

    def gold_hash(self) -> str:
        """Hash of a fresh database after the gold actions (cached per process); a task that carries its own
        (`gold_hash`, as the builtin tasks do) must agree with it."""
        replayed = self._domain.gold_hash(self._data["actions"], replay_actions)
        if self._data["gold_hash"] not in (None, replayed):
            raise ValueError(f"tau task {self._data['id']!r}: its gold_hash is not the state its gold actions reach "
                             "on this database (a task file out of step with its database: regenerate both with "
                             "`python -m userrl.envs.tau.generate`)")
        return replayed

    def goal_reached(self) -> bool:
        """Whether the database is at the gold state and every required output has been said."""
        return self.db.state_hash() == self.gold_hash() and not missing_outputs(
            self._data["outputs"], self.responds
        )

    # ------------------------------------------------------------------ steps

    async def _astep_impl(
        self, choice: str, content: str
    ) -> tuple[str, float, bool, dict[str, Any], dict[str, Any]]:
        base, terminated = 0.0, False
        self.step_tool_call = None
        if choice == "search":
            feedback = self._search(content)
        elif choice == "action":
            reply = await self._respond(content)
            if reply is None:
                # The conversation is over; the database is judged as it stands, as after ###STOP###.
                feedback, base, terminated = CUSTOMER_GONE, self._end("customer_failed"), True
            else:
                feedback = reply
                if STOP_TOKEN in feedback:
                    base, terminated = self._end("stop"), True
        elif choice == "answer":
            feedback, is_terminal = self._tool_call(content)
            if is_terminal:
                base, terminated = self._end("transfer"), True
        elif choice == "finish":
            self.end_reason, terminated, feedback = "finish", True, EPISODE_FINISHED
        else:
            feedback = INVALID_ACTION
        # No step penalty: the return is 0 or 1 (docs/spec/GYMS.md §5); reward_scale still applies.
        return feedback, self.shaped_reward(base), terminated, self._extra_obs(), self._gym_info()

    def _end(self, reason: str) -> float:
        """Evaluate the episode (terminal step by ###STOP### or a transfer) and return the τ reward."""
        self.end_reason = reason
        self.outcome = evaluate(self.db, self.gold_hash(), self._data["outputs"], self.responds)
        return self.outcome.reward

    def _search(self, content: str) -> str:
        query = content.strip().lower()
        if query == "tools":
            if self.tools_shown:
                return TOOLS_ALREADY_SHOWN
            self.tools_shown = True
            return self._tools_info
        if query == "help":
            return HELP_TEXT
        if self.expose_policy:
            if query == "policy":
                return self._domain.policy() or NO_POLICY
            return SEARCH_UNSUPPORTED_WITH_POLICY
        return SEARCH_UNSUPPORTED

    async def _respond(self, message: str) -> str | None:
        """Send an agent message to the customer: the reply, or None when it gave none and that ends the episode."""
        self.responds.append(message)
        self.dialogue.append(("agent", message))
        if self.customer is not None:
            reply = self.customer.reply(message, self.goal_reached())
        else:
            assert self.llm is not None
            system, user = customer_messages(self._data["instruction"], self.dialogue)
            text, call = await self.llm.complete_text(
                CUSTOMER_ROLE, system, user, temperature=self.user_temperature
            )
            reply = clean_reply(text)
            # An empty reply is a failed call, as the OpenAI client counts it (it retries empties).
            self.record_lm_call(call.role, call.attempts, call.ok and reply is not None, call.latency_s)
            if reply is None:
                self.customer_failures += 1
                if self.customer_failure == "end":
                    return None
                reply = FALLBACK_REPLY
        self.dialogue.append(("customer", reply))
        return reply

    def _tool_call(self, content: str) -> tuple[str, bool]:
        """Run one tool call: (observation, whether the tool ends the episode)."""
        call = parse_tool_call(content)
        tool = self._tools.get(call.name) if call is not None else None
        if call is None or tool is None:
            self.invalid_tool_calls += 1
            self.step_tool_call = {"name": INVALID_TOOL_CALL, "error": True}
            return (INVALID_TOOL_FORMAT if call is None else unknown_action(call.name)), False
        self.tool_calls += 1
        observation = run_tool(self.db, call.name, call.arguments)
        error = observation.startswith(ERROR_PREFIX)
        self.tool_errors += error
        self.step_tool_call = {"name": call.name, "error": error}
        return observation, tool.terminal

    def _close_impl(self) -> None:
        # Drop the episode's overlay; the pristine database stays cached for the next env in this process.
        self.db = None  # type: ignore[assignment]
        self.dialogue = []
        self.responds = []
