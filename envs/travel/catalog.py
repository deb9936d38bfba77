"""Domain catalog of the Travel generator: places, option samplers and preference templates per aspect.

A preference is a predicate over the fields the agent sees, so a careful agent can always tell which
displayed options satisfy the elicited preferences. Every random draw goes through the `random.Random`
instance passed in (the generator seeds one per scenario); nothing here touches a global generator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Option = dict[str, Any]

# ---------------------------------------------------------------------------------------------- places

#: City -> (airport code, latitude, longitude). No city name contains a word of the search-judge keywords.
CITY_DATA: dict[str, tuple[str, float, float]] = {
    "New York": ("JFK", 40.6, -73.8),
    "San Francisco": ("SFO", 37.6, -122.4),
    "Los Angeles": ("LAX", 33.9, -118.4),
    "Chicago": ("ORD", 42.0, -87.9),
    "Seattle": ("SEA", 47.4, -122.3),
    "Boston": ("BOS", 42.4, -71.0),
    "Miami": ("MIA", 25.8, -80.3),
    "Denver": ("DEN", 39.9, -104.7),
    "Atlanta": ("ATL", 33.6, -84.4),
    "Toronto": ("YYZ", 43.7, -79.6),
    "Paris": ("CDG", 49.0, 2.5),
    "London": ("LHR", 51.5, -0.5),
    "Barcelona": ("BCN", 41.3, 2.1),
    "Rome": ("FCO", 41.8, 12.2),
    "Berlin": ("BER", 52.4, 13.5),
    "Amsterdam": ("AMS", 52.3, 4.8),
    "Lisbon": ("LIS", 38.8, -9.1),
    "Vienna": ("VIE", 48.1, 16.6),
    "Tokyo": ("HND", 35.6, 139.8),
    "Sydney": ("SYD", -33.9, 151.2),
}
CITIES: dict[str, str] = {city: data[0] for city, data in CITY_DATA.items()}


def direct_flight_hours(origin: str, destination: str) -> float:
    """Rough nonstop flying time: great-circle distance at 800 km/h plus half an hour."""
    _, lat1, lon1 = CITY_DATA[origin]
    _, lat2, lon2 = CITY_DATA[destination]
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    cos_angle = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    km = 6371 * math.acos(max(-1.0, min(1.0, cos_angle)))
    return round(km / 800 + 0.5, 1)


MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

AIRLINES: dict[str, str] = {
    "Delta": "DL",
    "United": "UA",
    "JetBlue": "B6",
    "Air France": "AF",
    "Lufthansa": "LH",
    "British Airways": "BA",
    "KLM": "KL",
    "Iberia": "IB",
    "Air Canada": "AC",
    "Qantas": "QF",
}
FLIGHT_AMENITIES = ("wifi", "meal", "checked bag", "power outlet", "entertainment", "snacks")
FLIGHT_SERVICES = {"extra legroom": 45, "priority boarding": 20, "seat selection": 15, "lounge access": 55}

HOTEL_WORDS_A = (
    "Grand",
    "Harbor",
    "Royal",
    "Golden",
    "Park",
    "City",
    "Riverside",
    "Summit",
    "Garden",
    "Central",
)
HOTEL_WORDS_B = ("Plaza", "Palace", "Inn", "Tower", "Lodge", "House", "Court", "View", "Gate", "Square")
ROOM_TYPES: dict[str, int] = {
    "Single Room": 1,
    "Standard Queen": 2,
    "Deluxe King": 2,
    "Twin Room": 2,
    "Triple Room": 3,
    "Junior Suite": 3,
    "Family Suite": 4,
}
HOTEL_AMENITIES = ("free wifi", "pool", "fitness center", "breakfast", "parking", "spa", "bar")
HOTEL_SERVICES = {"airport shuttle": 25, "laundry": 15, "late checkout": 30, "room service": 12}

APARTMENT_WORDS_A = (
    "Sunny",
    "Quiet",
    "Modern",
    "Cozy",
    "Bright",
    "Old Town",
    "Skyline",
    "Canal",
    "Garden",
    "Loft",
)
APARTMENT_WORDS_B = ("Apartment", "Residence", "Studios", "Home", "Retreat", "Suites")
APARTMENT_AMENITIES = ("wifi", "kitchen", "washing machine", "balcony", "air conditioning", "parking")
APARTMENT_SERVICES = {"early check-in": 20, "cleaning": 35, "airport pickup": 45, "late checkout": 20}

#: (brand, model, categories, seats, daily price in USD)
CAR_MODELS: tuple[tuple[str, str, tuple[str, ...], int, int], ...] = (
    ("Toyota", "Corolla", ("sedan",), 5, 45),
    ("Toyota", "RAV4", ("SUV",), 5, 62),
    ("Toyota", "Prius", ("hybrid", "compact"), 5, 50),
    ("Honda", "Civic", ("sedan", "compact"), 5, 44),
    ("Honda", "Odyssey", ("minivan",), 8, 80),
    ("Ford", "Mustang", ("convertible", "sports"), 4, 90),
    ("Ford", "Explorer", ("SUV",), 7, 78),
    ("Tesla", "Model 3", ("electric", "sedan"), 5, 85),
    ("Tesla", "Model Y", ("electric", "SUV"), 7, 95),
    ("Hyundai", "Ioniq 5", ("electric", "SUV"), 5, 75),
    ("Kia", "Sorento", ("hybrid", "SUV"), 7, 70),
    ("Volkswagen", "Golf", ("compact",), 5, 40),
    ("BMW", "3 Series", ("sedan", "luxury"), 5, 88),
    ("Mini", "Cooper", ("convertible", "compact"), 4, 60),
    ("Chevrolet", "Tahoe", ("SUV",), 8, 92),
)
CAR_SERVICES = {"child seat": 10, "GPS navigation": 8, "additional driver": 12, "roadside assistance": 9}

RESTAURANT_WORDS_A = (
    "The Golden",
    "The Blue",
    "Little",
    "The Olive",
    "Casa",
    "The Copper",
    "Maison",
    "The Silver",
)
RESTAURANT_WORDS_B = ("Spoon", "Table", "Garden", "Kitchen", "Lantern", "Fork", "Bistro", "Oven", "Terrace")
CUISINES = (
    "Italian", "Japanese", "Mexican", "French", "Indian", "Thai",
    "Chinese", "Spanish", "Greek", "Korean", "Vietnamese", "Lebanese",
)  # fmt: skip
RESTAURANT_TAGS = (
    "vegetarian-friendly", "outdoor seating", "quiet", "takes reservations",
    "family-friendly", "live music", "wheelchair accessible", "late night",
)  # fmt: skip


@dataclass
class Trip:
    """One scenario's trip: places, dates, party and the per-aspect search arguments."""

    origin: str
    destination: str
    travelers: int
    nights: int
    flight_hours: float
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- samplers


