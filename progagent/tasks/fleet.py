"""Fleet domain: vehicles, trips and maintenance; driver logs are workspace files, fuel reports free text."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError

MODELS = ("Transit", "Sprinter", "Ducato", "Master", "Crafter", "Boxer")
KINDS = ("service", "brakes", "tyres", "inspection")
VSTATUS = ("active", "grounded")
REMARKS = ("tyre pressure ok", "brake noise when stopping", "mirror loose", "all fine", "Brakes feel soft",
           "low washer fluid", "engine light on", "clean cabin", "Engine Light flashing", "wipers worn")
PLATE_RE = r"[A-Z]{2}-\d{3}-[A-Z]{2}"

SCHEMA = """
CREATE TABLE vehicles (id INTEGER PRIMARY KEY, plate TEXT UNIQUE, model TEXT, year INTEGER, odometer INTEGER,
                       last_service_km INTEGER, status TEXT);
CREATE TABLE trips (id INTEGER PRIMARY KEY, vehicle_id INTEGER, driver TEXT, date TEXT, distance_km REAL,
                    fuel_l REAL, route TEXT);
CREATE TABLE maintenance (id INTEGER PRIMARY KEY AUTOINCREMENT, vehicle_id INTEGER, date TEXT, kind TEXT);
CREATE INDEX trips_vehicle ON trips(vehicle_id);
CREATE INDEX trips_date ON trips(date);
"""


def _plate(rng, used):
  letters = "ABCDEFGHJKLMNPRSTUVWXZ"
  while True:
    p = f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(100, 999)}-{rng.choice(letters)}{rng.choice(letters)}"
    if p not in used:
      used.add(p)
      return p


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  used: set = set()
  vehicles = []
  n_veh = 50 * f
  at_limit = set(rng.sample(range(n_veh), rng.randint(1, 3)))        # exactly 15000 km since service
  below = set(rng.sample(sorted(set(range(n_veh)) - at_limit), 2))    # just below: 14999 / 14000
  for i in range(n_veh):
    odo = rng.randint(20_000, 250_000)
    since = 15_000 if i in at_limit else rng.choice((14_999, 14_000)) if i in below else rng.randint(0, 30_000)
    vehicles.append({"id": i + 1, "plate": _plate(rng, used), "model": rng.choice(MODELS),
                     "year": rng.randint(2012, 2023), "odometer": odo, "last_service_km": odo - since,
                     "status": "active"})
  G.insert_rows(ctx, "vehicles", vehicles)
  eff = {v["id"]: rng.uniform(7, 14) for v in vehicles}
  thirsty = rng.choice(vehicles)["id"]     # the planted worst vehicle
  eff[thirsty] = rng.uniform(15.5, 17.5)
  drivers = G.unique_names(rng, 70 * f)
  trips = []
  for i in range(1150 * f):
    vid = rng.randint(1, n_veh)
    dist = round(rng.uniform(5, 400), 1)
    trips.append({"id": i + 1, "vehicle_id": vid, "driver": rng.choice(drivers), "date": G.rand_date(rng),
                  "distance_km": dist, "fuel_l": round(dist * eff[vid] / 100 * rng.uniform(0.9, 1.1), 1),
                  "route": f"{rng.choice(G.CITIES)} - {rng.choice(G.CITIES)}"})
  G.insert_rows(ctx, "trips", trips)
  G.insert_rows(ctx, "maintenance", [{"vehicle_id": rng.randint(1, n_veh), "date": G.rand_date(rng),
                                      "kind": rng.choice(KINDS)} for _ in range(70 * f)])
  G.write_docs(ctx, rng, "fleet", ["fleet_policy", "fuel_cards", "accidents", "routes", "drivers"])
  repeat = rng.choice(vehicles)["plate"]
  twice = rng.sample(range(B.n_data_files(f)), 2)
  logs = []
  for j in range(B.n_data_files(f)):
    lines = []
    for _ in range(rng.randint(3, 7)):
      lines.append(f"{G.rand_date(rng)} {rng.randint(6, 20):02d}:{rng.randint(0, 59):02d} "
                   f"{rng.choice(vehicles)['plate']}: {rng.choice(REMARKS)}")
    if j in twice:   # one vehicle reported twice, in two files
      lines.insert(rng.randint(0, len(lines)),
                   f"2024-06-{rng.randint(10, 28)} 07:30 {repeat}: brake noise when stopping")
    logs.append(lines)
  # both spellings of an engine-light report occur; one vehicle is reported only in capitals
  lower = {ln.split()[2].rstrip(":") for lines in logs for ln in lines if "engine light" in ln}
  for remark in ("engine light on", "Engine Light flashing"):
    plate = rng.choice([v["plate"] for v in vehicles if v["plate"] not in lower])
    lower.add(plate)
    lines = logs[rng.randrange(len(logs))]
    lines.insert(rng.randint(0, len(lines)), f"{G.rand_date(rng)} 18:05 {plate}: {remark}")
  for j, lines in enumerate(logs):
    ctx.write(f"driver_logs/log_{j + 1:03d}.txt", "\n".join(lines) + "\n")


# -- tools

def _vehicle(ctx, plate):
  r = ctx.q1("SELECT * FROM vehicles WHERE plate = ?", plate)
  if r is None:
    raise ToolError(f"no vehicle with plate {plate!r} (plates look like 'AB-123-CD')")
  return r


def _schedule(ctx, plate, date, kind):
  if kind not in KINDS:
    raise ToolError(f"unknown maintenance kind {kind!r}; use one of {list(KINDS)}")
  vid = _vehicle(ctx, plate)["id"]
  ctx.exec("INSERT INTO maintenance (vehicle_id, date, kind) VALUES (?, ?, ?)", vid, date, kind)
  return {"plate": plate, "date": date, "kind": kind}


def _set_status(ctx, plate, status):
  if status not in VSTATUS:
    raise ToolError(f"unknown vehicle status {status!r}; use one of {list(VSTATUS)}")
  prev = _vehicle(ctx, plate)["status"]
  ctx.exec("UPDATE vehicles SET status = ? WHERE plate = ?", status, plate)
  return {"plate": plate, "status": status, "previous": prev}


def _fuel_report(ctx, plate):
  """A free-text fuel report (the numbers must be parsed out of the sentence)."""
  v = _vehicle(ctx, plate)
  r = ctx.q1("SELECT COUNT(*) AS n, COALESCE(SUM(distance_km), 0) AS km, COALESCE(SUM(fuel_l), 0) AS fuel "
             "FROM trips WHERE vehicle_id = ?", v["id"])
  if not r["n"]:
    return {"plate": plate, "report": f"No trips were logged for {plate} this half-year."}
  return {"plate": plate, "report": f"Fuel card summary for {v['model']} {plate}: {r['n']} trips logged, "
          f"{r['km']:,.1f} km driven and {r['fuel']:,.1f} litres of diesel drawn since 2024-01-01."}


TOOLS = (
    B.list_tool("list_vehicles", "List vehicles: items {id, plate, model, year, odometer, last_service_km, status}.",
                table="vehicles", columns="id, plate, model, year, odometer, last_service_km, status",
                filters=[B.Filter("plate", "plate = ?", B.p_str("exact licence plate, e.g. 'AB-123-CD'")),
                         B.Filter("model", "model = ?", B.p_str("vehicle model", MODELS)),
                         B.Filter("status", "status = ?", B.p_str("vehicle status", VSTATUS)),
                         B.Filter("min_km_since_service", "odometer - last_service_km >= ?",
                                  B.p_int("only vehicles with odometer - last_service_km >= this"))]),
    B.list_tool("list_trips", "List trips: items {id, vehicle_id, date, distance_km, fuel_l}.", table="trips",
                columns="id, vehicle_id, date, distance_km, fuel_l",
                filters=[B.Filter("vehicle_id", "vehicle_id = ?", B.p_int("vehicle id")),
                         B.Filter("date_from", "date >= ?", B.p_str("first date, YYYY-MM-DD (inclusive)")),
                         B.Filter("date_to", "date <= ?", B.p_str("last date, YYYY-MM-DD (inclusive)")),
                         B.Filter("driver", "driver = ?", B.p_str("driver name"))]),
    B.list_tool("list_maintenance", "List maintenance jobs: items {id, vehicle_id, date, kind}.", table="maintenance",
                columns="id, vehicle_id, date, kind",
                filters=[B.Filter("vehicle_id", "vehicle_id = ?", B.p_int("vehicle id")),
                         B.Filter("kind", "kind = ?", B.p_str("job kind", KINDS))]),
    B.tool("fuel_report", "The fuel-card summary of one vehicle since 2024-01-01: {plate, report} (report is a "
           "sentence).", _fuel_report, required=("plate",), plate=B.p_str("licence plate")),
    B.tool("schedule_maintenance", "Schedule a maintenance job for a vehicle.", _schedule,
           required=("plate", "date", "kind"), plate=B.p_str("licence plate"), date=B.p_str("YYYY-MM-DD"),
           kind=B.p_str("job kind", KINDS)),
    B.tool("set_vehicle_status", "Set a vehicle's status (active or grounded).", _set_status,
           required=("plate", "status"), plate=B.p_str("licence plate"), status=B.p_str("new status", VSTATUS)),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("fleet", "A delivery company's vans, trips and maintenance.", SCHEMA, generate, TOOLS)

# -- oracles

DUE = """\
offset = 0
due = []
while offset is not None:
    page = tools["list_vehicles"](min_km_since_service=15000, limit=200, offset=offset)
    due += [v["plate"] for v in page["items"]]
    offset = page["next_offset"]
