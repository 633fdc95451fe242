"""Fleet domain: vehicles, trips and maintenance; driver logs are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

MODELS = ("Transit", "Sprinter", "Ducato", "Master", "Crafter", "Boxer")
KINDS = ("service", "brakes", "tyres", "inspection")
REMARKS = ("tyre pressure ok", "brake noise when stopping", "mirror loose", "all fine", "Brakes feel soft",
           "low washer fluid", "engine light on", "clean cabin")

SCHEMA = """
CREATE TABLE vehicles (id INTEGER PRIMARY KEY, plate TEXT UNIQUE, model TEXT, year INTEGER, odometer INTEGER,
                       last_service_km INTEGER);
CREATE TABLE trips (id INTEGER PRIMARY KEY, vehicle_id INTEGER, driver TEXT, date TEXT, distance_km REAL,
                    fuel_l REAL, route TEXT);
CREATE TABLE maintenance (id INTEGER PRIMARY KEY AUTOINCREMENT, vehicle_id INTEGER, date TEXT, kind TEXT);
CREATE INDEX trips_vehicle ON trips(vehicle_id);
"""


def _plate(rng, used):
  while True:
    p = f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}-{rng.randint(100, 999)}-" \
        f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXZ')}"
    if p not in used:
      used.add(p)
      return p


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  used: set = set()
  vehicles = []
  for i in range(50 * f):
    odo = rng.randint(20_000, 250_000)
    since = 15_000 if i == 0 else 14_000 if i == 1 else rng.randint(0, 30_000)
    vehicles.append({"id": i + 1, "plate": _plate(rng, used), "model": rng.choice(MODELS),
                     "year": rng.randint(2012, 2023), "odometer": odo, "last_service_km": odo - since})
  B.insert_rows(ctx, "vehicles", vehicles)
  eff = {v["id"]: rng.uniform(7, 14) for v in vehicles}
  drivers = B.unique_names(rng, 70 * f)
  trips = []
  for i in range(1150 * f):
    vid = rng.randint(1, len(vehicles))
    dist = round(rng.uniform(5, 400), 1)
    trips.append({"id": i + 1, "vehicle_id": vid, "driver": rng.choice(drivers), "date": B.rand_date(rng),
                  "distance_km": dist, "fuel_l": round(dist * eff[vid] / 100 * rng.uniform(0.9, 1.1), 1),
                  "route": f"{rng.choice(B.CITIES)} - {rng.choice(B.CITIES)}"})
  B.insert_rows(ctx, "trips", trips)
  B.insert_rows(ctx, "maintenance", [{"vehicle_id": rng.randint(1, len(vehicles)), "date": B.rand_date(rng),
                                      "kind": rng.choice(KINDS)} for _ in range(70 * f)])
  B.write_docs(ctx, rng, "fleet", ["fleet_policy", "fuel_cards", "accidents", "routes", "drivers"])
  repeat = vehicles[rng.randint(0, len(vehicles) - 1)]["plate"]
  for j in range(B.n_data_files(f)):
    lines = []
    for _ in range(rng.randint(3, 7)):
      lines.append(f"{B.rand_date(rng)} {rng.randint(6, 20):02d}:{rng.randint(0, 59):02d} "
                   f"{rng.choice(vehicles)['plate']}: {rng.choice(REMARKS)}")
    if j < 2:   # one vehicle reported twice, in two files
      lines.append(f"2024-06-{10 + j} 07:30 {repeat}: brake noise when stopping")
    ctx.write(f"driver_logs/log_{j + 1:03d}.txt", "\n".join(lines) + "\n")


def _vehicle_id(ctx, plate):
  r = ctx.q1("SELECT id FROM vehicles WHERE plate = ?", plate)
  if r is None:
    raise ToolError(f"no vehicle with plate {plate!r} (plates look like 'AB-123-CD')")
  return r["id"]


def _list_trips(ctx, vehicle_id):
  if ctx.q1("SELECT id FROM vehicles WHERE id = ?", vehicle_id) is None:
    raise ToolError(f"no vehicle with id {vehicle_id}")
  return ctx.q("SELECT id, date, distance_km, fuel_l, driver FROM trips WHERE vehicle_id = ? ORDER BY id", vehicle_id)


def _schedule(ctx, plate, date, kind):
  if kind not in KINDS:
    raise ToolError(f"unknown maintenance kind {kind!r}; use one of {list(KINDS)}")
  vid = _vehicle_id(ctx, plate)
  ctx.exec("INSERT INTO maintenance (vehicle_id, date, kind) VALUES (?, ?, ?)", vid, date, kind)
  return {"plate": plate, "date": date, "kind": kind}


TOOLS = (
    B.tool("list_vehicles", "List the vehicles: [{id, plate, model, odometer, last_service_km}].",
           lambda ctx: ctx.q("SELECT id, plate, model, odometer, last_service_km FROM vehicles ORDER BY id")),
    B.tool("get_vehicle", "Get one vehicle by plate.",
           lambda ctx, plate: ctx.q1("SELECT * FROM vehicles WHERE id = ?", _vehicle_id(ctx, plate)),
           required=("plate",), plate=B.p_str("licence plate")),
    B.tool("list_trips", "List a vehicle's trips: [{id, date, distance_km, fuel_l, driver}].", _list_trips,
           required=("vehicle_id",), vehicle_id=B.p_int("vehicle id")),
    B.tool("list_maintenance", "List a vehicle's maintenance records: [{id, date, kind}].",
           lambda ctx, plate: ctx.q("SELECT id, date, kind FROM maintenance WHERE vehicle_id = ? ORDER BY id",
                                    _vehicle_id(ctx, plate)), required=("plate",), plate=B.p_str("licence plate")),
    B.tool("schedule_maintenance", "Schedule a maintenance job for a vehicle.", _schedule,
           required=("plate", "date", "kind"), plate=B.p_str("licence plate"), date=B.p_str("YYYY-MM-DD"),
           kind=B.p_str("job kind", KINDS)),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("fleet", "A delivery company's vans, trips and maintenance.", SCHEMA, generate, TOOLS)

DUE = """\
for v in tools["list_vehicles"]():
    if v["odometer"] - v["last_service_km"] >= 15000:
        tools["schedule_maintenance"](plate=v["plate"], date="2024-07-15", kind="service")
