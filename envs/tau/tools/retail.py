"""Retail tools (docs/spec/TAU_TOOLS.md §3): checks, messages and database changes in upstream's exact order.

The statement order matters beyond the error messages: which check runs first decides the message, and
float arithmetic is reproduced operation by operation because unrounded sums end up in the state hash.
"""

from __future__ import annotations

from typing import Any

from userrl.envs.tau.database import EpisodeDB
from userrl.envs.tau.tools.base import Param, Tool, dumps
from userrl.envs.tau.tools.shared import get_user_details, record_json, shared_tools

CANCEL_REASONS = ("no longer needed", "ordered by mistake")

ORDER_ID = Param(
    "order_id", "string", "The order id, such as '#W0000000'. Note the '#' at the start of the order id."
)
ITEM_IDS = Param(
    "item_ids", "array", "The item ids, each such as '1008292230'. The list may contain the same id twice."
)
NEW_ITEM_IDS = Param(
    "new_item_ids",
    "array",
    "The new item ids, each such as '1008292230', one per entry of item_ids and in the same order; each "
    "must be a variant of the same product as the item it replaces.",
)
PAYMENT_METHOD_ID = Param(
    "payment_method_id",
    "string",
    "The payment method id, such as 'gift_card_0000000' or 'credit_card_0000000', as found in the user "
    "or order details.",
)
ADDRESS_PARAMS = (
    Param("address1", "string", "The first address line, such as '123 Main St'."),
    Param("address2", "string", "The second address line, such as 'Apt 1' (may be empty)."),
    Param("city", "string", "The city, such as 'San Francisco'."),
    Param("state", "string", "The state, such as 'CA'."),
    Param("country", "string", "The country, such as 'USA'."),
    Param("zip", "string", "The zip code, such as '12345'."),
)


def _address(address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any) -> dict[str, Any]:
    # Key order is part of the JSON observation: address1, address2, city, state, country, zip.
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


# ---------------------------------------------------------------------- read-only tools


def find_user_id_by_email(db: EpisodeDB, email: str) -> str:
    """The first user (file order) whose email matches case-insensitively."""
    for user_id in db.keys("users"):
        if db.get("users", user_id)["email"].lower() == email.lower():
            return user_id
    return "Error: user not found"


def find_user_id_by_name_zip(db: EpisodeDB, first_name: str, last_name: str, zip: str) -> str:
    """The first user whose names match case-insensitively and whose default address has this zip."""
    for user_id in db.keys("users"):
        profile = db.get("users", user_id)
        if (
            profile["name"]["first_name"].lower() == first_name.lower()
            and profile["name"]["last_name"].lower() == last_name.lower()
            and profile["address"]["zip"] == zip
        ):
            return user_id
    return "Error: user not found"


def get_order_details(db: EpisodeDB, order_id: str) -> str:
    """The order record as JSON."""
    return record_json(db, "orders", order_id, "order")


def get_product_details(db: EpisodeDB, product_id: str) -> str:
    """The product record (with all its variants) as JSON."""
    return record_json(db, "products", product_id, "product")


def list_all_product_types(db: EpisodeDB) -> str:
    """A JSON object mapping every product name to its product id, sorted by name."""
    names = {product["name"]: product["product_id"] for product in db.values("products")}
    return dumps(dict(sorted(names.items())))


# ---------------------------------------------------------------------- helpers of the item-change tools


def _count_check(order: dict[str, Any], item_ids: list[Any]) -> str | None:
    all_item_ids = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > all_item_ids.count(item_id):
            return f"Error: {item_id} not found"
    return None


def _price_difference(
    db: EpisodeDB, order: dict[str, Any], item_ids: list[Any], new_item_ids: list[Any]
) -> Any:
    """Sum of (new price - old price) in pair order, starting from the int 0; an error string on a bad id."""
    diff: Any = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        item = [item for item in order["items"] if item["item_id"] == item_id][0]
        variants = db.get("products", item["product_id"])["variants"]
        if not (new_item_id in variants and variants[new_item_id]["available"]):
            return f"Error: new item {new_item_id} not found or available"
        diff += variants[new_item_id]["price"] - item["price"]
    return diff


def _payment_error(methods: dict[str, Any], payment_method_id: str, amount: Any, what: str) -> str | None:
    """The item-swap tools' payment checks: the method is the user's, and a gift card covers the amount."""
    if payment_method_id not in methods:
        return "Error: payment method not found"
    if methods[payment_method_id]["source"] == "gift_card" and methods[payment_method_id]["balance"] < amount:
        return f"Error: insufficient gift card balance to pay for {what}"
    return None


def _credit_gift_card(db: EpisodeDB, user_id: str, payment_method_id: str, amount: Any) -> None:
    """Add amount (negative: a charge) to a gift card's balance, rounded to cents as τ-bench does."""
    method = db.mutable("users", user_id)["payment_methods"][payment_method_id]
    method["balance"] += amount
    method["balance"] = round(method["balance"], 2)