for plate in due:
    tools["schedule_maintenance"](plate=plate, date="2024-07-15", kind="service")
print(len(due), "scheduled")
tools["submit_answer"]()
"""

EFFICIENCY = r"""
import re
plates, offset = [], 0
while offset is not None:
    page = tools["list_vehicles"](limit=200, offset=offset)
    plates += [(v["id"], v["plate"]) for v in page["items"]]
    offset = page["next_offset"]
rate = {}
for vid, plate in plates:
    text = tools["fuel_report"](plate=plate)["report"]
    m = re.search(r"([\d,.]+) km driven and ([\d,.]+) litres", text)
    if m:
        km, litres = (float(x.replace(",", "")) for x in m.groups())
        if km > 0:
            rate[plate] = (100 * litres / km, vid)
best = min(rate, key=lambda p: (-round(rate[p][0], 6), rate[p][1]))
print(best, rate[best][0])
tools["submit_answer"](answer=best)
"""

MAY = """\
total, offset = 0.0, 0
while offset is not None:
    page = tools["list_trips"](date_from="2024-05-01", date_to="2024-05-31", limit=200, offset=offset)
    total += sum(t["distance_km"] for t in page["items"])
    offset = page["next_offset"]
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

GROUND = r"""
import re
plates = []
for path in tools["list_files"](directory="driver_logs"):
    for line in tools["read_file"](path=path)["content"].splitlines():
        if "engine light" in line.lower():
            plate = re.search(r"[A-Z]{2}-\d{3}-[A-Z]{2}", line).group(0)
            if plate not in plates:
                plates.append(plate)
rows = []
for plate in sorted(plates):
    v = tools["list_vehicles"](plate=plate)["items"][0]
    tools["set_vehicle_status"](plate=plate, status="grounded")
    tools["schedule_maintenance"](plate=plate, date="2024-07-08", kind="inspection")
    rows.append(f"{plate},{v['model']}")
tools["write_file"](path="reports/grounded.csv", content="plate,model\n" + "\n".join(rows) + "\n")
print(rows)
tools["submit_answer"]()
"""


