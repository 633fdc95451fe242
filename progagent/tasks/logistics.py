"""Logistics domain: depots, vehicles and parcel shipments; tracking logs are free text; today's pickup sheets
(several formats) are workspace files."""

from __future__ import annotations

import collections
import datetime
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError

STATUSES = ("created", "assigned", "in_transit", "delivered", "exception")
AREAS = ("North", "South", "East", "West", "Port", "Airport")
EVENTS = ("parcel scanned", "arrived at the sorting centre", "departed the hub", "loaded onto a linehaul truck",
          "held for address check", "transferred between vehicles")

SCHEMA = """
CREATE TABLE depots (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE vehicles (id INTEGER PRIMARY KEY, plate TEXT, depot_id INTEGER, capacity_kg REAL, status TEXT);
CREATE TABLE shipments (id INTEGER PRIMARY KEY, tracking TEXT UNIQUE, origin_city TEXT, dest_city TEXT,
                        weight_kg REAL, status TEXT, vehicle_id INTEGER, created TEXT, promised TEXT,
                        delivered TEXT, scan_log TEXT);
CREATE INDEX shipments_status ON shipments(status);
"""


def _day(d: str, k: int) -> str:
  return (datetime.date.fromisoformat(d) + datetime.timedelta(days=k)).isoformat()


def _plate(rng):
  return f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}-{rng.randint(10, 99)}-" \
         f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}"


