"""τ-bench tools over tiny hand-made databases (docs/spec/TAU_TOOLS.md §0-§4, §6): messages, changes, hash."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from userrl.envs.tau.database import DomainData, EpisodeDB
from userrl.envs.tau.hashing import canonical_text, state_hash, to_hashable
from userrl.envs.tau.parsing import MAX_ARGUMENT_DEPTH, ToolCall, parse_tool_call
from userrl.envs.tau.tools import catalogue_text, domain_tools, replay_actions, run_tool
from userrl.envs.tau.tools.calculator import calculate_expression

ADDR_ANN = {
    "address1": "1 Elm Street",
    "address2": "",
    "city": "Austin",
    "country": "USA",
    "state": "TX",
    "zip": "10001",
}
ADDR_BOB = {
    "address1": "2 Oak Road",
    "address2": "Apt 3",
    "city": "Boise",
    "country": "USA",
    "state": "ID",
    "zip": "20002",
}


def _item(name: str, product_id: str, item_id: str, price: float, options: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "product_id": product_id, "item_id": item_id, "price": price, "options": options}


MUG_RED = _item("Mug", "100", "111", 10.1, {"color": "red"})
MUG_BLUE = _item("Mug", "100", "112", 12.2, {"color": "blue"})
LAMP_SMALL = _item("Lamp", "200", "211", 30.0, {"size": "small"})
LAMP_LARGE = _item("Lamp", "200", "212", 45.25, {"size": "large"})


def _order(
    oid: str, user: str, items: list[dict[str, Any]], status: str, method: str, amount: float
) -> dict[str, Any]:
    return {
        "order_id": oid,
        "user_id": user,
        "address": dict(ADDR_ANN),
        "items": [dict(i) for i in items],
        "fulfillments": []
        if status == "pending"
        else [{"tracking_id": ["123456789012"], "item_ids": ["111"]}],
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": amount, "payment_method_id": method}],
    }


RETAIL: dict[str, Any] = {
    "orders": {
        "#W0000001": _order(
            "#W0000001", "ann_lee_1001", [MUG_RED, MUG_RED, LAMP_SMALL], "pending", "gift_card_1", 50.2
        ),
        "#W0000002": _order(
            "#W0000002", "ann_lee_1001", [MUG_RED, LAMP_SMALL], "delivered", "credit_card_1", 40.1
        ),
        "#W0000003": _order("#W0000003", "ann_lee_1001", [LAMP_LARGE], "processed", "paypal_1", 45.25),
        "#W0000004": _order("#W0000004", "ann_lee_1001", [MUG_BLUE], "pending", "credit_card_1", 12.2),
        "#W0000005": _order("#W0000005", "bob_ray_2002", [LAMP_SMALL], "pending", "credit_card_2", 30.0),
        "#W0000006": _order("#W0000006", "ann_lee_1001", [LAMP_LARGE], "pending", "credit_card_1", 99.99),
    },
    "products": {
        "100": {
            "name": "Mug",
            "product_id": "100",
            "variants": {
                "111": {"item_id": "111", "options": {"color": "red"}, "available": True, "price": 10.1},
                "112": {"item_id": "112", "options": {"color": "blue"}, "available": True, "price": 12.2},
                "113": {"item_id": "113", "options": {"color": "green"}, "available": False, "price": 9.0},
            },
        },
        "200": {
            "name": "Lamp",
            "product_id": "200",
            "variants": {
                "211": {"item_id": "211", "options": {"size": "small"}, "available": True, "price": 30.0},
                "212": {"item_id": "212", "options": {"size": "large"}, "available": True, "price": 45.25},
            },
        },
    },
    "users": {
        "ann_lee_1001": {
            "name": {"first_name": "Ann", "last_name": "Lee"},
            "address": dict(ADDR_ANN),
            "email": "ann.lee@example.com",
            "payment_methods": {
                "gift_card_1": {"source": "gift_card", "balance": 15, "id": "gift_card_1"},
                "credit_card_1": {
                    "source": "credit_card",
                    "brand": "visa",
                    "last_four": "1234",
                    "id": "credit_card_1",
                },
                "paypal_1": {"source": "paypal", "id": "paypal_1"},
            },
            "orders": ["#W0000001", "#W0000002", "#W0000003", "#W0000004", "#W0000006"],
        },
        "bob_ray_2002": {
            "name": {"first_name": "Bob", "last_name": "Ray"},
            "address": dict(ADDR_BOB),
            "email": "Bob.Ray@Example.com",
            "payment_methods": {
                "credit_card_2": {
                    "source": "credit_card",
                    "brand": "amex",
                    "last_four": "9999",
                    "id": "credit_card_2",
                }
            },
            "orders": ["#W0000005"],
        },
        "ann_lee_3003": {
            "name": {"first_name": "Ann", "last_name": "Lee"},
            "address": dict(ADDR_ANN, zip="30003"),
            "email": "ann.lee.two@example.com",
            "payment_methods": {},
            "orders": [],
        },
    },
}


def _flight(number: str, origin: str, dest: str, dep: str, arr: str, dates: dict[str, Any]) -> dict[str, Any]:
    return {
        "flight_number": number,
        "origin": origin,
        "destination": dest,
        "scheduled_departure_time_est": dep,
        "scheduled_arrival_time_est": arr,
        "dates": dates,
    }


def _open(seats: tuple[int, int, int], prices: tuple[int, int, int]) -> dict[str, Any]:
    cabins = ("basic_economy", "economy", "business")
    return {
        "status": "available",
        "available_seats": dict(zip(cabins, seats, strict=True)),
        "prices": dict(zip(cabins, prices, strict=True)),
    }


PAX_MIA = {"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}
PAX_NOAH = {"first_name": "Noah", "last_name": "Li", "dob": "1992-01-01"}

AIRLINE: dict[str, Any] = {
    "flights": {
        "HAT001": _flight(
            "HAT001",
            "PHL",
            "LGA",
            "06:00:00",
            "07:00:00",
            {
                "2024-05-01": {
                    "status": "landed",
                    "actual_departure_time_est": "x",
                    "actual_arrival_time_est": "y",
                },
                "2024-05-16": _open((5, 2, 1), (50, 100, 300)),
                "2024-05-17": {"status": "cancelled"},
            },
        ),
        "HAT002": _flight(
            "HAT002", "LGA", "BOS", "08:00:00", "09:30:00", {"2024-05-16": _open((9, 9, 9), (40, 80, 200))}
        ),
        "HAT003": _flight(
            "HAT003", "LGA", "BOS", "06:30:00", "07:30:00", {"2024-05-16": _open((9, 9, 9), (41, 81, 201))}
        ),
        "HAT004": _flight(
            "HAT004", "PHL", "LGA", "23:00:00", "00:30:00+1", {"2024-05-16": _open((9, 9, 9), (60, 120, 360))}
        ),
        "HAT005": _flight(
            "HAT005",
            "LGA",
            "BOS",
            "01:00:00",
            "02:00:00",
            {"2024-05-16": _open((9, 9, 9), (30, 70, 170)), "2024-05-17": _open((8, 8, 8), (31, 71, 171))},
        ),
    },
    "reservations": {
        "ABC123": {
            "reservation_id": "ABC123",
            "user_id": "mia_li_1",
            "origin": "PHL",
            "destination": "LGA",
            "flight_type": "one_way",
            "cabin": "economy",
            "flights": [
                {
                    "origin": "PHL",
                    "destination": "LGA",
                    "flight_number": "HAT001",
                    "date": "2024-05-16",
                    "price": 100,
                }
            ],
            "passengers": [dict(PAX_MIA)],
            "payment_history": [
                {"payment_id": "credit_card_1", "amount": 100},
                {"payment_id": "gift_card_1", "amount": 0.0},
            ],
            "created_at": "2024-05-10T10:00:00",
            "total_baggages": 1,
            "nonfree_baggages": 0,
            "insurance": "no",
        },
        "DEF456": {
            "reservation_id": "DEF456",
            "user_id": "mia_li_1",
            "origin": "PHL",
            "destination": "BOS",
            "flight_type": "one_way",
            "cabin": "basic_economy",
            "flights": [
                {
                    "origin": "PHL",
                    "destination": "LGA",
                    "flight_number": "HAT001",
                    "date": "2024-05-16",
                    "price": 50,
                },
                {
                    "origin": "LGA",
                    "destination": "BOS",
                    "flight_number": "HAT002",
                    "date": "2024-05-16",
                    "price": 40,
                },
            ],
            "passengers": [dict(PAX_MIA), dict(PAX_NOAH)],
            "payment_history": [{"payment_id": "gift_card_1", "amount": 180}],
            "created_at": "2024-05-10T10:00:00",
            "total_baggages": 2,
            "nonfree_baggages": 1,
            "insurance": "no",
        },
    },
    "users": {
        "mia_li_1": {
            "name": {"first_name": "Mia", "last_name": "Li"},
            "address": dict(ADDR_ANN),
            "email": "mia.li@example.com",
            "dob": "1990-04-05",
            "payment_methods": {
                "credit_card_1": {
                    "source": "credit_card",
                    "brand": "visa",
                    "last_four": "7447",
                    "id": "credit_card_1",
                },
                "gift_card_1": {"source": "gift_card", "amount": 500, "id": "gift_card_1"},
                "certificate_1": {"source": "certificate", "amount": 150, "id": "certificate_1"},
                "certificate_2": {"source": "certificate", "amount": 100, "id": "certificate_2"},
            },
            "saved_passengers": [dict(PAX_NOAH)],
            "membership": "gold",
            "reservations": ["ABC123", "DEF456"],
        }
    },
}


def make_db(domain: str, data: dict[str, Any] | None = None) -> EpisodeDB:
    tables = copy.deepcopy(data if data is not None else (RETAIL if domain == "retail" else AIRLINE))
    return EpisodeDB(DomainData(domain, tables, f"test {domain}", None))


def call(db: EpisodeDB, name: str, **kwargs: Any) -> str:
    return run_tool(db, name, kwargs)


def assert_unchanged(db: EpisodeDB) -> None:
    assert db.state_hash() == db.base.fresh_hash() and db.touched_records == 0


# ---------------------------------------------------------------- hashing and the copy-on-write database


def test_hash_reference_vector() -> None:
    value = {"b": [1, 2.0, "it's"], "a": {"c": True, "d": None}, "e": []}
    text = "(('a', (('c', True), ('d', None))), ('b', (1, 2.0, \"it's\")), ('e', ()))"
    assert canonical_text(value) == text
    assert state_hash(value) == "75cf601cd3dc578f9bb75c7d66aec8cffe49f5868117e569615b774f33856f51"
    assert state_hash(value) == hashlib.sha256(text.encode()).hexdigest()
    assert to_hashable({"s": {3, 1, 2}, "t": (1, [2])}) == (("s", (1, 2, 3)), ("t", (1, (2,))))
    assert canonical_text({"x": {"y": 1}}) == "(('x', (('y', 1),)),)"
    assert state_hash({"n": 250}) != state_hash({"n": 250.0})


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_fresh_hash_matches_the_reference_procedure(domain: str) -> None:
    db = make_db(domain)
    assert db.state_hash() == state_hash(db.base.tables) == db.base.fresh_hash()
    assert db.canonical_text() == canonical_text(db.base.tables)


def test_overlay_hash_equals_a_full_rehash_after_changes_and_inserts() -> None:
    db = make_db("airline")
    db.mutable("users", "mia_li_1")["membership"] = "silver"
    db.mutable("reservations", "DEF456")["insurance"] = "yes"
    db.insert("reservations", "AAA000", {"reservation_id": "AAA000"})  # sorts first
    db.insert("reservations", "CCC000", {"reservation_id": "CCC000"})  # between the two
    db.insert("reservations", "ZZZ999", {"reservation_id": "ZZZ999", "x": [1.5, None]})  # after the last
    db.insert("reservations", "ZZZ000", {"reservation_id": "ZZZ000"})  # also after the last
    assert db.state_hash() == state_hash(db.to_dict())
    assert list(db.keys("reservations")) == ["ABC123", "DEF456", "AAA000", "CCC000", "ZZZ999", "ZZZ000"]


@pytest.mark.parametrize("new_key", ["a_first", "z_last"])
def test_inserting_into_a_one_record_table_rewrites_the_one_tuple(new_key: str) -> None:
    db = make_db("airline")
    assert canonical_text({"users": db.base.tables["users"]}).endswith(",)),)")  # a 1-tuple in the text
    db.insert("users", new_key, {"name": "x"})
    assert db.state_hash() == state_hash(db.to_dict())


def test_copy_on_write_leaves_the_pristine_database_alone() -> None:
    db = make_db("retail")
    before = copy.deepcopy(db.base.tables)
    order = db.mutable("orders", "#W0000001")
    order["status"] = "cancelled"
    assert db.get("orders", "#W0000001")["status"] == "cancelled" and db.touched_records == 1
    assert db.base.tables == before
    assert EpisodeDB(db.base).get("orders", "#W0000001")["status"] == "pending"
    # A record copied but restored hashes like the pristine one.
    order["status"] = "pending"
    assert db.state_hash() == db.base.fresh_hash()


def test_state_hash_is_cached_per_version_and_refreshed_on_writes() -> None:
    db = make_db("retail")
    first = db.state_hash()
    assert db.state_hash() == first
    db.mutable("users", "bob_ray_2002")["email"] = "new@example.com"
    assert db.state_hash() != first == db.base.fresh_hash()


def test_insert_on_an_existing_id_keeps_its_position() -> None:
    db = make_db("airline")
    db.insert("reservations", "ABC123", {"reservation_id": "ABC123", "replaced": True})
    assert list(db.keys("reservations")) == ["ABC123", "DEF456"]
    assert db.get("reservations", "ABC123")["replaced"] is True
    assert db.state_hash() == state_hash(db.to_dict())


def test_reads_behave_like_a_dict() -> None:
    db = make_db("retail")
    with pytest.raises(KeyError, match="nope"):
        db.get("orders", "nope")
    with pytest.raises(TypeError, match="unhashable"):
        db.contains("orders", ["#W0000001"])
    assert call(db, "get_order_details", order_id=["#W0000001"]) == "Error: unhashable type: 'list'"


def test_unknown_domain_and_missing_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown τ domain"):
        DomainData("telecom", {}, "x", None)
    with pytest.raises(ValueError, match="lacks the tables"):
        DomainData("retail", {"orders": {}}, "x", None)


# ---------------------------------------------------------------- calculate, think, transfer


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 * (3 + 4)", "14.0"),
        ("10 / 3", "3.33"),
        ("2 ** 0.5", "1.41"),
        ("7 // 2", "3.0"),
        ("3.", "3.0"),
        (".5", "0.5"),
        ("+-3", "-3.0"),
        (" 1+1", "2.0"),
        ("10**400/10**399", "10.0"),
        ("100000000000000000.0*1", "1e+17"),
        ("1e5", "Error: invalid characters in expression"),
        ("\t2", "Error: invalid characters in expression"),
        ("__import__('os')", "Error: invalid characters in expression"),
        ("1/0", "Error: division by zero"),
        ("0**-1", "Error: 0.0 cannot be raised to a negative power"),
        ("(1", "Error: '(' was never closed (<string>, line 1)"),
        ("", "Error: invalid syntax (<string>, line 0)"),
        ("1 +", "Error: invalid syntax (<string>, line 1)"),
        ("2(3)", "Error: 'int' object is not callable"),
        ("()()", "Error: 'tuple' object is not callable"),
        ("...", "Error: float() argument must be a string or a real number, not 'ellipsis'"),
        ("()", "Error: float() argument must be a string or a real number, not 'tuple'"),
        ("(-8) ** 0.5", "Error: float() argument must be a string or a real number, not 'complex'"),
        ("2.0**10000", "Error: (34, 'Numerical result out of range')"),
        ("10**400", "Error: int too large to convert to float"),
        ("9**9**9", "Error: int too large to convert to float"),
        (
            "01",
            "Error: leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal "
            "integers (<string>, line 1)",
        ),
    ],
)
def test_calculate_follows_python_semantics(expression: str, expected: str) -> None:
    assert calculate_expression(expression) == expected
    assert call(make_db("retail"), "calculate", expression=expression) == expected


def test_calculate_think_and_transfer() -> None:
    db = make_db("airline")
    assert call(db, "calculate", expression=5) == "Error: 'int' object is not iterable"
    assert call(db, "think", thought="plan") == ""
    assert call(db, "transfer_to_human_agents", summary="help") == "Transfer successful"
    assert_unchanged(db)


# ---------------------------------------------------------------- dispatch, replay and the catalogue


def test_dispatch_errors() -> None:
    db = make_db("retail")
    assert call(db, "fly_me_to_the_moon") == "Unknown action fly_me_to_the_moon"
    missing = call(db, "cancel_pending_order", order_id="#W0000001")
    assert missing.startswith("Error: ") and "missing 1 required positional argument: 'reason'" in missing
    extra = call(db, "get_user_details", user_id="bob_ray_2002", verbose=True)
    assert extra.startswith("Error: ") and "unexpected keyword argument 'verbose'" in extra
    assert call(db, "list_all_product_types", x=1).startswith("Error: ")
    assert_unchanged(db)


def test_replay_skips_transfers_and_keeps_errors() -> None:
    db = make_db("retail")
    observations = replay_actions(
        db,
        [
            {"name": "find_user_id_by_email", "kwargs": {"email": "nobody@example.com"}},
            {"name": "transfer_to_human_agents", "kwargs": {"summary": "x"}},
            {
                "name": "cancel_pending_order",
                "kwargs": {"order_id": "#W0000005", "reason": "no longer needed"},
            },
        ],
    )
    assert observations[0] == "Error: user not found" and len(observations) == 2
    assert db.get("orders", "#W0000005")["status"] == "cancelled"


@pytest.mark.parametrize(("domain", "count"), [("retail", 16), ("airline", 14)])
def test_catalogue(domain: str, count: int) -> None:
    tools = domain_tools(domain)
    assert len(tools) == count and list(tools) == sorted(tools)
    assert {"calculate", "think", "transfer_to_human_agents"} <= set(tools)
    text = catalogue_text(domain)
    assert text.startswith("Available Tools:\n- ")
    for name, tool in tools.items():
        assert f"\n- {name}: " in text
        for param in tool.params:
            assert f"    - {param.name} ({param.type}): " in text
        schema = tool.schema()["function"]
        assert schema["name"] == name and schema["parameters"]["required"] == [p.name for p in tool.params]
    assert "Parameters: none" in text  # list_all_product_types / list_all_airports
    writes = {n for n, t in tools.items() if t.writes}
    expected = {
        "retail": {
            "cancel_pending_order",
            "exchange_delivered_order_items",
            "modify_pending_order_address",
            "modify_pending_order_items",
            "modify_pending_order_payment",
            "modify_user_address",
            "return_delivered_order_items",
        },
        "airline": {
            "book_reservation",
            "cancel_reservation",
            "send_certificate",
            "update_reservation_baggages",
            "update_reservation_flights",
            "update_reservation_passengers",
        },
    }
    assert writes == expected[domain]
    assert [n for n, t in tools.items() if t.terminal] == ["transfer_to_human_agents"]


# ---------------------------------------------------------------- retail: read-only tools


def test_retail_lookups() -> None:
    db = make_db("retail")
    assert call(db, "find_user_id_by_email", email="ANN.LEE@example.com") == "ann_lee_1001"
    assert call(db, "find_user_id_by_email", email="bob.ray@example.com") == "bob_ray_2002"
    assert call(db, "find_user_id_by_email", email="x@example.com") == "Error: user not found"
    assert (
        call(db, "find_user_id_by_name_zip", first_name="ann", last_name="LEE", zip="30003") == "ann_lee_3003"
    )
    assert (
        call(db, "find_user_id_by_name_zip", first_name="Ann", last_name="Lee", zip="10001") == "ann_lee_1001"
    )
    assert call(db, "find_user_id_by_name_zip", first_name="Ann", last_name="Lee", zip="99999") == (
        "Error: user not found"
    )
    assert call(db, "get_user_details", user_id="bob_ray_2002") == json.dumps(RETAIL["users"]["bob_ray_2002"])
    assert call(db, "get_user_details", user_id="nobody") == "Error: user not found"
    assert call(db, "get_order_details", order_id="#W0000003") == json.dumps(RETAIL["orders"]["#W0000003"])
    assert call(db, "get_order_details", order_id="W0000003") == "Error: order not found"
    assert call(db, "get_product_details", product_id="100") == json.dumps(RETAIL["products"]["100"])
    assert call(db, "get_product_details", product_id="111") == "Error: product not found"
    assert call(db, "list_all_product_types") == '{"Lamp": "200", "Mug": "100"}'
    assert_unchanged(db)


# ---------------------------------------------------------------- retail: cancel, address, payment


def test_cancel_pending_order() -> None:
    db = make_db("retail")
    assert (
        call(db, "cancel_pending_order", order_id="#W9", reason="no longer needed")
        == "Error: order not found"
    )
    assert call(db, "cancel_pending_order", order_id="#W0000002", reason="no longer needed") == (
        "Error: non-pending order cannot be cancelled"
    )
    assert (
        call(db, "cancel_pending_order", order_id="#W0000001", reason="changed my mind")
        == "Error: invalid reason"
    )
    assert_unchanged(db)
    out = json.loads(call(db, "cancel_pending_order", order_id="#W0000001", reason="ordered by mistake"))
    order = db.get("orders", "#W0000001")
    assert out == order and order["status"] == "cancelled"
    assert (
        list(order)[-2:] == ["payment_history", "cancel_reason"]
        and order["cancel_reason"] == "ordered by mistake"
    )
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 50.2,
        "payment_method_id": "gift_card_1",
    }
    assert db.get("users", "ann_lee_1001")["payment_methods"]["gift_card_1"]["balance"] == round(15 + 50.2, 2)


def test_cancel_after_a_payment_change_refunds_every_entry() -> None:
    db = make_db("retail")
    call(db, "modify_pending_order_payment", order_id="#W0000004", payment_method_id="gift_card_1")
    assert db.get("users", "ann_lee_1001")["payment_methods"]["gift_card_1"]["balance"] == 2.8
    call(db, "cancel_pending_order", order_id="#W0000004", reason="no longer needed")
    history = db.get("orders", "#W0000004")["payment_history"]
    assert len(history) == 6 and [h["transaction_type"] for h in history[3:]] == ["refund"] * 3
    assert db.get("users", "ann_lee_1001")["payment_methods"]["gift_card_1"]["balance"] == 15.0


def test_modify_pending_order_address_and_user_address() -> None:
    db = make_db("retail")
    new = {
        "address1": "9 New St",
        "address2": "",
        "city": "Omaha",
        "state": "NE",
        "country": "USA",
        "zip": "68101",
    }
    assert call(db, "modify_pending_order_address", order_id="#W9", **new) == "Error: order not found"
    assert call(db, "modify_pending_order_address", order_id="#W0000003", **new) == (
        "Error: non-pending order cannot be modified"
    )
    order = json.loads(
        call(db, "modify_pending_order_address", order_id="#W0000001", **dict(reversed(new.items())))
    )
    assert list(order["address"]) == ["address1", "address2", "city", "state", "country", "zip"]
    assert call(db, "modify_user_address", user_id="nobody", **new) == "Error: user not found"
    user = json.loads(call(db, "modify_user_address", user_id="bob_ray_2002", **new))
    assert user["address"] == new and db.get("orders", "#W0000005")["address"] == ADDR_ANN


def test_modify_pending_order_payment() -> None:
    db = make_db("retail")
    pay = "modify_pending_order_payment"
    assert call(db, pay, order_id="#W9", payment_method_id="paypal_1") == "Error: order not found"
    assert call(db, pay, order_id="#W0000002", payment_method_id="paypal_1") == (
        "Error: non-pending order cannot be modified"
    )
    assert (
        call(db, pay, order_id="#W0000004", payment_method_id="credit_card_2")
        == "Error: payment method not found"
    )
    assert call(db, pay, order_id="#W0000004", payment_method_id="credit_card_1") == (
        "Error: the new payment method should be different from the current one"
    )
    assert call(db, pay, order_id="#W0000006", payment_method_id="gift_card_1") == (
        "Error: insufficient gift card balance to pay for the order"
    )
    assert_unchanged(db)
    # Away from a gift card: the old card is refunded at once.
    order = json.loads(call(db, pay, order_id="#W0000001", payment_method_id="paypal_1"))
    assert order["payment_history"][1:] == [
        {"transaction_type": "payment", "amount": 50.2, "payment_method_id": "paypal_1"},
        {"transaction_type": "refund", "amount": 50.2, "payment_method_id": "gift_card_1"},
    ]
    assert order["status"] == "pending"
    assert db.get("users", "ann_lee_1001")["payment_methods"]["gift_card_1"]["balance"] == 65.2
    assert call(db, pay, order_id="#W0000001", payment_method_id="credit_card_1") == (
        "Error: there should be exactly one payment for a pending order"
    )


# ---------------------------------------------------------------- retail: item changes, returns, exchanges


def test_modify_pending_order_items_checks() -> None:
    db = make_db("retail")
    items = "modify_pending_order_items"
    base = {"order_id": "#W0000001", "payment_method_id": "credit_card_1"}
    assert (
        call(db, items, **dict(base, order_id="#W9"), item_ids=["111"], new_item_ids=["112"])
        == "Error: order not found"
    )
    assert call(db, items, **dict(base, order_id="#W0000002"), item_ids=["111"], new_item_ids=["112"]) == (
        "Error: non-pending order cannot be modified"
    )
    assert call(db, items, **base, item_ids=["999"], new_item_ids=["112"]) == "Error: 999 not found"
    assert call(db, items, **base, item_ids=["111"] * 3, new_item_ids=["112"] * 3) == "Error: 111 not found"
    assert call(db, items, **base, item_ids=["111"], new_item_ids=["112", "112"]) == (
        "Error: the number of items to be exchanged should match"
    )
    assert call(db, items, **base, item_ids=["111"], new_item_ids=["113"]) == (
        "Error: new item 113 not found or available"
    )
    assert call(db, items, **base, item_ids=["111"], new_item_ids=["211"]) == (
        "Error: new item 211 not found or available"
    )
    assert call(
        db, items, **dict(base, payment_method_id="credit_card_2"), item_ids=["111"], new_item_ids=["112"]
    ) == ("Error: payment method not found")
    assert call(
        db, items, **dict(base, payment_method_id="gift_card_1"), item_ids=["211"], new_item_ids=["212"]
    ) == ("Error: insufficient gift card balance to pay for the new item")
    assert_unchanged(db)


def test_modify_pending_order_items_changes() -> None:
    db = make_db("retail")
    out = call(
        db,
        "modify_pending_order_items",
        order_id="#W0000001",
        item_ids=["111", "111"],
        new_item_ids=["112", "112"],
        payment_method_id="gift_card_1",
    )
    order = db.get("orders", "#W0000001")
    diff = 0 + (12.2 - 10.1) + (12.2 - 10.1)  # accumulated in pair order, never rounded
    assert json.loads(out) == order and order["status"] == "pending (item modified)"
    assert order["payment_history"][-1] == {
        "transaction_type": "payment",
        "amount": diff,
        "payment_method_id": "gift_card_1",
    }
    assert [i["item_id"] for i in order["items"]] == ["112", "112", "211"]  # duplicates hit successive items
    assert order["items"][0] == {
        "name": "Mug",
        "product_id": "100",
        "item_id": "112",
        "price": 12.2,
        "options": {"color": "blue"},
    }
    assert db.get("users", "ann_lee_1001")["payment_methods"]["gift_card_1"]["balance"] == round(15 - diff, 2)
    assert order["items"][0]["options"] is not db.get("products", "100")["variants"]["112"]["options"]
    again = call(
        db,
        "modify_pending_order_items",
        order_id="#W0000001",
        item_ids=["211"],
        new_item_ids=["212"],
        payment_method_id="paypal_1",
    )
    assert again == "Error: non-pending order cannot be modified"


def test_modify_pending_order_items_without_a_price_change_records_a_zero_refund() -> None:
    db = make_db("retail")
    call(
        db,
        "modify_pending_order_items",
        order_id="#W0000004",
        item_ids=["112"],
        new_item_ids=["112"],
        payment_method_id="paypal_1",
    )
    assert db.get("orders", "#W0000004")["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 0.0,
        "payment_method_id": "paypal_1",
    }


def test_return_delivered_order_items() -> None:
    db = make_db("retail")
    ret = "return_delivered_order_items"
    assert (
        call(db, ret, order_id="#W9", item_ids=["111"], payment_method_id="gift_card_1")
        == "Error: order not found"
    )
    assert call(db, ret, order_id="#W0000001", item_ids=["111"], payment_method_id="gift_card_1") == (
        "Error: non-delivered order cannot be returned"
    )
    assert call(db, ret, order_id="#W0000002", item_ids=["111"], payment_method_id="credit_card_2") == (
        "Error: payment method not found"
    )
    assert call(db, ret, order_id="#W0000002", item_ids=["111"], payment_method_id="paypal_1") == (
        "Error: payment method should be either the original payment method or a gift card"
    )
    assert call(db, ret, order_id="#W0000002", item_ids=["111", "111"], payment_method_id="gift_card_1") == (
        "Error: some item not found"
    )
    assert_unchanged(db)
    order = json.loads(
        call(db, ret, order_id="#W0000002", item_ids=["211", "111"], payment_method_id="gift_card_1")
    )
    assert order["status"] == "return requested" and order["return_items"] == ["111", "211"]
    assert list(order)[-2:] == ["return_items", "return_payment_method_id"]
    assert order["payment_history"] == RETAIL["orders"]["#W0000002"]["payment_history"]
    assert db.get("users", "ann_lee_1001") == RETAIL["users"]["ann_lee_1001"]


def test_exchange_delivered_order_items() -> None:
    db = make_db("retail")
    ex = "exchange_delivered_order_items"
    base = {"order_id": "#W0000002", "payment_method_id": "paypal_1"}
    assert call(db, ex, **dict(base, order_id="#W0000004"), item_ids=["112"], new_item_ids=["111"]) == (
        "Error: non-delivered order cannot be exchanged"
    )
    assert call(db, ex, **base, item_ids=["112"], new_item_ids=["111"]) == "Error: 112 not found"
    assert (
        call(db, ex, **base, item_ids=["111"], new_item_ids=[])
        == "Error: the number of items to be exchanged should match"
    )
    assert (
        call(db, ex, **base, item_ids=["111"], new_item_ids=["113"])
        == "Error: new item 113 not found or available"
    )
    assert call(
        db, ex, **dict(base, payment_method_id="gift_card_9"), item_ids=["111"], new_item_ids=["112"]
    ) == ("Error: payment method not found")
    assert call(
        db, ex, **dict(base, payment_method_id="gift_card_1"), item_ids=["211"], new_item_ids=["212"]
    ) == ("Error: insufficient gift card balance to pay for the price difference")
    assert_unchanged(db)
    order = json.loads(call(db, ex, **base, item_ids=["211", "111"], new_item_ids=["212", "112"]))
    assert order["status"] == "exchange requested"
    assert order["exchange_items"] == ["111", "211"] and order["exchange_new_items"] == ["112", "212"]
    assert order["exchange_payment_method_id"] == "paypal_1"
    assert order["exchange_price_difference"] == round(0 + (45.25 - 30.0) + (12.2 - 10.1), 2) == 17.35
    assert order["items"] == RETAIL["orders"]["#W0000002"]["items"]
    assert order["payment_history"] == RETAIL["orders"]["#W0000002"]["payment_history"]


# ---------------------------------------------------------------- airline: read-only tools


def test_airline_lookups() -> None:
    db = make_db("airline")
    assert call(db, "get_user_details", user_id="mia_li_1") == json.dumps(AIRLINE["users"]["mia_li_1"])
    assert call(db, "get_user_details", user_id="x") == "Error: user not found"
    assert call(db, "get_reservation_details", reservation_id="ABC123") == json.dumps(
        AIRLINE["reservations"]["ABC123"]
    )
    assert (
        call(db, "get_reservation_details", reservation_id="NOPE00") == "Error: user not found"
    )  # upstream quirk
    airports = json.loads(call(db, "list_all_airports"))
    assert len(airports) == 20 and list(airports)[0] == "SFO" and list(airports)[-1] == "LGA"
    assert airports["LGA"] == "LaGuardia"
    assert_unchanged(db)


def test_search_direct_flight() -> None:
    db = make_db("airline")
    found = json.loads(call(db, "search_direct_flight", origin="PHL", destination="LGA", date="2024-05-16"))
    assert [f["flight_number"] for f in found] == ["HAT001", "HAT004"]
    assert list(found[0]) == [
        "flight_number",
        "origin",
        "destination",
        "scheduled_departure_time_est",
        "scheduled_arrival_time_est",
        "status",
        "available_seats",
        "prices",
    ]
    assert call(db, "search_direct_flight", origin="PHL", destination="LGA", date="2024-05-17") == "[]"
    assert call(db, "search_direct_flight", origin="PHL", destination="LGA", date="2024-05-01") == "[]"


def test_search_onestop_flight_and_its_quirks() -> None:
    db = make_db("airline")
    pairs = json.loads(call(db, "search_onestop_flight", origin="PHL", destination="BOS", date="2024-05-16"))
    # HAT003 leaves LGA before HAT001 lands; HAT004 lands after midnight, so its connection is on the 17th.
    assert [(a["flight_number"], b["flight_number"]) for a, b in pairs] == [
        ("HAT001", "HAT002"),
        ("HAT004", "HAT005"),
    ]
    first, second = pairs[1]
    assert first["date"] == "2024-05-16" and second["date"] == "2024-05-17"
    assert second["prices"] == {
        "basic_economy": 30,
        "economy": 70,
        "business": 170,
    }  # the 16th's entry: quirk
    assert list(first)[-1] == "date"
    # The next day is not zero-padded: a connection after midnight on the 5th would be looked up on "2024-05-6".
    assert call(db, "search_onestop_flight", origin="PHL", destination="BOS", date="2024-05-05") == "[]"


def test_search_onestop_flight_reproduces_the_upstream_key_error() -> None:
    data = copy.deepcopy(AIRLINE)
    del data["flights"]["HAT005"]["dates"]["2024-05-16"]
    db = make_db("airline", data)
    assert (
        call(db, "search_onestop_flight", origin="PHL", destination="BOS", date="2024-05-16")
        == "Error: '2024-05-16'"
    )


# ---------------------------------------------------------------- airline: booking


def booking(**overrides: Any) -> dict[str, Any]:
    args = {
        "user_id": "mia_li_1",
        "origin": "PHL",
        "destination": "BOS",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [
            {"flight_number": "HAT001", "date": "2024-05-16"},
            {"flight_number": "HAT002", "date": "2024-05-16"},
        ],
        "passengers": [dict(PAX_MIA)],
        "payment_methods": [
            {"payment_id": "certificate_1", "amount": 150},
            {"payment_id": "gift_card_1", "amount": 110},
        ],
        "total_baggages": 2,
        "nonfree_baggages": 1,
        "insurance": "yes",
    }
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"user_id": "nobody"}, "Error: user not found"),
        ({"flights": [{"flight_number": "HAT999", "date": "2024-05-16"}]}, "Error: flight HAT999 not found"),
        (
            {"flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]},
            "Error: flight HAT001 not found on date 2024-05-20",
        ),
        (
            {"flights": [{"flight_number": "HAT001", "date": "2024-05-17"}]},
            "Error: flight HAT001 not available on date 2024-05-17",
        ),
        (
            {"cabin": "business", "passengers": [PAX_MIA, PAX_NOAH]},
            "Error: not enough seats on flight HAT001",
        ),
        ({"cabin": "first"}, "Error: 'first'"),
        ({"flights": [{"date": "2024-05-16"}]}, "Error: 'flight_number'"),
        (
            {"payment_methods": [{"payment_id": "paypal_7", "amount": 260}]},
            "Error: payment method paypal_7 not found",
        ),
        (
            {
                "payment_methods": [
                    {"payment_id": "certificate_2", "amount": 160},
                    {"payment_id": "credit_card_1", "amount": 100},
                ]
            },
            "Error: not enough balance in payment method certificate_2",
        ),
        (
            {"payment_methods": [{"payment_id": "credit_card_1", "amount": 259.0}]},
            "Error: payment amount does not add up, total price is 260, but paid 259.0",
        ),
    ],
)
def test_book_reservation_errors(overrides: dict[str, Any], message: str) -> None:
    db = make_db("airline")
    assert call(db, "book_reservation", **booking(**overrides)) == message
    assert_unchanged(db)


def test_book_reservation_changes() -> None:
    db = make_db("airline")
    # 100 + 80 per flight, +30 insurance, +50 per non-free bag = 260.
    out = json.loads(call(db, "book_reservation", **booking()))
    assert out == db.get("reservations", "HATHAT") and out["reservation_id"] == "HATHAT"
    assert out["flights"] == [
        {
            "flight_number": "HAT001",
            "date": "2024-05-16",
            "price": 100,
            "origin": "PHL",
            "destination": "LGA",
        },
        {"flight_number": "HAT002", "date": "2024-05-16", "price": 80, "origin": "LGA", "destination": "BOS"},
    ]
    assert list(out) == [
        "reservation_id",
        "user_id",
        "origin",
        "destination",
        "flight_type",
        "cabin",
        "flights",
        "passengers",
        "payment_history",
        "created_at",
        "total_baggages",
        "nonfree_baggages",
        "insurance",
    ]
    assert out["created_at"] == "2024-05-15T15:00:00" and "status" not in out
    user = db.get("users", "mia_li_1")
    assert "certificate_1" not in user["payment_methods"]  # deleted even though only 150 of it was worth 150
    assert user["payment_methods"]["gift_card_1"]["amount"] == 390
    assert user["reservations"][-1] == "HATHAT"
    assert db.get("flights", "HAT001")["dates"]["2024-05-16"]["available_seats"]["economy"] == 2  # untouched
    cheap = booking(
        insurance="no", nonfree_baggages=0, payment_methods=[{"payment_id": "credit_card_1", "amount": 180}]
    )
    assert json.loads(call(db, "book_reservation", **cheap))["reservation_id"] == "HATHAU"
    assert json.loads(call(db, "book_reservation", **cheap))["reservation_id"] == "HATHAV"
    assert (
        json.loads(call(db, "book_reservation", **cheap))["reservation_id"] == "HATHAV"
    )  # reused without a check
    assert list(db.keys("reservations"))[-3:] == ["HATHAT", "HATHAU", "HATHAV"]
    assert db.state_hash() == state_hash(db.to_dict())


def test_book_reservation_with_a_certificate_twice_fails_half_way() -> None:
    db = make_db("airline")
    args = booking(
        payment_methods=[
            {"payment_id": "gift_card_1", "amount": 10},
            {"payment_id": "certificate_1", "amount": 125},
            {"payment_id": "certificate_1", "amount": 125},
        ]
    )
    assert call(db, "book_reservation", **args) == "Error: 'certificate_1'"
    methods = db.get("users", "mia_li_1")["payment_methods"]
    assert "certificate_1" not in methods and methods["gift_card_1"]["amount"] == 490  # the flagged edge case
    assert not db.contains("reservations", "HATHAT")


# ---------------------------------------------------------------- airline: cancel and updates


def test_cancel_reservation() -> None:
    db = make_db("airline")
    assert call(db, "cancel_reservation", reservation_id="NOPE00") == "Error: reservation not found"
    out = json.loads(call(db, "cancel_reservation", reservation_id="ABC123"))
    history = db.get("reservations", "ABC123")["payment_history"]
    assert history[2:] == [
        {"payment_id": "credit_card_1", "amount": -100},
        {"payment_id": "gift_card_1", "amount": -0.0},
    ]
    assert str(history[3]["amount"]) == "-0.0"
    assert list(out)[-1] == "status" and out["status"] == "cancelled"
    assert db.get("users", "mia_li_1") == AIRLINE["users"]["mia_li_1"]  # no balance is credited back


def test_update_reservation_flights() -> None:
    upd = "update_reservation_flights"
    same = [
        {"flight_number": "HAT001", "date": "2024-05-16"},
        {"flight_number": "HAT002", "date": "2024-05-16"},
    ]
    db = make_db("airline")
    assert call(
        db, upd, reservation_id="NOPE00", cabin="economy", flights=same, payment_id="credit_card_1"
    ) == ("Error: reservation not found")
    assert call(
        db, upd, reservation_id="DEF456", cabin="basic_economy", flights=same, payment_id="paypal_9"
    ) == ("Error: payment method not found")
    assert call(
        db, upd, reservation_id="DEF456", cabin="basic_economy", flights=same, payment_id="certificate_1"
    ) == ("Error: certificate cannot be used to update reservation")
    assert call(
        db,
        upd,
        reservation_id="DEF456",
        cabin="basic_economy",
        flights=[{"flight_number": "HAT001", "date": "2024-05-17"}],
        payment_id="credit_card_1",
    ) == ("Error: flight HAT001 not available on date 2024-05-17")
    assert_unchanged(db)
    # Unchanged segments keep their price: the total is 0 and no payment entry is added.
    out = json.loads(
        call(
            db, upd, reservation_id="DEF456", cabin="basic_economy", flights=same, payment_id="credit_card_1"
        )
    )
    assert len(out["payment_history"]) == 1
    assert out["flights"][0] == {
        "flight_number": "HAT001",
        "date": "2024-05-16",
        "price": 50,
        "origin": "PHL",
        "destination": "LGA",
    }
    # A cabin change reprices every segment: (100 + 80 - 50 - 40) * 2 passengers = 180 from the gift card.
    out = json.loads(
        call(db, upd, reservation_id="DEF456", cabin="economy", flights=same, payment_id="gift_card_1")
    )
    assert out["payment_history"][-1] == {"payment_id": "gift_card_1", "amount": 180}
    assert out["cabin"] == "basic_economy"  # not updated: upstream quirk
    assert db.get("users", "mia_li_1")["payment_methods"]["gift_card_1"]["amount"] == 320


def test_update_reservation_flights_refund_raises_a_gift_card_balance() -> None:
    db = make_db("airline")
    out = json.loads(
        call(
            db,
            "update_reservation_flights",
            reservation_id="ABC123",
            cabin="basic_economy",
            flights=[{"flight_number": "HAT001", "date": "2024-05-16"}],
            payment_id="gift_card_1",
        )
    )
    assert out["payment_history"][-1] == {"payment_id": "gift_card_1", "amount": -50}
    assert db.get("users", "mia_li_1")["payment_methods"]["gift_card_1"]["amount"] == 550


def test_update_reservation_flights_gift_card_must_cover_the_total() -> None:
    data = copy.deepcopy(AIRLINE)
    data["users"]["mia_li_1"]["payment_methods"]["gift_card_1"]["amount"] = 10
    db = make_db("airline", data)
    flights = [{"flight_number": "HAT004", "date": "2024-05-16"}]
    assert call(
        db,
        "update_reservation_flights",
        reservation_id="ABC123",
        cabin="economy",
        flights=flights,
        payment_id="gift_card_1",
    ) == ("Error: gift card balance is not enough")


def test_update_reservation_baggages() -> None:
    bags = "update_reservation_baggages"
    db = make_db("airline")
    assert call(
        db, bags, reservation_id="NOPE00", total_baggages=1, nonfree_baggages=0, payment_id="gift_card_1"
    ) == ("Error: reservation not found")
    assert call(db, bags, reservation_id="ABC123", total_baggages=1, nonfree_baggages=0, payment_id="x") == (
        "Error: payment method not found"
    )
    assert call(
        db, bags, reservation_id="ABC123", total_baggages=1, nonfree_baggages=0, payment_id="certificate_2"
    ) == ("Error: certificate cannot be used to update reservation")
    assert call(
        db, bags, reservation_id="ABC123", total_baggages=20, nonfree_baggages=11, payment_id="gift_card_1"
    ) == ("Error: gift card balance is not enough")
    assert_unchanged(db)
    out = json.loads(
        call(
            db, bags, reservation_id="ABC123", total_baggages=4, nonfree_baggages=3, payment_id="gift_card_1"
        )
    )
    assert (out["total_baggages"], out["nonfree_baggages"]) == (4, 3)
    assert out["payment_history"][-1] == {"payment_id": "gift_card_1", "amount": 150}
    assert db.get("users", "mia_li_1")["payment_methods"]["gift_card_1"]["amount"] == 350
    # A decrease is allowed, costs nothing and adds no entry.
    out = json.loads(
        call(
            db,
            bags,
            reservation_id="ABC123",
            total_baggages=0,
            nonfree_baggages=0,
            payment_id="credit_card_1",
        )
    )
    assert (out["total_baggages"], len(out["payment_history"])) == (0, 3)


def test_update_reservation_passengers() -> None:
    pax = "update_reservation_passengers"
    db = make_db("airline")
    assert call(db, pax, reservation_id="NOPE00", passengers=[]) == "Error: reservation not found"
    assert call(db, pax, reservation_id="ABC123", passengers=[PAX_MIA, PAX_NOAH]) == (
        "Error: number of passengers does not match"
    )
    new = [{"first_name": "Ava", "last_name": "Li", "dob": "2000-01-01", "seat": "12A"}]
    assert json.loads(call(db, pax, reservation_id="ABC123", passengers=new))["passengers"] == new


def test_send_certificate() -> None:
    db = make_db("airline")
    assert call(db, "send_certificate", user_id="nobody", amount=50) == "Error: user not found"
    assert call(db, "send_certificate", user_id="mia_li_1", amount=150) == (
        "Certificate certificate_3221322 added to user mia_li_1 with amount 150."
    )
    assert call(db, "send_certificate", user_id="mia_li_1", amount=50.0) == (
        "Certificate certificate_3221323 added to user mia_li_1 with amount 50.0."
    )
    call(db, "send_certificate", user_id="mia_li_1", amount=1)
    methods = db.get("users", "mia_li_1")["payment_methods"]
    assert methods["certificate_3221322"] == {
        "source": "certificate",
        "amount": 150,
        "id": "certificate_3221322",
    }
    before = db.state_hash()
    assert call(db, "send_certificate", user_id="mia_li_1", amount=1).startswith("Error: ")
    assert db.state_hash() == before


# ---------------------------------------------------------------- answer parsing


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"name": "get_user_details", "arguments": {"user_id": "a"}}',
            ToolCall("get_user_details", {"user_id": "a"}),
        ),
        ('{"name": "think", "arguments": "{\\"thought\\": \\"x\\"}"}', ToolCall("think", {"thought": "x"})),
        ('{"name": "list_all_airports"}', ToolCall("list_all_airports", {})),
        ('{"name": "list_all_airports", "arguments": null}', ToolCall("list_all_airports", {})),
        ('{"name": " think ", "arguments": ""}', ToolCall("think", {})),
        ('get_user_details: {"user_id": "a"}', ToolCall("get_user_details", {"user_id": "a"})),
        ('get_user_details {"user_id": "a"}', ToolCall("get_user_details", {"user_id": "a"})),
        (
            '<think>hmm {"x": 1}</think>\nget_order_details:{"order_id": "#W1"}',
            ToolCall("get_order_details", {"order_id": "#W1"}),
        ),
        (
            'I will call it now: ```json\n{"name": "think", "arguments": {"thought": "t"}}\n```',
            ToolCall("think", {"thought": "t"}),
        ),
        (
            'Sure! {"name": "calculate", "arguments": {"expression": "1+1"}} done',
            ToolCall("calculate", {"expression": "1+1"}),
        ),
    ],
)
def test_parse_tool_call_accepts(content: str, expected: ToolCall) -> None:
    assert parse_tool_call(content) == expected


@pytest.mark.parametrize(
    "content",
    [
        "",
        "get_user_details",
        "get_user_details(user_id='a')",
        '{"arguments": {"user_id": "a"}}',
        '{"name": 5, "arguments": {}}',
        '{"name": "think", "arguments": [1, 2]}',
        '{"name": "think", "arguments": "not json"}',
        '{"name": "send_certificate", "arguments": {"user_id": "a", "amount": NaN}}',
        '["get_user_details", {"user_id": "a"}]',
        "{'name': 'think'}",
    ],
)
def test_parse_tool_call_refuses(content: str) -> None:
    assert parse_tool_call(content) is None


def test_parse_tool_call_refuses_pathological_nesting() -> None:
    deep = "[" * (MAX_ARGUMENT_DEPTH + 1) + "]" * (MAX_ARGUMENT_DEPTH + 1)
    assert parse_tool_call(f'{{"name": "think", "arguments": {{"thought": {deep}}}}}') is None
    assert parse_tool_call('{"name": "think", "arguments": {"thought": [[1]]}}') is not None
    assert parse_tool_call("{" * 5000) is None


# ---------------------------------------------------------------- property: overlay == full copy, pristine intact

_ORDER_IDS = st.sampled_from(["#W0000001", "#W0000002", "#W0000004", "#W0000005", "#W0000006", "#W9"])
_ITEMS = st.lists(st.sampled_from(["111", "112", "113", "211", "212"]), min_size=0, max_size=3)
_METHODS = st.sampled_from(["gift_card_1", "credit_card_1", "paypal_1", "credit_card_2"])
_ADDRESS = st.fixed_dictionaries({k: st.sampled_from(["a", "b"]) for k in ADDR_ANN})
_RETAIL_CALLS = st.one_of(
    st.tuples(
        st.just("cancel_pending_order"),
        st.fixed_dictionaries({"order_id": _ORDER_IDS, "reason": st.sampled_from(["no longer needed", "x"])}),
    ),
    st.tuples(
        st.just("modify_pending_order_items"),
        st.fixed_dictionaries(
            {
                "order_id": _ORDER_IDS,
                "item_ids": _ITEMS,
                "new_item_ids": _ITEMS,
                "payment_method_id": _METHODS,
            }
        ),
    ),
    st.tuples(
        st.just("exchange_delivered_order_items"),
        st.fixed_dictionaries(
            {
                "order_id": _ORDER_IDS,
                "item_ids": _ITEMS,
                "new_item_ids": _ITEMS,
                "payment_method_id": _METHODS,
            }
        ),
    ),
    st.tuples(
        st.just("modify_pending_order_payment"),
        st.fixed_dictionaries({"order_id": _ORDER_IDS, "payment_method_id": _METHODS}),
    ),
    st.tuples(
        st.just("return_delivered_order_items"),
        st.fixed_dictionaries({"order_id": _ORDER_IDS, "item_ids": _ITEMS, "payment_method_id": _METHODS}),
    ),
    st.tuples(
        st.just("modify_pending_order_address"), _ADDRESS.map(lambda a: {"order_id": "#W0000004", **a})
    ),
    st.tuples(st.just("modify_user_address"), _ADDRESS.map(lambda a: {"user_id": "bob_ray_2002", **a})),
)
_SEGMENTS = st.lists(
    st.fixed_dictionaries(
        {"flight_number": st.sampled_from(["HAT001", "HAT002", "HAT004"]), "date": st.just("2024-05-16")}
    ),
    min_size=1,
    max_size=2,
)
_PAYMENT_IDS = st.sampled_from(["credit_card_1", "gift_card_1", "certificate_1", "certificate_2"])
_AIRLINE_CALLS = st.one_of(
    st.tuples(
        st.just("book_reservation"),
        st.fixed_dictionaries(
            {
                "user_id": st.just("mia_li_1"),
                "origin": st.just("PHL"),
                "destination": st.just("BOS"),
                "flight_type": st.just("one_way"),
                "cabin": st.sampled_from(["economy", "basic_economy"]),
                "flights": _SEGMENTS,
                "passengers": st.just([PAX_MIA]),
                "payment_methods": st.lists(
                    st.fixed_dictionaries(
                        {"payment_id": _PAYMENT_IDS, "amount": st.sampled_from([40, 50, 100, 130])}
                    ),
                    min_size=1,
                    max_size=2,
                ),
                "total_baggages": st.just(0),
                "nonfree_baggages": st.sampled_from([0, 1]),
                "insurance": st.sampled_from(["yes", "no"]),
            }
        ),
    ),
    st.tuples(
        st.just("cancel_reservation"),
        st.fixed_dictionaries({"reservation_id": st.sampled_from(["ABC123", "DEF456", "HATHAT"])}),
    ),
    st.tuples(
        st.just("update_reservation_flights"),
        st.fixed_dictionaries(
            {
                "reservation_id": st.sampled_from(["ABC123", "DEF456"]),
                "cabin": st.sampled_from(["economy", "basic_economy"]),
                "flights": _SEGMENTS,
                "payment_id": _PAYMENT_IDS,
            }
        ),
    ),
    st.tuples(
        st.just("update_reservation_baggages"),
        st.fixed_dictionaries(
            {
                "reservation_id": st.sampled_from(["ABC123", "DEF456"]),
                "total_baggages": st.integers(0, 3),
                "nonfree_baggages": st.integers(0, 3),
                "payment_id": _PAYMENT_IDS,
            }
        ),
    ),
    st.tuples(
        st.just("send_certificate"),
        st.fixed_dictionaries({"user_id": st.just("mia_li_1"), "amount": st.sampled_from([50, 75.5])}),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.tuples(st.just("retail"), st.lists(_RETAIL_CALLS, max_size=6)),
        st.tuples(st.just("airline"), st.lists(_AIRLINE_CALLS, max_size=6)),
    )
)
def test_overlay_hash_equals_a_full_copy_after_any_tool_sequence(
    case: tuple[str, list[tuple[str, dict[str, Any]]]],
) -> None:
    domain, calls = case
    db = make_db(domain)
    pristine = copy.deepcopy(db.base.tables)
    for name, kwargs in calls:
        out = call(db, name, **copy.deepcopy(kwargs))
        assert isinstance(out, str)
        assert db.state_hash() == state_hash(db.to_dict())
    assert db.base.tables == pristine  # every write went through the episode's own copies
