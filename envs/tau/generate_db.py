"""Seeded generator of our own retail database (τ-bench retail schema: users, products, orders)."""

from __future__ import annotations

import itertools
import random
from typing import Any

N_USERS = 100
#: (name, option name -> values, (lowest price, highest price)); invented for this package.
PRODUCT_TYPES: tuple[tuple[str, dict[str, list[str]], tuple[float, float]], ...] = (
    (
        "Travel Mug",
        {"capacity": ["12oz", "16oz", "20oz"], "color": ["black", "white", "teal"], "lid": ["flip", "slide"]},
        (14, 42),
    ),
    (
        "Rain Jacket",
        {"size": ["S", "M", "L", "XL"], "color": ["navy", "yellow", "olive"], "hood": ["fixed", "packable"]},
        (55, 160),
    ),
    (
        "Wireless Mouse",
        {
            "color": ["black", "gray", "white"],
            "connection": ["bluetooth", "usb receiver"],
            "grip": ["ambidextrous", "right-handed"],
        },
        (18, 90),
    ),
    (
        "Bike Helmet",
        {"size": ["S", "M", "L"], "color": ["black", "white", "orange"], "ventilation": ["standard", "high"]},
        (40, 150),
    ),
    (
        "Cutting Board",
        {"material": ["bamboo", "maple", "plastic"], "size": ["small", "medium", "large"]},
        (12, 70),
    ),
    (
        "Plant Pot",
        {
            "material": ["ceramic", "terracotta", "plastic"],
            "diameter": ["6 inch", "8 inch", "10 inch"],
            "color": ["white", "green", "gray"],
        },
        (9, 55),
    ),
    (
        "Pillow",
        {
            "firmness": ["soft", "medium", "firm"],
            "size": ["standard", "queen", "king"],
            "fill": ["down", "memory foam", "polyester"],
        },
        (22, 120),
    ),
    (
        "Umbrella",
        {
            "size": ["compact", "full"],
            "color": ["black", "blue", "red", "clear"],
            "opening": ["manual", "automatic"],
        },
        (14, 60),
    ),
    (
        "Hiking Socks",
        {"size": ["S", "M", "L"], "material": ["wool", "synthetic"], "cushion": ["light", "full"]},
        (11, 32),
    ),
    (
        "Desk Lamp",
        {
            "color": ["black", "silver", "white"],
            "brightness": ["low", "medium", "high"],
            "power": ["USB", "plug-in"],
        },
        (25, 110),
    ),
    (
        "Toaster",
        {"slots": ["2", "4"], "color": ["black", "red", "stainless"], "finish": ["matte", "glossy"]},
        (30, 140),
    ),
    (
        "Board Game",
        {"edition": ["classic", "deluxe", "travel"], "language": ["English", "Spanish", "French"]},
        (18, 75),
    ),
    (
        "Phone Case",
        {
            "model": ["Model A", "Model B", "Model C"],
            "color": ["black", "blue", "pink"],
            "material": ["silicone", "leather"],
        },
        (10, 48),
    ),
    (
        "Picture Frame",
        {
            "size": ["5x7", "8x10", "11x14"],
            "material": ["wood", "metal"],
            "color": ["black", "white", "natural"],
        },
        (12, 65),
    ),
    (
        "Scarf",
        {
            "material": ["wool", "cotton", "silk"],
            "color": ["gray", "burgundy", "cream"],
            "length": ["short", "long"],
        },
        (16, 95),
    ),
    (
        "Jigsaw Puzzle",
        {"pieces": ["500", "1000", "2000"], "theme": ["landscape", "animals", "art"]},
        (12, 45),
    ),
    (
        "Camping Stove",
        {"fuel": ["propane", "butane"], "burners": ["1", "2"], "ignition": ["manual", "piezo"]},
        (35, 180),
    ),
    (
        "Tote Bag",
        {
            "material": ["canvas", "leather", "nylon"],
            "color": ["black", "tan", "green"],
            "closure": ["open", "zipper"],
        },
        (15, 130),
    ),
    (
        "Bath Towel",
        {
            "size": ["hand", "bath", "oversized"],
            "color": ["white", "gray", "blue"],
            "material": ["cotton", "bamboo"],
        },
        (9, 45),
    ),
    (
        "Sleeping Bag",
        {
            "temperature": ["20F", "35F", "50F"],
            "shape": ["mummy", "rectangular"],
            "fill": ["down", "synthetic"],
        },
        (45, 260),
    ),
    (
        "Blender",
        {"capacity": ["32oz", "48oz", "64oz"], "color": ["black", "white"], "speeds": ["3", "6", "10"]},
        (35, 220),
    ),
    (
        "Reading Glasses",
        {
            "strength": ["+1.0", "+1.5", "+2.0", "+2.5"],
            "frame": ["round", "square"],
            "color": ["black", "tortoise"],
        },
        (12, 60),
    ),
)
FIRST_NAMES = (
    "Amara",
    "Bruno",
    "Celine",
    "Dario",
    "Elena",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Luca",
    "Maya",
    "Nolan",
    "Olga",
    "Pavel",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
    "Umar",
    "Vera",
    "Wendell",
    "Ximena",
    "Yusra",
    "Zane",
    "Aiko",
    "Bianca",
    "Cyrus",
    "Delia",
    "Emil",
    "Freya",
    "Gideon",
    "Hana",
    "Ivo",
    "Juno",
)
LAST_NAMES = (
    "Abbott",
    "Becker",
    "Castillo",
    "Dumont",
    "Eriksen",
    "Fontaine",
    "Gallo",
    "Haddad",
    "Ibarra",
    "Jensen",
    "Kowalski",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quintero",
    "Rossetti",
    "Sato",
    "Tanaka",
    "Ueda",
    "Varga",
    "Whitfield",
    "Yilmaz",
    "Zielinski",
    "Achebe",
    "Brandt",
    "Costa",
    "Duarte",
)
STREETS = (
    "Alder Street",
    "Birch Avenue",
    "Cedar Lane",
    "Dogwood Drive",
    "Elm Court",
    "Fir Road",
    "Juniper Way",
    "Laurel Street",
    "Magnolia Avenue",
    "Oak Ridge Road",
    "Pine Hollow Lane",
    "Spruce Boulevard",
    "Sycamore Drive",
    "Willow Bend Road",
    "Harbor View Drive",
    "Meadow Lane",
    "Riverside Avenue",
)
CITIES = (
    ("Portland", "OR", "972"),
    ("Denver", "CO", "802"),
    ("Austin", "TX", "787"),
    ("Columbus", "OH", "432"),
    ("Raleigh", "NC", "276"),
    ("Madison", "WI", "537"),
    ("Tucson", "AZ", "857"),
    ("Boise", "ID", "837"),
    ("Richmond", "VA", "232"),
    ("Omaha", "NE", "681"),
    ("Albany", "NY", "122"),
    ("Spokane", "WA", "992"),
)
CARD_BRANDS = ("visa", "mastercard", "amex", "discover")
#: Order statuses in the τ-bench files with their weights here.
STATUSES = (("pending", 35), ("processed", 12), ("delivered", 40), ("cancelled", 13))