def _scan_log(rng, s, n_hops):
  """Free-text scan history, newest first: from the origin through intermediate hubs."""
  cities = [s["origin_city"]] + [rng.choice(G.CITIES) for _ in range(n_hops)]
  t = datetime.datetime.fromisoformat(s["created"] + "T08:00")
  lines = []
  for c in cities:
    t += datetime.timedelta(minutes=rng.randint(200, 1900))
    lines.append(f"{t:%Y-%m-%d %H:%M}: {rng.choice(EVENTS)} in {c}.")
  return "\n".join(reversed(lines))


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  depots = []
  for c in G.CITIES:
    for area in rng.sample(AREAS, rng.randint(1, 2)):
      depots.append({"id": len(depots) + 1, "name": f"{c} {area}", "city": c})
  G.insert_rows(ctx, "depots", depots)
  vehicles = []
  lisbon = [d["id"] for d in depots if d["city"] == "Lisbon"]
  for i in range(40 * f):
    dep = rng.choice(lisbon) if i < 3 * f else rng.choice(depots)["id"]
    vehicles.append({"id": i + 1, "plate": _plate(rng), "depot_id": dep,
                     "capacity_kg": float(rng.choice((800, 1200, 1500, 2000, 3500))),
                     "status": "maintenance" if rng.random() < 0.15 else "active"})
  active = [v["id"] for v in vehicles if v["status"] == "active"]
  codes = rng.sample(range(10 ** 7, 10 ** 8), 700 * f + 10)
  ships = []
  for i in range(700 * f):
    created = G.rand_date(rng, "2024-03-01", "2024-06-30")
    old = created < "2024-06-10"
    if old:
      status = rng.choices(STATUSES, (0, 0, 2, 92, 6))[0]
    else:
      status = rng.choices(STATUSES, (25, 25, 45, 5, 0))[0]
    origin = rng.choice(G.CITIES)
    s = {"id": i + 1, "tracking": f"LG{codes[i]}", "origin_city": origin,
         "dest_city": rng.choice([c for c in G.CITIES if c != origin]), "weight_kg": round(rng.uniform(0.5, 420), 1),
         "status": status, "vehicle_id": None, "created": created, "promised": _day(created, rng.randint(2, 7)),
         "delivered": None, "scan_log": None}
    if status in ("assigned", "in_transit"):
      s["vehicle_id"] = rng.choice(active)
    if status == "delivered":
      s["delivered"] = min(_day(s["promised"], rng.choice((-2, -1, -1, 0, 0, 1, 2, 4))), "2024-06-30")
      s["delivered"] = max(s["delivered"], _day(created, 1))
    if status in ("in_transit", "exception"):
      s["scan_log"] = _scan_log(rng, s, rng.randint(1, 4))
    ships.append(s)
  # The heaviest-loaded vehicle (by weight) is never the one carrying the most parcels.
  heavy_v, busy_v = rng.sample(active, 2)
  moving = rng.sample([s for s in ships if s["status"] == "in_transit"], 18)
  for s in moving[:4]:
    s["vehicle_id"], s["weight_kg"] = heavy_v, round(rng.uniform(380, 420), 1)
  for s in moving[4:]:
    s["vehicle_id"], s["weight_kg"] = busy_v, round(rng.uniform(0.5, 2), 1)
  porto = [s for s in ships if s["status"] == "delivered" and s["dest_city"] == "Porto"]
  for s in rng.sample(porto, 2):     # delivered on the promised day: not late
    s["delivered"] = s["promised"]
  # Lisbon pickups waiting for a vehicle; one too heavy for any vehicle.
  for s in rng.sample([s for s in ships if s["status"] == "created"], 6 * f):
    s["origin_city"] = "Lisbon"
    if s["dest_city"] == "Lisbon":
      s["dest_city"] = "Porto"
  heavy = rng.choice([s for s in ships if s["status"] == "created" and s["origin_city"] == "Lisbon"])
  heavy["weight_kg"] = round(rng.uniform(3600, 5000), 1)
  G.write_docs(ctx, rng, "logistics", ["dispatch_rules", "depots", "claims", "vehicle_care", "contacts"])
  # Pickup sheets: today's (to apply) and yesterday's (already applied), in three formats.
  n_files = B.n_data_files(f)
  assigned = [s for s in ships if s["status"] == "assigned"]
  others = [s for s in ships if s["status"] in ("delivered", "created")]
  picks = iter(rng.sample(assigned, n_files * 2))
  for j in range(n_files):
    day = "2024-07-01" if j < n_files - f else "2024-06-30"
    rows = [next(picks) for _ in range(rng.randint(1, 2))] + rng.sample(others, rng.randint(0, 1))
    rng.shuffle(rows)
    dep = rng.choice(depots)["name"]
    fmt = rng.choice(("csv", "json", "txt"))
    if fmt == "csv":
      text = "tracking,picked_up_at\n" + "".join(f"{s['tracking']},{rng.randint(7, 18)}:{rng.randint(10, 59)}\n"
                                                 for s in rows)
    elif fmt == "json":
      text = json.dumps({"depot": dep, "date": day, "parcels": [s["tracking"] for s in rows]}, indent=1) + "\n"
    else:
      text = f"Depot: {dep}\nDate: {day}\n" + "".join(f"Collected {s['tracking']} ({s['weight_kg']} kg)\n"
                                                      for s in rows)
    ctx.write(f"inbox/dispatch/{day}/pickups_{j + 1:03d}.{fmt}", text)
  _plant_distractors(rng, depots, vehicles, ships, {f"LG{c}" for c in codes})
  G.insert_rows(ctx, "vehicles", vehicles)
  G.insert_rows(ctx, "shipments", ships)