def _chance(rnd: random.Random, p: float) -> bool:
    return rnd.random() < p


def _subset(rnd: random.Random, items: tuple[str, ...], p: float) -> list[str]:
    return [item for item in items if _chance(rnd, p)]


def _hub_choices(trip: Trip, k: int = 6) -> list[str]:
    """The k layover cities with the smallest detour between the trip's cities."""
    others = [c for c in CITIES if c not in (trip.origin, trip.destination)]

    def detour(hub: str) -> float:
        return direct_flight_hours(trip.origin, hub) + direct_flight_hours(hub, trip.destination)

    return sorted(others, key=detour)[:k]


def sample_flight(rnd: random.Random, trip: Trip) -> Option:
    """A flight with 0-2 layovers at cities near the way; leg times follow the distances."""
    legs = rnd.choices([1, 2, 3], [4, 4, 2])[0]
    hubs = rnd.sample(_hub_choices(trip), legs - 1)
    if legs == 3 and direct_flight_hours(trip.origin, hubs[1]) < direct_flight_hours(trip.origin, hubs[0]):
        hubs.reverse()  # visit the nearer hub first
    cities = [trip.origin, *hubs, trip.destination]
    path = [CITIES[c] for c in cities]
    time: list[float] = []
    for i in range(legs):
        if i:
            time.append(round(rnd.uniform(0.7, 5.0), 1))
        time.append(round(direct_flight_hours(cities[i], cities[i + 1]) * rnd.uniform(0.95, 1.1), 1))
    airline = rnd.choice(list(AIRLINES))
    company = [airline if _chance(rnd, 0.6) else rnd.choice(list(AIRLINES)) for _ in range(legs)]
    amenities = _subset(rnd, FLIGHT_AMENITIES, 0.5)
    service = {k: v for k, v in FLIGHT_SERVICES.items() if _chance(rnd, 0.45)}
    if "checked bag" not in amenities and _chance(rnd, 0.6):
        service["checked bag"] = 35
    cost = (90 + 85 * trip.flight_hours) * rnd.uniform(0.6, 1.8) * (0.88 ** (legs - 1))
    return {
        "path": path,
        "time": time,
        "company": company,
        "flight_number": [f"{AIRLINES[c]}{rnd.randint(100, 2999)}" for c in company],
        "cost": int(round(cost / 5.0) * 5),
        "amenities": amenities,
        "service": service,
    }


