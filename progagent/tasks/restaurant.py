"""Restaurant domain: menu, tables and reservations, orders with tips, ingredient stock and supplier orders;
recipe cards (several formats) and a management memo are workspace files."""

from __future__ import annotations

import itertools
import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

CATEGORIES = ("starter", "main", "dessert", "side", "drink")
DISHES = {
    "starter": "Soup Salad Bruschetta Carpaccio Croquettes Dumplings Tartare Skewers Spring-Rolls Terrine",
    "main": "Risotto Curry Burger Steak Lasagna Paella Stir-Fry Tagine Gnocchi Ramen Schnitzel Pie",
    "dessert": "Tart Cheesecake Mousse Sorbet Brownie Pudding Parfait Crumble Cake Panna-Cotta",
    "side": "Fries Slaw Greens Rice Mash Flatbread Pickles Beans Polenta Noodles",
    "drink": "Lemonade Iced-Tea Smoothie Spritz Cola Shake Kombucha Cordial Lassi Tonic",
}
STYLES = ("Harbour Garden Smoky Spicy Rustic Golden Nordic Alpine Coastal Classic Tuscan Bengal Andalusian Velvet "
          "Sunset Midnight Citrus Herbal Wild Royal").split()
INGREDIENTS = ("rice flour butter cream milk eggs tomato onion garlic basil chicken beef pork salmon shrimp tofu "
               "potato carrot spinach mushroom lemon lime sugar chocolate vanilla strawberry apple honey yogurt "
               "cheese olive-oil chili ginger coriander lentils chickpeas coconut-milk soy-sauce vinegar mint").split()
PEANUT = ("peanuts", "peanut oil", "peanut butter", "crushed peanuts", "peanut sauce")
QUALIFIERS = ("", "organic ", "fresh ", "dried ", "smoked ", "frozen ", "local ", "fine ", "premium ", "wild ", "baby ",
              "aged ", "raw ", "sweet ")
SUPPLIERS = ("FreshFarm", "Oceanic", "MillCo", "DairyBest", "SpiceRoute", "GreenLeaf")
AREAS = ("window", "terrace", "bar", "hall")
SLOTS = ("12:00", "12:30", "13:00", "13:30", "19:00", "19:30", "20:00", "20:30", "21:00")
RES_STATUSES = ("pending", "confirmed", "cancelled", "seated")
OVERSIZE_DATE = "2024-07-06"
CONFIRM_DATE = "2024-07-05"

SCHEMA = """
CREATE TABLE menu_items (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price REAL, active INTEGER);
CREATE TABLE tables (id INTEGER PRIMARY KEY, seats INTEGER, area TEXT);
CREATE TABLE reservations (id INTEGER PRIMARY KEY, guest TEXT, phone TEXT, date TEXT, time TEXT, party_size INTEGER,
                           table_id INTEGER, status TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, date TEXT, table_id INTEGER, server TEXT, total REAL, tip REAL);
CREATE TABLE suppliers (name TEXT PRIMARY KEY, min_order INTEGER);
CREATE TABLE ingredients (id INTEGER PRIMARY KEY, name TEXT, unit TEXT, stock INTEGER, reorder_level INTEGER,
                          supplier TEXT);
CREATE TABLE supplier_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, ingredient_id INTEGER, supplier TEXT,
                              quantity INTEGER);
CREATE INDEX res_date ON reservations(date);
CREATE INDEX orders_date ON orders(date);
"""


def _menu(rng: random.Random, n: int) -> list[dict]:
  pool = [(cat, f"{s} {d.replace('-', ' ')}") for cat, ds in DISHES.items() for s in STYLES for d in ds.split()]
  rng.shuffle(pool)
  lo = {"starter": 6, "main": 12, "dessert": 5, "side": 3, "drink": 2}
  return [{"id": i + 1, "name": nm, "category": cat, "price": round(rng.uniform(lo[cat], 3 * lo[cat]), 2),
           "active": int(rng.random() < 0.85)} for i, (cat, nm) in enumerate(pool[:n])]