def _plant_distractors(rng, depots, vehicles, ships, codes) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): the first vehicle (the one tried first) is an active,
  large vehicle of a depot outside Lisbon (assign_lisbon_pickups without 'Lisbon vehicles'), and shipments
  assigned but not yet in transit make another vehicle the most loaded when they count (most_loaded_vehicle
  without 'in transit')."""
  vehicles[0].update(depot_id=rng.choice([d["id"] for d in depots if d["city"] != "Lisbon"]), status="active",
                     capacity_kg=3500.0)
  moving, both = collections.defaultdict(float), collections.defaultdict(float)
  for s in ships:
    if s["status"] in ("assigned", "in_transit"):
      both[s["vehicle_id"]] += s["weight_kg"]
      if s["status"] == "in_transit":
        moving[s["vehicle_id"]] += s["weight_kg"]
  lead = min(moving, key=lambda v: (-round(moving[v], 1), v))
  lisbon = {d["id"] for d in depots if d["city"] == "Lisbon"}
  rival = rng.choice([v["id"] for v in vehicles if v["status"] == "active" and v["id"] != lead
                      and v["depot_id"] not in lisbon])
  while both[rival] <= both[lead]:
    code = f"LG{rng.randint(10 ** 7, 10 ** 8 - 1)}"
    if code in codes:
      continue
    codes.add(code)
    origin = rng.choice(G.CITIES)
    created = G.rand_date(rng, "2024-06-10", "2024-06-30")
    s = {"id": len(ships) + 1, "tracking": code, "origin_city": origin,
         "dest_city": rng.choice([c for c in G.CITIES if c != origin]), "weight_kg": round(rng.uniform(300, 420), 1),
         "status": "assigned", "vehicle_id": rival, "created": created, "promised": _day(created, rng.randint(2, 7)),
         "delivered": None, "scan_log": None}
    ships.append(s)
    both[rival] += s["weight_kg"]


def _shipment(ctx, shipment_id):
  r = ctx.q1("SELECT * FROM shipments WHERE id = ?", shipment_id)
  if r is None:
    raise ToolError(f"no shipment with id {shipment_id}")
  return r


def _track(ctx, tracking):
  r = ctx.q1("SELECT * FROM shipments WHERE tracking = ?", tracking)
  if r is None:
    raise ToolError(f"no shipment with tracking code {tracking!r} (codes look like 'LG12345678')")
  log = r["scan_log"]
  if log is None:
    log = f"{r['created']} 08:00: shipment registered in {r['origin_city']}."
    if r["delivered"]:
      log = f"{r['delivered']} 15:30: delivered in {r['dest_city']}.\n" + log
  return {"tracking": tracking, "log": log}


def _assign(ctx, shipment_id, vehicle_id):
  s = _shipment(ctx, shipment_id)
  v = ctx.q1("SELECT * FROM vehicles WHERE id = ?", vehicle_id)
  if v is None:
    raise ToolError(f"no vehicle with id {vehicle_id}")
  refused = {"ok": False, "shipment_id": shipment_id, "vehicle_id": vehicle_id}  # data, not an error result
  if s["status"] != "created":
    return {**refused, "error": f"shipment {shipment_id} is {s['status']}, only created shipments can be assigned"}
  if v["status"] != "active":
    return {**refused, "error": f"vehicle {vehicle_id} is in maintenance"}
  load = ctx.scalar("SELECT COALESCE(SUM(weight_kg), 0) FROM shipments WHERE vehicle_id = ? AND status IN "
                    "('assigned', 'in_transit')", vehicle_id)
  if round(load + s["weight_kg"], 1) > v["capacity_kg"]:   # weights have one decimal: no float noise
    return {**refused, "error": f"vehicle {vehicle_id} has {v['capacity_kg'] - load:.1f} kg free, shipment "
            f"weighs {s['weight_kg']} kg"}
  ctx.exec("UPDATE shipments SET vehicle_id = ?, status = 'assigned' WHERE id = ?", vehicle_id, shipment_id)
  return {"ok": True, "shipment_id": shipment_id, "vehicle_id": vehicle_id}


def _set_status(ctx, shipment_id, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  prev = _shipment(ctx, shipment_id)["status"]
  ctx.exec("UPDATE shipments SET status = ? WHERE id = ?", status, shipment_id)
  return {"id": shipment_id, "status": status, "previous": prev}


_CITY = B.p_str("city", G.CITIES)

TOOLS = (
    B.list_tool("list_shipments", "List shipments {id, tracking, origin_city, dest_city, weight_kg, status, "
                "vehicle_id, created, promised, delivered}, optionally filtered.", table="shipments",
                columns="id, tracking, origin_city, dest_city, weight_kg, status, vehicle_id, created, promised, "
                "delivered", filters=[
                    B.Filter("status", "status = ?", B.p_str("shipment status", STATUSES)),
                    B.Filter("origin_city", "origin_city = ?", _CITY),
                    B.Filter("dest_city", "dest_city = ?", _CITY),
                    B.Filter("tracking", "tracking = ?", B.p_str("exact tracking code")),
                    B.Filter("vehicle_id", "vehicle_id = ?", B.p_int("vehicle id")),
                    B.Filter("promised_before", "promised < ?", B.p_str("only shipments promised before this "
                                                                        "date (YYYY-MM-DD)"))]),
    B.list_tool("list_vehicles", "List vehicles {id, plate, depot, city, capacity_kg, status}, optionally "
                "filtered.", table="vehicles v JOIN depots d ON d.id = v.depot_id",
                columns="v.id AS id, v.plate AS plate, d.name AS depot, d.city AS city, v.capacity_kg AS "
                "capacity_kg, v.status AS status", order_by="v.id", filters=[
                    B.Filter("city", "d.city = ?", B.p_str("city of the vehicle's depot", G.CITIES)),
                    B.Filter("status", "v.status = ?", B.p_str("vehicle status", ("active", "maintenance")))]),
    B.tool("track_shipment", "The scan history of a shipment: {tracking, log} (free text).", _track,
           required=("tracking",), tracking=B.p_str("tracking code")),
    B.tool("assign_vehicle", "Assign a created shipment to a vehicle. Returns {ok: true, shipment_id, vehicle_id}, "
           "or {ok: false, shipment_id, vehicle_id, error} when the assignment is refused.", _assign,
           required=("shipment_id", "vehicle_id"),
           shipment_id=B.p_int("shipment id"), vehicle_id=B.p_int("vehicle id")),
    B.tool("set_shipment_status", "Set the status of one shipment.", _set_status,
           required=("shipment_id", "status"), shipment_id=B.p_int("shipment id"),
           status=B.p_str("new status", STATUSES)),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("logistics", "A parcel carrier's depots, vehicles and shipments.", SCHEMA, generate, TOOLS)

LATE_PORTO = """\
total, offset = 0.0, 0
while offset is not None:
    page = tools["list_shipments"](status="delivered", dest_city="Porto", limit=200, offset=offset)
    total += sum(s["weight_kg"] for s in page["items"] if s["delivered"] > s["promised"])
    offset = page["next_offset"]
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

