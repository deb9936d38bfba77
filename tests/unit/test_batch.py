from userrl.batch import collate, micro_batches, plan_micro_batches, split_for_ranks
from userrl.trajectory import Trajectory


def _traj(n, sampled):
    t = Trajectory(uid="u", group_id="g", env_name="function", item_key="k")
    t.append(list(range(n - sampled)), 1)
    t.append(list(range(sampled)), 2, sampled=True, turn=0, logprobs=[-1.0] * sampled)
    return t


def test_collate_pads_on_the_right():
    batch = collate([_traj(5, 2), _traj(3, 1)], pad_token_id=9)
    assert batch.input_ids.shape == (2, 5)
    assert batch.input_ids[1, 3:].tolist() == [9, 9]
    assert batch.attention_mask[1].tolist() == [1, 1, 1, 0, 0]
    assert batch.loss_mask[0].tolist() == [0, 0, 0, 1, 1]
    assert batch.role_ids[1, 3:].tolist() == [-1, -1]
    assert batch.turn_ids[0].tolist() == [-1, -1, -1, 0, 0]


def test_micro_batches_respect_the_token_budget():
    lengths = [10, 10, 30, 5, 5]
    groups = micro_batches(list(range(5)), lengths, token_budget=40)
    assert groups == [[0, 1], [2], [3, 4]]
    assert all(max(lengths[i] for i in g) * len(g) <= 40 for g in groups)


def test_every_rank_runs_the_same_number_of_micro_batches():
    assert split_for_ranks(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    plan = plan_micro_batches(5, [10, 10, 10, 50, 50], world_size=2, token_budget=50)
    assert len(plan[0]) == len(plan[1]) == 2
    assert plan[0] == [[0, 1, 2], []] and plan[1] == [[3], [4]]
