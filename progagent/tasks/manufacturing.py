"""Manufacturing domain: production lines, machines, batches and spare parts; QC verdicts are workspace files."""

from __future__ import annotations

import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

LINES = ("A", "B", "C", "D")
MKINDS = ("press", "lathe", "mill", "welder", "oven", "packer")
BSTATUS = ("released", "hold", "scrapped")
PRODUCTS = ("bracket", "hinge", "flange", "housing", "gear", "shaft", "valve", "clamp", "bushing", "pulley")
PARTS = ("bearing", "belt", "seal", "fuse", "filter", "nozzle", "sensor", "spring", "gasket", "relay")
LETTERS = "ABCDEFGHJKLMNPRSTUVWXZ"
INFO = ("cycle start", "cycle end", "tool change", "shift handover", "coolant topped up", "door opened",
        "program loaded", "warm-up done")
ALARMS = ("E12 spindle overheat", "E31 air pressure low", "E44 guard open in cycle", "E57 servo fault")

SCHEMA = """
CREATE TABLE machines (id INTEGER PRIMARY KEY, code TEXT UNIQUE, line TEXT, kind TEXT, status TEXT,
                       unreachable INTEGER);
CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT UNIQUE, name TEXT);
CREATE TABLE batches (id INTEGER PRIMARY KEY, batch_no TEXT UNIQUE, product_id INTEGER, machine_id INTEGER,
                      date TEXT, qty INTEGER, defects INTEGER, status TEXT);
CREATE TABLE machine_events (id INTEGER PRIMARY KEY, machine_id INTEGER, ts TEXT, level TEXT, message TEXT);
CREATE TABLE parts (id INTEGER PRIMARY KEY, part_no TEXT UNIQUE, name TEXT, stock INTEGER, reorder_level INTEGER);
CREATE TABLE purchase_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, part_no TEXT, qty INTEGER);
CREATE INDEX batches_date ON batches(date);
CREATE INDEX events_machine ON machine_events(machine_id);
"""