def _recipe_text(fmt: str, cards: list[tuple[str, list[str]]]) -> str:
  if fmt == "json":
    return json.dumps([{"dish": d, "ingredients": ing} for d, ing in cards], indent=1)
  if fmt == "csv":
    return "dish,ingredient\n" + "".join(f"{d},{i}\n" for d, ing in cards for i in ing)
  return "".join(f"== {d} ==\n" + "".join(f"* {i}\n" for i in ing) + "\n" for d, ing in cards)


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  menu = _menu(rng, 40 * f)
  cat, pct = rng.choice(CATEGORIES), rng.randint(3, 12)   # the price memo: one item of the category is off the menu
  in_cat = rng.sample([m for m in menu if m["category"] == cat], 2)
  in_cat[0]["active"], in_cat[1]["active"] = 0, 1
  G.insert_rows(ctx, "menu_items", menu)
  tables = [{"id": i + 1, "seats": rng.choice((2, 2, 4, 4, 4, 6, 8)), "area": rng.choice(AREAS)} for i in range(15 * f)]
  G.insert_rows(ctx, "tables", tables)
  guests = G.unique_names(rng, 300 * f)
  used: set = set()
  res: list[dict] = []

  def add(date, status, table=None, time=None, party=None):
    for _ in range(50):
      t = table or rng.randint(1, len(tables))
      tm = time or rng.choice(SLOTS)
      if (t, date, tm) not in used or status == "cancelled":
        break
    else:
      return None
    seats = tables[t - 1]["seats"]
    if party is None:
      party = rng.randint(1, seats) if rng.random() < 0.85 else seats + rng.randint(1, 2)
    if status != "cancelled":
      used.add((t, date, tm))
    g = rng.choice(guests)
    res.append({"id": len(res) + 1, "guest": g, "phone": f"+351 93 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
                "date": date, "time": tm, "party_size": party, "table_id": t, "status": status})
    return res[-1]

  for _ in range(420 * f):
    d = G.rand_date(rng, "2024-06-15", "2024-07-31")
    st = (rng.choices(("seated", "cancelled"), (85, 15))[0] if d < B.TODAY else
          rng.choices(("pending", "confirmed", "cancelled"), (30, 60, 10))[0])
    add(d, st)
  for _ in range(rng.randint(1, 3)):        # parties larger than their table ...
    t = rng.randint(1, len(tables))
    add(OVERSIZE_DATE, "confirmed", t, party=tables[t - 1]["seats"] + rng.randint(1, 3))
  for _ in range(rng.randint(1, 2)):        # ... and exactly its size
    t = rng.randint(1, len(tables))
    add(OVERSIZE_DATE, "confirmed", t, party=tables[t - 1]["seats"])
  for _ in range(rng.randint(1, 2)):        # pending reservations that can be confirmed
    add(CONFIRM_DATE, "pending")
  taken = [r for r in res if r["date"] == CONFIRM_DATE and r["status"] == "confirmed"]
  for r in rng.sample(taken, min(len(taken), rng.randint(1, 3))):   # pending ones that clash with a confirmed one
    extra = add(CONFIRM_DATE, "cancelled", r["table_id"], r["time"])
    extra["status"] = "pending"
  servers = G.unique_names(rng, 8)
  star, volume = rng.sample(servers, 2)     # the best tipped server; the one with the biggest sales
  orders = []
  for i in range(600 * f):
    s, total = rng.choice(servers), round(rng.uniform(15, 260), 2)
    d = G.rand_date(rng, "2024-01-02", "2024-06-30")
    rate = rng.uniform(0.12, 0.25) if s == star else rng.uniform(0.0, 0.18) if s != volume else rng.uniform(0, 0.05)
    orders.append({"id": i + 1, "date": d, "table_id": rng.randint(1, len(tables)), "server": s, "total": total,
                   "tip": round(total * rate, 2)})
  june = {s: sum(o["total"] for o in orders if o["server"] == s and o["date"] >= "2024-06-01") for s in servers}
  while june[volume] < max(v for k, v in june.items() if k != volume) + 100:
    total = round(rng.uniform(180, 260), 2)
    orders.append({"id": len(orders) + 1, "date": G.rand_date(rng, "2024-06-01", "2024-06-30"),
                   "table_id": rng.randint(1, len(tables)), "server": volume, "total": total,
                   "tip": round(total * rng.uniform(0, 0.03), 2)})
    june[volume] += total
  G.insert_rows(ctx, "suppliers", [{"name": s, "min_order": rng.randint(6, 25)} for s in SUPPLIERS])
  names = [f"{q}{b.replace('-', ' ')}" for q, b in itertools.product(QUALIFIERS, INGREDIENTS)]
  rng.shuffle(names)
  ingr = []
  for i in range(60 * f):
    level = rng.randint(5, 40)
    stock = rng.randint(0, level - 1) if rng.random() < 0.12 else rng.randint(level, 4 * level)
    ingr.append({"id": i + 1, "name": names[i], "unit": rng.choice(("kg", "l", "pcs")), "stock": stock,
                 "reorder_level": level, "supplier": rng.choice(SUPPLIERS)})
  for e in rng.sample(ingr, 2):   # at least two below the reorder level, one ordered in a small amount
    e["stock"] = e["reorder_level"] - rng.randint(1, 3)
  small = rng.choice([e for e in ingr if e["stock"] >= e["reorder_level"]])   # 2 x level - stock below any minimum
  small["reorder_level"] = rng.randint(3, 4)
  small["stock"] = small["reorder_level"] - 1
  G.insert_rows(ctx, "ingredients", ingr)
  G.write_docs(ctx, rng, "restaurant", ["service", "allergens", "suppliers", "hygiene", "staff_rota"])
  ctx.write("memos/price_memo.txt", f"Management memo\n\nFrom next week every active {cat} on the menu goes up by "
            f"{pct} percent (new price rounded to the nearest cent). Items that are off the menu keep their "
            f"price.\nRecord every change in reports/price_changes.csv.\n")
  peanut = set(rng.sample([m["id"] for m in menu if m["active"]], rng.randint(2, 4)))
  peanut.add(rng.choice([m["id"] for m in menu if not m["active"]]))
  k = B.n_data_files(f)
  fmts = ["txt", "json", "csv", rng.choice(("txt", "json", "csv"))] + [rng.choice(("txt", "json", "csv"))
                                                                        for _ in range(k - 4)]
  rng.shuffle(fmts)
  order = list(menu)
  rng.shuffle(order)
  for j in range(k):
    cards = []
    for m in order[j::k]:
      ing = rng.sample(INGREDIENTS, rng.randint(3, 6))
      if m["id"] in peanut:
        ing.insert(rng.randint(0, len(ing)), rng.choice(PEANUT))
      cards.append((m["name"], [x.replace("-", " ") for x in ing]))
    ctx.write(f"recipes/cards_{j + 1:02d}.{fmts[j]}", _recipe_text(fmts[j], cards))
  # Distractors of the declared conditions (base.Task.conditions), drawn after everything else so that the rest
  # of the state is what it would be without them: a pending reservation for 2024-07-06 larger than its table
  # (oversized_parties without 'confirmed'), and generous tips before June that make another server the best
  # tipped of the year (top_tipped_server without 'June').
  planted = None
  while planted is None:   # a table with a free slot that day
    t = rng.randint(1, len(tables))
    planted = add(OVERSIZE_DATE, "pending", t, party=tables[t - 1]["seats"] + rng.randint(1, 3))
  tips = lambda s, start: sum(o["tip"] for o in orders if o["server"] == s and o["date"] >= start)
  best = min(servers, key=lambda s: (-round(tips(s, "2024-06-01"), 2), s))
  rival = rng.choice([s for s in servers if s != best])
  while tips(rival, "") <= tips(best, ""):
    total = round(rng.uniform(120, 260), 2)
    orders.append({"id": len(orders) + 1, "date": G.rand_date(rng, "2024-01-02", "2024-05-31"),
                   "table_id": rng.randint(1, len(tables)), "server": rival, "total": total,
                   "tip": round(total * rng.uniform(0.2, 0.3), 2)})
  G.insert_rows(ctx, "reservations", res)
  G.insert_rows(ctx, "orders", orders)