def sample_hotel(rnd: random.Random, trip: Trip) -> Option:
    """A hotel with 2-3 room types, each priced for the whole stay."""
    rating = round(rnd.uniform(5.5, 9.8), 1)
    quality = 0.7 + (rating - 5.5) / 6
    rooms = rnd.sample(list(ROOM_TYPES), rnd.randint(2, 3))
    rooms.sort(key=list(ROOM_TYPES).index)
    cost = {
        r: int(round((55 + 35 * ROOM_TYPES[r]) * quality * rnd.uniform(0.85, 1.2) * trip.nights / 5.0) * 5)
        for r in rooms
    }
    return {
        "name": f"{rnd.choice(HOTEL_WORDS_A)} {rnd.choice(HOTEL_WORDS_B)} Hotel",
        "room": {r: ROOM_TYPES[r] for r in rooms},
        "cost": cost,
        "rating": rating,
        "amenities": _subset(rnd, HOTEL_AMENITIES, 0.5),
        "service": {k: v for k, v in HOTEL_SERVICES.items() if _chance(rnd, 0.45)},
    }


def sample_apartment(rnd: random.Random, trip: Trip) -> Option:
    """An apartment with a bed/bath code such as 2B1B and a whole-stay price."""
    beds = rnd.randint(1, 4)
    baths = rnd.randint(1, min(3, beds + 1))
    rating = round(rnd.uniform(6.0, 9.9), 1)
    cost = (50 + 40 * beds + 20 * baths) * rnd.uniform(0.7, 1.5) * trip.nights
    return {
        "name": f"{rnd.choice(APARTMENT_WORDS_A)} {rnd.choice(APARTMENT_WORDS_B)}",
        "room": f"{beds}B{baths}B",
        "capacity": max(beds, 2 * beds + rnd.choice([-1, 0, 0, 1])),
        "cost": int(round(cost / 5.0) * 5),
        "rating": rating,
        "amenities": _subset(rnd, APARTMENT_AMENITIES, 0.5),
        "service": {k: v for k, v in APARTMENT_SERVICES.items() if _chance(rnd, 0.45)},
    }


def sample_rental_car(rnd: random.Random, trip: Trip) -> Option:
    """A rental car priced for the whole rental period, with insurance options and paid services."""
    brand, model, categories, seats, daily = rnd.choice(CAR_MODELS)
    days = max(1, trip.nights)
    insurance = {"basic": 12 * days}
    if _chance(rnd, 0.5):
        insurance["full coverage"] = 28 * days
    if _chance(rnd, 0.4):
        insurance["theft protection"] = 9 * days
    # Electric cars have no gearbox to choose; the others come either way.
    transmission = "automatic" if "electric" in categories or _chance(rnd, 0.6) else "manual"
    return {
        "brand": brand,
        "model": model,
        "categories": [*categories, transmission],
        "seats": seats,
        "cost": int(round(daily * days * rnd.uniform(0.75, 1.35) / 5.0) * 5),
        "insurance": insurance,
        "service": {k: v * days for k, v in CAR_SERVICES.items() if _chance(rnd, 0.45)},
    }