def _item_swap(
    db: EpisodeDB, order_id: str, item_ids: list[Any], new_item_ids: list[Any], status: str, verb: str
) -> tuple[dict[str, Any], Any] | str:
    """The checks shared by the two item-swap tools, in τ-bench's order: (order, price difference) or an error."""
    if not db.contains("orders", order_id):
        return "Error: order not found"
    order = db.get("orders", order_id)
    if order["status"] != status:
        return f"Error: non-{status} order cannot be {verb}"
    error = _count_check(order, item_ids)
    if error:
        return error
    if len(item_ids) != len(new_item_ids):
        return "Error: the number of items to be exchanged should match"
    diff = _price_difference(db, order, item_ids, new_item_ids)
    if isinstance(diff, str):
        return diff
    return order, diff


# ---------------------------------------------------------------------- write tools


def cancel_pending_order(db: EpisodeDB, order_id: str, reason: str) -> str:
    """Cancel a pending order and refund every payment (gift cards at once)."""
    if not db.contains("orders", order_id):
        return "Error: order not found"
    if db.get("orders", order_id)["status"] != "pending":
        return "Error: non-pending order cannot be cancelled"
    if reason not in CANCEL_REASONS:
        return "Error: invalid reason"
    order = db.mutable("orders", order_id)
    refunds = []
    for payment in order["payment_history"]:
        payment_id = payment["payment_method_id"]
        refunds.append(
            {"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": payment_id}
        )
        if "gift_card" in payment_id:  # test by id: gift cards are refunded immediately
            _credit_gift_card(db, order["user_id"], payment_id, payment["amount"])
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return dumps(order)


