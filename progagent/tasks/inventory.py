"""Inventory domain: a warehouse's products, suppliers and purchase orders; shipment manifests (several formats)
and stock-count sheets are workspace files; suppliers publish free-text status reports."""

from __future__ import annotations

import collections
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

CATEGORIES = ("tools", "electrical", "plumbing", "garden", "paint", "hardware")
ITEMS = ("drill hammer wrench saw cable switch socket pipe valve tap hose rake shovel brush roller primer "
         "bolt nut hinge lock bracket clamp ladder sealant").split()
ON_TIME = ("All deliveries on schedule. Next consolidation run on {day}.",
           "Operating normally; warehouse open 7:00-19:00 on weekdays.",
           "No delays expected this week. Please send forecasts by {day}.",
           "Fleet fully available, orders dispatched within one working day.")
DELAYED = ("Deliveries delayed by {n} days due to port congestion.",
           "Running {n} days behind schedule after a system outage on {day}.",
           "Shipments are held at customs; expect them {n} days late.")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")

SCHEMA = """
CREATE TABLE suppliers (id INTEGER PRIMARY KEY, name TEXT, country TEXT, lead_days INTEGER, contact TEXT,
                        status_report TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT UNIQUE, name TEXT, category TEXT, stock INTEGER,
                       reorder_level INTEGER, unit_cost REAL, supplier_id INTEGER, description TEXT);
CREATE TABLE purchase_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, sku TEXT, quantity INTEGER);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_sup = 24 * f
  kinds = [rng.random() < 0.3 for _ in range(n_sup)]    # True: the supplier is running late
  a, b = rng.sample(range(n_sup), 2)
  kinds[a], kinds[b] = True, False
  reports = [rng.choice(DELAYED if k else ON_TIME).format(n=rng.randint(3, 21), day=rng.choice(DAYS)) for k in kinds]
  no_delay = [i + 1 for i, r in enumerate(reports) if r.startswith("No delays")]
  if not no_delay:   # the trap report ('No delays ...') exists in every instance
    i = rng.choice([i for i, k in enumerate(kinds) if not k])
    reports[i] = ON_TIME[2].format(day=rng.choice(DAYS))
    no_delay = [i + 1]
  G.insert_rows(ctx, "suppliers", [
      {"id": i + 1, "name": f"{rng.choice(G.LAST)} {rng.choice(('Supply', 'Trading', 'Industrial', 'Wholesale'))} "
       f"#{i + 1}", "country": rng.choice(("PT", "ES", "FR", "DE", "PL", "IE")), "lead_days": rng.randint(2, 30),
       "contact": G.email_of("sales desk", i + 1, "supply.example"), "status_report": reports[i]}
      for i in range(n_sup)])
  prods = []
  for i in range(600 * f):
    reorder = rng.randint(10, 60)
    low = rng.random() < 0.05
    prods.append({"id": i + 1, "sku": f"SKU-{10000 + i}", "name": f"{rng.choice(G.WORDS)} {rng.choice(ITEMS)} {i}",
                  "category": rng.choice(CATEGORIES),
                  "stock": rng.randint(0, reorder - 1) if low else rng.randint(reorder + 1, reorder + 240),
                  "reorder_level": reorder, "unit_cost": round(rng.uniform(0.5, 250), 2),
                  "supplier_id": rng.randint(1, n_sup), "description": G.sentence(rng, 9)})
  for p in rng.sample(prods, 3 * f):         # exactly at the reorder level: not below it
    p["stock"] = p["reorder_level"]
  low = [p for p in prods if p["stock"] < p["reorder_level"]]
  p1, p2 = rng.sample(low, 2)
  p1["supplier_id"] = rng.choice([i + 1 for i, k in enumerate(kinds) if k])
  p2["supplier_id"] = rng.choice(no_delay)
  G.write_docs(ctx, rng, "inventory", ["receiving", "reordering", "safety", "suppliers", "layout"])
  n_files = B.n_data_files(f)
  fmts = ["json", "txt"] + [rng.choice(("csv", "json", "txt")) for _ in range(n_files // 2 - 2)]
  rng.shuffle(fmts)
  for j in range(n_files // 2):
    rows = [(rng.choice(prods)["sku"], rng.randint(1, 50)) for _ in range(rng.randint(2, 6))]
    fmt = fmts[j]
    if fmt == "csv":
      text = "sku,quantity\n" + "".join(f"{s},{q}\n" for s, q in rows)
    elif fmt == "json":
      text = json.dumps({"manifest": f"M-{rng.randint(1000, 9999)}", "carrier": rng.choice(G.LAST),
                         "lines": [{"sku": s, "qty": q} for s, q in rows]}, indent=1) + "\n"
    else:
      text = (f"Manifest M-{rng.randint(1000, 9999)}\nReceived: {G.rand_date(rng)}\n" +
              "".join(f"{s}: {q} units\n" for s, q in rows))
    ctx.write(f"shipments/manifest_{j + 1:03d}.{fmt}", text)
  counted = rng.sample(prods, sum(rng.randint(3, 6) for _ in range(n_files - n_files // 2)))
  per = -(-len(counted) // (n_files - n_files // 2))
  for j in range(n_files - n_files // 2):
    chunk = counted[j * per:(j + 1) * per]
    lines = []
    for p in chunk:
      c = p["stock"] if rng.random() < 0.3 else max(0, p["stock"] + rng.choice((-1, 1)) * rng.randint(1, 12))
      lines.append(f"{p['sku']},{c}\n")
    ctx.write(f"counts/count_sheet_{j + 1:03d}.csv", "sku,counted\n" + "".join(lines))
  # The distractor of top_electrical_supplier without 'electrical' (base.Task.conditions; drawn last, so the rest
  # of the state is what it would be without it): another supplier takes over products of other categories (in
  # stock) until it supplies the most products of all.
  count = lambda cat=None: collections.Counter(p["supplier_id"] for p in prods if cat in (None, p["category"]))
  elec = count("electrical")
  lead = min(elec, key=lambda k: (-elec[k], k))
  rival = rng.choice([i + 1 for i in range(n_sup) if i + 1 != lead])
  spare = [p for p in prods if p["category"] != "electrical" and p["stock"] >= p["reorder_level"]
           and p["supplier_id"] not in (lead, rival)]
  rng.shuffle(spare)
  for p in spare[:count()[lead] - count()[rival] + rng.randint(1, 3)]:
    p["supplier_id"] = rival
  G.insert_rows(ctx, "products", prods)


def _product(ctx, sku):
  r = ctx.q1("SELECT * FROM products WHERE sku = ?", sku)
  if r is None:
    raise ToolError(f"no product with sku {sku!r} (skus look like 'SKU-10042')")
  return r


def _get_supplier(ctx, supplier_id):
  r = ctx.q1("SELECT id, name, country, lead_days, contact FROM suppliers WHERE id = ?", supplier_id)
  if r is None:
    raise ToolError(f"no supplier with id {supplier_id}")
  return r


def _supplier_status(ctx, supplier_id):
  _get_supplier(ctx, supplier_id)
  return {"supplier_id": supplier_id, "report": ctx.scalar("SELECT status_report FROM suppliers WHERE id = ?",
                                                           supplier_id)}


def _adjust_stock(ctx, sku, delta):
  p = _product(ctx, sku)
  if p["stock"] + delta < 0:
    raise ToolError(f"stock of {sku} would become negative ({p['stock']} + {delta})")
  ctx.exec("UPDATE products SET stock = stock + ? WHERE sku = ?", delta, sku)
  return {"sku": sku, "stock": p["stock"] + delta}


def _create_po(ctx, sku, quantity):
  _product(ctx, sku)
  if quantity <= 0:
    raise ToolError("quantity must be positive")
  ctx.exec("INSERT INTO purchase_orders (sku, quantity) VALUES (?, ?)", sku, quantity)
  return {"id": ctx.scalar("SELECT MAX(id) FROM purchase_orders"), "sku": sku, "quantity": quantity}


TOOLS = (
    B.list_tool("list_products", "List products {sku, name, category, stock, reorder_level, unit_cost, "
                "supplier_id}, optionally filtered.", table="products",
                columns="sku, name, category, stock, reorder_level, unit_cost, supplier_id", filters=[
                    B.Filter("category", "category = ?", B.p_str("category", CATEGORIES)),
                    B.Filter("sku", "sku = ?", B.p_str("exact sku, e.g. 'SKU-10042'")),
                    B.Filter("supplier_id", "supplier_id = ?", B.p_int("supplier id")),
                    B.Filter("low_stock", "(stock < reorder_level) = ?",
                             {"type": "boolean", "description": "true: only products whose stock is below their "
                              "reorder level; false: only the others"})]),
    B.tool("get_supplier", "Get one supplier {id, name, country, lead_days, contact}.", _get_supplier,
           required=("supplier_id",), supplier_id=B.p_int("supplier id")),
    B.tool("supplier_status", "The supplier's latest status report: {supplier_id, report} (free text).",
           _supplier_status, required=("supplier_id",), supplier_id=B.p_int("supplier id")),
    B.tool("adjust_stock", "Add `delta` (negative to remove) to a product's stock.", _adjust_stock,
           required=("sku", "delta"), sku=B.p_str("product sku"), delta=B.p_int("units to add")),
    B.tool("create_purchase_order", "Order `quantity` units of a product from its supplier.", _create_po,
           required=("sku", "quantity"), sku=B.p_str("product sku"), quantity=B.p_int("units to order")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("inventory", "A warehouse's products, suppliers and purchase orders.", SCHEMA, generate, TOOLS)

REORDER = """\
low = []
offset = 0
while offset is not None:
    page = tools["list_products"](low_stock=True, limit=200, offset=offset)
    low += page["items"]
    offset = page["next_offset"]