def sample_restaurant(rnd: random.Random, trip: Trip) -> Option:
    """A restaurant with an expected price per person, a rating, review counts per star and tags."""
    rating = round(rnd.uniform(5.0, 9.8), 1)
    total = rnd.randint(20, 2500)
    top = (rating - 5.0) / 4.8
    weights = [
        0.05 + 0.6 * top,
        0.25,
        0.3 * (1 - top) + 0.05,
        0.1 * (1 - top) + 0.02,
        0.08 * (1 - top) + 0.01,
    ]
    norm = sum(weights)
    counts = [int(total * w / norm) for w in weights]
    return {
        "name": f"{rnd.choice(RESTAURANT_WORDS_A)} {rnd.choice(RESTAURANT_WORDS_B)}",
        "cuisine": rnd.choice(CUISINES),
        "expectation": rnd.randint(12, 110),
        "rating": rating,
        "reviews": {str(5 - i): c for i, c in enumerate(counts)},
        "tags": _subset(rnd, RESTAURANT_TAGS, 0.45),
    }


SAMPLERS: dict[str, Callable[[random.Random, Trip], Option]] = {
    "flight": sample_flight,
    "hotel": sample_hotel,
    "apartment": sample_apartment,
    "rental_car": sample_rental_car,
    "restaurant": sample_restaurant,
}

# ---------------------------------------------------------------------------------------------- preferences


@dataclass
class PreferenceSpec:
    """One concrete hidden preference: its texts, its check, and (hotel rooms) which rooms it allows."""

    key: str
    aspect: str
    subcategory: str
    text: str
    implicit: str
    check: Callable[[Option], bool]
    room_ok: Callable[[str, int], bool] | None = None

    def entry(self) -> list[str]:
        """The schema's preference entry [aspect, subcategory, preference_text, implicit_elicitation_text]."""
        return [self.aspect, self.subcategory, self.text, self.implicit]


Template = Callable[[random.Random, Trip], PreferenceSpec]


def _layovers(option: Option) -> list[float]:
    return option["time"][1::2]