def _digits(rnd: random.Random, n: int) -> str:
    return str(rnd.randrange(10 ** (n - 1), 10**n))


def _unique(make: Any, used: set[str]) -> str:
    while True:
        value = make()
        if value not in used:
            used.add(value)
            return value


def make_address(rnd: random.Random) -> dict[str, str]:
    """A random US address with the τ-bench field order."""
    city, state, zip_prefix = rnd.choice(CITIES)
    unit = rnd.choice(["", f"Suite {rnd.randint(100, 999)}", f"Apt {rnd.randint(1, 40)}"])
    return {
        "address1": f"{rnd.randint(10, 999)} {rnd.choice(STREETS)}",
        "address2": unit,
        "city": city,
        "country": "USA",
        "state": state,
        "zip": zip_prefix + _digits(rnd, 2),
    }


def make_products(rnd: random.Random, used_ids: set[str]) -> dict[str, Any]:
    """Every product type with 4-9 variants (about 85% available), prices with two decimals."""
    products = {}
    for name, options, (low, high) in PRODUCT_TYPES:
        product_id = _unique(lambda: _digits(rnd, 10), used_ids)
        combos = list(itertools.product(*options.values()))
        chosen = sorted(rnd.sample(range(len(combos)), min(len(combos), rnd.randint(4, 9))))
        variants = {}
        for index in chosen:
            item_id = _unique(lambda: _digits(rnd, 10), used_ids)
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(options, combos[index], strict=True)),
                "available": rnd.random() < 0.85,
                "price": round(rnd.uniform(low, high), 2),
            }
        products[product_id] = {"name": name, "product_id": product_id, "variants": variants}
    return products