LOADED = """\
from collections import defaultdict
load, offset = defaultdict(float), 0
while offset is not None:
    page = tools["list_shipments"](status="in_transit", limit=50, offset=offset)
    for s in page["items"]:
        load[s["vehicle_id"]] += s["weight_kg"]
    offset = page["next_offset"]
best = min(load, key=lambda v: (-round(load[v], 1), v))
plate = None
offset = 0
while plate is None:
    page = tools["list_vehicles"](limit=200, offset=offset)
    plate = next((v["plate"] for v in page["items"] if v["id"] == best), None)
    offset = page["next_offset"]
print(best, plate, round(load[best], 1))
tools["submit_answer"](answer=plate)
"""

EXCEPTIONS = """\
import re
out, offset = [], 0
while offset is not None:
    page = tools["list_shipments"](status="exception", limit=200, offset=offset)
    for s in page["items"]:
        log = tools["track_shipment"](tracking=s["tracking"])["log"]
        scans = re.findall(r"^(\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}): .* in (\\w+)\\.$", log, re.M)
        last_city = max(scans)[1]
        if last_city != s["dest_city"]:
            out.append(s["tracking"])
    offset = page["next_offset"]
print(len(out))
tools["submit_answer"](answer=out)
"""

ASSIGN = """\
vehicles = tools["list_vehicles"](city="Lisbon", status="active", limit=200)["items"]
left, offset = [], 0
waiting = []
while offset is not None:
    page = tools["list_shipments"](status="created", origin_city="Lisbon", limit=200, offset=offset)
    waiting += page["items"]
    offset = page["next_offset"]
for s in waiting:
    for v in vehicles:
        r = tools["assign_vehicle"](shipment_id=s["id"], vehicle_id=v["id"])
        if r.get("ok"):
            break
    else:
        left.append(s["tracking"])
print(len(waiting), left)
tools["submit_answer"](answer=left)
"""