for p in low:
    if p["stock"] < p["reorder_level"]:
        tools["create_purchase_order"](sku=p["sku"], quantity=2 * p["reorder_level"] - p["stock"])
print(len(low), "purchase orders")
tools["submit_answer"]()
"""

REORDER_WRONG = """\
offset = 0
while offset is not None:
    page = tools["list_products"](limit=200, offset=offset)
    for p in page["items"]:
        if p["stock"] <= p["reorder_level"]:
            tools["create_purchase_order"](sku=p["sku"], quantity=2 * p["reorder_level"] - p["stock"])
    offset = page["next_offset"]
tools["submit_answer"]()
"""

MANIFESTS = """\
import json, re
for path in tools["list_files"](directory="shipments"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        lines = [(x["sku"], x["qty"]) for x in json.loads(text)["lines"]]
    elif path.endswith(".csv"):
        lines = [row.split(",") for row in text.strip().splitlines()[1:]]
    else:
        lines = re.findall(r"^(SKU-\\d+): (\\d+) units", text, re.M)
    for sku, qty in lines:
        tools["adjust_stock"](sku=sku.strip(), delta=int(qty))
tools["submit_answer"]()
"""

VALUE = """\
value, offset = 0.0, 0
while offset is not None:
    page = tools["list_products"](category="electrical", limit=200, offset=offset)
    value += sum(p["stock"] * p["unit_cost"] for p in page["items"])
    offset = page["next_offset"]
print(round(value, 2))
tools["submit_answer"](answer=round(value, 2))
"""

SUPPLIER = """\
from collections import Counter
c, offset = Counter(), 0
while offset is not None:
    page = tools["list_products"](category="electrical", limit=200, offset=offset)
    c.update(p["supplier_id"] for p in page["items"])
    offset = page["next_offset"]
best = min(c, key=lambda s: (-c[s], s))
name = tools["get_supplier"](supplier_id=best)["name"]
print(name, c[best])
tools["submit_answer"](answer=name)
"""

DELAYED_PROG = """\
import re
low, offset = [], 0
while offset is not None:
    page = tools["list_products"](low_stock=True, limit=200, offset=offset)
    low += page["items"]
    offset = page["next_offset"]
late = {}
for sid in sorted({p["supplier_id"] for p in low}):
    report = tools["supplier_status"](supplier_id=sid)["report"]
    late[sid] = re.search(r"\\d+ days", report) is not None
skus = [p["sku"] for p in low if late[p["supplier_id"]]]
print(len(low), len(skus))
tools["submit_answer"](answer=skus)
"""

COUNTS = """\
adjust = []
for path in tools["list_files"](directory="counts"):
    for row in tools["read_file"](path=path)["content"].strip().splitlines()[1:]:
        sku, counted = row.split(",")
        p = tools["list_products"](sku=sku)["items"][0]
        delta = int(counted) - p["stock"]
        if delta != 0:
            tools["adjust_stock"](sku=sku, delta=delta)
            adjust.append((sku, delta))
        if int(counted) < p["reorder_level"]:
            tools["create_purchase_order"](sku=sku, quantity=2 * p["reorder_level"] - int(counted))
adjust.sort()
tools["write_file"](path="reports/count_adjustments.csv",
                    content="sku,delta\\n" + "".join(f"{s},{d}\\n" for s, d in adjust))
print(len(adjust), "adjustments")
tools["submit_answer"]()
"""


def _stock(ctx):
  return {r["sku"]: r["stock"] for r in ctx.q("SELECT sku, stock FROM products")}


def _manifest_expected(ctx):
  import re
  want = _stock(ctx)
  for rel in ctx.files("shipments"):
    text = ctx.read(rel)
    if rel.endswith(".json"):
      lines = [(x["sku"], x["qty"]) for x in read_records(rel, text, key="lines")]
    elif rel.endswith(".csv"):
      lines = [(r["sku"], r["quantity"]) for r in read_records(rel, text)]
    else:
      lines = re.findall(r"^(SKU-\d+): (\d+) units", text, re.M)
    for sku, qty in lines:
      want[sku.strip()] += int(qty)
  return want


def _pos(ctx):
  return sorted((r["sku"], r["quantity"]) for r in ctx.q("SELECT sku, quantity FROM purchase_orders"))


def _delayed(ctx):
  import re
  return [r["sku"] for r in ctx.q("SELECT p.sku, s.status_report FROM products p JOIN suppliers s ON s.id = "
                                  "p.supplier_id WHERE p.stock < p.reorder_level ORDER BY p.id")
          if re.search(r"\d+ days", r["status_report"])]


def _counts_expected(ctx):
  prods = {r["sku"]: r for r in ctx.q("SELECT sku, stock, reorder_level FROM products")}
  stock = {s: r["stock"] for s, r in prods.items()}
  adjust, pos = [], []
  for rel in ctx.files("counts"):
    for row in ctx.read(rel).strip().splitlines()[1:]:
      sku, counted = row.split(",")
      c = int(counted)
      if c != stock[sku]:
        adjust.append((sku, c - stock[sku]))
      if c < prods[sku]["reorder_level"]:
        pos.append((sku, 2 * prods[sku]["reorder_level"] - c))
      stock[sku] = c
  return {"stock": stock, "adjust": sorted(adjust), "pos": sorted(pos)}


def _counts_check(ctx, e, a):
  if _stock(ctx) != e["stock"] or _pos(ctx) != sorted(tuple(x) for x in e["pos"]):
    return False
  text = ctx.read("reports/count_adjustments.csv")
  return text is not None and [ln.strip() for ln in text.strip().splitlines()] == (
      ["sku,delta"] + [f"{s},{d}" for s, d in e["adjust"]])


TASKS = [
    B.Task(DOMAIN, "reorder_low_stock",
           "For every product whose stock is below its reorder level, create one purchase order for "
           "2 * reorder_level - stock units. Create no other purchase orders.", (REORDER,),
           lambda ctx: sorted((r["sku"], 2 * r["reorder_level"] - r["stock"]) for r in ctx.q(
               "SELECT sku, stock, reorder_level FROM products WHERE stock < reorder_level")),
           check=lambda ctx, e, a: _pos(ctx) == [tuple(x) for x in e],
           wrong=REORDER_WRONG),
    B.Task(DOMAIN, "apply_manifests",
           "Apply every shipment manifest in shipments/: each line item of a manifest adds its quantity to "
           "that product's stock.", (MANIFESTS,), _manifest_expected,
           check=lambda ctx, e, a: _stock(ctx) == e, wrong=('if path.endswith(".json"):', 'if False:'),
           tags=("explore",)),
    B.Task(DOMAIN, "electrical_value",
           "What is the total inventory value (stock * unit_cost, summed over products) of the 'electrical' "
           "category? Round it to 2 decimals.", (VALUE,),
           lambda ctx: round(ctx.scalar("SELECT SUM(stock * unit_cost) FROM products WHERE category = "
                                        "'electrical'"), 2),
           answer="number", wrong=('p["stock"] * p["unit_cost"]', 'p["unit_cost"]'),
           conditions=(("electrical", ('category="electrical", ', '')),)),
    B.Task(DOMAIN, "top_electrical_supplier",
           "Which supplier supplies the most products of the 'electrical' category? Submit the supplier's name "
           "(on a tie, the supplier with the smaller id).", (SUPPLIER,),
           lambda ctx: ctx.scalar("SELECT s.name FROM products p JOIN suppliers s ON s.id = p.supplier_id "
                                  "WHERE p.category = 'electrical' GROUP BY s.id ORDER BY COUNT(*) DESC, s.id LIMIT 1"),
           answer="text",
           wrong=("best = min(c, key=lambda s: (-c[s], s))", "best = sorted(c, key=lambda s: (-c[s], s))[1]"),
           conditions=(("electrical", ('category="electrical", ', '')),)),
    B.Task(DOMAIN, "delayed_low_stock",
           "Which products whose stock is below their reorder level come from a supplier whose latest status "
           "report says its deliveries are currently late? Submit the list of their SKUs.", (DELAYED_PROG,),
           _delayed, answer="set",
           wrong=('re.search(r"\\d+ days", report) is not None', '"delay" in report.lower() or "days" in report'),
           tags=("errors",),
           conditions=(("below reorder level", ('low_stock=True, limit=200', 'limit=200')),)),
    B.Task(DOMAIN, "stock_count",
           "The sheets in counts/ hold today's physical stock counts (sku,counted). Set every counted product's "
           "stock to the counted quantity, and for every counted product whose counted quantity is below its "
           "reorder level create one purchase order for 2 * reorder_level - counted units. Then write "
           "reports/count_adjustments.csv with the header line 'sku,delta' and one line per product whose "
           "stock changed (delta = counted - previous stock), sorted by sku.", (COUNTS,), _counts_expected,
           check=_counts_check, wrong=('if int(counted) < p["reorder_level"]:', 'if delta < 0:'),
           tags=("writeback",)),
]
