"""Airline tools (docs/spec/TAU_TOOLS.md §4): checks, messages and database changes in upstream's order."""

from __future__ import annotations

import copy
from collections.abc import Sized
from typing import Any

from userrl.envs.tau.database import EpisodeDB
from userrl.envs.tau.tools.base import Param, Tool, dumps
from userrl.envs.tau.tools.shared import get_user_details, record_json, shared_tools

#: Fixed answer of list_all_airports, in upstream's order.
AIRPORTS: dict[str, str] = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}
#: Ids that book_reservation tries in turn; the last one is used without checking (upstream).
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
BOOKING_TIME = "2024-05-15T15:00:00"
INSURANCE_PER_PASSENGER = 30
PRICE_PER_NONFREE_BAG = 50


# ---------------------------------------------------------------------- read-only tools


def get_reservation_details(db: EpisodeDB, reservation_id: str) -> str:
    """The reservation record as JSON (a missing one says 'user not found': an upstream quirk, kept)."""
    return record_json(db, "reservations", reservation_id, "user")


def list_all_airports(db: EpisodeDB) -> str:
    """The fixed airport-code-to-city map."""
    return dumps(AIRPORTS)


def _without_dates(flight: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flight.items() if k != "dates"}


def search_direct_flight(db: EpisodeDB, origin: str, destination: str, date: str) -> str:
    """Direct flights on a date with status 'available', with that date's seats and prices."""
    results = []
    for flight in db.values("flights"):
        if (
            flight["origin"] == origin
            and flight["destination"] == destination
            and date in flight["dates"]
            and flight["dates"][date]["status"] == "available"
        ):
            result = _without_dates(flight)
            result.update(flight["dates"][date])
            results.append(result)
    return dumps(results)


def search_onestop_flight(db: EpisodeDB, origin: str, destination: str, date: str) -> str:
    """Pairs of connecting flights; reproduces upstream's date arithmetic and second-leg quirks."""
    flights = list(db.values("flights"))
    results = []
    for flight1 in flights:
        if flight1["origin"] != origin:
            continue
        for flight2 in flights:
            if not (flight2["destination"] == destination and flight1["destination"] == flight2["origin"]):
                continue
            # Not zero-padded, and the month is fixed: faithful to upstream.
            date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in flight1["scheduled_arrival_time_est"] else date
            if flight1["scheduled_arrival_time_est"] > flight2["scheduled_departure_time_est"]:
                continue
            if (
                date in flight1["dates"]
                and date2 in flight2["dates"]
                and flight1["dates"][date]["status"] == "available"
                and flight2["dates"][date2]["status"] == "available"
            ):
                leg1 = _without_dates(flight1)
                leg1.update(flight1["dates"][date])
                leg1["date"] = date
                leg2 = _without_dates(flight2)
                leg2.update(flight2["dates"][date])  # `date`, not `date2`: upstream quirk
                leg2["date"] = date2
                results.append([leg1, leg2])
    return dumps(results)


# ---------------------------------------------------------------------- pricing shared by booking and updates


def _price_segment(db: EpisodeDB, segment: dict[str, Any], cabin: str, passengers: Sized) -> str | None:
    """Check one new segment and set its price, origin and destination; an error string when it fails."""
    flight_number = segment["flight_number"]
    if not db.contains("flights", flight_number):
        return f"Error: flight {flight_number} not found"
    flight = db.get("flights", flight_number)
    if segment["date"] not in flight["dates"]:
        return f"Error: flight {flight_number} not found on date {segment['date']}"
    on_date = flight["dates"][segment["date"]]
    if on_date["status"] != "available":
        return f"Error: flight {flight_number} not available on date {segment['date']}"
    # len() only here, as upstream: a bad passenger list fails after the flight checks.
    if on_date["available_seats"][cabin] < len(passengers):
        return f"Error: not enough seats on flight {flight_number}"
    segment["price"] = on_date["prices"][cabin]
    segment["origin"] = flight["origin"]
    segment["destination"] = flight["destination"]
    return None


# ---------------------------------------------------------------------- write tools


