"""Energy domain: sites, utility meters and weekly readings; field inspection reports are workspace files."""

from __future__ import annotations

import datetime
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

KINDS = ("electricity", "gas", "solar")
MSTATUS = ("active", "faulty", "review", "retired")
ORDER_KINDS = ("inspect", "replace", "calibrate")
SITE_KINDS = ("Depot", "Plant", "Office", "Warehouse", "Campus", "Yard", "Lab")
HARBOUR = "Harbour Depot"    # the site the consumption task names
WEEKS = [(datetime.date(2024, 1, 1) + datetime.timedelta(weeks=k)).isoformat() for k in range(26)]
CONDITIONS = ("good", "worn", "damaged", "good", "good")

SCHEMA = """
CREATE TABLE sites (id INTEGER PRIMARY KEY, name TEXT UNIQUE, city TEXT);
CREATE TABLE meters (id INTEGER PRIMARY KEY, serial TEXT UNIQUE, site_id INTEGER, kind TEXT, unit TEXT,
                     installed TEXT, status TEXT, comm_fail INTEGER, checks_failed INTEGER);
CREATE TABLE readings (id INTEGER PRIMARY KEY, meter_id INTEGER, week TEXT, value REAL);
CREATE TABLE work_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, serial TEXT, kind TEXT, date TEXT, note TEXT);
CREATE INDEX readings_meter ON readings(meter_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  names = {HARBOUR}
  while len(names) < 12 * f:
    names.add(f"{rng.choice(G.LAST)} {rng.choice(SITE_KINDS)}")
  names = sorted(names - {HARBOUR})
  rng.shuffle(names)
  names.insert(rng.randint(0, len(names)), HARBOUR)
  sites = [{"id": i + 1, "name": n, "city": rng.choice(G.CITIES)} for i, n in enumerate(names)]
  G.insert_rows(ctx, "sites", sites)
  harbour = names.index(HARBOUR) + 1
  top = rng.choice([s["id"] for s in sites if s["id"] != harbour])   # the biggest consumer in June
  serials: set = set()
  meters = []

  def meter(site, kind, unit="kWh", status="active", installed=None):
    while True:
      sn = f"{kind[0].upper()}M-{rng.randint(10000, 99999)}"
      if sn not in serials:
        serials.add(sn)
        break
    meters.append({"id": len(meters) + 1, "serial": sn, "site_id": site, "kind": kind, "unit": unit,
                   "installed": installed or G.rand_date(rng, "2010-01-01", "2023-12-31"), "status": status,
                   "comm_fail": rng.choice((0, 0, 1, 2)), "checks_failed": rng.choice((0, 0, 0, 1, 2))})
    return meters[-1]

  for s in sites:   # every site: 2-3 electricity meters, a gas meter, often a solar meter
    for _ in range(4 if s["id"] == top else rng.randint(2, 3)):
      meter(s["id"], "electricity", status=rng.choice(("active",) * 8 + ("faulty",)))
    meter(s["id"], "gas", unit="m3", status=rng.choice(("active",) * 5 + ("faulty",)))
    if rng.random() < 0.6:
      meter(s["id"], "solar", status=rng.choice(("active",) * 6 + ("faulty",)))
  # older electricity meters count watt-hours (the unit field says so); never at the top site
  elec = [m for m in meters if m["kind"] == "electricity"]
  wh = rng.sample([m for m in elec if m["site_id"] not in (top, harbour)], rng.randint(3, 5) * f)
  wh.append(rng.choice([m for m in elec if m["site_id"] == harbour]))
  for m in wh:
    m["unit"] = "Wh"
  # an old faulty gas meter (must stay faulty) and old active ones (to retire)
  for m in rng.sample([m for m in meters if m["kind"] == "gas"], 3 + f):
    m["installed"] = G.rand_date(rng, "2009-01-01", "2014-12-31")
  old_gas = [m for m in meters if m["kind"] == "gas" and m["installed"] < "2015-01-01"]
  old_gas[0]["status"] = "faulty"
  old_gas[-1]["status"] = "active"
  solar = [m for m in meters if m["kind"] == "solar"]
  for m in solar[:3]:
    m["status"] = "active"
  solar = [m for m in solar if m["status"] == "active"]
  solar[0]["checks_failed"], solar[1]["checks_failed"], solar[-1]["checks_failed"] = 0, 1, rng.randint(2, 3)
  base = {m["id"]: rng.uniform(1300, 1600) if m["site_id"] == top else rng.uniform(100, 600) for m in meters}
  spikes = set(rng.sample([m["id"] for m in elec if m["site_id"] != top], rng.randint(2, 4)))
  spikes.add(rng.choice([m["id"] for m in wh]))
  readings = []
  for m in meters:
    spike_week = rng.choice(WEEKS[22:]) if m["id"] in spikes else None
    for w in WEEKS:
      kwh = base[m["id"]] * rng.uniform(0.8, 1.2)
      if w == spike_week:
        kwh = rng.uniform(2100, 4000)
      value = round(kwh * 1000) if m["unit"] == "Wh" else round(kwh, 1)
      readings.append({"id": len(readings) + 1, "meter_id": m["id"], "week": w, "value": value})
  G.write_docs(ctx, rng, "energy", ["metering", "tariffs", "safety", "contacts", "reporting"])
  # inspection reports: CSV, JSON and 'key: value' text, in a folder the instructions do not name
  n = B.n_data_files(f)
  fmts = ["csv", "json", "txt"] * n
  rng.shuffle(fmts)
  fmts = fmts[:n]
  fmts[:3] = ["csv", "json", "txt"]
  sampled = rng.sample(meters, 5 * n)
  for j, fmt in enumerate(fmts):
    batch = sampled[5 * j:5 * j + 5]
    rows = [(m["serial"], "damaged" if k == 0 else rng.choice(CONDITIONS), rng.choice(G.FIRST)) for k, m in
            enumerate(batch)]
    rng.shuffle(rows)
    date = G.rand_date(rng, "2024-05-01", "2024-06-28")
    if fmt == "csv":
      text = "serial,condition,technician\n" + "".join(f"{s},{c},{t}\n" for s, c, t in rows)
    elif fmt == "json":
      text = json.dumps({"date": date, "meters": [{"meter": s, "condition": c, "by": t} for s, c, t in rows]},
                        indent=1) + "\n"
    else:
      text = f"Inspection round {date}\n\n" + "\n".join(f"Meter: {s}\nCondition: {c.upper()}\nTechnician: {t}\n"
                                                         for s, c, t in rows)
    ctx.write(f"field/2024/inspection_{j + 1:03d}.{fmt}", text)
  _plant_distractors(rng, sites, meters, readings, top, harbour, meter)
  G.insert_rows(ctx, "meters", meters)
  G.insert_rows(ctx, "readings", readings)


def _plant_distractors(rng, sites, meters, readings, top, harbour, meter) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): a site with huge electricity readings before June
  (top_site_june / june_spike_review without the June weeks), a site whose gas meter reads more in June than
  all meters of the top site together (top_site_june / june_spike_review without 'electricity'), and a faulty
  solar meter with a failed self-test check (failed_selftests without 'active')."""
  others = [s["id"] for s in sites if s["id"] not in (top, harbour)]
  before, gas_site = rng.sample(others, 2)
  by_meter = {}
  for r in readings:
    by_meter.setdefault(r["meter_id"], []).append(r)
  for m in meters:
    if m["site_id"] == before and m["kind"] == "electricity":   # > 2 meters x 22 weeks x 5000 > the top site's year
      for r in by_meter[m["id"]][:22]:
        kwh = rng.uniform(5000, 6000)
        r["value"] = round(kwh * 1000) if m["unit"] == "Wh" else round(kwh, 1)
    if m["site_id"] == gas_site and m["kind"] == "gas":   # 4 June weeks x 12000 > every meter of the top site
      for r in by_meter[m["id"]][22:]:
        r["value"] = round(rng.uniform(12000, 14000), 1)
  site = rng.choice([s for s in others if s not in (before, gas_site)])
  m = meter(site, "solar", status="faulty")
  m["checks_failed"] = rng.randint(1, 3)
  for w in WEEKS:
    readings.append({"id": len(readings) + 1, "meter_id": m["id"], "week": w,
                     "value": round(rng.uniform(100, 600), 1)})