def make_payment_methods(rnd: random.Random, used_ids: set[str]) -> dict[str, Any]:
    """One to three methods of distinct sources."""
    methods = {}
    for source in rnd.sample(["credit_card", "gift_card", "paypal"], rnd.randint(1, 3)):
        method_id = _unique(lambda s=source: f"{s}_{_digits(rnd, 7)}", used_ids)
        if source == "credit_card":
            record = {
                "source": source,
                "brand": rnd.choice(CARD_BRANDS),
                "last_four": _digits(rnd, 4),
                "id": method_id,
            }
        elif source == "gift_card":
            record = {"source": source, "balance": rnd.randint(0, 300), "id": method_id}
        else:
            record = {"source": source, "id": method_id}
        methods[method_id] = record
    return methods


def make_users(rnd: random.Random, used_ids: set[str]) -> dict[str, Any]:
    """N_USERS users with unique names, emails and ids."""
    users = {}
    names = rnd.sample(list(itertools.product(FIRST_NAMES, LAST_NAMES)), N_USERS)
    for first, last in names:
        user_id = _unique(lambda f=first, la=last: f"{f.lower()}_{la.lower()}_{_digits(rnd, 4)}", used_ids)
        users[user_id] = {
            "name": {"first_name": first, "last_name": last},
            "address": make_address(rnd),
            "email": f"{first.lower()}.{last.lower()}{_digits(rnd, 4)}@example.com",
            "payment_methods": make_payment_methods(rnd, used_ids),
            "orders": [],
        }
    return users


def make_order(
    rnd: random.Random, user_id: str, user: dict[str, Any], products: dict[str, Any], used_ids: set[str]
) -> dict[str, Any]:
    """One order of 1-4 items with a status, fulfillments and its payment history."""
    order_id = _unique(lambda: f"#W{_digits(rnd, 7)}", used_ids)
    items = []
    for product in rnd.sample(list(products.values()), rnd.randint(1, 4)):
        variant = product["variants"][rnd.choice(list(product["variants"]))]
        items.append(
            {
                "name": product["name"],
                "product_id": product["product_id"],
                "item_id": variant["item_id"],
                "price": variant["price"],
                "options": dict(variant["options"]),
            }
        )
    status = rnd.choices([s for s, _ in STATUSES], [w for _, w in STATUSES])[0]
    fulfillments = []
    if status != "pending":
        fulfillments = [{"tracking_id": [_digits(rnd, 12)], "item_ids": [i["item_id"] for i in items]}]
    method_id = rnd.choice(list(user["payment_methods"]))
    amount = round(sum(item["price"] for item in items), 2)
    history = [{"transaction_type": "payment", "amount": amount, "payment_method_id": method_id}]
    if status == "cancelled":
        history.append({"transaction_type": "refund", "amount": amount, "payment_method_id": method_id})
    address = dict(user["address"]) if rnd.random() < 0.8 else make_address(rnd)
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": address,
        "items": items,
        "fulfillments": fulfillments,
        "status": status,
        "payment_history": history,
    }


def generate_database(seed: int) -> dict[str, dict[str, Any]]:
    """The whole builtin retail database: products, users, then 1-4 orders per user."""
    rnd = random.Random(f"{seed}-database")
    used: set[str] = set()
    products = make_products(rnd, used)
    users = make_users(rnd, used)
    orders = {}
    for user_id, user in users.items():
        for _ in range(rnd.randint(1, 4)):
            order = make_order(rnd, user_id, user, products, used)
            orders[order["order_id"]] = order
            user["orders"].append(order["order_id"])
    return {"orders": orders, "products": products, "users": users}