LOST = """\
lost, offset = [], 0
while offset is not None:
    page = tools["list_shipments"](status="in_transit", promised_before="2024-06-20", limit=200, offset=offset)
    lost += page["items"]
    offset = page["next_offset"]
for s in lost:
    tools["set_shipment_status"](shipment_id=s["id"], status="exception")
rows = sorted(lost, key=lambda s: s["tracking"])
tools["write_file"](path="reports/lost_shipments.csv", content="tracking,dest_city,weight_kg\\n" +
                    "".join(f"{s['tracking']},{s['dest_city']},{s['weight_kg']}\\n" for s in rows))
print(len(lost))
tools["submit_answer"]()
"""

PICKUPS = """\
import json, re
files = [p for p in tools["list_files"]() if "2024-07-01" in p]
codes = []
for path in files:
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        codes += json.loads(text)["parcels"]
    else:
        codes += re.findall(r"LG\\d{8}", text)
n = 0
for code in codes:
    s = tools["list_shipments"](tracking=code)["items"][0]
    if s["status"] == "assigned":
        tools["set_shipment_status"](shipment_id=s["id"], status="in_transit")
        n += 1
print(len(files), len(codes), n)
tools["submit_answer"]()
"""


def _statuses(ctx):
  return {r["id"]: [r["status"], r["vehicle_id"]] for r in ctx.q("SELECT id, status, vehicle_id FROM shipments")}


def _same(ctx, want):
  return _statuses(ctx) == {int(k): list(v) for k, v in want.items()}


def _loaded(ctx):
  return ctx.scalar("SELECT v.plate FROM shipments s JOIN vehicles v ON v.id = s.vehicle_id WHERE s.status = "
                    "'in_transit' GROUP BY v.id ORDER BY -ROUND(SUM(s.weight_kg), 1), v.id LIMIT 1")


def _exceptions(ctx):
  import re
  out = []
  for r in ctx.q("SELECT tracking, dest_city, scan_log FROM shipments WHERE status = 'exception' ORDER BY id"):
    scans = re.findall(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}): .* in (\w+)\.$", r["scan_log"], re.M)
    if max(scans)[1] != r["dest_city"]:
      out.append(r["tracking"])
  return out


def _assign_expected(ctx):
  state = _statuses(ctx)
  vehicles = ctx.q("SELECT v.id, v.capacity_kg FROM vehicles v JOIN depots d ON d.id = v.depot_id WHERE d.city = "
                   "'Lisbon' AND v.status = 'active' ORDER BY v.id")
  load = {v["id"]: ctx.scalar("SELECT COALESCE(SUM(weight_kg), 0) FROM shipments WHERE vehicle_id = ? AND status "
                              "IN ('assigned', 'in_transit')", v["id"]) for v in vehicles}
  left = []
  for s in ctx.q("SELECT id, tracking, weight_kg FROM shipments WHERE status = 'created' AND origin_city = 'Lisbon' "
                 "ORDER BY id"):
    for v in vehicles:
      if round(load[v["id"]] + s["weight_kg"], 1) <= v["capacity_kg"]:
        load[v["id"]] += s["weight_kg"]
        state[s["id"]] = ["assigned", v["id"]]
        break
    else:
      left.append(s["tracking"])
  return {"answer": left, "state": state}


def _lost_expected(ctx):
  state = _statuses(ctx)
  rows = ctx.q("SELECT id, tracking, dest_city, weight_kg FROM shipments WHERE status = 'in_transit' AND promised < "
               "'2024-06-20' ORDER BY tracking")
  for r in rows:
    state[r["id"]][0] = "exception"
  return {"state": state, "lines": ["tracking,dest_city,weight_kg"] +
          [f"{r['tracking']},{r['dest_city']},{r['weight_kg']}" for r in rows]}


def _lost_check(ctx, e, a):
  text = ctx.read("reports/lost_shipments.csv")
  return (_same(ctx, e["state"]) and text is not None
          and [ln.strip() for ln in text.strip().splitlines()] == e["lines"])