# -- tools

def _meter(ctx, serial):
  r = ctx.q1("SELECT * FROM meters WHERE serial = ?", serial)
  if r is None:
    raise ToolError(f"no meter with serial {serial!r} (serials look like 'EM-12345')")
  return r


def _diagnostics(ctx, serial):
  m = _meter(ctx, serial)
  key = ("run_diagnostics", serial)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if n < m["comm_fail"]:
    return {"serial": serial, "ok": False, "error": "meter did not answer (timeout); try again"}
  k = m["checks_failed"]
  return {"serial": serial, "ok": True, "report": f"Self-test of {m['kind']} meter {serial} finished: {5 - k} of 5 "
          f"checks passed, {k} failed" + (". Register and clock look normal." if k == 0 else
                                           ". See the service manual for the failed checks.")}


def _set_status(ctx, serial, status):
  if status not in MSTATUS:
    raise ToolError(f"unknown meter status {status!r}; use one of {list(MSTATUS)}")
  prev = _meter(ctx, serial)["status"]
  ctx.exec("UPDATE meters SET status = ? WHERE serial = ?", status, serial)
  return {"serial": serial, "status": status, "previous": prev}


def _work_order(ctx, serial, kind, date, note=""):
  if kind not in ORDER_KINDS:
    raise ToolError(f"unknown work order kind {kind!r}; use one of {list(ORDER_KINDS)}")
  _meter(ctx, serial)
  ctx.exec("INSERT INTO work_orders (serial, kind, date, note) VALUES (?, ?, ?, ?)", serial, kind, date, note or "")
  return {"serial": serial, "kind": kind, "date": date, "created": True}


