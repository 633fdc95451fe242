"""Inventory domain: a warehouse's products, suppliers and purchase orders; shipment manifests are CSV files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

CATEGORIES = ("tools", "electrical", "plumbing", "garden", "paint", "hardware")
ITEMS = ("drill hammer wrench saw cable switch socket pipe valve tap hose rake shovel brush roller primer "
         "bolt nut hinge lock bracket clamp ladder sealant").split()

SCHEMA = """
CREATE TABLE suppliers (id INTEGER PRIMARY KEY, name TEXT, country TEXT, lead_days INTEGER, contact TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT UNIQUE, name TEXT, category TEXT, stock INTEGER,
                       reorder_level INTEGER, unit_cost REAL, supplier_id INTEGER, description TEXT);
CREATE TABLE purchase_orders (id INTEGER PRIMARY KEY AUTOINCREMENT, sku TEXT, quantity INTEGER);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_sup = 24 * f
  B.insert_rows(ctx, "suppliers", [{"id": i + 1, "name": f"{rng.choice(B.LAST)} {rng.choice(('Supply', 'Trading', 'Industrial', 'Wholesale'))} #{i + 1}",
                                    "country": rng.choice(("PT", "ES", "FR", "DE", "PL", "IE")),
                                    "lead_days": rng.randint(2, 30), "contact": B.email_of("sales desk", i + 1, "supply.example")}
                                   for i in range(n_sup)])
  prods = []
  for i in range(600 * f):
    cat = CATEGORIES[i % len(CATEGORIES)] if i < len(CATEGORIES) * 2 else rng.choice(CATEGORIES)
    reorder = rng.randint(10, 60)
    stock = rng.randint(0, 200) if i >= len(CATEGORIES) * 2 else (reorder if i < len(CATEGORIES) else reorder - 3)
    prods.append({"id": i + 1, "sku": f"SKU-{10000 + i}", "name": f"{rng.choice(B.WORDS)} {rng.choice(ITEMS)} {i}",
                  "category": cat, "stock": stock, "reorder_level": reorder,
                  "unit_cost": round(rng.uniform(0.5, 250), 2), "supplier_id": rng.randint(1, n_sup),
                  "description": B.sentence(rng, 9)})
  B.insert_rows(ctx, "products", prods)
  B.write_docs(ctx, rng, "inventory", ["receiving", "reordering", "safety", "suppliers", "layout"])
  for j in range(B.n_data_files(f)):
    rows = [(rng.choice(prods)["sku"], rng.randint(1, 50)) for _ in range(rng.randint(2, 6))]
    ctx.write(f"shipments/manifest_{j + 1:03d}.csv", "sku,quantity\n" + "".join(f"{s},{q}\n" for s, q in rows))


def _product(ctx, sku):
  r = ctx.q1("SELECT * FROM products WHERE sku = ?", sku)
  if r is None:
    raise ToolError(f"no product with sku {sku!r} (skus look like 'SKU-10042')")
  return r


def _list_products(ctx, category):
  if category not in CATEGORIES:
    raise ToolError(f"unknown category {category!r}; list_categories gives them")
  return ctx.q("SELECT sku, name, stock, reorder_level, unit_cost, supplier_id FROM products WHERE category = ? "
               "ORDER BY id", category)