def _new_jobs(ctx, e):
  return sorted((r["vehicle_id"], r["date"], r["kind"]) for r in ctx.q("SELECT * FROM maintenance WHERE id > ?",
                                                                        e["max_id"]))


def _due_expected(ctx):
  return {"max_id": ctx.scalar("SELECT MAX(id) FROM maintenance"),
          "jobs": sorted((r["id"], "2024-07-15", "service") for r in ctx.q(
              "SELECT id FROM vehicles WHERE odometer - last_service_km >= 15000"))}


def _log_plates(ctx, needle):
  import re
  plates = set()
  for rel in ctx.files("driver_logs"):
    for line in ctx.read(rel).splitlines():
      if needle in line.lower():
        plates.add(re.search(PLATE_RE, line).group(0))
  return sorted(plates)


def _brakes_expected(ctx):
  ids = {ctx.scalar("SELECT id FROM vehicles WHERE plate = ?", p) for p in _log_plates(ctx, "brake")}
  return {"max_id": ctx.scalar("SELECT MAX(id) FROM maintenance"),
          "jobs": sorted((i, "2024-07-10", "brakes") for i in ids)}


def _jobs_check(ctx, e, a):
  return _new_jobs(ctx, e) == [tuple(j) for j in e["jobs"]]


def _worst(ctx):
  best = None
  for r in ctx.q("SELECT v.id, v.plate, SUM(t.distance_km) AS km, SUM(t.fuel_l) AS fuel FROM trips t "
                 "JOIN vehicles v ON v.id = t.vehicle_id GROUP BY v.id ORDER BY v.id"):
    km, fuel = round(r["km"], 1), round(r["fuel"], 1)   # what the report shows
    if km > 0:
      key = (-round(100 * fuel / km, 6), r["id"])
      if best is None or key < best[0]:
        best = (key, r["plate"])
  return best[1]