tools["submit_answer"]()
"""

EFFICIENCY = """\
rate = {}
for v in tools["list_vehicles"]():
    trips = tools["list_trips"](vehicle_id=v["id"])
    km = sum(t["distance_km"] for t in trips)
    if km > 0:
        rate[v["plate"]] = (100 * sum(t["fuel_l"] for t in trips) / km, v["id"])
best = min(rate, key=lambda p: (-round(rate[p][0], 6), rate[p][1]))
print(best, rate[best][0])
tools["submit_answer"](answer=best)
"""

MAY = """\
total = 0.0
for v in tools["list_vehicles"]():
    total += sum(t["distance_km"] for t in tools["list_trips"](vehicle_id=v["id"]) if t["date"].startswith("2024-05"))
print(round(total, 1))
tools["submit_answer"](answer=round(total, 1))
"""

BRAKES = r"""
import re
plates = []
for path in tools["list_files"](directory="driver_logs"):
    for line in tools["read_file"](path=path)["content"].splitlines():
        if "brake" in line.lower():
            plate = re.search(r"[A-Z]{2}-\d{3}-[A-Z]{2}", line).group(0)
            if plate not in plates:
                plates.append(plate)
for plate in plates:
    tools["schedule_maintenance"](plate=plate, date="2024-07-10", kind="brakes")
print(plates)
tools["submit_answer"]()
"""


def _new_jobs(ctx, e):
  return sorted((r["vehicle_id"], r["date"], r["kind"]) for r in ctx.q("SELECT * FROM maintenance WHERE id > ?",
                                                                        e["max_id"]))


def _due_expected(ctx):
  return {"max_id": ctx.scalar("SELECT MAX(id) FROM maintenance"),
          "jobs": sorted((r["id"], "2024-07-15", "service") for r in ctx.q(
              "SELECT id FROM vehicles WHERE odometer - last_service_km >= 15000"))}


def _brakes_expected(ctx):
  import re
  ids = set()
  for rel in ctx.files("driver_logs"):
    for line in ctx.read(rel).splitlines():
      if "brake" in line.lower():
        ids.add(ctx.scalar("SELECT id FROM vehicles WHERE plate = ?", re.search(r"[A-Z]{2}-\d{3}-[A-Z]{2}", line).group(0)))
  return {"max_id": ctx.scalar("SELECT MAX(id) FROM maintenance"),
          "jobs": sorted((i, "2024-07-10", "brakes") for i in ids)}


def _jobs_check(ctx, e, a):
  return _new_jobs(ctx, e) == [tuple(j) for j in e["jobs"]]


TASKS = [
    B.Task(DOMAIN, "schedule_due_service",
           "Schedule a maintenance job of kind 'service' on 2024-07-15 for every vehicle that has driven at least "
           "15000 km since its last service (odometer - last_service_km). Schedule nothing else.", (DUE,),
           _due_expected, check=_jobs_check, wrong=(">= 15000", "> 15000")),
    B.Task(DOMAIN, "worst_fuel_efficiency",
           "Which vehicle used the most fuel per 100 km over all its trips (total fuel / total distance)? Submit "
           "its plate (on a tie, the vehicle with the smaller id).", (EFFICIENCY,),
           lambda ctx: ctx.scalar("SELECT v.plate FROM trips t JOIN vehicles v ON v.id = t.vehicle_id GROUP BY v.id "
                                  "ORDER BY -ROUND(100 * SUM(t.fuel_l) / SUM(t.distance_km), 6), v.id LIMIT 1"),
           answer="text", wrong=("best = min(rate, key=lambda p: (-round(rate[p][0], 6), rate[p][1]))",
                                 "best = sorted(rate, key=lambda p: (-round(rate[p][0], 6), rate[p][1]))[1]")),
    B.Task(DOMAIN, "may_distance",
           "What total distance did the whole fleet drive in May 2024? Submit the kilometres rounded to 1 decimal.",
           (MAY,), lambda ctx: round(ctx.scalar("SELECT SUM(distance_km) FROM trips WHERE date LIKE '2024-05-%'"), 1),
           answer="number", wrong=('t["date"].startswith("2024-05")', 't["date"] >= "2024-05"')),
    B.Task(DOMAIN, "brake_reports",
           "Every vehicle mentioned in a driver log line (driver_logs/) that contains the word 'brake' (any letter "
           "case) needs one maintenance job of kind 'brakes' on 2024-07-10: schedule exactly one per vehicle, and "
           "nothing else.", (BRAKES,), _brakes_expected, check=_jobs_check,
           wrong=("            if plate not in plates:\n                plates.append(plate)",
                  "            plates.append(plate)")),
]