# -- tools

def _update_price(ctx, item_id, price):
  r = ctx.q1("SELECT price FROM menu_items WHERE id = ?", item_id)
  if r is None:
    raise ToolError(f"no menu item with id {item_id}")
  if not 0 < price < 1000:
    raise ToolError("price must be positive and below 1000")
  ctx.exec("UPDATE menu_items SET price = ? WHERE id = ?", round(price, 2), item_id)
  return {"item_id": item_id, "price": round(price, 2), "previous": r["price"]}


def _confirm(ctx, reservation_id):
  """Confirms a pending reservation; a clash with a confirmed one answers ok false (no exception)."""
  r = ctx.q1("SELECT * FROM reservations WHERE id = ?", reservation_id)
  if r is None:
    raise ToolError(f"no reservation with id {reservation_id}")
  if r["status"] != "pending":
    raise ToolError(f"reservation {reservation_id} is {r['status']}; only pending ones can be confirmed")
  clash = ctx.q1("SELECT id FROM reservations WHERE table_id = ? AND date = ? AND time = ? AND status = 'confirmed' "
                 "AND id != ?", r["table_id"], r["date"], r["time"], reservation_id)
  if clash is not None:
    return {"reservation_id": reservation_id, "ok": False,
            "error": f"table {r['table_id']} is already booked on {r['date']} at {r['time']}"}
  ctx.exec("UPDATE reservations SET status = 'confirmed' WHERE id = ?", reservation_id)
  return {"reservation_id": reservation_id, "ok": True, "status": "confirmed"}