def modify_pending_order_address(
    db: EpisodeDB, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> str:
    """Replace the shipping address of a pending order."""
    if not db.contains("orders", order_id):
        return "Error: order not found"
    if db.get("orders", order_id)["status"] != "pending":
        return "Error: non-pending order cannot be modified"
    order = db.mutable("orders", order_id)
    order["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(order)


def modify_user_address(
    db: EpisodeDB, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> str:
    """Replace a user's default address (existing orders keep theirs)."""
    if not db.contains("users", user_id):
        return "Error: user not found"
    user = db.mutable("users", user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return dumps(user)


def modify_pending_order_items(
    db: EpisodeDB, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    """Swap items of a pending order for other variants of the same products; pay or refund the difference."""
    checked = _item_swap(db, order_id, item_ids, new_item_ids, "pending", "modified")
    if isinstance(checked, str):
        return checked
    order, diff = checked
    methods = db.get("users", order["user_id"])["payment_methods"]
    error = _payment_error(methods, payment_method_id, diff, "the new item")
    if error:
        return error

    order = db.mutable("orders", order_id)
    order["payment_history"].append(
        {
            "transaction_type": "payment" if diff > 0 else "refund",
            "amount": abs(diff),  # not rounded: values such as 0.04999999999999716 are part of the hash
            "payment_method_id": payment_method_id,
        }
    )
    if methods[payment_method_id]["source"] == "gift_card":
        _credit_gift_card(db, order["user_id"], payment_method_id, -diff)
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        # First match against the items as already changed, so duplicate ids hit successive items.
        item = [item for item in order["items"] if item["item_id"] == item_id][0]
        variant = db.get("products", item["product_id"])["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        # A copy: the order must never share a dict with the pristine product table.
        item["options"] = dict(variant["options"])
    order["status"] = "pending (item modified)"
    return dumps(order)


def modify_pending_order_payment(db: EpisodeDB, order_id: str, payment_method_id: str) -> str:
    """Pay a pending order with another method: a new payment plus a refund of the old one."""
    if not db.contains("orders", order_id):
        return "Error: order not found"
    order = db.get("orders", order_id)
    if order["status"] != "pending":
        return "Error: non-pending order cannot be modified"
    methods = db.get("users", order["user_id"])["payment_methods"]
    if payment_method_id not in methods:
        return "Error: payment method not found"
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        return "Error: there should be exactly one payment for a pending order"
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        return "Error: the new payment method should be different from the current one"
    amount = history[0]["amount"]
    if methods[payment_method_id]["source"] == "gift_card" and methods[payment_method_id]["balance"] < amount:
        return "Error: insufficient gift card balance to pay for the order"

    order = db.mutable("orders", order_id)
    order["payment_history"].extend(
        [
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
        ]
    )
    if methods[payment_method_id]["source"] == "gift_card":
        _credit_gift_card(db, order["user_id"], payment_method_id, -amount)
    if "gift_card" in old_id:  # test by id
        _credit_gift_card(db, order["user_id"], old_id, amount)
    return dumps(order)


def return_delivered_order_items(
    db: EpisodeDB, order_id: str, item_ids: list[str], payment_method_id: str
) -> str:
    """Request a return of items of a delivered order (no payment changes yet)."""
    if not db.contains("orders", order_id):
        return "Error: order not found"
    order = db.get("orders", order_id)
    if order["status"] != "delivered":
        return "Error: non-delivered order cannot be returned"
    if payment_method_id not in db.get("users", order["user_id"])["payment_methods"]:
        return "Error: payment method not found"
    if (
        "gift_card" not in payment_method_id
        and payment_method_id != order["payment_history"][0]["payment_method_id"]
    ):
        return "Error: payment method should be either the original payment method or a gift card"
    all_item_ids = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > all_item_ids.count(item_id):
            return "Error: some item not found"
    order = db.mutable("orders", order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return dumps(order)


def exchange_delivered_order_items(
    db: EpisodeDB, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    """Request an exchange of delivered items for other variants (items and payments unchanged for now)."""
    checked = _item_swap(db, order_id, item_ids, new_item_ids, "delivered", "exchanged")
    if isinstance(checked, str):
        return checked
    order, diff = checked
    diff = round(diff, 2)
    methods = db.get("users", order["user_id"])["payment_methods"]
    error = _payment_error(methods, payment_method_id, diff, "the price difference")
    if error:
        return error
    order = db.mutable("orders", order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return dumps(order)


# ---------------------------------------------------------------------- the catalogue


def retail_tools() -> list[Tool]:
    """Every retail tool, in upstream's advertised (alphabetical) order."""
    tools = [
        Tool(
            "cancel_pending_order",
            cancel_pending_order,
            "Cancel a pending order; processed or delivered orders cannot be cancelled. Explain the "
            "cancellation and get an explicit yes from the customer first. The order becomes 'cancelled' and "
            "every payment is refunded: at once to a gift card, otherwise within 5-7 business days. Returns "
            "the order after the cancellation.",
            (
                ORDER_ID,
                Param(
                    "reason",
                    "string",
                    "Why the order is cancelled: 'no longer needed' or 'ordered by mistake'.",
                ),
            ),
            writes=True,
        ),
        Tool(
            "exchange_delivered_order_items",
            exchange_delivered_order_items,
            "Exchange items of a delivered order for other variants of the same products. A delivered order "
            "allows one return or exchange in total. Explain the exchange and get an explicit yes from the "
            "customer first.",
            (ORDER_ID, ITEM_IDS, NEW_ITEM_IDS, PAYMENT_METHOD_ID),
            writes=True,
        ),
        Tool(
            "find_user_id_by_email",
            find_user_id_by_email,
            "Find a user id from an email address; returns the user id or an error.",
            (Param("email", "string", "The email address, such as 'something@example.com'."),),
        ),
        Tool(
            "find_user_id_by_name_zip",
            find_user_id_by_name_zip,
            "Find a user id from first name, last name and zip code; returns the user id or an error. Look "
            "users up by email first, and use this tool only when the email is unknown or not found.",
            (
                Param("first_name", "string", "The first name, such as 'John'."),
                Param("last_name", "string", "The last name, such as 'Doe'."),
                Param("zip", "string", "The zip code, such as '12345'."),
            ),
        ),
        Tool(
            "get_order_details",
            get_order_details,
            "Get the status and details of an order.",
            (ORDER_ID,),
        ),
        Tool(
            "get_product_details",
            get_product_details,
            "Get the inventory details of a product, with all its variants.",
            (
                Param(
                    "product_id",
                    "string",
                    "The product id, such as '6086499569'. A product id is not an item id.",
                ),
            ),
        ),
        Tool(
            "get_user_details",
            get_user_details,
            "Get the details of a user, including their orders.",
            (Param("user_id", "string", "The user id, such as 'sara_doe_496'."),),
        ),
        Tool(
            "list_all_product_types",
            list_all_product_types,
            "List the name and product id of every product type in the store.",
        ),
        Tool(
            "modify_pending_order_address",
            modify_pending_order_address,
            "Change the shipping address of a pending order. Explain the change and get an explicit yes from "
            "the customer first.",
            (ORDER_ID, *ADDRESS_PARAMS),
            writes=True,
        ),
        Tool(
            "modify_pending_order_items",
            modify_pending_order_items,
            "Change items of a pending order to other variants of the same products. This can be done only "
            "once per pending order. Explain the change and get an explicit yes from the customer first.",
            (ORDER_ID, ITEM_IDS, NEW_ITEM_IDS, PAYMENT_METHOD_ID),
            writes=True,
        ),
        Tool(
            "modify_pending_order_payment",
            modify_pending_order_payment,
            "Change the payment method of a pending order. Explain the change and get an explicit yes from "
            "the customer first.",
            (ORDER_ID, PAYMENT_METHOD_ID),
            writes=True,
        ),
        Tool(
            "modify_user_address",
            modify_user_address,
            "Change the default address of a user. Explain the change and get an explicit yes from the "
            "customer first.",
            (Param("user_id", "string", "The user id, such as 'sara_doe_496'."), *ADDRESS_PARAMS),
            writes=True,
        ),
        Tool(
            "return_delivered_order_items",
            return_delivered_order_items,
            "Return items of a delivered order; the order becomes 'return requested' and the customer gets "
            "an email on how to send the items back. The refund goes to the original payment method or to a "
            "gift card. Explain the return and get an explicit yes from the customer first.",
            (ORDER_ID, ITEM_IDS, PAYMENT_METHOD_ID),
            writes=True,
        ),
    ]
    tools.extend(shared_tools("order"))
    return sorted(tools, key=lambda tool: tool.name)
