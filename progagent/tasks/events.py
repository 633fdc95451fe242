"""Events domain: venues, events, ticket bookings and customer e-mails; organiser notices are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError

VENUES = (("Blue Cellar", "Lisbon", 40), ("Riverside Hall", "Lisbon", 600), ("Old Mill", "Porto", 250),
          ("Glass House", "Madrid", 800), ("Harbour Stage", "Porto", 350), ("North Dome", "Oslo", 500),
          ("Garden Pavilion", "Lyon", 150), ("Union Theatre", "Dublin", 450))
KINDS = ("Jazz Night", "Poetry Slam", "Indie Showcase", "Film Club", "Comedy Hour", "String Quartet", "Tech Talk",
         "Folk Session", "Dance Party", "Book Launch")
CITIES = tuple(sorted({c for _, c, _ in VENUES}))

SCHEMA = """
CREATE TABLE venues (id INTEGER PRIMARY KEY, name TEXT, city TEXT, capacity INTEGER);
CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT, venue_id INTEGER, date TEXT, status TEXT, price REAL,
                     description TEXT, busy INTEGER DEFAULT 0);
CREATE TABLE bookings (id INTEGER PRIMARY KEY, event_id INTEGER, customer_email TEXT, seats INTEGER, status TEXT);
CREATE TABLE emails (id INTEGER PRIMARY KEY AUTOINCREMENT, to_addr TEXT, subject TEXT, body TEXT);
CREATE INDEX bookings_event ON bookings(event_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  G.insert_rows(ctx, "venues", [{"id": i + 1, "name": n, "city": c, "capacity": cap}
                                for i, (n, c, cap) in enumerate(VENUES)])
  n_ev = 105 * f
  events = []
  for i in range(n_ev):
    events.append({"id": i + 1, "name": f"{rng.choice(KINDS)} #{i + 1}", "venue_id": rng.randint(1, len(VENUES)),
                   "date": G.rand_date(rng, "2024-07-05", "2024-10-31"),
                   "status": "cancelled" if rng.random() < 0.1 else "scheduled",
                   "price": float(rng.choice((10, 12.5, 15, 20, 25, 30, 45))), "description": G.sentence(rng, 8),
                   "busy": rng.choice((0, 0, 0, 1, 2))})   # event_sales answers 'busy' this many times first
  customers = [G.email_of(n, i) for i, n in enumerate(G.unique_names(rng, 525 * f))]
  bookings = []

  def book(ev, email, seats, status="confirmed"):
    bookings.append({"id": len(bookings) + 1, "event_id": ev, "customer_email": email, "seats": seats,
                     "status": status})

  for _ in range(1330 * f):
    book(rng.randint(1, n_ev), rng.choice(customers), rng.randint(1, 6),
         "confirmed" if rng.random() < 0.9 else "refunded")
  # oversold only when refunded seats are (wrongly) counted: a scheduled event at a mid-size venue
  sched = [e for e in events if e["status"] == "scheduled"]
  confirmed = {}
  for b in bookings:
    if b["status"] == "confirmed":
      confirmed[b["event_id"]] = confirmed.get(b["event_id"], 0) + b["seats"]
  seats = lambda ev, st: sum(b["seats"] for b in bookings if b["event_id"] == ev and b["status"] in st)
  trap = rng.choice([e for e in sched if 150 <= VENUES[e["venue_id"] - 1][2] <= 350
                     and confirmed.get(e["id"], 0) <= VENUES[e["venue_id"] - 1][2]])
  cap = VENUES[trap["venue_id"] - 1][2]
  while seats(trap["id"], ("confirmed", "refunded")) <= cap:
    book(trap["id"], rng.choice(customers), rng.randint(6, 10), "refunded")
  # group buyers (bookings of 7+ seats); ranking by their big bookings alone differs from the full ranking
  group = rng.sample(customers, rng.randint(3, 5))
  for email in group:
    for _ in range(rng.randint(2, 6)):
      book(rng.randint(1, n_ev), email, rng.randint(7, 10))
    if rng.random() < 0.5:
      book(rng.randint(1, n_ev), email, rng.randint(7, 10), "refunded")

  def ranking(big_only):
    tot = {m: sum(b["seats"] for b in bookings if b["customer_email"] == m and b["status"] == "confirmed"
                  and (b["seats"] >= 7 or not big_only)) for m in group}
    return min(tot, key=lambda m: (-tot[m], m))

  while ranking(True) == ranking(False):
    loser = rng.choice([m for m in group if m != ranking(True)])
    for _ in range(rng.randint(3, 6)):
      book(rng.randint(1, n_ev), loser, rng.randint(4, 6))
  G.write_docs(ctx, rng, "events", ["box_office", "refunds", "venues", "accessibility", "press"])
  picks = rng.sample(sched, B.n_data_files(f))
  kinds = ["cancel", "move"] * (len(picks) // 2)
  rng.shuffle(kinds)
  for j, (e, kind) in enumerate(zip(picks, kinds)):
    if kind == "cancel":
      body = f"CANCELLED: {e['name']}\nThe organiser called it off. All confirmed bookings must be refunded.\n"
    else:
      body = (f"RESCHEDULED: {e['name']}\nNew date: {G.rand_date(rng, '2024-11-01', '2024-12-20')}. "
              "Bookings stay valid.\n")
    ctx.write(f"notices/notice_{j + 1:03d}.txt", body)
  _plant_distractors(rng, events, customers, group, bookings, book)
  G.insert_rows(ctx, "events", events)
  G.insert_rows(ctx, "bookings", bookings)


def _plant_distractors(rng, events, customers, group, bookings, book) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them), all on one new cancelled event at the smallest venue: a
  customer who never booked 7+ seats holds more confirmed seats than every group buyer (top_seat_buyer without
  'group buyer'), a group buyer's refunded bookings put them first when refunded seats count (top_seat_buyer
  without 'confirmed'), and so many confirmed seats that the event is oversold (oversold_events without
  'scheduled')."""
  small = min(range(len(VENUES)), key=lambda v: VENUES[v][2]) + 1
  ev = len(events) + 1
  events.append({"id": ev, "name": f"{rng.choice(KINDS)} #{ev}", "venue_id": small,
                 "date": G.rand_date(rng, "2024-07-05", "2024-10-31"), "status": "cancelled",
                 "price": float(rng.choice((10, 12.5, 15, 20, 25, 30, 45))), "description": G.sentence(rng, 8),
                 "busy": rng.choice((0, 0, 0, 1, 2))})

  def seats(m, statuses):
    return sum(b["seats"] for b in bookings if b["customer_email"] == m and b["status"] in statuses)

  top = min(group, key=lambda m: (-seats(m, ("confirmed",)), m))
  loner = rng.choice([m for m in customers if m not in group])
  while seats(loner, ("confirmed",)) <= seats(top, ("confirmed",)):
    book(ev, loner, rng.randint(4, 6))
  rival = rng.choice([m for m in group if m != top])
  while seats(rival, ("confirmed", "refunded")) <= seats(top, ("confirmed", "refunded")):
    book(ev, rival, rng.randint(4, 6), "refunded")
  while seats_of_event(bookings, ev) <= VENUES[small - 1][2]:
    book(ev, rng.choice([m for m in customers if m not in group]), rng.randint(1, 6))


def seats_of_event(bookings, ev) -> int:
  """Confirmed seats of one event in the generator's bookings."""
  return sum(b["seats"] for b in bookings if b["event_id"] == ev and b["status"] == "confirmed")


