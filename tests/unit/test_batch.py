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
    plan = plan_micro_batches(5, [10, 10, 10, 50, 50], world_size=2, token_budget=50)
    assert len(plan[0]) == len(plan[1]) == 2
    assert plan[0] == [[3], [0, 2]] and plan[1] == [[4], [1]]


def test_ranks_get_near_equal_tokens_and_micro_batches_of_similar_lengths():
    # Four tasks' groups of four, in the order the rollout returns them: short and long tasks side by side.
    lengths = [200, 205, 210, 198, 300, 296, 305, 290, 240, 250, 245, 238, 280, 270, 275, 285]
    shares = split_for_ranks(list(range(16)), lengths, 2)
    assert sorted(shares[0] + shares[1]) == list(range(16))
    totals = [sum(lengths[i] for i in share) for share in shares]
    assert abs(totals[0] - totals[1]) <= max(lengths) and totals == [2043, 2044]
    for share in shares:  # longest first
        assert [lengths[i] for i in share] == sorted((lengths[i] for i in share), reverse=True)
    # Padding (count x longest - tokens) of the plan, against the old contiguous halves packed in order.
    plan = plan_micro_batches(16, lengths, world_size=2, token_budget=2048)

    def padding(micros):
        return sum(len(m) * max(lengths[i] for i in m) - sum(lengths[i] for i in m) for m in micros if m)

    contiguous = [micro_batches(list(range(8)), lengths, 2048), micro_batches(list(range(8, 16)), lengths, 2048)]
    assert padding(plan[0] + plan[1]) == 373 and padding(contiguous[0] + contiguous[1]) == 568
    # The slowest rank's tokens with padding: 2240, against 2410 for the old halves (2004 and 2083 tokens).
    def padded(rank):
        return sum(len(m) * max(lengths[i] for i in m) for m in rank if m)

    assert max(map(padded, plan)) == 2240 and max(map(padded, contiguous)) == 2410
