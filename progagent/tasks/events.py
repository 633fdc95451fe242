"""Events domain: venues, events and ticket bookings; organiser notices are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

VENUES = (("Blue Cellar", "Lisbon", 40), ("Riverside Hall", "Lisbon", 600), ("Old Mill", "Porto", 250),
          ("Glass House", "Madrid", 800), ("Harbour Stage", "Porto", 350), ("North Dome", "Oslo", 500),
          ("Garden Pavilion", "Lyon", 150), ("Union Theatre", "Dublin", 450))
KINDS = ("Jazz Night", "Poetry Slam", "Indie Showcase", "Film Club", "Comedy Hour", "String Quartet", "Tech Talk",
         "Folk Session", "Dance Party", "Book Launch")

SCHEMA = """
CREATE TABLE venues (id INTEGER PRIMARY KEY, name TEXT, city TEXT, capacity INTEGER);
CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT, venue_id INTEGER, date TEXT, status TEXT, price REAL,
                     description TEXT);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, event_id INTEGER, customer_email TEXT, seats INTEGER, status TEXT);
CREATE INDEX bookings_event ON bookings(event_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  B.insert_rows(ctx, "venues", [{"id": i + 1, "name": n, "city": c, "capacity": cap} for i, (n, c, cap) in enumerate(VENUES)])
  n_ev = 105 * f
  events = []
  for i in range(n_ev):
    events.append({"id": i + 1, "name": f"{rng.choice(KINDS)} #{i + 1}", "venue_id": 1 if i < 3 else rng.randint(1, len(VENUES)),
                   "date": B.rand_date(rng, "2024-07-05", "2024-10-31"), "status": "cancelled" if i % 10 == 9 else "scheduled",
                   "price": float(rng.choice((10, 12.5, 15, 20, 25, 30, 45))), "description": B.sentence(rng, 12)})
  B.insert_rows(ctx, "events", events)
  customers = [B.email_of(n, i) for i, n in enumerate(B.unique_names(rng, 525 * f))]
  bookings = []

  def book(ev, email, seats, status="confirmed"):
    bookings.append({"id": len(bookings) + 1, "event_id": ev, "customer_email": email, "seats": seats, "status": status})

  for _ in range(1330 * f):
    book(rng.randint(1, n_ev), rng.choice(customers), rng.randint(1, 6), "confirmed" if rng.random() < 0.9 else "refunded")
  for s in (9, 8, 7, 9, 10, 8):   # the first Blue Cellar event is oversold by seats (not by booking count)
    book(1, rng.choice(customers), s)
  for k in range(8):
    book(rng.randint(1, n_ev), "ana.top@example.org", 8)
  for k in range(30):
    book(rng.randint(1, n_ev), "many.small@example.org", 1)
  B.insert_rows(ctx, "bookings", bookings)
  B.write_docs(ctx, rng, "events", ["box_office", "refunds", "venues", "accessibility", "press"])
  sched = [e for e in events if e["status"] == "scheduled"]
  picks = rng.sample(sched, B.n_data_files(f))
  for j, e in enumerate(picks):
    if j % 2 == 0:
      body = f"CANCELLED: {e['name']}\nThe organiser called it off. All confirmed bookings must be refunded.\n"
    else:
      body = f"RESCHEDULED: {e['name']}\nNew date: {B.rand_date(rng, '2024-11-01', '2024-12-20')}. Bookings stay valid.\n"
    ctx.write(f"notices/notice_{j + 1:03d}.txt", body)


def _event(ctx, event_id):
  r = ctx.q1("SELECT * FROM events WHERE id = ?", event_id)
  if r is None:
    raise ToolError(f"no event with id {event_id}")
  return r


def _refund(ctx, booking_id):
  r = ctx.q1("SELECT status FROM bookings WHERE id = ?", booking_id)
  if r is None:
    raise ToolError(f"no booking with id {booking_id}")
  if r["status"] != "confirmed":
    raise ToolError(f"booking {booking_id} is already {r['status']}")
  ctx.exec("UPDATE bookings SET status = 'refunded' WHERE id = ?", booking_id)
  return {"booking_id": booking_id, "status": "refunded"}


TOOLS = (
    B.tool("list_venues", "List the venues: [{id, name, city, capacity}].",
           lambda ctx: ctx.q("SELECT * FROM venues ORDER BY id")),
    B.tool("list_events", "List all events: [{id, name, venue_id, date, status, price}].",
           lambda ctx: ctx.q("SELECT id, name, venue_id, date, status, price FROM events ORDER BY id")),
    B.tool("get_event", "Get one event with its description.", _event, required=("event_id",), event_id=B.p_int("event id")),
    B.tool("list_bookings", "List an event's bookings: [{id, customer_email, seats, status}] (status confirmed or "
           "refunded).", lambda ctx, event_id: (_event(ctx, event_id), ctx.q(
               "SELECT id, customer_email, seats, status FROM bookings WHERE event_id = ? ORDER BY id", event_id))[1],
           required=("event_id",), event_id=B.p_int("event id")),
    B.tool("refund_booking", "Refund a confirmed booking.", _refund, required=("booking_id",),
           booking_id=B.p_int("booking id")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("events", "A promoter's venues, events and ticket bookings.", SCHEMA, generate, TOOLS)

OVERSOLD = """\
cap = {v["id"]: v["capacity"] for v in tools["list_venues"]()}
out = []
for e in tools["list_events"]():
    if e["status"] == "scheduled":
        seats = sum(b["seats"] for b in tools["list_bookings"](event_id=e["id"]) if b["status"] == "confirmed")
        if seats > cap[e["venue_id"]]:
            out.append(e["name"])
print(out)
tools["submit_answer"](answer=out)
"""

REFUND = """\
names = set()
for path in tools["list_files"](directory="notices"):
    first = tools["read_file"](path=path)["content"].splitlines()[0]
    if first.startswith("CANCELLED: "):
        names.add(first[len("CANCELLED: "):].strip())
for e in tools["list_events"]():
    if e["name"] in names:
        for b in tools["list_bookings"](event_id=e["id"]):
            if b["status"] == "confirmed":
                tools["refund_booking"](booking_id=b["id"])
tools["submit_answer"]()
"""

REVENUE = """\
lisbon = {v["id"] for v in tools["list_venues"]() if v["city"] == "Lisbon"}
total = 0.0
for e in tools["list_events"]():
    if e["venue_id"] in lisbon and e["status"] == "scheduled":
        total += sum(b["seats"] * e["price"] for b in tools["list_bookings"](event_id=e["id"]) if b["status"] == "confirmed")
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

TOP = """\
from collections import Counter
c = Counter()
for e in tools["list_events"]():
    for b in tools["list_bookings"](event_id=e["id"]):
        if b["status"] == "confirmed":
            c[b["customer_email"]] += b["seats"]
best = min(c, key=lambda m: (-c[m], m))
print(best, c[best])
tools["submit_answer"](answer=best)
"""


def _booking_status(ctx):
  return {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM bookings")}


def _refund_expected(ctx):
  names = set()
  for rel in ctx.files("notices"):
    first = ctx.read(rel).splitlines()[0]
    if first.startswith("CANCELLED: "):
      names.add(first[len("CANCELLED: "):].strip())
  want = _booking_status(ctx)
  for r in ctx.q("SELECT b.id, e.name FROM bookings b JOIN events e ON e.id = b.event_id WHERE b.status = 'confirmed'"):
    if r["name"] in names:
      want[r["id"]] = "refunded"
  return want


TASKS = [
    B.Task(DOMAIN, "oversold_events",
           "Which scheduled events have more confirmed seats booked than their venue's capacity? Submit the list "
           "of their names.", (OVERSOLD,),
           lambda ctx: [r["name"] for r in ctx.q(
               "SELECT e.name FROM events e JOIN venues v ON v.id = e.venue_id JOIN bookings b ON b.event_id = e.id "
               "WHERE e.status = 'scheduled' AND b.status = 'confirmed' GROUP BY e.id HAVING SUM(b.seats) > v.capacity")],
           answer="set", wrong=('sum(b["seats"] for b', "sum(1 for b")),
    B.Task(DOMAIN, "refund_cancelled_notices",
           "Some files in notices/ announce that an event is cancelled (first line 'CANCELLED: <event name>'). "
           "Refund every confirmed booking of those events, and nothing else.", (REFUND,), _refund_expected,
           check=lambda ctx, e, a: _booking_status(ctx) == e,
           wrong=('if first.startswith("CANCELLED: "):\n        names.add(first[len("CANCELLED: "):].strip())',
                  'names.add(first.split(": ", 1)[1].strip())')),
    B.Task(DOMAIN, "lisbon_revenue",
           "What is the revenue (seats * ticket price over confirmed bookings) of the scheduled events held at "
           "venues in Lisbon? Round it to 2 decimals.", (REVENUE,),
           lambda ctx: round(ctx.scalar(
               "SELECT COALESCE(SUM(b.seats * e.price), 0) FROM bookings b JOIN events e ON e.id = b.event_id JOIN venues v "
               "ON v.id = e.venue_id WHERE v.city = 'Lisbon' AND e.status = 'scheduled' AND b.status = 'confirmed'"), 2),
           answer="number", wrong=(' if b["status"] == "confirmed"', "")),
    B.Task(DOMAIN, "top_seat_buyer",
           "Which customer (e-mail) holds the most seats in confirmed bookings over all events? Submit the e-mail "
           "(on a tie, the alphabetically first).", (TOP,),
           lambda ctx: ctx.scalar("SELECT customer_email FROM bookings WHERE status = 'confirmed' GROUP BY "
                                  "customer_email ORDER BY SUM(seats) DESC, customer_email LIMIT 1"),
           answer="text", wrong=('c[b["customer_email"]] += b["seats"]', 'c[b["customer_email"]] += 1')),
]
