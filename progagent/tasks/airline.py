"""Airline domain: a regional airline's flights, passengers, bookings and vouchers; delay logs are files."""

from __future__ import annotations

import datetime
import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

AIRPORTS = ("LIS", "OPO", "MAD", "LYS", "BER", "OSL", "KRK", "DUB")   # G.CITIES' airports; LIS is the hub
AIRCRAFT = (("Caravan", 9), ("King Air", 11), ("Twin Otter", 19))
FLIGHT_STATUSES = ("scheduled", "departed", "cancelled")
BOOKING_STATUSES = ("confirmed", "checked_in", "cancelled")
FARES = ("economy", "flex", "business")
TIERS = ("none", "silver", "gold")
WEEK = ("2024-07-01", "2024-07-08")   # overbooked_week: departures on or after / before

SCHEMA = """
CREATE TABLE flights (id INTEGER PRIMARY KEY, code TEXT, origin TEXT, destination TEXT, date TEXT, dep_time TEXT,
                      aircraft TEXT, capacity INTEGER, status TEXT, gate TEXT, delay_min INTEGER,
                      busy INTEGER);
CREATE TABLE passengers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, tier TEXT, miles INTEGER);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, passenger_id INTEGER, flight_id INTEGER, fare_class TEXT,
                       price REAL, status TEXT);
CREATE TABLE vouchers (id INTEGER PRIMARY KEY AUTOINCREMENT, passenger_id INTEGER, amount REAL, reason TEXT);
CREATE INDEX bookings_flight ON bookings(flight_id);
"""