def _flight_templates() -> dict[str, Template]:
    def stops(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        if _chance(rnd, 0.5):
            return PreferenceSpec(
                "stops", "flight", "number of stops", "I only want a direct flight with no stops.",
                "Changing planes always stresses me out, so I'd rather board once and get off at my destination.",
                lambda o: len(o["path"]) == 2,
            )  # fmt: skip
        return PreferenceSpec(
            "stops", "flight", "number of stops", "The flight can have at most one stop.",
            "One connection is fine, but I really can't face a journey with two or more plane changes.",
            lambda o: len(o["path"]) <= 3,
        )  # fmt: skip

    def duration(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        hours = int(round(trip.flight_hours * rnd.uniform(1.2, 1.5))) + 1
        return PreferenceSpec(
            "duration", "flight", "total travel time",
            f"The total travel time, layovers included, must be at most {hours} hours.",
            f"I have an appointment soon after I land, so I can't spend more than {hours} hours getting there, "
            "waiting at airports included.",
            lambda o: sum(o["time"]) <= hours,
        )  # fmt: skip

    def airline(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        avoid = rnd.choice(list(AIRLINES))
        return PreferenceSpec(
            "airline", "flight", "airline choice", f"I do not want to fly with {avoid} on any leg.",
            f"The last time I flew with {avoid} they lost my luggage, and I'd rather not go through that again.",
            lambda o: avoid not in o["company"],
        )  # fmt: skip

    def wifi(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "wifi", "flight", "onboard wifi", "Free wifi on board is a must.",
            "I will have to answer work emails during the whole flight, and I refuse to pay extra just to get online.",
            lambda o: "wifi" in o["amenities"],
        )  # fmt: skip

    def baggage(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "baggage", "flight", "checked baggage", "A checked bag must be included for free.",
            "I'm bringing a big suitcase, and I don't want to pay a baggage fee on top of the ticket.",
            lambda o: "checked bag" in o["amenities"],
        )  # fmt: skip

    def meal(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "meal", "flight", "inflight meal", "A free meal should be served on board.",
            "I never manage to eat before I leave for the airport, so I count on being fed on the plane "
            "without paying extra.",
            lambda o: "meal" in o["amenities"],
        )  # fmt: skip

    def legroom(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "legroom", "flight", "extra legroom", "The airline must offer extra legroom seats, even if paid.",
            "I'm quite tall, and my knees hurt in a normal seat unless I can buy some more space.",
            lambda o: "extra legroom" in o["service"],
        )  # fmt: skip

    def layover(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "layover", "flight", "layover length", "Any layover must be at most 2 hours long.",
            "Long waits at airports drive me crazy; if I have to change planes I want to get going again quickly.",
            lambda o: all(h <= 2.0 for h in _layovers(o)),
        )  # fmt: skip

    return {f.__name__: f for f in (stops, duration, airline, wifi, baggage, meal, legroom, layover)}


def _has(field_name: str, item: str) -> Callable[[Option], bool]:
    return lambda o: item in o[field_name]


def _hotel_templates() -> dict[str, Template]:
    def rating(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        low = rnd.choice([7.5, 8.0, 8.5])
        return PreferenceSpec(
            "rating", "hotel", "guest rating", f"The hotel needs a guest rating of at least {low}.",
            f"I have read too many horror stories, so I only trust places that guests rate {low} out of 10 or better.",
            lambda o: o["rating"] >= low,
        )  # fmt: skip

    def capacity(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        need = rnd.choice([3, 4])
        return PreferenceSpec(
            "capacity", "hotel", "room capacity", f"One room must sleep at least {need} people.",
            f"My sister's family may join us at the last minute, so I want one room where {need} people could sleep.",
            lambda o: any(c >= need for c in o["room"].values()),
            room_ok=lambda _name, cap: cap >= need,
        )  # fmt: skip

    def pool(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "pool", "hotel", "swimming pool", "The hotel must have a swimming pool.",
            "My morning laps are the one habit I never skip, even when I travel.",
            _has("amenities", "pool"),
        )  # fmt: skip

    def breakfast(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "breakfast", "hotel", "breakfast included", "Breakfast must be included in the stay.",
            "I can't function before I've eaten, and I don't want to hunt for a cafe every morning.",
            _has("amenities", "breakfast"),
        )  # fmt: skip

    def shuttle(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "shuttle", "hotel", "airport shuttle", "The hotel should offer an airport shuttle; paying for it is fine.",
            "After a long journey I'd rather not deal with taxis; a ride straight from the airport would be ideal.",
            _has("service", "airport shuttle"),
        )  # fmt: skip

    def fitness(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "fitness", "hotel", "fitness center", "The hotel needs a fitness center.",
            "I'm training for a marathon and can't skip my daily workout on the treadmill.",
            _has("amenities", "fitness center"),
        )  # fmt: skip

    def parking(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "parking", "hotel", "parking space", "Parking must be available at the hotel.",
            "I'll have a vehicle with me, and searching the streets for a spot every night would be a nightmare.",
            _has("amenities", "parking"),
        )  # fmt: skip

    return {f.__name__: f for f in (rating, capacity, pool, breakfast, shuttle, fitness, parking)}


def _bed_bath(option: Option) -> tuple[int, int]:
    beds, baths = option["room"].rstrip("B").split("B")
    return int(beds), int(baths)


def _apartment_templates() -> dict[str, Template]:
    def bedrooms(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        need = rnd.choice([2, 3])
        return PreferenceSpec(
            "bedrooms", "apartment", "bedroom count", f"The apartment needs at least {need} bedrooms.",
            f"We all sleep badly when we share, so I want {need} separate rooms to sleep in.",
            lambda o: _bed_bath(o)[0] >= need,
        )  # fmt: skip

    def bathrooms(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "bathrooms", "apartment", "bathroom count", "The apartment needs at least 2 bathrooms.",
            "Mornings get chaotic when everyone waits for a single shower.",
            lambda o: _bed_bath(o)[1] >= 2,
        )  # fmt: skip

    def capacity(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        need = rnd.choice([4, 5, 6])
        return PreferenceSpec(
            "capacity", "apartment", "guest capacity", f"The apartment must accommodate at least {need} guests.",
            f"Some cousins may stay over a few nights, so the place should be able to host {need} of us.",
            lambda o: o["capacity"] >= need,
        )  # fmt: skip

    def laundry(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "laundry", "apartment", "washing machine", "The apartment must have a washing machine.",
            "I'm packing light for the whole stay, so I'll need to do my laundry there.",
            _has("amenities", "washing machine"),
        )  # fmt: skip

    def kitchen(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "kitchen", "apartment", "full kitchen", "The apartment must have a kitchen.",
            "I follow a strict diet and want to cook my own food instead of eating out every day.",
            _has("amenities", "kitchen"),
        )  # fmt: skip

    def rating(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        low = rnd.choice([8.0, 8.5, 9.0])
        return PreferenceSpec(
            "rating", "apartment", "apartment rating", f"The apartment should have a rating of at least {low}.",
            f"I only book places that previous guests rate {low} out of 10 or better; I've been burned before.",
            lambda o: o["rating"] >= low,
        )  # fmt: skip

    def balcony(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "balcony", "apartment", "private balcony", "The apartment should have a balcony.",
            "My favourite part of a trip is having my morning coffee outside, looking over the city.",
            _has("amenities", "balcony"),
        )  # fmt: skip

    def checkin(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "checkin", "apartment", "early check-in", "Early check-in must be possible, even for a fee.",
            "I arrive at dawn, and I really don't want to wander around with my luggage until the afternoon.",
            _has("service", "early check-in"),
        )  # fmt: skip

    def cooling(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "cooling", "apartment", "air conditioning", "The apartment must have air conditioning.",
            "I can't sleep at all when the bedroom gets warm at night.",
            _has("amenities", "air conditioning"),
        )  # fmt: skip

    return {
        f.__name__: f
        for f in (bedrooms, bathrooms, capacity, laundry, kitchen, rating, balcony, checkin, cooling)
    }


def _rental_car_templates() -> dict[str, Template]:
    def seats(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        need = rnd.choice([5, 7])
        return PreferenceSpec(
            "seats", "rental_car", "seat count", f"The car needs at least {need} seats.",
            f"We'll be picking up friends on the way, so there will be {need} of us in the car at times.",
            lambda o: o["seats"] >= need,
        )  # fmt: skip

    def vehicle(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        kind, noun, hint = rnd.choice([
            ("SUV", "an SUV", "We'll be driving on rough mountain roads, so I want something tall and sturdy."),
            ("electric", "an electric car", "I try hard to keep my carbon footprint low and would rather not burn any fuel."),
            ("hybrid", "a hybrid", "Fuel is pricey and I'll drive a lot, so I want something that sips petrol."),
            ("convertible", "a convertible", "I've always dreamed of driving along the coast with the roof down."),
        ])  # fmt: skip
        return PreferenceSpec(
            "vehicle", "rental_car", "vehicle type", f"The car must be {noun}.",
            hint, lambda o: kind in o["categories"],
        )  # fmt: skip

    def transmission(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "transmission", "rental_car", "automatic transmission", "The car must have an automatic transmission.",
            "I never learned to drive with a clutch pedal.",
            _has("categories", "automatic"),
        )  # fmt: skip

    def brand(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        avoid = rnd.choice(sorted({m[0] for m in CAR_MODELS}))
        return PreferenceSpec(
            "brand", "rental_car", "car brand", f"I do not want a car made by {avoid}.",
            f"My last {avoid} broke down in the middle of nowhere, and I've sworn off that make since.",
            lambda o: o["brand"] != avoid,
        )  # fmt: skip

    def insurance(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "insurance", "rental_car", "insurance coverage", "A full coverage insurance option must be offered.",
            "I got a huge bill for a tiny scratch once, so I want to be protected against everything this time.",
            _has("insurance", "full coverage"),
        )  # fmt: skip

    def child(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "child", "rental_car", "child seat", "The rental company must offer a child seat.",
            "My three-year-old is coming along, and I can't carry our own booster on the plane.",
            _has("service", "child seat"),
        )  # fmt: skip

    def gps(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "gps", "rental_car", "GPS navigation", "GPS navigation must be available for the car.",
            "My phone has no data plan abroad, so I'd be lost on those roads without a built-in map.",
            _has("service", "GPS navigation"),
        )  # fmt: skip

    def driver(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "driver", "rental_car", "additional driver", "An additional driver must be allowed.",
            "My partner and I want to take turns at the wheel on the long drives.",
            _has("service", "additional driver"),
        )  # fmt: skip

    return {f.__name__: f for f in (seats, vehicle, transmission, brand, insurance, child, gps, driver)}


def _restaurant_templates() -> dict[str, Template]:
    def cuisine(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        liked = sorted(rnd.sample(CUISINES, 3))
        text = f"The cuisine must be {liked[0]}, {liked[1]} or {liked[2]}."
        return PreferenceSpec(
            "cuisine", "restaurant", "cuisine type", text,
            f"I've been craving {liked[0]}, {liked[1]} or {liked[2]} food for weeks now.",
            lambda o: o["cuisine"] in liked,
        )  # fmt: skip

    def rating(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        low = rnd.choice([7.5, 8.0, 8.5])
        return PreferenceSpec(
            "rating", "restaurant", "restaurant rating", f"The restaurant needs a rating of at least {low}.",
            f"It's a special evening for us, and I don't want to gamble on a place rated below {low} out of 10.",
            lambda o: o["rating"] >= low,
        )  # fmt: skip

    def vegetarian(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "vegetarian", "restaurant", "vegetarian dishes", "The restaurant must be vegetarian-friendly.",
            "My partner doesn't eat meat, so we need a place where they can order a proper meal.",
            _has("tags", "vegetarian-friendly"),
        )  # fmt: skip

    def outdoor(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "outdoor", "restaurant", "outdoor seating", "The restaurant should have outdoor seating.",
            "On a warm evening I'd hate to be stuck inside; eating under the open sky is half the fun.",
            _has("tags", "outdoor seating"),
        )  # fmt: skip

    def quiet(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "quiet", "restaurant", "quiet atmosphere", "The restaurant should be quiet.",
            "It's a business conversation, so we need to hear each other without shouting.",
            _has("tags", "quiet"),
        )  # fmt: skip

    def reviews(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        need = rnd.choice([300, 500, 800])
        return PreferenceSpec(
            "reviews", "restaurant", "review count", f"The restaurant should have at least {need} reviews in total.",
            f"I only trust places that lots of people have tried; a few dozen opinions mean nothing, I want {need} or more.",
            lambda o: sum(o["reviews"].values()) >= need,
        )  # fmt: skip

    def reservations(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "reservations", "restaurant", "table reservations", "The restaurant must take reservations.",
            "I hate queueing for a table, so I want our spot guaranteed in advance.",
            _has("tags", "takes reservations"),
        )  # fmt: skip

    def access(rnd: random.Random, trip: Trip) -> PreferenceSpec:
        return PreferenceSpec(
            "access", "restaurant", "wheelchair access", "The restaurant must be wheelchair accessible.",
            "My father is joining us, and he uses a wheelchair these days.",
            _has("tags", "wheelchair accessible"),
        )  # fmt: skip

    return {
        f.__name__: f for f in (cuisine, rating, vegetarian, outdoor, quiet, reviews, reservations, access)
    }


TEMPLATES: dict[str, dict[str, Template]] = {
    "flight": _flight_templates(),
    "hotel": _hotel_templates(),
    "apartment": _apartment_templates(),
    "rental_car": _rental_car_templates(),
    "restaurant": _restaurant_templates(),
}


def effective_cost(aspect: str, option: Option, prefs: list[PreferenceSpec]) -> float:
    """The price the cheapest-option rule compares: a hotel's cheapest room allowed by the preferences."""
    if aspect == "hotel":
        allowed = [
            cost
            for name, cost in option["cost"].items()
            if all(p.room_ok is None or p.room_ok(name, option["room"][name]) for p in prefs)
        ]
        return float(min(allowed)) if allowed else float("inf")
    if aspect == "restaurant":
        return float(option["expectation"])
    return float(option["cost"])