# -- tools

def _event(ctx, event_id):
  r = ctx.q1("SELECT id, name, venue_id, date, status, price FROM events WHERE id = ?", event_id)
  if r is None:
    raise ToolError(f"no event with id {event_id}")
  return r


def _sales(ctx, event_id):
  """Seat totals of one event; a busy backend answers {'ok': false, 'error'} (no error flag) a few times."""
  _event(ctx, event_id)
  key = ("event_sales", event_id)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if n < ctx.scalar("SELECT busy FROM events WHERE id = ?", event_id):
    return {"ok": False, "event_id": event_id, "error": "ticketing backend busy, no figures returned; call again"}
  r = ctx.q1("SELECT COALESCE(SUM(CASE WHEN status = 'confirmed' THEN seats END), 0) AS confirmed_seats, "
             "COALESCE(SUM(CASE WHEN status = 'refunded' THEN seats END), 0) AS refunded_seats, COUNT(*) AS bookings "
             "FROM bookings WHERE event_id = ?", event_id)
  return {"ok": True, "event_id": event_id, **r}


def _refund(ctx, booking_id):
  r = ctx.q1("SELECT status FROM bookings WHERE id = ?", booking_id)
  if r is None:
    raise ToolError(f"no booking with id {booking_id}")
  if r["status"] != "confirmed":
    raise ToolError(f"booking {booking_id} is already {r['status']}")
  ctx.exec("UPDATE bookings SET status = 'refunded' WHERE id = ?", booking_id)
  return {"booking_id": booking_id, "status": "refunded"}