def _unique(rng, used, make):
  while True:
    x = make()
    if x not in used:
      used.add(x)
      return x


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  used: set = set()
  machines = []
  for i in range(24 * f):
    line = LINES[i % len(LINES)]
    machines.append({"id": i + 1, "code": _unique(rng, used, lambda: f"{line}-{rng.randint(100, 999)}"), "line": line,
                     "kind": rng.choice(MKINDS), "status": rng.choice(("running",) * 6 + ("idle",)),
                     "unreachable": rng.choice((0, 0, 1, 2))})
  G.insert_rows(ctx, "machines", machines)
  products = [{"id": i + 1, "sku": _unique(rng, used, lambda: f"{rng.choice(LETTERS)}{rng.choice(LETTERS)}-"
                                                              f"{rng.randint(1000, 9999)}"),
               "name": f"{rng.choice(PRODUCTS)} {rng.choice('SMLX')}{rng.randint(1, 99)}"} for i in range(30 * f)]
  G.insert_rows(ctx, "products", products)
  batches = []

  def batch(pid, date, qty, defects, machine=None):
    batches.append({"id": len(batches) + 1, "batch_no": _unique(rng, used, lambda: f"B{rng.randint(100000, 999999)}"),
                    "product_id": pid, "machine_id": machine or rng.randint(1, len(machines)), "date": date,
                    "qty": qty, "defects": defects, "status": "released"})

  for _ in range(700 * f):
    qty = rng.randint(50, 500)
    batch(rng.randint(1, len(products)), G.rand_date(rng), qty, round(qty * rng.uniform(0, 0.1)))
  # June: a high-volume but defect-ridden product, and the true leader in good units
  lead, noisy = rng.sample(range(1, len(products) + 1), 2)
  for _ in range(rng.randint(4, 6)):
    batch(lead, G.rand_date(rng, "2024-06-01", "2024-06-30"), rng.randint(600, 700), rng.randint(0, 10))
  june = lambda pid, good: sum(b["qty"] - good * b["defects"] for b in batches if b["product_id"] == pid
                                and b["date"].startswith("2024-06"))
  while june(noisy, 0) <= june(lead, 0) + 200:
    q = rng.randint(600, 900)
    batch(noisy, G.rand_date(rng, "2024-06-01", "2024-06-30"), q, round(q * rng.uniform(0.45, 0.6)))
  line_b = [m["id"] for m in machines if m["line"] == "B"]
  for _ in range(rng.randint(2, 4) * f):   # small trial batches on line B in May with many defects
    q = rng.randint(20, 40)
    batch(rng.randint(1, len(products)), G.rand_date(rng, "2024-05-01", "2024-05-31"), q,
          round(q * rng.uniform(0.3, 0.5)), rng.choice(line_b))
  for _ in range(rng.randint(1, 3)):   # May batches exactly at the 8 % limit (not above it)
    q = rng.choice((50, 100, 150, 200, 250))
    batch(rng.randint(1, len(products)), G.rand_date(rng, "2024-05-01", "2024-05-31"), q, q * 8 // 100)
  events = []
  for m in machines:
    for _ in range(rng.randint(6, 12)):
      day = G.rand_date(rng, "2024-05-20", "2024-06-30")
      events.append((m["id"], f"{day} {rng.randint(6, 21):02d}:{rng.randint(0, 59):02d}", "INFO", rng.choice(INFO)))
    if rng.random() < 0.35:
      events.append((m["id"], f"{G.rand_date(rng, '2024-05-20', '2024-06-30')} {rng.randint(6, 21):02d}:"
                              f"{rng.randint(0, 59):02d}", "ALARM", rng.choice(ALARMS)))
  line_a = [m for m in machines if m["line"] == "A"]
  alarm_m, horn_m = rng.sample(line_a, 2)
  events.append((alarm_m["id"], f"{G.rand_date(rng, '2024-06-01', '2024-06-30')} 11:{rng.randint(10, 59)}",
                 "ALARM", rng.choice(ALARMS)))
  horn = [e for e in events if e[0] == horn_m["id"] and e[2] == "ALARM" and e[1].startswith("2024-06")]
  for e in horn:
    events.remove(e)
  events.append((horn_m["id"], f"{G.rand_date(rng, '2024-06-01', '2024-06-30')} 07:05", "INFO",
                 "alarm horn test passed"))
  events.sort(key=lambda e: (e[0], e[1]))
  G.insert_rows(ctx, "machine_events", [{"id": i + 1, "machine_id": e[0], "ts": e[1], "level": e[2], "message": e[3]}
                                        for i, e in enumerate(events)])
  parts = []
  for i in range(60 * f):
    level = rng.randint(10, 80)
    parts.append({"id": i + 1, "part_no": _unique(rng, used, lambda: f"P-{rng.randint(10000, 99999)}"),
                  "name": f"{rng.choice(PARTS)} {rng.randint(10, 99)}", "reorder_level": level,
                  "stock": rng.randint(0, level - 1) if rng.random() < 0.2 else rng.randint(level, 4 * level)})
  exact = rng.choice(parts)   # stock equal to the reorder level: not below it
  exact["stock"] = exact["reorder_level"]
  G.insert_rows(ctx, "parts", parts)
  G.write_docs(ctx, rng, "manufacturing", ["quality_manual", "safety", "shift_plan", "purchasing", "lines"])
  # QC verdicts: CSV, JSON and 'key: value' text files in a folder the instructions do not name
  n = B.n_data_files(f)
  fmts = ["csv", "json", "txt"] * n
  rng.shuffle(fmts)
  fmts = fmts[:n]
  fmts[:3] = ["csv", "json", "txt"]
  rng.shuffle(fmts)
  picked = rng.sample(batches, 6 * n)
  for j, fmt in enumerate(fmts):
    rows = [(b["batch_no"], k == 0 or rng.random() < 0.2) for k, b in enumerate(picked[6 * j:6 * j + 6])]
    rng.shuffle(rows)
    who = rng.choice(G.FIRST)
    if fmt == "csv":
      text = "batch,verdict,inspector\n" + "".join(f"{b},{'reject' if r else 'pass'},{who}\n" for b, r in rows)
    elif fmt == "json":
      text = json.dumps({"inspector": who, "results": [{"batch": b, "result": "rejected" if r else "ok"}
                                                        for b, r in rows]}, indent=1) + "\n"
    else:
      text = f"QC sheet by {who}\n\n" + "\n".join(f"Batch: {b}\nVerdict: {'REJECTED' if r else 'ACCEPTED'}\n"
                                                  for b, r in rows)
    ctx.write(f"qa/inbox/qc_{j + 1:03d}.{fmt}", text)
  _plant_distractors(rng, machines, batches, batch, f)
  G.insert_rows(ctx, "batches", batches)


def _plant_distractors(rng, machines, batches, batch, f) -> None:
  """Batches that make each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): large clean batches before May of another product, which
  then has the most good units over all months (top_product_june without 'June'); batches on other lines in May
  and on line B outside May whose defect rates move the line-B-or-May rate away from the line B rate of May
  (line_b_defect_rate without 'line B' / 'May')."""
  other = [m["id"] for m in machines if m["line"] != "B"]
  line_b = [m["id"] for m in machines if m["line"] == "B"]
  good = lambda pid, month="": sum(b["qty"] - b["defects"] for b in batches if b["product_id"] == pid
                                   and b["date"].startswith(month))
  lead = max(sorted({b["product_id"] for b in batches}), key=lambda p: good(p, "2024-06"))   # the June leader
  rival = rng.choice(sorted({b["product_id"] for b in batches} - {lead}))
  while good(rival) <= good(lead):
    q = rng.randint(600, 700)
    batch(rival, G.rand_date(rng, "2024-01-01", "2024-04-30"), q, rng.randint(0, 10), rng.choice(other))

  def rate(keep):
    rows = [b for b in batches if keep(b)]
    return sum(b["defects"] for b in rows) / sum(b["qty"] for b in rows)

  target = rate(lambda b: b["machine_id"] in line_b and b["date"].startswith("2024-05"))
  for machines_, dates, wider in ((other, ("2024-05-01", "2024-05-31"), lambda b: b["date"].startswith("2024-05")),
                                  (line_b, ("2024-01-01", "2024-04-30"), lambda b: b["machine_id"] in line_b)):
    up = rate(wider) >= target   # push the wider rate further from line B's May rate
    for _ in range(f):
      q = rng.randint(500, 600)
      batch(rival, G.rand_date(rng, *dates), q,
            round(q * rng.uniform(0.4, 0.5)) if up else 0, rng.choice(machines_))


# -- tools

def _machine(ctx, code):
  r = ctx.q1("SELECT * FROM machines WHERE code = ?", code)
  if r is None:
    raise ToolError(f"no machine with code {code!r} (codes look like 'A-123')")
  return r


def _machine_log(ctx, code, month):
  m = _machine(ctx, code)
  if len(month) != 7 or month[4] != "-":
    raise ToolError(f"month must be YYYY-MM, got {month!r}")
  key = ("machine_log", code, month)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if n < m["unreachable"]:
    return {"machine": code, "ok": False, "error": "controller unreachable, no log returned; try again"}
  rows = ctx.q("SELECT ts, level, message FROM machine_events WHERE machine_id = ? AND ts LIKE ? ORDER BY ts, id",
               m["id"], f"{month}-%")
  return {"machine": code, "ok": True, "log": "".join(f"{r['ts']} {r['level']} {r['message']}\n" for r in rows)}


def _set_batch_status(ctx, batch_no, status):
  if status not in BSTATUS:
    raise ToolError(f"unknown batch status {status!r}; use one of {list(BSTATUS)}")
  r = ctx.q1("SELECT status FROM batches WHERE batch_no = ?", batch_no)
  if r is None:
    raise ToolError(f"no batch {batch_no!r} (batch numbers look like 'B123456')")
  ctx.exec("UPDATE batches SET status = ? WHERE batch_no = ?", status, batch_no)
  return {"batch_no": batch_no, "status": status, "previous": r["status"]}


def _order_part(ctx, part_no, qty):
  if ctx.q1("SELECT id FROM parts WHERE part_no = ?", part_no) is None:
    raise ToolError(f"no part {part_no!r} (part numbers look like 'P-12345')")
  if qty <= 0:
    raise ToolError(f"qty must be positive, got {qty}")
  ctx.exec("INSERT INTO purchase_orders (part_no, qty) VALUES (?, ?)", part_no, qty)
  return {"part_no": part_no, "qty": qty, "ordered": True}


BATCH_TABLE = "batches b JOIN products p ON p.id = b.product_id JOIN machines m ON m.id = b.machine_id"

TOOLS = (
    B.list_tool("list_machines", "List machines: items {id, code, line, kind, status}.", table="machines",
                columns="id, code, line, kind, status",
                filters=[B.Filter("line", "line = ?", B.p_str("production line", LINES)),
                         B.Filter("kind", "kind = ?", B.p_str("machine kind", MKINDS)),
                         B.Filter("code", "code = ?", B.p_str("exact machine code"))]),
    B.list_tool("list_batches", "List production batches: items {batch_no, sku, machine, date, qty, defects, "
                "status}.", table=BATCH_TABLE, order_by="b.id",
                columns="b.batch_no AS batch_no, p.sku AS sku, m.code AS machine, b.date AS date, b.qty AS qty, "
                        "b.defects AS defects, b.status AS status",
                filters=[B.Filter("line", "m.line = ?", B.p_str("production line", LINES)),
                         B.Filter("machine", "m.code = ?", B.p_str("machine code")),
                         B.Filter("sku", "p.sku = ?", B.p_str("product SKU")),
                         B.Filter("date_from", "b.date >= ?", B.p_str("first date, YYYY-MM-DD (inclusive)")),
                         B.Filter("date_to", "b.date <= ?", B.p_str("last date, YYYY-MM-DD (inclusive)")),
                         B.Filter("status", "b.status = ?", B.p_str("batch status", BSTATUS))]),
    B.list_tool("list_parts", "List spare parts: items {part_no, name, stock, reorder_level}.", table="parts",
                columns="part_no, name, stock, reorder_level",
                filters=[B.Filter("below_reorder", "(stock < reorder_level) = ?",
                                  B.p_int("1: only parts whose stock is below their reorder level; 0: only the "
                                          "others")),
                         B.Filter("name", "name LIKE ?", B.p_str("part name contains"), like=True)]),
    B.tool("machine_log", "One machine's controller log for a month: {machine, ok, log} with one "
           "'YYYY-MM-DD HH:MM LEVEL message' line per entry, or {machine, ok: false, error} when the controller "
           "does not answer.", _machine_log, required=("code", "month"), code=B.p_str("machine code"),
           month=B.p_str("YYYY-MM")),
    B.tool("set_batch_status", "Set a batch's status.", _set_batch_status, required=("batch_no", "status"),
           batch_no=B.p_str("batch number"), status=B.p_str("new status", BSTATUS)),
    B.tool("order_part", "Place a purchase order for a spare part.", _order_part, required=("part_no", "qty"),
           part_no=B.p_str("part number"), qty=B.p_int("units to order")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("manufacturing", "A factory's production lines, machines, batches and spare parts.", SCHEMA,
                  generate, TOOLS)

# -- oracles

PAGES = B.paging_prelude("all_pages", kwargs="kw", rows="out")

DEFECT_RATE = PAGES + """
rows = all_pages("list_batches", line="B", date_from="2024-05-01", date_to="2024-05-31")
qty = sum(b["qty"] for b in rows)
rate = round(100 * sum(b["defects"] for b in rows) / qty, 2)
print(len(rows), rate)
tools["submit_answer"](answer=rate)
"""

DEFECT_WRONG = PAGES + """
rows = all_pages("list_batches", line="B", date_from="2024-05-01", date_to="2024-05-31")
tools["submit_answer"](answer=round(100 * sum(b["defects"] / b["qty"] for b in rows) / len(rows), 2))
"""

TOP_PRODUCT = PAGES + """
good = {}
for b in all_pages("list_batches", date_from="2024-06-01", date_to="2024-06-30"):
    good[b["sku"]] = good.get(b["sku"], 0) + b["qty"] - b["defects"]
best = min(good, key=lambda s: (-good[s], s))
print(best, good[best])
tools["submit_answer"](answer=best)
"""

ALARMS_PROG = PAGES + """
alarmed = []
for m in all_pages("list_machines", line="A"):
    for attempt in range(5):
        r = tools["machine_log"](code=m["code"], month="2024-06")
        if r["ok"]:
            break
    else:
        raise RuntimeError("no log from " + m["code"])
    levels = [line.split()[2] for line in r["log"].splitlines() if line.strip()]
    if "ALARM" in levels:
        alarmed.append(m["code"])
print(alarmed)
tools["submit_answer"](answer=alarmed)
"""

ALARMS_WRONG = PAGES + """
alarmed = []
for m in all_pages("list_machines", line="A"):
    r = tools["machine_log"](code=m["code"], month="2024-06")
    while not r["ok"]:
        r = tools["machine_log"](code=m["code"], month="2024-06")
    if "alarm" in r["log"].lower():
        alarmed.append(m["code"])
tools["submit_answer"](answer=alarmed)
"""

HOLD = r"""
import csv, io, json
rejected = set()
for path in tools["list_files"]():
    if not path.startswith("qa/"):
        continue
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".csv"):
        rejected |= {r["batch"] for r in csv.DictReader(io.StringIO(text)) if r["verdict"].strip() == "reject"}
    elif path.endswith(".json"):
        rejected |= {r["batch"] for r in json.loads(text)["results"] if r["result"] == "rejected"}
    else:
        batch = None
        for line in text.splitlines():
            if line.startswith("Batch:"):
                batch = line.split(":", 1)[1].strip()
            elif line.startswith("Verdict:") and line.split(":", 1)[1].strip() == "REJECTED":
                rejected.add(batch)
for b in sorted(rejected):
    tools["set_batch_status"](batch_no=b, status="hold")
tools["write_file"](path="qa/hold_list.txt", content="".join(b + "\n" for b in sorted(rejected)))
print(sorted(rejected))
tools["submit_answer"]()
"""

REORDER = PAGES + """
lines = ["part_no,qty"]
for p in all_pages("list_parts", below_reorder=1):
    qty = 2 * p["reorder_level"] - p["stock"]
    tools["order_part"](part_no=p["part_no"], qty=qty)
    lines.append(f"{p['part_no']},{qty}")
tools["write_file"](path="purchasing/orders.csv", content="\\n".join(lines) + "\\n")
print(lines)
tools["submit_answer"]()
"""

SCRAP = PAGES + """
n = 0
for b in all_pages("list_batches", date_from="2024-05-01", date_to="2024-05-31"):
    if b["defects"] / b["qty"] > 0.08:
        tools["set_batch_status"](batch_no=b["batch_no"], status="scrapped")
        n += 1
print(n)
tools["submit_answer"]()
"""


def _batch_status(ctx):
  return {r["batch_no"]: r["status"] for r in ctx.q("SELECT batch_no, status FROM batches")}


# (batch field, verdict field, the rejected value) of a QC sheet, by its format
_QC_FIELDS = {"csv": ("batch", "verdict", "reject"), "json": ("batch", "result", "rejected"),
              "txt": ("Batch", "Verdict", "REJECTED")}


def _rejected(ctx):
  out = set()
  for rel in ctx.files("qa/inbox"):
    batch, verdict, rejected = _QC_FIELDS[rel.rsplit(".", 1)[-1]]
    out |= {r[batch] for r in read_records(rel, ctx.read(rel), key="results") if r[verdict] == rejected}
  return sorted(out)


def _hold_expected(ctx):
  rej = _rejected(ctx)
  status = _batch_status(ctx)
  status.update({b: "hold" for b in rej})
  return {"status": status, "list": rej}


def _hold_check(ctx, e, a):
  text = ctx.read("qa/hold_list.txt")
  if text is None or _batch_status(ctx) != e["status"]:
    return False
  got = [ln.strip() for ln in text.splitlines() if ln.strip()]
  return sorted(got) == e["list"] and len(set(got)) == len(got)


def _reorder_expected(ctx):
  return {"orders": sorted([r["part_no"], 2 * r["reorder_level"] - r["stock"]] for r in ctx.q(
      "SELECT part_no, stock, reorder_level FROM parts WHERE stock < reorder_level"))}


def _reorder_check(ctx, e, a):
  want = [tuple(o) for o in e["orders"]]
  if sorted((r["part_no"], r["qty"]) for r in ctx.q("SELECT part_no, qty FROM purchase_orders")) != want:
    return False
  text = ctx.read("purchasing/orders.csv")
  if text is None:
    return False
  lines = [ln.replace(" ", "") for ln in text.strip().splitlines() if ln.strip()]
  if not lines or lines[0].lower() != "part_no,qty":
    return False
  try:
    got = sorted((ln.split(",")[0], int(ln.split(",")[1])) for ln in lines[1:])
  except (IndexError, ValueError):
    return False
  return got == want


def _scrap_expected(ctx):
  status = _batch_status(ctx)
  for r in ctx.q("SELECT batch_no FROM batches WHERE date LIKE '2024-05-%' AND defects * 100 > 8 * qty"):
    status[r["batch_no"]] = "scrapped"
  return status


def _top_product(ctx):
  return ctx.scalar("SELECT p.sku FROM batches b JOIN products p ON p.id = b.product_id WHERE b.date LIKE '2024-06-%' "
                    "GROUP BY p.id ORDER BY -SUM(b.qty - b.defects), p.sku LIMIT 1")


def _alarms(ctx):
  return [r["code"] for r in ctx.q("SELECT DISTINCT m.code FROM machines m JOIN machine_events e ON "
                                   "e.machine_id = m.id WHERE m.line = 'A' AND e.level = 'ALARM' AND "
                                   "e.ts LIKE '2024-06-%'")]


TASKS = [
    B.Task(DOMAIN, "line_b_defect_rate",
           "What was the defect rate of all batches produced on line B in May 2024, i.e. total defects / total "
           "quantity * 100? Submit the percentage rounded to 2 decimals.", (DEFECT_RATE,),
           lambda ctx: round(100 * ctx.scalar(
               "SELECT 1.0 * SUM(b.defects) / SUM(b.qty) FROM batches b JOIN machines m ON m.id = b.machine_id "
               "WHERE m.line = 'B' AND b.date LIKE '2024-05-%'"), 2), answer="number", wrong=DEFECT_WRONG,
           conditions=(("line B", ('line="B", ', '')),
                       ("May", (', date_from="2024-05-01", date_to="2024-05-31"', '')))),
    B.Task(DOMAIN, "top_product_june",
           "Which product had the most good units (quantity minus defects) over all batches produced in June 2024? "
           "Submit its SKU (on a tie, the alphabetically first).", (TOP_PRODUCT,), _top_product, answer="text",
           tags=("paging",), wrong=('+ b["qty"] - b["defects"]', '+ b["qty"]'),
           conditions=(("June", (', date_from="2024-06-01", date_to="2024-06-30"', '')),)),
    B.Task(DOMAIN, "line_a_alarms",
           "Which machines on line A logged at least one entry of level ALARM in their controller log for June "
           "2024? Submit the list of machine codes.", (ALARMS_PROG,), _alarms, answer="set", tags=("errors",),
           wrong=ALARMS_WRONG,
           conditions=(("line A", ('all_pages("list_machines", line="A")', 'all_pages("list_machines")')),)),
    B.Task(DOMAIN, "hold_qc_rejects",
           "Quality-control verdicts on batches were filed somewhere in the workspace, in more than one file "
           "format. Put every batch that QC rejected on hold (batch status 'hold'), and write the file "
           "qa/hold_list.txt listing their batch numbers, one per line. Change nothing else.", (HOLD,),
           _hold_expected, check=_hold_check, tags=("explore", "writeback"),
           wrong=('    elif path.endswith(".json"):', '    elif path.endswith(".json") and False:')),
    B.Task(DOMAIN, "reorder_parts",
           "Place one purchase order for every spare part whose stock is below its reorder level, for "
           "2 * reorder_level - stock units, and record the orders in a new file purchasing/orders.csv with the "
           "header 'part_no,qty' and one 'part_no,qty' line per order. Order nothing else.", (REORDER,),
           _reorder_expected, check=_reorder_check, tags=("writeback",),
           wrong=('qty = 2 * p["reorder_level"] - p["stock"]', 'qty = p["reorder_level"] - p["stock"]')),
    B.Task(DOMAIN, "scrap_may_defects",
           "Set the status of every batch produced in May 2024 whose defect rate (defects / quantity) is above 8% "
           "to 'scrapped'. Do not change any other batch.", (SCRAP,), _scrap_expected,
           check=lambda ctx, e, a: _batch_status(ctx) == e, wrong=("> 0.08", ">= 0.08"),
           conditions=(("May", (', date_from="2024-05-01", date_to="2024-05-31"', '')),)),
]