def book_reservation(
    db: EpisodeDB,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict[str, Any]],
    passengers: list[dict[str, Any]],
    payment_methods: list[dict[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> str:
    """Book a new reservation (id HATHAT, then HATHAU, then HATHAV) and charge its payment methods."""
    if not db.contains("users", user_id):
        return "Error: user not found"
    user = db.get("users", user_id)
    reservation_id = NEW_RESERVATION_IDS[0]
    if db.contains("reservations", reservation_id):
        reservation_id = NEW_RESERVATION_IDS[1]
        if db.contains("reservations", reservation_id):
            reservation_id = NEW_RESERVATION_IDS[2]
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": copy.deepcopy(flights),
        "passengers": passengers,
        "payment_history": payment_methods,
        "created_at": BOOKING_TIME,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    total_price: Any = 0
    for segment in reservation["flights"]:
        error = _price_segment(db, segment, cabin, passengers)
        if error:
            return error
        total_price += segment["price"] * len(passengers)
    if insurance == "yes":
        total_price += INSURANCE_PER_PASSENGER * len(passengers)
    total_price += PRICE_PER_NONFREE_BAG * nonfree_baggages

    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        if payment_id not in user["payment_methods"]:
            return f"Error: payment method {payment_id} not found"
        method = user["payment_methods"][payment_id]
        if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
            return f"Error: not enough balance in payment method {payment_id}"
    paid = sum(payment["amount"] for payment in payment_methods)
    if paid != total_price:
        return f"Error: payment amount does not add up, total price is {total_price}, but paid {paid}"

    user = db.mutable("users", user_id)
    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        # A certificate listed twice fails here with a KeyError after the first deletion (upstream edge case).
        if user["payment_methods"][payment_id]["source"] == "gift_card":
            user["payment_methods"][payment_id]["amount"] -= amount
        elif user["payment_methods"][payment_id]["source"] == "certificate":
            del user["payment_methods"][payment_id]
    db.insert("reservations", reservation_id, reservation)
    user["reservations"].append(reservation_id)
    return dumps(reservation)


def cancel_reservation(db: EpisodeDB, reservation_id: str) -> str:
    """Cancel a reservation: a negative entry per payment and status 'cancelled'; no balances change."""
    if not db.contains("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.mutable("reservations", reservation_id)
    refunds = [
        {"payment_id": payment["payment_id"], "amount": -payment["amount"]}
        for payment in reservation["payment_history"]
    ]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return dumps(reservation)


def _update_payment_error(method: dict[str, Any], total: Any) -> str | None:
    if method["source"] == "certificate":
        return "Error: certificate cannot be used to update reservation"
    if method["source"] == "gift_card" and method["amount"] < total:
        return "Error: gift card balance is not enough"
    return None


def update_reservation_flights(
    db: EpisodeDB, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
) -> str:
    """Replace a reservation's whole itinerary and charge (or refund) the price difference."""
    if not db.contains("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.get("reservations", reservation_id)
    passengers = reservation["passengers"]
    total_price: Any = 0
    flights = copy.deepcopy(flights)
    for segment in flights:
        same = [
            f
            for f in reservation["flights"]
            if f["flight_number"] == segment["flight_number"]
            and f["date"] == segment["date"]
            and cabin == reservation["cabin"]
        ]
        if same:
            # An unchanged segment keeps its booked price; no availability check.
            total_price += same[0]["price"] * len(passengers)
            segment["price"] = same[0]["price"]
            segment["origin"] = same[0]["origin"]
            segment["destination"] = same[0]["destination"]
            continue
        error = _price_segment(db, segment, cabin, passengers)
        if error:
            return error
        total_price += segment["price"] * len(passengers)
    total_price -= sum(f["price"] for f in reservation["flights"]) * len(passengers)

    methods = db.get("users", reservation["user_id"])["payment_methods"]
    if payment_id not in methods:
        return "Error: payment method not found"
    error = _update_payment_error(methods[payment_id], total_price)
    if error:
        return error

    if methods[payment_id]["source"] == "gift_card":
        db.mutable("users", reservation["user_id"])["payment_methods"][payment_id]["amount"] -= total_price
    reservation = db.mutable("reservations", reservation_id)
    reservation["flights"] = flights
    if total_price != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": total_price})
    # The reservation's cabin is not updated and seat counts are not touched (upstream).
    return dumps(reservation)


def update_reservation_baggages(
    db: EpisodeDB, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> str:
    """Set the bag counts and charge 50 per additional non-free bag."""
    if not db.contains("reservations", reservation_id):
        return "Error: reservation not found"
    reservation = db.get("reservations", reservation_id)
    total_price = PRICE_PER_NONFREE_BAG * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    methods = db.get("users", reservation["user_id"])["payment_methods"]
    if payment_id not in methods:
        return "Error: payment method not found"
    error = _update_payment_error(methods[payment_id], total_price)
    if error:
        return error
    reservation = db.mutable("reservations", reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    if methods[payment_id]["source"] == "gift_card":
        db.mutable("users", reservation["user_id"])["payment_methods"][payment_id]["amount"] -= total_price
    if total_price != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": total_price})
    return dumps(reservation)


def update_reservation_passengers(
    db: EpisodeDB, reservation_id: str, passengers: list[dict[str, Any]]
) -> str:
    """Replace the passenger list (same length required)."""
    if not db.contains("reservations", reservation_id):
        return "Error: reservation not found"
    if len(passengers) != len(db.get("reservations", reservation_id)["passengers"]):
        return "Error: number of passengers does not match"
    reservation = db.mutable("reservations", reservation_id)
    reservation["passengers"] = passengers
    return dumps(reservation)


def send_certificate(db: EpisodeDB, user_id: str, amount: float) -> str:
    """Add a certificate of the given amount to a user's payment methods."""
    if not db.contains("users", user_id):
        return "Error: user not found"
    for payment_id in CERTIFICATE_IDS:
        if payment_id not in db.get("users", user_id)["payment_methods"]:
            user = db.mutable("users", user_id)
            user["payment_methods"][payment_id] = {
                "source": "certificate",
                "amount": amount,
                "id": payment_id,
            }
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    # Upstream returns nothing here (and crashes); we report it and change nothing.
    return "Error: no certificate id left for this user"


# ---------------------------------------------------------------------- the catalogue

RESERVATION_ID = Param("reservation_id", "string", "The reservation id, such as 'ZFA04Y'.")
USER_ID = Param("user_id", "string", "The user id, such as 'sara_doe_496'.")
CABIN = Param("cabin", "string", "The cabin class: 'basic_economy', 'economy' or 'business'.")
PAYMENT_ID = Param(
    "payment_id",
    "string",
    "A payment id from the user's profile, such as 'credit_card_7815826', 'gift_card_7815826' or "
    "'certificate_7815826'.",
)
PASSENGERS = Param(
    "passengers",
    "array",
    "Every passenger, each as {'first_name': 'Noah', 'last_name': 'Brown', 'dob': '1990-01-01'}.",
)
FLIGHT_SEARCH = (
    Param("origin", "string", "The origin airport code, such as 'JFK'."),
    Param("destination", "string", "The destination airport code, such as 'LAX'."),
    Param("date", "string", "The date of the flight as 'YYYY-MM-DD', such as '2024-05-01'."),
)


def airline_tools() -> list[Tool]:
    """Every airline tool, in upstream's advertised (alphabetical) order."""
    tools = [
        Tool(
            "book_reservation",
            book_reservation,
            "Book a new reservation for a user and pay for it with one or more of the user's payment methods.",
            (
                USER_ID,
                Param("origin", "string", "The origin airport code, such as 'SFO'."),
                Param("destination", "string", "The destination airport code, such as 'JFK'."),
                Param("flight_type", "string", "'one_way' or 'round_trip'."),
                CABIN,
                Param(
                    "flights",
                    "array",
                    "Every flight segment, each as {'flight_number': 'HAT001', 'date': '2024-05-01'}.",
                ),
                PASSENGERS,
                Param(
                    "payment_methods",
                    "array",
                    "The payments, each as {'payment_id': 'credit_card_7815826', 'amount': 100}; the amounts "
                    "must add up to the total price.",
                ),
                Param("total_baggages", "integer", "The total number of bags in the reservation."),
                Param("nonfree_baggages", "integer", "How many of those bags are not free."),
                Param("insurance", "string", "Travel insurance: 'yes' or 'no'."),
            ),
            writes=True,
        ),
        Tool(
            "cancel_reservation",
            cancel_reservation,
            "Cancel a whole reservation.",
            (RESERVATION_ID,),
            writes=True,
        ),
        Tool(
            "get_reservation_details",
            get_reservation_details,
            "Get the details of a reservation.",
            (RESERVATION_ID,),
        ),
        Tool(
            "get_user_details",
            get_user_details,
            "Get the details of a user, including their reservations.",
            (USER_ID,),
        ),
        Tool("list_all_airports", list_all_airports, "List every airport code with its city."),
        Tool(
            "search_direct_flight",
            search_direct_flight,
            "Search direct flights between two airports on a date.",
            FLIGHT_SEARCH,
        ),
        Tool(
            "search_onestop_flight",
            search_onestop_flight,
            "Search connections with exactly one stop between two airports on a date.",
            FLIGHT_SEARCH,
        ),
        Tool(
            "send_certificate",
            send_certificate,
            "Send a certificate to a user as a goodwill gesture; be careful with this.",
            (USER_ID, Param("amount", "number", "The certificate amount.")),
            writes=True,
        ),
        Tool(
            "update_reservation_baggages",
            update_reservation_baggages,
            "Update the bag counts of a reservation; each additional non-free bag costs 50.",
            (
                RESERVATION_ID,
                Param("total_baggages", "integer", "The new total number of bags."),
                Param("nonfree_baggages", "integer", "The new number of non-free bags."),
                PAYMENT_ID,
            ),
            writes=True,
        ),
        Tool(
            "update_reservation_flights",
            update_reservation_flights,
            "Update the flights of a reservation and pay or get refunded the price difference.",
            (
                RESERVATION_ID,
                CABIN,
                Param(
                    "flights",
                    "array",
                    "Every flight segment of the WHOLE new itinerary, unchanged ones included, each as "
                    "{'flight_number': 'HAT001', 'date': '2024-05-01'}.",
                ),
                PAYMENT_ID,
            ),
            writes=True,
        ),
        Tool(
            "update_reservation_passengers",
            update_reservation_passengers,
            "Update the passengers of a reservation; the number of passengers cannot change.",
            (RESERVATION_ID, PASSENGERS),
            writes=True,
        ),
    ]
    tools.extend(shared_tools("reservation"))
    return sorted(tools, key=lambda tool: tool.name)