def _reschedule(ctx, event_id, date):
  import datetime
  prev = _event(ctx, event_id)["date"]
  try:
    datetime.date.fromisoformat(date)
  except (TypeError, ValueError):
    raise ToolError(f"date must be YYYY-MM-DD, got {date!r}") from None
  ctx.exec("UPDATE events SET date = ? WHERE id = ?", date, event_id)
  return {"event_id": event_id, "date": date, "previous": prev}


def _send_email(ctx, to, subject, body):
  if "@" not in to:
    raise ToolError(f"not an e-mail address: {to!r}")
  if not subject.strip() or not body.strip():
    raise ToolError("subject and body must not be empty")
  ctx.exec("INSERT INTO emails (to_addr, subject, body) VALUES (?, ?, ?)", to, subject, body)
  return {"to": to, "sent": True}


TOOLS = (
    B.list_tool("list_venues", "List venues: items {id, name, city, capacity}.", table="venues",
                columns="id, name, city, capacity", filters=[B.Filter("city", "city = ?", B.p_str("city", CITIES))]),
    B.list_tool("list_events", "List events: items {id, name, venue_id, date, status, price}.", table="events",
                columns="id, name, venue_id, date, status, price",
                filters=[B.Filter("venue_id", "venue_id = ?", B.p_int("venue id")),
                         B.Filter("status", "status = ?", B.p_str("event status", ("scheduled", "cancelled"))),
                         B.Filter("name", "name = ?", B.p_str("exact event name")),
                         B.Filter("date_from", "date >= ?", B.p_str("first date, YYYY-MM-DD (inclusive)")),
                         B.Filter("date_to", "date <= ?", B.p_str("last date, YYYY-MM-DD (inclusive)"))]),
    B.list_tool("list_bookings", "List bookings: items {id, event_id, customer_email, seats, status} (status "
                "confirmed or refunded).", table="bookings", columns="id, event_id, customer_email, seats, status",
                filters=[B.Filter("event_id", "event_id = ?", B.p_int("event id")),
                         B.Filter("customer_email", "customer_email = ?", B.p_str("customer e-mail")),
                         B.Filter("status", "status = ?", B.p_str("booking status", ("confirmed", "refunded"))),
                         B.Filter("min_seats", "seats >= ?", B.p_int("only bookings with at least this many seats"))]),
    B.tool("event_sales", "Seat totals of one event: {ok, event_id, confirmed_seats, refunded_seats, bookings}, or "
           "{ok: false, event_id, error} when the ticketing backend is busy.", _sales, required=("event_id",),
           event_id=B.p_int("event id")),
    B.tool("refund_booking", "Refund a confirmed booking.", _refund, required=("booking_id",),
           booking_id=B.p_int("booking id")),
    B.tool("reschedule_event", "Move an event to a new date.", _reschedule, required=("event_id", "date"),
           event_id=B.p_int("event id"), date=B.p_str("new date, YYYY-MM-DD")),
    B.tool("send_email", "Send an e-mail to a customer.", _send_email, required=("to", "subject", "body"),
           to=B.p_str("e-mail address"), subject=B.p_str("subject line"), body=B.p_str("message text")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("events", "A promoter's venues, events and ticket bookings.", SCHEMA, generate, TOOLS)

# -- oracles

OVERSOLD = """\
def all_pages(name, **kw):
    out, offset = [], 0
    while offset is not None:
        page = tools[name](limit=200, offset=offset, **kw)
        out += page["items"]
        offset = page["next_offset"]
    return out

def sales(event_id):
    for attempt in range(5):
        r = tools["event_sales"](event_id=event_id)
        if r.get("ok"):
            return r
    raise RuntimeError(f"no sales figures for event {event_id}")

cap = {v["id"]: v["capacity"] for v in all_pages("list_venues")}
out = []
for e in all_pages("list_events", status="scheduled"):
    s = sales(e["id"])
    if s["confirmed_seats"] > cap[e["venue_id"]]:
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
for name in sorted(names):
    for e in tools["list_events"](name=name)["items"]:
        offset, ids = 0, []
        while offset is not None:
            page = tools["list_bookings"](event_id=e["id"], status="confirmed", limit=200, offset=offset)
            ids += [b["id"] for b in page["items"]]
            offset = page["next_offset"]
        for bid in ids:
            tools["refund_booking"](booking_id=bid)
tools["submit_answer"]()
"""

REVENUE = """\
def sales(event_id):
    while True:
        r = tools["event_sales"](event_id=event_id)
        if r.get("ok"):
            return r

total = 0.0
for v in tools["list_venues"](city="Lisbon")["items"]:
    offset = 0
    while offset is not None:
        page = tools["list_events"](venue_id=v["id"], status="scheduled", limit=200, offset=offset)
        for e in page["items"]:
            total += sales(e["id"])["confirmed_seats"] * e["price"]
        offset = page["next_offset"]
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

TOP = """\
def all_pages(**kw):
    out, offset = [], 0
    while offset is not None:
        page = tools["list_bookings"](limit=200, offset=offset, **kw)
        out += page["items"]
        offset = page["next_offset"]
    return out

group = sorted({b["customer_email"] for b in all_pages(status="confirmed", min_seats=7)})
seats = {m: sum(b["seats"] for b in all_pages(customer_email=m, status="confirmed")) for m in group}
best = min(seats, key=lambda m: (-seats[m], m))
print(seats)
tools["submit_answer"](answer=best)
"""

TOP_WRONG = """\
from collections import Counter
c = Counter()
for b in tools["list_bookings"](status="confirmed", min_seats=7, limit=200)["items"]:
    c[b["customer_email"]] += b["seats"]
tools["submit_answer"](answer=min(c, key=lambda m: (-c[m], m)))
"""

MOVE = r"""
import re
moves = {}
for path in tools["list_files"](directory="notices"):
    text = tools["read_file"](path=path)["content"]
    lines = text.splitlines()
    if lines and lines[0].startswith("RESCHEDULED: "):
        moves[lines[0][len("RESCHEDULED: "):].strip()] = re.search(r"New date: (\d{4}-\d{2}-\d{2})", text).group(1)
for name, date in sorted(moves.items()):
    e = tools["list_events"](name=name)["items"][0]
    tools["reschedule_event"](event_id=e["id"], date=date)
    emails, offset = set(), 0
    while offset is not None:
        page = tools["list_bookings"](event_id=e["id"], status="confirmed", limit=200, offset=offset)
        emails |= {b["customer_email"] for b in page["items"]}
        offset = page["next_offset"]
    for to in sorted(emails):
        tools["send_email"](to=to, subject=f"Rescheduled: {name}",
                            body=f"{name} has moved to {date}. Your booking stays valid.")
print(moves)
tools["submit_answer"]()
"""


def _booking_status(ctx):
  return {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM bookings")}


def _notices(ctx, prefix):
  import re
  out = {}
  for rel in ctx.files("notices"):
    text = ctx.read(rel)
    first = text.splitlines()[0]
    if first.startswith(prefix):
      m = re.search(r"New date: (\d{4}-\d{2}-\d{2})", text)
      out[first[len(prefix):].strip()] = m.group(1) if m else None
  return out


def _refund_expected(ctx):
  names = _notices(ctx, "CANCELLED: ")
  want = _booking_status(ctx)
  for r in ctx.q("SELECT b.id, e.name FROM bookings b JOIN events e ON e.id = b.event_id WHERE b.status = 'confirmed'"):
    if r["name"] in names:
      want[r["id"]] = "refunded"
  return want


def _oversold(ctx):
  return [r["name"] for r in ctx.q(
      "SELECT e.name FROM events e JOIN venues v ON v.id = e.venue_id JOIN bookings b ON b.event_id = e.id "
      "WHERE e.status = 'scheduled' AND b.status = 'confirmed' GROUP BY e.id HAVING SUM(b.seats) > v.capacity")]


def _top(ctx):
  return ctx.scalar("SELECT customer_email FROM bookings WHERE status = 'confirmed' AND customer_email IN "
                    "(SELECT customer_email FROM bookings WHERE status = 'confirmed' AND seats >= 7) "
                    "GROUP BY customer_email ORDER BY SUM(seats) DESC, customer_email LIMIT 1")


def _move_expected(ctx):
  moves = _notices(ctx, "RESCHEDULED: ")
  dates = {r["id"]: r["date"] for r in ctx.q("SELECT id, date FROM events")}
  mails = []
  for name, date in moves.items():
    eid = ctx.scalar("SELECT id FROM events WHERE name = ?", name)
    dates[eid] = date
    mails += [[r["customer_email"], f"Rescheduled: {name}", date] for r in ctx.q(
        "SELECT DISTINCT customer_email FROM bookings WHERE event_id = ? AND status = 'confirmed'", eid)]
  return {"dates": {str(k): v for k, v in dates.items()}, "mails": sorted(mails),
          "bookings": _booking_status(ctx)}


def _move_check(ctx, e, a):
  if {str(r["id"]): r["date"] for r in ctx.q("SELECT id, date FROM events")} != e["dates"]:
    return False
  if _booking_status(ctx) != e["bookings"]:
    return False
  rows = ctx.q("SELECT to_addr, subject, body FROM emails")
  got = sorted([r["to_addr"].strip().lower(), " ".join(r["subject"].split()).lower(), r["body"]] for r in rows)
  want = sorted([m, s.lower(), d] for m, s, d in e["mails"])
  return len(got) == len(want) and all(g[:2] == w[:2] and w[2] in g[2] for g, w in zip(got, want))


TASKS = [
    B.Task(DOMAIN, "oversold_events",
           "Which scheduled events have more confirmed seats booked than their venue's capacity? Submit the list "
           "of their names.", (OVERSOLD,), _oversold, answer="set", tags=("errors",),
           wrong=('s["confirmed_seats"] > cap', 's["confirmed_seats"] + s["refunded_seats"] > cap'),
           conditions=(("scheduled", ('"list_events", status="scheduled"', '"list_events"')),)),
    B.Task(DOMAIN, "refund_cancelled_notices",
           "Some files in notices/ announce that an event is cancelled (first line 'CANCELLED: <event name>'). "
           "Refund every confirmed booking of those events, and nothing else.", (REFUND,), _refund_expected,
           check=lambda ctx, e, a: _booking_status(ctx) == e,
           wrong=('if first.startswith("CANCELLED: "):\n        names.add(first[len("CANCELLED: "):].strip())',
                  'names.add(first.split(": ", 1)[1].strip())')),
    B.Task(DOMAIN, "lisbon_revenue",
           "What is the revenue (confirmed seats * ticket price) of the scheduled events held at venues in "
           "Lisbon? Round it to 2 decimals.", (REVENUE,),
           lambda ctx: round(ctx.scalar(
               "SELECT COALESCE(SUM(b.seats * e.price), 0) FROM bookings b JOIN events e ON e.id = b.event_id JOIN "
               "venues v ON v.id = e.venue_id WHERE v.city = 'Lisbon' AND e.status = 'scheduled' AND "
               "b.status = 'confirmed'"), 2),
           answer="number", tags=("errors",), wrong=('status="scheduled", ', ""),
           conditions=(("Lisbon", ('tools["list_venues"](city="Lisbon")', 'tools["list_venues"](limit=200)')),)),
    B.Task(DOMAIN, "top_seat_buyer",
           "Customers with at least one confirmed booking of 7 or more seats are group buyers. Which group buyer "
           "holds the most seats in confirmed bookings over all events (all their confirmed bookings count, small "
           "ones too)? Submit the e-mail (on a tie, the alphabetically first).", (TOP,), _top,
           answer="text", wrong=TOP_WRONG,
           conditions=(("confirmed", ('(customer_email=m, status="confirmed")', '(customer_email=m)')),
                       ("group buyer", ('(status="confirmed", min_seats=7)', '(status="confirmed")')))),
    B.Task(DOMAIN, "reschedule_notices",
           "Some files in notices/ announce that an event moves (first line 'RESCHEDULED: <event name>', then "
           "'New date: YYYY-MM-DD'). For each such event: set its date to the new date, and send one e-mail to "
           "every customer holding a confirmed booking of it (one per customer) with the subject "
           "'Rescheduled: <event name>' and a body that contains the new date. Send no other e-mails and "
           "change nothing else.", (MOVE,), _move_expected, check=_move_check, tags=("writeback",),
           wrong=('status="confirmed", limit=200', "limit=200")),
]