def _ground_expected(ctx):
  plates = _log_plates(ctx, "engine light")
  ids = [ctx.scalar("SELECT id FROM vehicles WHERE plate = ?", p) for p in plates]
  return {"max_id": ctx.scalar("SELECT MAX(id) FROM maintenance"),
          "jobs": sorted((i, "2024-07-08", "inspection") for i in ids),
          "status": {r["plate"]: ("grounded" if r["plate"] in plates else r["status"])
                     for r in ctx.q("SELECT plate, status FROM vehicles")},
          "csv": {p: ctx.scalar("SELECT model FROM vehicles WHERE plate = ?", p) for p in plates}}


def _ground_check(ctx, e, a):
  if not _jobs_check(ctx, e, a):
    return False
  if {r["plate"]: r["status"] for r in ctx.q("SELECT plate, status FROM vehicles")} != e["status"]:
    return False
  text = ctx.read("reports/grounded.csv")
  if text is None:
    return False
  lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
  if not lines or lines[0].replace(" ", "").lower() != "plate,model":
    return False
  got = {}
  for ln in lines[1:]:
    parts = [p.strip() for p in ln.split(",")]
    if len(parts) != 2 or parts[0] in got:
      return False
    got[parts[0]] = parts[1]
  return got == e["csv"]


TASKS = [
    B.Task(DOMAIN, "schedule_due_service",
           "Schedule a maintenance job of kind 'service' on 2024-07-15 for every vehicle that has driven at least "
           "15000 km since its last service (odometer - last_service_km). Schedule nothing else.", (DUE,),
           _due_expected, check=_jobs_check, wrong=("min_km_since_service=15000", "min_km_since_service=15001")),
    B.Task(DOMAIN, "worst_fuel_efficiency",
           "Which vehicle used the most fuel per 100 km over all its trips (total fuel / total distance, as shown "
           "in its fuel report)? Submit its plate (on a tie, the vehicle with the smaller id).", (EFFICIENCY,),
           _worst, answer="text", tags=("errors",),
           wrong=("best = min(rate, key=lambda p: (-round(rate[p][0], 6), rate[p][1]))",
                  "best = min(rate, key=lambda p: (round(rate[p][0], 6), rate[p][1]))")),
    B.Task(DOMAIN, "may_distance",
           "What total distance did the whole fleet drive in May 2024? Submit the kilometres rounded to 1 decimal.",
           (MAY,), lambda ctx: round(ctx.scalar("SELECT SUM(distance_km) FROM trips WHERE date LIKE '2024-05-%'"), 1),
           answer="number", tags=("paging",), wrong=('date_to="2024-05-31"', 'date_to="2024-05-30"'),
           conditions=(("May", ('date_from="2024-05-01", date_to="2024-05-31", ', '')),)),
    B.Task(DOMAIN, "brake_reports",
           "Every vehicle mentioned in a driver log line (driver_logs/) that contains the word 'brake' (any letter "
           "case) needs one maintenance job of kind 'brakes' on 2024-07-10: schedule exactly one per vehicle, and "
           "nothing else.", (BRAKES,), _brakes_expected, check=_jobs_check,
           wrong=("            if plate not in plates:\n                plates.append(plate)",
                  "            plates.append(plate)")),
    B.Task(DOMAIN, "ground_engine_lights",
           "Driver logs (driver_logs/) mention vehicles whose engine light came on (a line containing 'engine "
           "light', any letter case). For each such vehicle: set its status to 'grounded', schedule one "
           "maintenance job of kind 'inspection' on 2024-07-08, and list it in a new file reports/grounded.csv "
           "with the header line 'plate,model' and one 'plate,model' line per vehicle. Change nothing else.",
           (GROUND,), _ground_expected, check=_ground_check, tags=("writeback",),
           wrong=('if "engine light" in line.lower():', 'if "engine light" in line:')),
]