def _supplier_order(ctx, ingredient_id, quantity):
  """Orders from the ingredient's supplier; below the supplier's minimum it answers ok false (no exception)."""
  r = ctx.q1("SELECT i.supplier, s.min_order FROM ingredients i JOIN suppliers s ON s.name = i.supplier "
             "WHERE i.id = ?", ingredient_id)
  if r is None:
    raise ToolError(f"no ingredient with id {ingredient_id}")
  if quantity <= 0:
    raise ToolError("quantity must be positive")
  if quantity < r["min_order"]:
    return {"ingredient_id": ingredient_id, "ok": False,
            "error": f"{r['supplier']} accepts orders of at least {r['min_order']} units"}
  ctx.exec("INSERT INTO supplier_orders (ingredient_id, supplier, quantity) VALUES (?, ?, ?)", ingredient_id,
           r["supplier"], quantity)
  return {"ingredient_id": ingredient_id, "ok": True, "supplier": r["supplier"], "quantity": quantity}


TOOLS = (
    B.list_tool("list_menu", "List menu items: items {id, name, category, price, active} (active 1 = on the menu).",
                table="menu_items", columns="id, name, category, price, active",
                filters=[B.Filter("category", "category = ?", B.p_str("only this category", CATEGORIES)),
                         B.Filter("active", "active = ?", B.p_int("1: only items on the menu, 0: only items off it")),
                         B.Filter("name", "name LIKE ?", B.p_str("part of the item's name"), like=True)]),
    B.tool("update_menu_price", "Set the price of one menu item.", _update_price, required=("item_id", "price"),
           item_id=B.p_int("menu item id"), price=B.p_num("new price")),
    B.list_tool("list_reservations", "List reservations with their table's size: items {id, guest, date, time, "
                "party_size, table_id, seats, status}.", table="reservations r JOIN tables t ON t.id = r.table_id",
                columns="r.id AS id, r.guest AS guest, r.date AS date, r.time AS time, r.party_size AS party_size, "
                "r.table_id AS table_id, t.seats AS seats, r.status AS status", order_by="r.date, r.time, r.id",
                filters=[B.Filter("date", "r.date = ?", B.p_str("only this date, YYYY-MM-DD")),
                         B.Filter("status", "r.status = ?", B.p_str("only this status", RES_STATUSES)),
                         B.Filter("min_party", "r.party_size >= ?", B.p_int("only parties at least this big"))]),
    B.tool("confirm_reservation", "Confirm a pending reservation; returns {reservation_id, ok, status} or "
           "{reservation_id, ok: false, error} when it cannot be confirmed.", _confirm,
           required=("reservation_id",), reservation_id=B.p_int("reservation id")),
    B.list_tool("list_orders", "List guest orders: items {id, date, table_id, server, total, tip}.", table="orders",
                columns="id, date, table_id, server, total, tip", order_by="date, id",
                filters=[B.Filter("date_from", "date >= ?", B.p_str("earliest date, YYYY-MM-DD (included)")),
                         B.Filter("date_to", "date <= ?", B.p_str("latest date, YYYY-MM-DD (included)")),
                         B.Filter("server", "server = ?", B.p_str("only this server's orders"))]),
    B.list_tool("list_ingredients", "List ingredients in stock: items {id, name, unit, stock, reorder_level, "
                "supplier}.", table="ingredients", columns="id, name, unit, stock, reorder_level, supplier",
                filters=[B.Filter("below_reorder", "(stock < reorder_level) = ?",
                                  B.p_int("1: only those whose stock is below the reorder level")),
                         B.Filter("supplier", "supplier = ?", B.p_str("only this supplier", SUPPLIERS))]),
    B.tool("place_supplier_order", "Order an ingredient from its supplier; returns {ingredient_id, ok, supplier, "
           "quantity} or {ingredient_id, ok: false, error} when the supplier refuses.", _supplier_order,
           required=("ingredient_id", "quantity"), ingredient_id=B.p_int("ingredient id"),
           quantity=B.p_int("units to order")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("restaurant", "A restaurant's menu, reservations, orders and kitchen stock.", SCHEMA, generate,
                  TOOLS)

PAGES = B.paging_prelude("fetch", tool="tool", kwargs="kw", rows="out", offset="off", page="p")

OVERSIZE = PAGES + """\
ids = [r["id"] for r in fetch("list_reservations", date="2024-07-06", status="confirmed")
       if r["party_size"] > r["seats"]]
print(ids)
tools["submit_answer"](answer=sorted(ids))
"""

TIPS = PAGES + """\
from collections import defaultdict
tips = defaultdict(float)
for o in fetch("list_orders", date_from="2024-06-01", date_to="2024-06-30"):
    tips[o["server"]] += o["tip"]
best = min(tips, key=lambda s: (-round(tips[s], 2), s))
print(best, round(tips[best], 2))
tools["submit_answer"](answer=best)
"""

ALLERGEN = PAGES + r"""
import csv, io, json, re
on_menu = {m["name"] for m in fetch("list_menu", active=1)}
dishes = {}
for path in tools["list_files"](directory="recipes"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        for card in json.loads(text):
            dishes.setdefault(card["dish"], []).extend(card["ingredients"])
    elif path.endswith(".csv"):
        for row in csv.DictReader(io.StringIO(text)):
            dishes.setdefault(row["dish"], []).append(row["ingredient"])
    else:
        dish = None
        for line in text.splitlines():
            m = re.match(r"== (.+) ==", line)
            if m:
                dish = m.group(1)
            elif line.startswith("* "):
                dishes.setdefault(dish, []).append(line[2:])
hits = sorted(d for d, ing in dishes.items() if any("peanut" in i.lower() for i in ing) and d in on_menu)
print(hits)
tools["submit_answer"](answer=hits)
"""

CONFIRM = PAGES + """\
failed = []
for r in fetch("list_reservations", date="2024-07-05", status="pending"):
    out = tools["confirm_reservation"](reservation_id=r["id"])
    if not out.get("ok"):
        failed.append(r["id"])
print(failed)
tools["submit_answer"](answer=failed)
"""

RESTOCK = PAGES + r"""
import re
rows = ["ingredient_id,quantity"]
for i in fetch("list_ingredients", below_reorder=1):
    qty = 2 * i["reorder_level"] - i["stock"]
    out = tools["place_supplier_order"](ingredient_id=i["id"], quantity=qty)
    if not out.get("ok"):
        m = re.search(r"at least (\d+)", out.get("error", ""))
        qty = int(m.group(1))
        out = tools["place_supplier_order"](ingredient_id=i["id"], quantity=qty)
    rows.append(f"{i['id']},{qty}")
tools["write_file"](path="reports/restock.csv", content="\n".join(rows) + "\n")
print(len(rows) - 1, "orders")
tools["submit_answer"]()
"""

PRICES = PAGES + r"""
import re
memo = tools["read_file"](path="memos/price_memo.txt")["content"]
cat, pct = re.search(r"every active (\w+) on the menu goes up by (\d+) percent", memo).groups()
rows = ["item_id,old_price,new_price"]
for m in fetch("list_menu", category=cat, active=1):
    new = round(m["price"] * (100 + int(pct)) / 100, 2)
    tools["update_menu_price"](item_id=m["id"], price=new)
    rows.append(f"{m['id']},{m['price']:.2f},{new:.2f}")
tools["write_file"](path="reports/price_changes.csv", content="\n".join(rows) + "\n")
tools["submit_answer"]()
"""


def _tips(ctx):
  return ctx.scalar("SELECT server FROM orders WHERE date BETWEEN '2024-06-01' AND '2024-06-30' GROUP BY server "
                    "ORDER BY -ROUND(SUM(tip), 2), server LIMIT 1")


def _allergen(ctx):
  peanut = set()
  for rel in ctx.files("recipes"):
    text = ctx.read(rel)
    if rel.endswith(".json"):
      peanut |= {c["dish"] for c in read_records(rel, text) if any("peanut" in i for i in c["ingredients"])}
    elif rel.endswith(".csv"):
      peanut |= {line.split(",")[0] for line in text.splitlines()[1:] if "peanut" in line}
    else:
      for block in text.split("== ")[1:]:
        dish, _, rest = block.partition(" ==")
        if "peanut" in rest:
          peanut.add(dish)
  return sorted(r["name"] for r in ctx.q("SELECT name FROM menu_items WHERE active = 1") if r["name"] in peanut)


def _statuses(ctx):
  return {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM reservations")}


def _confirm_expected(ctx):
  want, failed = _statuses(ctx), []
  confirmed = {(r["table_id"], r["time"]) for r in ctx.q(
      "SELECT table_id, time FROM reservations WHERE date = ? AND status = 'confirmed'", CONFIRM_DATE)}
  for r in ctx.q("SELECT * FROM reservations WHERE date = ? AND status = 'pending'", CONFIRM_DATE):
    if (r["table_id"], r["time"]) in confirmed:
      failed.append(r["id"])
    else:
      want[r["id"]] = "confirmed"
  return {"answer": failed, "statuses": want}


def _restock(ctx):
  return {r["id"]: max(2 * r["reorder_level"] - r["stock"], r["min_order"]) for r in ctx.q(
      "SELECT i.id, i.stock, i.reorder_level, s.min_order FROM ingredients i JOIN suppliers s ON s.name = i.supplier "
      "WHERE i.stock < i.reorder_level")}


def _csv_rows(ctx, rel, header):
  text = ctx.read(rel)
  if text is None:
    return None
  lines = [line.replace(" ", "") for line in text.splitlines() if line.strip()]
  if not lines or lines[0] != header:
    return None
  return [line.split(",") for line in lines[1:]]


def _restock_check(ctx, e, a):
  got = ctx.q("SELECT ingredient_id, quantity FROM supplier_orders ORDER BY ingredient_id")
  if [(r["ingredient_id"], r["quantity"]) for r in got] != sorted(e.items()):
    return False
  rows = _csv_rows(ctx, "reports/restock.csv", "ingredient_id,quantity")
  try:
    return rows is not None and sorted((int(i), int(q)) for i, q in rows) == sorted(e.items())
  except ValueError:
    return False


def _prices_expected(ctx):
  cat, pct = re.search(r"every active (\w+) on the menu goes up by (\d+) percent",
                       ctx.read("memos/price_memo.txt")).groups()
  prices = {r["id"]: r["price"] for r in ctx.q("SELECT id, price FROM menu_items")}
  changed = {r["id"]: round(r["price"] * (100 + int(pct)) / 100, 2) for r in ctx.q(
      "SELECT id, price FROM menu_items WHERE category = ? AND active = 1", cat)}
  return {"old": prices, "new": {**prices, **changed}, "changed": changed}


def _prices_check(ctx, e, a):
  now = {r["id"]: r["price"] for r in ctx.q("SELECT id, price FROM menu_items")}
  if now.keys() != e["new"].keys() or any(abs(now[i] - e["new"][i]) > 0.011 for i in now):
    return False
  rows = _csv_rows(ctx, "reports/price_changes.csv", "item_id,old_price,new_price")
  try:
    got = {int(i): (float(o), float(n)) for i, o, n in rows or []}
  except ValueError:
    return False
  return (rows is not None and len(got) == len(rows) and got.keys() == e["changed"].keys() and
          all(abs(o - e["old"][i]) < 0.006 and abs(n - e["new"][i]) < 0.011 for i, (o, n) in got.items()))


TASKS = [
    B.Task(DOMAIN, "oversized_parties",
           "Which confirmed reservations for 2024-07-06 are for a party larger than the number of seats at their "
           "table? Submit the list of their reservation ids.", (OVERSIZE,),
           lambda ctx: [r["id"] for r in ctx.q(
               "SELECT r.id FROM reservations r JOIN tables t ON t.id = r.table_id WHERE r.date = ? AND "
               "r.status = 'confirmed' AND r.party_size > t.seats", OVERSIZE_DATE)],
           answer="set", wrong=('r["party_size"] > r["seats"]', 'r["party_size"] >= r["seats"]'),
           conditions=(("date", ('date="2024-07-06", ', '')), ("confirmed", (', status="confirmed"', '')))),
    B.Task(DOMAIN, "top_tipped_server",
           "Which server received the most tips in total on orders dated in June 2024? Submit the server's name "
           "(on a tie, the alphabetically first).", (TIPS,), _tips, answer="text",
           wrong=('tips[o["server"]] += o["tip"]', 'tips[o["server"]] += o["total"]'),
           conditions=(("June", (', date_from="2024-06-01", date_to="2024-06-30"', '')),)),
    B.Task(DOMAIN, "peanut_dishes",
           "The recipe cards in recipes/ list each dish's ingredients; the files do not all use the same format. "
           "Which dishes currently on the menu (active) contain peanut in any form? Submit the list of their names.",
           (ALLERGEN,), _allergen, answer="set", wrong=(" and d in on_menu", ""), tags=("explore",)),
    B.Task(DOMAIN, "confirm_pending_reservations",
           "Confirm every pending reservation for 2024-07-05 with confirm_reservation. Some of them cannot be "
           "confirmed; submit the list of the ids of those reservations.", (CONFIRM,), _confirm_expected,
           answer="set", check=lambda ctx, e, a: _statuses(ctx) == e["statuses"],
           wrong=('if not out.get("ok"):', "if False:"), tags=("errors",),
           conditions=(("date", ('date="2024-07-05", ', '')),)),
    B.Task(DOMAIN, "restock_low_ingredients",
           "For every ingredient whose stock is below its reorder level, place one supplier order for "
           "2 x reorder level - stock units; when the supplier refuses an amount below its minimum order, order "
           "that minimum instead. Then write reports/restock.csv with the header 'ingredient_id,quantity' and one "
           "row per ingredient ordered, giving the quantity actually ordered.", (RESTOCK,), _restock,
           check=_restock_check, wrong=("qty = 2 * i[\"reorder_level\"] - i[\"stock\"]",
                                        "qty = i[\"reorder_level\"] - i[\"stock\"]"), tags=("writeback", "errors")),
    B.Task(DOMAIN, "apply_price_memo",
           "Apply the price change announced in memos/price_memo.txt to the menu, and record every change as the "
           "memo asks, in a CSV file with the header 'item_id,old_price,new_price' (one row per changed item).",
           (PRICES,), _prices_expected, check=_prices_check, wrong=(", active=1)", ")"), tags=("writeback",),
           conditions=(("category", ('category=cat, ', '')),)),
]
