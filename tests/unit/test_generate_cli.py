"""The generators' shared scaffolding: leveled task sets (ids, per-level seeded splits) and the command line."""

from __future__ import annotations

import random
from pathlib import Path

from userrl.envs.generate_cli import generator_parser, leveled_tasks


def test_leveled_tasks_numbers_each_level_and_draws_its_split_from_the_level_seed():
    made = leveled_tasks("xx", (0, 2), 7, lambda level, rnd: [{"level": level, "draw": rnd.random()} for _ in range(5)], 0.4)
    assert [t["id"] for t in made] == [f"xx-{lv}-{i:03d}" for lv in (0, 2) for i in range(5)]
    for level in (0, 2):
        # Plain oracle: the level's generator makes the items, then samples round(0.4 * 5) = 2 test indices.
        rnd = random.Random(f"7-level-{level}")
        draws = [rnd.random() for _ in range(5)]
        test = set(rnd.sample(range(5), 2))
        rows = [t for t in made if t["level"] == level]
        assert [t["draw"] for t in rows] == draws
        assert {i for i, t in enumerate(rows) if t["split"] == "test"} == test
        assert all(t["split"] == "train" for i, t in enumerate(rows) if i not in test)


def test_generator_parser_has_an_option_per_output_a_seed_and_check():
    parser = generator_parser("d", 5, {"--a": Path("x.json"), "--b": Path("y.json")})
    args = parser.parse_args(["--b", "z.json", "--check"])
    assert (args.a, args.b, args.seed, args.check) == (Path("x.json"), Path("z.json"), 5, True)