def _get_supplier(ctx, supplier_id):
  r = ctx.q1("SELECT * FROM suppliers WHERE id = ?", supplier_id)
  if r is None:
    raise ToolError(f"no supplier with id {supplier_id}")
  return r


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
    B.tool("list_categories", "List the product categories.", lambda ctx: list(CATEGORIES)),
    B.tool("list_products", "List the products of a category: [{sku, name, stock, reorder_level, unit_cost, "
           "supplier_id}].", _list_products, required=("category",), category=B.p_str("category", CATEGORIES)),
    B.tool("get_product", "Get one product by sku.", _product, required=("sku",), sku=B.p_str("product sku")),
    B.tool("get_supplier", "Get one supplier.", _get_supplier, required=("supplier_id",),
           supplier_id=B.p_int("supplier id")),
    B.tool("adjust_stock", "Add `delta` (negative to remove) to a product's stock.", _adjust_stock,
           required=("sku", "delta"), sku=B.p_str("product sku"), delta=B.p_int("units to add")),
    B.tool("create_purchase_order", "Order `quantity` units of a product from its supplier.", _create_po,
           required=("sku", "quantity"), sku=B.p_str("product sku"), quantity=B.p_int("units to order")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("inventory", "A warehouse's products, suppliers and purchase orders.", SCHEMA, generate, TOOLS)

REORDER = """\
n = 0
for cat in tools["list_categories"]():
    for p in tools["list_products"](category=cat):
        if p["stock"] < p["reorder_level"]:
            tools["create_purchase_order"](sku=p["sku"], quantity=2 * p["reorder_level"] - p["stock"])
            n += 1
print(n, "purchase orders")
tools["submit_answer"]()
"""

MANIFESTS = """\
for path in tools["list_files"](directory="shipments"):
    lines = tools["read_file"](path=path)["content"].strip().splitlines()
    for line in lines[1:]:
        sku, qty = line.split(",")
        tools["adjust_stock"](sku=sku.strip(), delta=int(qty))
tools["submit_answer"]()
"""

VALUE = """\
value = sum(p["stock"] * p["unit_cost"] for p in tools["list_products"](category="electrical"))
print(round(value, 2))
tools["submit_answer"](answer=round(value, 2))
"""

SUPPLIER = """\
from collections import Counter
c = Counter(p["supplier_id"] for p in tools["list_products"](category="electrical"))
best = min(c, key=lambda s: (-c[s], s))
name = tools["get_supplier"](supplier_id=best)["name"]
print(name, c[best])
tools["submit_answer"](answer=name)
"""


def _stock(ctx):
  return {r["sku"]: r["stock"] for r in ctx.q("SELECT sku, stock FROM products")}


def _manifest_expected(ctx):
  want = _stock(ctx)
  for rel in ctx.files("shipments"):
    for line in ctx.read(rel).strip().splitlines()[1:]:
      sku, qty = line.split(",")
      want[sku.strip()] += int(qty)
  return want


def _pos(ctx):
  return sorted((r["sku"], r["quantity"]) for r in ctx.q("SELECT sku, quantity FROM purchase_orders"))


TASKS = [
    B.Task(DOMAIN, "reorder_low_stock",
           "For every product whose stock is below its reorder level, create one purchase order for "
           "2 * reorder_level - stock units. Create no other purchase orders.", (REORDER,),
           lambda ctx: sorted((r["sku"], 2 * r["reorder_level"] - r["stock"]) for r in ctx.q(
               "SELECT sku, stock, reorder_level FROM products WHERE stock < reorder_level")),
           check=lambda ctx, e, a: _pos(ctx) == [tuple(x) for x in e],
           wrong=('p["stock"] < p["reorder_level"]', 'p["stock"] <= p["reorder_level"]')),
    B.Task(DOMAIN, "apply_manifests",
           "Apply every shipment manifest in shipments/ (CSV with header 'sku,quantity'): each row adds its "
           "quantity to that product's stock.", (MANIFESTS,), _manifest_expected,
           check=lambda ctx, e, a: _stock(ctx) == e, wrong=("lines[1:]", "lines[1:-1]")),
    B.Task(DOMAIN, "electrical_value",
           "What is the total inventory value (stock * unit_cost, summed over products) of the 'electrical' "
           "category? Round it to 2 decimals.", (VALUE,),
           lambda ctx: round(ctx.scalar("SELECT SUM(stock * unit_cost) FROM products WHERE category = 'electrical'"), 2),
           answer="number", wrong=('p["stock"] * p["unit_cost"]', 'p["unit_cost"]')),
    B.Task(DOMAIN, "top_electrical_supplier",
           "Which supplier supplies the most products of the 'electrical' category? Submit the supplier's name "
           "(on a tie, the supplier with the smaller id).", (SUPPLIER,),
           lambda ctx: ctx.scalar("SELECT s.name FROM products p JOIN suppliers s ON s.id = p.supplier_id "
                                  "WHERE p.category = 'electrical' GROUP BY s.id ORDER BY COUNT(*) DESC, s.id LIMIT 1"),
           answer="text",
           wrong=("best = min(c, key=lambda s: (-c[s], s))", "best = sorted(c, key=lambda s: (-c[s], s))[1]")),
]
