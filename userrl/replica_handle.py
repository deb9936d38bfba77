"""Calling one policy or user replica the same way whether it is a Ray actor or an object in this process,
and how long a caller waits for a dead one (the env runners' policy requests and the local user backend's)."""

from __future__ import annotations

from typing import Any

from userrl.engines.base import GenerationOutput, GenerationRequest

#: How long a request waits for a dead replica to come back (Ray restarts it; the group gives a policy
#: replica the weights): the env runners' policy requests and the user backend's requests alike.
REPLICA_WAIT_S = 120.0


class ReplicaHandle:
    """One replica, called the same way whether it is a Ray actor or an object in this process."""

    def __init__(self, replica: Any):
        import ray

        self.replica = replica
        self.is_actor = isinstance(replica, ray.actor.ActorHandle)

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """One generation request."""
        if self.is_actor:
            return await self.replica.generate.remote(request)
        return await self.replica.generate(request)

    def end_session(self, key: str) -> None:
        """Tell the replica an episode is over (fire and forget: nothing waits on it)."""
        if self.is_actor:
            self.replica.end_session.remote(key)
        else:
            self.replica.end_session(key)