READINGS_TABLE = "readings r JOIN meters m ON m.id = r.meter_id"

TOOLS = (
    B.list_tool("list_sites", "List sites: items {id, name, city}.", table="sites", columns="id, name, city",
                filters=[B.Filter("name", "name = ?", B.p_str("exact site name")),
                         B.Filter("city", "city = ?", B.p_str("city"))]),
    B.list_tool("list_meters", "List meters: items {id, serial, site_id, kind, unit, installed, status}.",
                table="meters", columns="id, serial, site_id, kind, unit, installed, status",
                filters=[B.Filter("site_id", "site_id = ?", B.p_int("site id")),
                         B.Filter("kind", "kind = ?", B.p_str("meter kind", KINDS)),
                         B.Filter("status", "status = ?", B.p_str("meter status", MSTATUS)),
                         B.Filter("serial", "serial = ?", B.p_str("exact serial")),
                         B.Filter("installed_before", "installed < ?", B.p_str("only meters installed before this "
                                                                               "date, YYYY-MM-DD"))]),
    B.list_tool("list_readings", "List weekly meter readings: items {id, meter_id, week, value} (week = the "
                "Monday the week starts; value as the meter counts it).", table=READINGS_TABLE,
                columns="r.id AS id, r.meter_id AS meter_id, r.week AS week, r.value AS value", order_by="r.id",
                filters=[B.Filter("meter_id", "r.meter_id = ?", B.p_int("meter id")),
                         B.Filter("site_id", "m.site_id = ?", B.p_int("site id of the meter")),
                         B.Filter("kind", "m.kind = ?", B.p_str("meter kind", KINDS)),
                         B.Filter("week_from", "r.week >= ?", B.p_str("first week start, YYYY-MM-DD (inclusive)")),
                         B.Filter("week_to", "r.week <= ?", B.p_str("last week start, YYYY-MM-DD (inclusive)")),
                         B.Filter("min_value", "r.value >= ?", B.p_num("only readings with value >= this"))]),
    B.tool("run_diagnostics", "Run a meter's remote self-test: {serial, ok, report} with a one-line report, or "
           "{serial, ok: false, error} when the meter does not answer.", _diagnostics, required=("serial",),
           serial=B.p_str("meter serial")),
    B.tool("set_meter_status", "Set a meter's status.", _set_status, required=("serial", "status"),
           serial=B.p_str("meter serial"), status=B.p_str("new status", MSTATUS)),
    B.tool("create_work_order", "Open a work order for a meter.", _work_order, required=("serial", "kind", "date"),
           serial=B.p_str("meter serial"), kind=B.p_str("work order kind", ORDER_KINDS),
           date=B.p_str("YYYY-MM-DD"), note=B.p_str("free-text note (optional)")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("energy", "A facilities company's sites, utility meters and weekly readings.", SCHEMA, generate,
                  TOOLS)

# -- oracles

PAGES = B.paging_prelude("all_pages", kwargs="kw", rows="out")

HARBOUR_Q2 = PAGES + """
site = tools["list_sites"](name="Harbour Depot")["items"][0]
unit = {m["id"]: m["unit"] for m in all_pages("list_meters", site_id=site["id"], kind="electricity")}
total = 0.0
for r in all_pages("list_readings", site_id=site["id"], kind="electricity", week_from="2024-04-01",
                   week_to="2024-06-24"):
    total += r["value"] / 1000 if unit[r["meter_id"]] == "Wh" else r["value"]
print(unit, round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

SELFTEST = PAGES + r"""
import re
failed = []
for m in all_pages("list_meters", kind="solar", status="active"):
    for attempt in range(5):
        r = tools["run_diagnostics"](serial=m["serial"])
        if r["ok"]:
            break
    else:
        raise RuntimeError("no answer from " + m["serial"])
    n_failed = int(re.search(r"(\d+) failed", r["report"]).group(1))
    if n_failed > 0:
        failed.append(m["serial"])
print(failed)
tools["submit_answer"](answer=failed)
"""

DAMAGED = r"""
import csv, io, json
damaged = set()
for path in tools["list_files"]():
    if not path.startswith("field/"):
        continue
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".csv"):
        for row in csv.DictReader(io.StringIO(text)):
            if row["condition"].strip().lower() == "damaged":
                damaged.add(row["serial"].strip())
    elif path.endswith(".json"):
        for row in json.loads(text)["meters"]:
            if row["condition"].lower() == "damaged":
                damaged.add(row["meter"])
    else:
        serial = None
        for line in text.splitlines():
            if line.startswith("Meter:"):
                serial = line.split(":", 1)[1].strip()
            elif line.startswith("Condition:") and line.split(":", 1)[1].strip().lower() == "damaged":
                damaged.add(serial)
print(sorted(damaged))
tools["submit_answer"](answer=sorted(damaged))
"""

SPIKES = PAGES + """
unit = {m["id"]: (m["serial"], m["unit"]) for m in all_pages("list_meters", kind="electricity")}
peak = {}
for r in all_pages("list_readings", kind="electricity", week_from="2024-06-03", week_to="2024-06-24", min_value=2000):
    serial, u = unit[r["meter_id"]]
    kwh = r["value"] / 1000 if u == "Wh" else r["value"]
    if kwh > 2000:
        peak[serial] = max(peak.get(serial, 0.0), kwh)
lines = ["serial,kwh"]
for serial in sorted(peak):
    tools["set_meter_status"](serial=serial, status="review")
    tools["create_work_order"](serial=serial, kind="inspect", date="2024-07-03",
                               note=f"June peak {peak[serial]:.1f} kWh")
    lines.append(f"{serial},{peak[serial]:.1f}")
tools["write_file"](path="reviews/june_spikes.csv", content="\\n".join(lines) + "\\n")
print(lines)
tools["submit_answer"]()
"""

RETIRE = PAGES + """
old = all_pages("list_meters", kind="gas", status="active", installed_before="2015-01-01")
for m in old:
    tools["set_meter_status"](serial=m["serial"], status="retired")
print(len(old))
tools["submit_answer"]()
"""

TOP_SITE = PAGES + """
meters = {m["id"]: m for m in all_pages("list_meters", kind="electricity")}
use = {}
for r in all_pages("list_readings", kind="electricity", week_from="2024-06-03", week_to="2024-06-24"):
    m = meters[r["meter_id"]]
    use[m["site_id"]] = use.get(m["site_id"], 0.0) + (r["value"] / 1000 if m["unit"] == "Wh" else r["value"])
best = min(use, key=lambda s: (-use[s], s))
name = {s["id"]: s["name"] for s in all_pages("list_sites")}[best]
print(name, use[best])
tools["submit_answer"](answer=name)
"""


def _kwh(r):
  return r["value"] / 1000 if r["unit"] == "Wh" else r["value"]


def _readings(ctx, where, *args):
  return ctx.q("SELECT r.meter_id, r.week, r.value, m.serial, m.unit, m.site_id FROM readings r JOIN meters m ON "
               f"m.id = r.meter_id WHERE m.kind = 'electricity' AND {where}", *args)


def _harbour(ctx):
  sid = ctx.scalar("SELECT id FROM sites WHERE name = ?", HARBOUR)
  return round(sum(_kwh(r) for r in _readings(ctx, "m.site_id = ? AND r.week BETWEEN '2024-04-01' AND '2024-06-24'",
                                              sid)), 2)


def _failed(ctx):
  return [r["serial"] for r in ctx.q("SELECT serial FROM meters WHERE kind = 'solar' AND status = 'active' AND "
                                     "checks_failed > 0")]


# (meter field, condition field, the damaged value) of a field report, by its format
_REPORT_FIELDS = {"csv": ("serial", "condition", "damaged"), "json": ("meter", "condition", "damaged"),
                  "txt": ("Meter", "Condition", "DAMAGED")}


def _damaged(ctx):
  out = set()
  for rel in ctx.files("field"):
    meter, cond, damaged = _REPORT_FIELDS[rel.rsplit(".", 1)[-1]]
    out |= {r[meter] for r in read_records(rel, ctx.read(rel), key="meters") if r[cond] == damaged}
  return sorted(out)


def _meter_status(ctx):
  return {r["serial"]: r["status"] for r in ctx.q("SELECT serial, status FROM meters")}


def _spikes_expected(ctx):
  peak = {}
  for r in _readings(ctx, "r.week BETWEEN '2024-06-03' AND '2024-06-24'"):
    if _kwh(r) > 2000:
      peak[r["serial"]] = max(peak.get(r["serial"], 0.0), _kwh(r))
  status = _meter_status(ctx)
  status.update({s: "review" for s in peak})
  return {"peak": peak, "status": status, "max_id": ctx.scalar("SELECT COALESCE(MAX(id), 0) FROM work_orders")}


def _spikes_check(ctx, e, a):
  if _meter_status(ctx) != e["status"]:
    return False
  orders = ctx.q("SELECT serial, kind, date FROM work_orders WHERE id > ?", e["max_id"])
  if sorted((o["serial"], o["kind"], o["date"]) for o in orders) != sorted((s, "inspect", "2024-07-03")
                                                                           for s in e["peak"]):
    return False
  text = ctx.read("reviews/june_spikes.csv")
  if text is None:
    return False
  lines = [ln.replace(" ", "") for ln in text.strip().splitlines() if ln.strip()]
  if not lines or lines[0].lower() != "serial,kwh":
    return False
  got = {}
  for ln in lines[1:]:
    parts = ln.split(",")
    try:
      got[parts[0]] = float(parts[1])
    except (IndexError, ValueError):
      return False
  return (len(got) == len(lines) - 1 and got.keys() == e["peak"].keys()
          and all(abs(got[s] - e["peak"][s]) <= 0.051 for s in got))


def _retire_expected(ctx):
  status = _meter_status(ctx)
  for r in ctx.q("SELECT serial FROM meters WHERE kind = 'gas' AND status = 'active' AND installed < '2015-01-01'"):
    status[r["serial"]] = "retired"
  return status


def _top_site(ctx):
  use = {}
  for r in _readings(ctx, "r.week BETWEEN '2024-06-03' AND '2024-06-24'"):
    use[r["site_id"]] = use.get(r["site_id"], 0.0) + _kwh(r)
  best = min(use, key=lambda s: (-use[s], s))
  return ctx.scalar("SELECT name FROM sites WHERE id = ?", best)


TASKS = [
    B.Task(DOMAIN, "harbour_q2_kwh",
           "How much electricity did the electricity meters of the site 'Harbour Depot' record for the weeks "
           "starting 2024-04-01 through 2024-06-24 (inclusive)? Submit the total in kWh, rounded to 2 decimals.",
           (HARBOUR_Q2,), _harbour, answer="number", tags=("explore",),
           wrong=('r["value"] / 1000 if unit[r["meter_id"]] == "Wh" else r["value"]', 'r["value"]'),
           conditions=(("site", ('site_id=site["id"], kind=', 'kind='), ('site_id=site["id"], kind=', 'kind=')),
                       ("weeks", (', week_from="2024-04-01",\n                   week_to="2024-06-24"', '')),
                       ("electricity", (', kind="electricity")', ')'), (', kind="electricity", ', ', ')))),
    B.Task(DOMAIN, "failed_selftests",
           "Run the remote self-test of every active solar meter. Submit the list of serials of the meters whose "
           "self-test reported at least one failed check.", (SELFTEST,), _failed, answer="set", tags=("errors",),
           wrong=("if n_failed > 0:", "if n_failed > 1:"),
           conditions=(("solar", ('kind="solar", ', '')), ("active", (', status="active"', '')))),
    B.Task(DOMAIN, "damaged_meters",
           "Field technicians filed inspection reports for the meters somewhere in the workspace; the report files "
           "come in more than one format. Submit the list of serials of all meters reported in damaged condition.",
           (DAMAGED,), _damaged, answer="set", tags=("explore",),
           wrong=('line.split(":", 1)[1].strip().lower() == "damaged"', 'line.split(":", 1)[1].strip() == "damaged"')),
    B.Task(DOMAIN, "june_spike_review",
           "Find every electricity meter with a weekly consumption above 2000 kWh in a week starting between "
           "2024-06-03 and 2024-06-24 (inclusive). For each: set its status to 'review', open one work order of "
           "kind 'inspect' dated 2024-07-03, and list it in a new file reviews/june_spikes.csv with the header "
           "'serial,kwh' and one line per meter giving its highest such weekly kWh (1 decimal). Change nothing "
           "else.", (SPIKES,), _spikes_expected, check=_spikes_check, tags=("writeback",),
           wrong=('kwh = r["value"] / 1000 if u == "Wh" else r["value"]', 'kwh = r["value"]'),
           conditions=(("june", (', week_from="2024-06-03", week_to="2024-06-24"', '')),
                       ("electricity", ('"list_meters", kind="electricity"', '"list_meters"'),
                        ('"list_readings", kind="electricity", ', '"list_readings", ')))),
    B.Task(DOMAIN, "retire_old_gas",
           "Set the status of every active gas meter installed before 2015-01-01 to 'retired'. Do not change any "
           "other meter.", (RETIRE,), _retire_expected, check=lambda ctx, e, a: _meter_status(ctx) == e,
           wrong=('kind="gas", status="active",', 'kind="gas",'),
           conditions=(("gas", ('kind="gas", ', '')), ("installed", (', installed_before="2015-01-01"', '')))),
    B.Task(DOMAIN, "top_site_june",
           "Which site's electricity meters recorded the most consumption (in kWh) over the weeks starting "
           "2024-06-03 through 2024-06-24 (inclusive)? Submit the site name.", (TOP_SITE,), _top_site,
           answer="text", tags=("explore",),
           wrong=('(r["value"] / 1000 if m["unit"] == "Wh" else r["value"])', 'r["value"]'),
           conditions=(("june", (', week_from="2024-06-03", week_to="2024-06-24"', '')),
                       ("electricity", ('"list_meters", kind="electricity"', '"list_meters"'),
                        ('"list_readings", kind="electricity", ', '"list_readings", ')))),
]