def _pickups_expected(ctx):
  import re
  state = _statuses(ctx)
  for rel in ctx.files("inbox/dispatch/2024-07-01"):
    for code in re.findall(r"LG\d{8}", ctx.read(rel)):
      r = ctx.q1("SELECT id, status FROM shipments WHERE tracking = ?", code)
      if r["status"] == "assigned":
        state[r["id"]][0] = "in_transit"
  return state


TASKS = [
    B.Task(DOMAIN, "late_weight_porto",
           "What is the total weight in kg of the shipments to Porto that were delivered after their promised "
           "date? Round it to 2 decimals.", (LATE_PORTO,),
           lambda ctx: round(ctx.scalar("SELECT COALESCE(SUM(weight_kg), 0) FROM shipments WHERE status = "
                                        "'delivered' AND dest_city = 'Porto' AND delivered > promised"), 2),
           answer="number", wrong=('s["delivered"] > s["promised"]', 's["delivered"] >= s["promised"]'),
           conditions=(("Porto", (', dest_city="Porto"', '')),)),
    B.Task(DOMAIN, "most_loaded_vehicle",
           "Which vehicle carries the largest total weight of shipments that are in transit? Submit its plate "
           "(on a tie, the vehicle with the smaller id).", (LOADED,), _loaded, answer="text",
           wrong=("load[s[\"vehicle_id\"]] += s[\"weight_kg\"]", "load[s[\"vehicle_id\"]] += 1"), tags=("paging",),
           conditions=(("in transit", ('status="in_transit", ', ''),
                        ('load[s["vehicle_id"]] += s["weight_kg"]',
                         'if s["vehicle_id"] is not None: load[s["vehicle_id"]] += s["weight_kg"]')),)),
    B.Task(DOMAIN, "exceptions_off_route",
           "For every shipment whose status is 'exception', find the city of its most recent scan. Which of "
           "them were last scanned somewhere other than their destination city? Submit the list of their "
           "tracking codes.", (EXCEPTIONS,), _exceptions, answer="set",
           wrong=("last_city = max(scans)[1]", "last_city = scans[-1][1]"), tags=("errors",)),
    B.Task(DOMAIN, "assign_lisbon_pickups",
           "Assign every shipment with status 'created' whose origin is Lisbon to an active vehicle of a Lisbon "
           "depot. Go through the shipments in id order; for each, try the vehicles in id order and keep the "
           "first assignment that is accepted (a refused assignment changes nothing). Leave a shipment that "
           "no vehicle accepts unassigned. Submit the list of tracking codes of the shipments left unassigned.",
           (ASSIGN,), _assign_expected, answer="set", check=lambda ctx, e, a: _same(ctx, e["state"]),
           wrong=('if r.get("ok"):', "if r:"), tags=("errors",),
           conditions=(("origin Lisbon", (', origin_city="Lisbon"', '')),
                       ("Lisbon vehicles", ('city="Lisbon", status="active"', 'status="active"')))),
    B.Task(DOMAIN, "report_lost_shipments",
           "Every shipment still in transit whose promised date is before 2024-06-20 is considered lost. Set the "
           "status of each to 'exception', and write reports/lost_shipments.csv with the header line "
           "'tracking,dest_city,weight_kg' and one line per lost shipment, sorted by tracking code. Change no "
           "other shipment.", (LOST,), _lost_expected, check=_lost_check,
           wrong=('promised_before="2024-06-20", ', ""), tags=("writeback",),
           conditions=(("in transit", ('status="in_transit", ', '')),)),
    B.Task(DOMAIN, "apply_todays_pickups",
           "Today's pickup sheets from the depots are somewhere in the workspace; they name the shipments (by "
           "tracking code) that drivers collected today. Set every listed shipment that is currently 'assigned' "
           "to 'in_transit'. Do not change any other shipment.", (PICKUPS,), _pickups_expected,
           check=lambda ctx, e, a: _same(ctx, e), wrong=('if "2024-07-01" in p', 'if "dispatch" in p'),
           tags=("explore",),
           conditions=(("assigned", ('if s["status"] == "assigned":', 'if s["status"] != "in_transit":')),)),
]