def _hm(minutes: int) -> str:
  return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _mins(hm: str) -> int:
  return int(hm[:2]) * 60 + int(hm[3:])


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  start = datetime.date(2024, 6, 20)
  routes = [(a, b) for s in AIRPORTS[1:] for a, b in (("LIS", s), (s, "LIS"))]
  flights = []

  def add_flight(date: str, minute: int, route=None) -> dict:
    o, d = route or rng.choice(routes)
    ac, cap = rng.choice(AIRCRAFT)
    fl = {"id": len(flights) + 1, "code": f"PA{1000 + len(flights)}", "origin": o, "destination": d, "date": date,
          "dep_time": _hm(minute), "aircraft": ac, "capacity": cap,
          "status": "departed" if date < B.TODAY else "scheduled", "gate": f"{rng.choice('ABC')}{rng.randint(1, 20)}",
          "delay_min": 0, "busy": rng.choice((0, 1, 1, 2))}
    flights.append(fl)
    return fl

  for _ in range(110 * f):
    date = (start + datetime.timedelta(days=rng.randint(0, 41))).isoformat()
    if date == B.TODAY:
      date = "2024-07-02"
    add_flight(date, rng.randrange(6 * 12, 22 * 12) * 5)
  # Today's departures: morning ones and evening ones; one morning flight has the longest delay.
  n_today = rng.randint(5, 9) * f
  today = [add_flight(B.TODAY, rng.randrange(6 * 12, 12 * 12) * 5 if i % 2 == 0
                      else rng.randrange(15 * 12, 21 * 12) * 5) for i in range(n_today)]
  for fl in today:
    fl["delay_min"] = rng.choice((0, 0, rng.randint(5, 75)))
  worst = rng.choice([fl for fl in today if fl["dep_time"] < "12:00"])
  worst["delay_min"], worst["busy"] = rng.randint(90, 170), rng.randint(1, 2)
  rng.shuffle(flights)   # ids and codes in no particular order
  for i, (fl, num) in enumerate(zip(flights, rng.sample(range(100, 10_000), len(flights)))):
    fl["id"], fl["code"] = i + 1, f"PA{num}"
  # Future cancellations: flights with a later scheduled flight on the same route.
  later = {}
  for fl in sorted(flights, key=lambda x: (x["date"], x["dep_time"], x["id"])):
    if fl["date"] > B.TODAY:
      later.setdefault((fl["origin"], fl["destination"]), []).append(fl)
  cands = [fl for seq in later.values() for fl in seq[:-1]]
  cancelled = rng.sample(cands, rng.randint(2, 4) * f)
  for fl in cancelled:
    fl["status"] = "cancelled"
  # Past cancellations too (their bookings are not to be rebooked).
  for fl in rng.sample([x for x in flights if x["date"] < B.TODAY], f):
    fl["status"] = "cancelled"

  names = G.unique_names(rng, 200 * f)
  G.insert_rows(ctx, "passengers", [{"id": i + 1, "name": nm, "email": G.email_of(nm, i + 1, "mail.example"),
                                     "tier": rng.choices(TIERS, (6, 3, 1))[0], "miles": rng.randint(0, 90_000)}
                                    for i, nm in enumerate(names)])
  week = [fl for fl in flights if WEEK[0] <= fl["date"] < WEEK[1] and fl["status"] == "scheduled"]
  over = {fl["id"] for fl in rng.sample(week, rng.randint(2, 4))}
  full = {fl["id"] for fl in rng.sample([fl for fl in week if fl["id"] not in over], 2)}
  bookings = []

  def book(fl, status, fare=None):
    fare = fare or rng.choices(FARES, (6, 3, 1))[0]
    price = round(rng.uniform(40, 160) * {"economy": 1, "flex": 1.6, "business": 3.2}[fare], 2)
    bookings.append({"id": 5001 + len(bookings), "passenger_id": rng.randint(1, 200 * f), "flight_id": fl["id"],
                     "fare_class": fare, "price": price, "status": status})

  for fl in flights:
    cap = fl["capacity"]
    active = (cap + rng.randint(1, 3) if fl["id"] in over else cap if fl["id"] in full
              else rng.randint(max(1, cap // 3), cap - 1))
    n_cancel = rng.randint(1, 3) if fl["id"] in full or fl in cancelled else rng.choice((0, 0, 0, 1))
    for i in range(active):   # a cancelled flight has checked-in passengers too
      book(fl, "checked_in" if fl["date"] <= B.TODAY or rng.random() < 0.15 or i == 0 and fl in cancelled
           else "confirmed")
    for _ in range(n_cancel):
      book(fl, "cancelled")
  # The revenue task's trap: a cancelled business booking on a July LIS-OSL flight.
  lis_osl = [fl for fl in flights if (fl["origin"], fl["destination"]) == ("LIS", "OSL") and fl["date"] >= "2024-07-01"]
  book(rng.choice(lis_osl), "cancelled", "business")
  for fl in rng.sample(lis_osl, min(2, len(lis_osl))):
    book(fl, "confirmed", "business")
  G.write_docs(ctx, rng, "airline", ["fare_rules", "baggage", "punctuality", "crew", "loyalty"])
  # Delay logs of past departures in three formats (minutes in CSV, seconds in JSON, free text).
  past = [fl for fl in flights if fl["status"] == "departed"]
  rng.shuffle(past)
  lis = [fl for fl in past if fl["origin"] == "LIS"]
  k = B.n_data_files(f)
  picks = lis[:2 * f] + [fl for fl in past if fl not in lis[:2 * f]][:5 * k - 2 * f]
  rng.shuffle(picks)
  for j in range(k):
    part = picks[5 * j:5 * j + 5]
    delays = [rng.randint(3, 150) for _ in part]
    fmt = (j + rng.randrange(3)) % 3
    stem = f"operations/delay_logs/log_{j + 1:03d}"
    if fmt == 0:
      ctx.write(f"{stem}.csv", "flight,date,delay_min\n" + "".join(
          f"{fl['code']},{fl['date']},{d}\n" for fl, d in zip(part, delays)))
    elif fmt == 1:
      ctx.write(f"{stem}.json", json.dumps({"logged_by": rng.choice(names), "entries": [
          {"flight": fl["code"], "date": fl["date"], "delay_s": d * 60} for fl, d in zip(part, delays)]}, indent=1))
    else:
      ctx.write(f"{stem}.txt", "Departure delay log\n\n" + "".join(
          f"{fl['code']} on {fl['date']}: left {d // 60} h {d % 60} min late\n" for fl, d in zip(part, delays)))
  _plant_distractors(rng, flights, add_flight, book, worst)
  G.insert_rows(ctx, "flights", flights)
  G.insert_rows(ctx, "bookings", bookings)


def _plant_distractors(rng, flights, add_flight, book, worst) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): a flight tomorrow whose delay, already announced, is longer
  than today's longest (longest_delay_today without 'today'); business bookings on a July flight to OSL from
  another airport and on a June LIS-OSL flight (business_revenue_lis_osl without 'from LIS' / 'July'); an
  overbooked flight cancelled in the week and an overbooked scheduled flight after it (overbooked_week without
  'scheduled' / the week)."""
  codes = {fl["code"] for fl in flights}

  def new_flight(date, route, status="scheduled"):
    fl = add_flight(date, rng.randrange(6 * 12, 22 * 12) * 5, route)
    while fl["code"] in codes:
      fl["code"] = f"PA{rng.randint(100, 9999)}"
    codes.add(fl["code"])
    fl["status"] = status
    return fl

  routes = sorted({(fl["origin"], fl["destination"]) for fl in flights})
  tomorrow = new_flight("2024-07-02", rng.choice(routes))
  tomorrow["delay_min"] = worst["delay_min"] + rng.randint(10, 60)
  for _ in range(rng.randint(2, tomorrow["capacity"] - 1)):
    book(tomorrow, "confirmed")
  elsewhere = new_flight(f"2024-07-{rng.randint(8, 31):02d}", (rng.choice(AIRPORTS[1:5] + AIRPORTS[6:]), "OSL"))
  june = new_flight(f"2024-06-{rng.randint(20, 30):02d}", ("LIS", "OSL"), "departed")
  for fl, status in ((elsewhere, "confirmed"), (june, "checked_in")):
    for _ in range(rng.randint(1, 2)):
      book(fl, status, "business")
  later = rng.choice([fl for fl in flights if fl["status"] == "scheduled" and fl["date"] >= WEEK[1]])
  cancelled = new_flight(f"2024-07-0{rng.randint(2, 7)}", (later["origin"], later["destination"]), "cancelled")
  after = new_flight(f"2024-07-{rng.randint(8, 31):02d}", rng.choice(routes))
  for fl in (cancelled, after):
    for _ in range(fl["capacity"] + rng.randint(1, 3)):
      book(fl, "confirmed")


# -- tools

def _get_flight(ctx, flight_id):
  r = ctx.q1("SELECT id, code, origin, destination, date, dep_time, aircraft, capacity, status FROM flights "
             "WHERE id = ?", flight_id)
  if r is None:
    raise ToolError(f"no flight with id {flight_id}")
  return r


def _get_passenger(ctx, passenger_id):
  r = ctx.q1("SELECT * FROM passengers WHERE id = ?", passenger_id)
  if r is None:
    raise ToolError(f"no passenger with id {passenger_id}")
  return r


def _flight_status(ctx, flight_id):
  _get_flight(ctx, flight_id)
  fl = ctx.q1("SELECT * FROM flights WHERE id = ?", flight_id)
  key = ("flight_status", flight_id)
  ctx.calls[key] = ctx.calls.get(key, 0) + 1
  if ctx.calls[key] <= fl["busy"]:   # `busy` (hidden): how often the board answers with an error object first
    return {"ok": False, "flight_id": flight_id, "error": "status board feed timed out, no report; try again"}
  head = f"Flight {fl['code']} {fl['origin']}-{fl['destination']} on {fl['date']}"
  if fl["status"] == "cancelled":
    return {"flight_id": flight_id, "report": f"{head}: CANCELLED. Passengers are being rebooked."}
  if fl["status"] == "departed":
    return {"flight_id": flight_id, "report": f"{head}: departed."}
  if fl["date"] != B.TODAY and not fl["delay_min"]:   # a delay can be announced the day before
    return {"flight_id": flight_id, "report": f"{head}: scheduled {fl['dep_time']}, no live data yet."}
  if fl["delay_min"] == 0:
    return {"flight_id": flight_id, "report": f"{head}: on time, departure {fl['dep_time']} from gate {fl['gate']}."}
  exp = _hm(_mins(fl["dep_time"]) + fl["delay_min"])
  return {"flight_id": flight_id, "report": f"{head}: delayed, now expected to depart at {exp} (scheduled "
                                            f"{fl['dep_time']}); gate {fl['gate']}."}


def _rebook(ctx, booking_id, flight_id):
  b = ctx.q1("SELECT * FROM bookings WHERE id = ?", booking_id)
  if b is None:
    raise ToolError(f"no booking with id {booking_id}")
  if b["status"] == "cancelled":
    raise ToolError(f"booking {booking_id} is cancelled")
  fl = _get_flight(ctx, flight_id)
  if fl["status"] != "scheduled":
    raise ToolError(f"flight {flight_id} is {fl['status']}; rebook only onto scheduled flights")
  ctx.exec("UPDATE bookings SET flight_id = ? WHERE id = ?", flight_id, booking_id)
  return {"booking_id": booking_id, "flight_id": flight_id, "previous_flight_id": b["flight_id"]}


def _issue_voucher(ctx, passenger_id, amount, reason):
  _get_passenger(ctx, passenger_id)
  if amount <= 0:
    raise ToolError("amount must be positive")
  ctx.exec("INSERT INTO vouchers (passenger_id, amount, reason) VALUES (?, ?, ?)", passenger_id, float(amount), reason)
  return {"passenger_id": passenger_id, "amount": float(amount), "issued": True}


TOOLS = (
    B.list_tool("list_flights", "List flights {id, code, origin, destination, date, dep_time, status} ordered by "
                "departure, filtered.", table="flights",
                columns="id, code, origin, destination, date, dep_time, status",
                order_by="date, dep_time, id", filters=[
                    B.Filter("origin", "origin = ?", B.p_str("origin airport code", AIRPORTS)),
                    B.Filter("destination", "destination = ?", B.p_str("destination airport code", AIRPORTS)),
                    B.Filter("status", "status = ?", B.p_str("flight status", FLIGHT_STATUSES)),
                    B.Filter("code", "code = ?", B.p_str("flight code, e.g. PA1042")),
                    B.Filter("date_from", "date >= ?", B.p_str("only flights on or after this date (YYYY-MM-DD)")),
                    B.Filter("date_before", "date < ?", B.p_str("only flights before this date (YYYY-MM-DD)"))]),
    B.tool("get_flight", "Get one flight with all fields (aircraft, capacity = seats).", _get_flight,
           required=("flight_id",), flight_id=B.p_int("flight id")),
    B.list_tool("list_bookings", "List bookings {id, passenger_id, flight_id, fare_class, price, status}, filtered.",
                table="bookings", columns="id, passenger_id, flight_id, fare_class, price, status", filters=[
                    B.Filter("flight_id", "flight_id = ?", B.p_int("flight id")),
                    B.Filter("passenger_id", "passenger_id = ?", B.p_int("passenger id")),
                    B.Filter("status", "status = ?", B.p_str("booking status", BOOKING_STATUSES)),
                    B.Filter("exclude_status", "status != ?", B.p_str("leave out bookings with this status",
                                                                      BOOKING_STATUSES)),
                    B.Filter("fare_class", "fare_class = ?", B.p_str("fare class", FARES))]),
    B.tool("get_passenger", "Get one passenger.", _get_passenger, required=("passenger_id",),
           passenger_id=B.p_int("passenger id")),
    B.tool("flight_status", "The live status board's report of a flight: {flight_id, report} (free text), or {ok: "
           "false, flight_id, error} when the board's feed fails.", _flight_status, required=("flight_id",),
           flight_id=B.p_int("flight id")),
    B.tool("rebook_booking", "Move a booking to another (scheduled) flight.", _rebook,
           required=("booking_id", "flight_id"), booking_id=B.p_int("booking id"), flight_id=B.p_int("new flight id")),
    B.tool("issue_voucher", "Issue a travel voucher to a passenger.", _issue_voucher,
           required=("passenger_id", "amount", "reason"), passenger_id=B.p_int("passenger id"),
           amount=B.p_num("voucher value in EUR"), reason=B.p_str("why the voucher is issued")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("airline", "A regional airline's flights, passengers and bookings.", SCHEMA, generate, TOOLS)

PAGES = B.paging_prelude("fetch_all")

STRANDED = """\
pax = set()
for fl in fetch_all("list_flights", status="cancelled"):
    for b in fetch_all("list_bookings", flight_id=fl["id"], exclude_status="cancelled"):
        pax.add(b["passenger_id"])
print(len(pax))
tools["submit_answer"](answer=sorted(pax))
"""

REBOOK = """\
moves = []
for fl in fetch_all("list_flights", status="cancelled", date_from="2024-07-02"):
    nxt = [x for x in fetch_all("list_flights", origin=fl["origin"], destination=fl["destination"],
                                status="scheduled", date_from=fl["date"])
           if (x["date"], x["dep_time"]) > (fl["date"], fl["dep_time"])]
    target = nxt[0]   # ordered by departure
    for b in fetch_all("list_bookings", flight_id=fl["id"], exclude_status="cancelled"):
        tools["rebook_booking"](booking_id=b["id"], flight_id=target["id"])
        tools["issue_voucher"](passenger_id=b["passenger_id"], amount=50, reason=f"cancelled flight {fl['code']}")
        moves.append((b["id"], target["code"]))
print(len(moves), moves[:5])
tools["submit_answer"]()
"""

DELAYS = r"""
import json, re
logs = [p for p in tools["list_files"]() if p.startswith("operations/")]
delay = {}
for path in logs:
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".csv"):
        for line in text.strip().splitlines()[1:]:
            code, date, minutes = line.split(",")
            delay[code] = delay.get(code, 0) + int(minutes)
    elif path.endswith(".json"):
        for e in json.loads(text)["entries"]:
            delay[e["flight"]] = delay.get(e["flight"], 0) + e["delay_s"] // 60
    else:
        for code, h, m in re.findall(r"(PA\d+) on \S+: left (\d+) h (\d+) min", text):
            delay[code] = delay.get(code, 0) + int(h) * 60 + int(m)
lis = {fl["code"] for fl in fetch_all("list_flights", origin="LIS", date_before="2024-07-01")}
total = sum(v for code, v in delay.items() if code in lis)
print(len(delay), total)
tools["submit_answer"](answer=total)
"""

WORST = r"""
import re
worst, best_delay = None, -1
for fl in fetch_all("list_flights", date_from="2024-07-01", date_before="2024-07-02"):
    for attempt in range(5):   # the board's feed fails now and then: ask again
        res = tools["flight_status"](flight_id=fl["id"])
        if res.get("ok", True):
            break
    rep = res["report"]
    m = re.search(r"expected to depart at (\d\d):(\d\d) \(scheduled (\d\d):(\d\d)\)", rep)
    d = (int(m.group(1)) * 60 + int(m.group(2)) - int(m.group(3)) * 60 - int(m.group(4))) if m else 0
    if d > best_delay:
        worst, best_delay = fl["code"], d
print(worst, best_delay)
tools["submit_answer"](answer=worst)
"""

WORST_WRONG = r"""
import re
latest, code = "", None
offset = 0
while offset is not None:
    page = tools["list_flights"](date_from="2024-07-01", date_before="2024-07-02", offset=offset)
    for fl in page["items"]:
        for attempt in range(5):
            res = tools["flight_status"](flight_id=fl["id"])
            if res.get("ok", True):
                break
        rep = res["report"]
        m = re.search(r"expected to depart at (\d\d:\d\d)", rep)
        t = m.group(1) if m else fl["dep_time"]
        if t > latest:
            latest, code = t, fl["code"]
    offset = page["next_offset"]
tools["submit_answer"](answer=code)
"""

REVENUE = """\
total = 0.0
for fl in fetch_all("list_flights", origin="LIS", destination="OSL", date_from="2024-07-01", date_before="2024-08-01"):
    for b in fetch_all("list_bookings", flight_id=fl["id"], fare_class="business", exclude_status="cancelled"):
        total += b["price"]
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

OVERBOOKED = """\
over = []
for fl in fetch_all("list_flights", status="scheduled", date_from="2024-07-01", date_before="2024-07-08"):
    seats = tools["get_flight"](flight_id=fl["id"])["capacity"]
    n = tools["list_bookings"](flight_id=fl["id"], exclude_status="cancelled", limit=1)["total"]
    if n > seats:
        over.append(fl["code"])
print(over)
tools["submit_answer"](answer=over)
"""


def _stranded(ctx):
  return [r["passenger_id"] for r in ctx.q(
      "SELECT DISTINCT b.passenger_id FROM bookings b JOIN flights f ON f.id = b.flight_id "
      "WHERE f.status = 'cancelled' AND b.status != 'cancelled' ORDER BY 1")]


def _rebook_expected(ctx):
  moves = {}
  for fl in ctx.q("SELECT * FROM flights WHERE status = 'cancelled' AND date >= '2024-07-02'"):
    target = ctx.scalar("SELECT id FROM flights WHERE origin = ? AND destination = ? AND status = 'scheduled' AND "
                        "(date > ? OR date = ? AND dep_time > ?) ORDER BY date, dep_time, id LIMIT 1",
                        fl["origin"], fl["destination"], fl["date"], fl["date"], fl["dep_time"])
    for b in ctx.q("SELECT id, passenger_id FROM bookings WHERE flight_id = ? AND status != 'cancelled'", fl["id"]):
      moves[b["id"]] = (target, b["passenger_id"])
  flights = {r["id"]: r["flight_id"] for r in ctx.q("SELECT id, flight_id FROM bookings")}
  return {"flights": flights, "moves": moves}


def _rebook_check(ctx, e, a):
  want = dict(e["flights"])
  for bid, (target, _) in e["moves"].items():
    want[bid] = target
  got = {r["id"]: r["flight_id"] for r in ctx.q("SELECT id, flight_id FROM bookings")}
  if got != want:
    return False
  vouchers = sorted((r["passenger_id"], round(r["amount"], 2)) for r in ctx.q("SELECT * FROM vouchers"))
  return vouchers == sorted((p, 50.0) for _, p in e["moves"].values())


def _delays(ctx):
  lis = {r["code"] for r in ctx.q("SELECT code FROM flights WHERE origin = 'LIS' AND date < ?", B.TODAY)}
  total = 0
  for rel in ctx.files("operations/delay_logs"):
    text = ctx.read(rel)
    if rel.endswith(".csv"):
      total += sum(int(r["delay_min"]) for r in read_records(rel, text) if r["flight"] in lis)
    elif rel.endswith(".json"):
      total += sum(e["delay_s"] // 60 for e in read_records(rel, text, key="entries") if e["flight"] in lis)
    else:
      total += sum(int(h) * 60 + int(m) for c, h, m in re.findall(r"(PA\d+) on \S+: left (\d+) h (\d+) min", text)
                   if c in lis)
  return total


TASKS = [
    B.Task(DOMAIN, "stranded_passengers",
           "Which passengers hold a booking that is not cancelled (confirmed or checked in) on a cancelled "
           "flight? Submit their passenger ids.", (PAGES, STRANDED), _stranded, answer="set",
           wrong=(', exclude_status="cancelled"', ""),
           conditions=(("cancelled flight", ('"list_flights", status="cancelled"', '"list_flights"')),)),
    B.Task(DOMAIN, "rebook_cancelled",
           "Flights departing after today have been cancelled. Move every booking that is not cancelled "
           "(confirmed or checked in) on such a flight to the next scheduled flight of the same route (same "
           "origin and destination) that departs after the cancelled one, and issue the booking's passenger one "
           "voucher of 50 EUR per moved booking (any reason text). Change nothing else.", (PAGES, REBOOK),
           _rebook_expected, check=_rebook_check, wrong=('exclude_status="cancelled"', 'status="confirmed"'),
           tags=("writeback",),
           conditions=(("after today", (', date_from="2024-07-02"', '')),
                       ("same route", ('origin=fl["origin"], destination=fl["destination"],', '')))),
    B.Task(DOMAIN, "lis_departure_delays",
           "The operations team logged the departure delays of some past flights in files somewhere in the "
           "workspace (in several formats). What is the total logged delay, in minutes, of flights that departed "
           "from LIS? Submit an integer.", (PAGES, DELAYS), _delays, answer="int",
           wrong=("if code in lis)", ")"), tags=("explore",)),
    B.Task(DOMAIN, "longest_delay_today",
           "Which of today's flights has the longest departure delay according to the live status board? "
           "Submit its flight code.", (PAGES, WORST),
           lambda ctx: ctx.scalar("SELECT code FROM flights WHERE date = ? ORDER BY delay_min DESC, id LIMIT 1",
                                  B.TODAY), answer="text", wrong=WORST_WRONG, tags=("errors",),
           conditions=(("today", (', date_from="2024-07-01", date_before="2024-07-02"', '')),)),
    B.Task(DOMAIN, "business_revenue_lis_osl",
           "What is the total price of the business-class bookings that are not cancelled on flights from LIS "
           "to OSL departing in July 2024? Submit the amount rounded to 2 decimals.", (PAGES, REVENUE),
           lambda ctx: round(ctx.scalar(
               "SELECT COALESCE(SUM(b.price), 0) FROM bookings b JOIN flights f ON f.id = b.flight_id WHERE "
               "f.origin = 'LIS' AND f.destination = 'OSL' AND f.date >= '2024-07-01' AND f.date < '2024-08-01' "
               "AND b.fare_class = 'business' AND b.status != 'cancelled'"), 2), answer="number",
           wrong=(', exclude_status="cancelled")', ")"),
           conditions=(("from LIS", ('origin="LIS", ', '')), ("to OSL", ('destination="OSL", ', '')),
                       ("July", (', date_from="2024-07-01", date_before="2024-08-01"', '')),
                       ("business", ('fare_class="business", ', '')))),
    B.Task(DOMAIN, "overbooked_week",
           "Which scheduled flights departing from 2024-07-01 to 2024-07-07 are overbooked, i.e. have more "
           "bookings that are not cancelled than seats? Submit their flight codes.", (PAGES, OVERBOOKED),
           lambda ctx: [r["code"] for r in ctx.q(
               "SELECT f.code FROM flights f JOIN bookings b ON b.flight_id = f.id WHERE f.status = 'scheduled' "
               "AND f.date >= ? AND f.date < ? AND b.status != 'cancelled' GROUP BY f.id "
               "HAVING COUNT(*) > f.capacity ORDER BY f.id", *WEEK)], answer="set",
           wrong=(', exclude_status="cancelled", limit=1)', ", limit=1)"),
           conditions=(("scheduled", ('status="scheduled", ', '')),
                       ("week", (', date_from="2024-07-01", date_before="2024-07-08"', '')))),
]
