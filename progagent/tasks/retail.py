"""Retail domain: customers and orders; refund requests arrive as workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

STATUSES = ("pending", "shipped", "delivered", "cancelled", "refunded")
TIERS = ("bronze", "silver", "gold")

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, city TEXT, tier TEXT, joined TEXT,
                        address TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, status TEXT, total REAL, created TEXT,
                     note TEXT);
CREATE INDEX orders_status ON orders(status);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_cust, n_orders = 90 * f, 690 * f
  names = B.unique_names(rng, n_cust)
  customers = [{"id": i + 1, "name": nm, "email": B.email_of(nm, i + 1), "city": rng.choice(B.CITIES),
                "tier": rng.choices(TIERS, (5, 3, 2))[0], "joined": B.rand_date(rng, "2020-01-01", "2023-12-31"),
                "address": f"{rng.randint(1, 300)} {rng.choice(B.LAST)} Street"} for i, nm in enumerate(names)]
  customers[0]["tier"] = "gold"
  customers[1]["tier"] = "silver"   # the distractor below: a big spender who is not gold
  B.insert_rows(ctx, "customers", customers)
  orders = []
  for i in range(n_orders):
    orders.append({"id": 1001 + i, "customer_id": rng.randint(1, n_cust),
                   "status": rng.choices(STATUSES, (20, 20, 45, 10, 5))[0],
                   "total": round(rng.uniform(5, 950), 2), "created": B.rand_date(rng, "2023-10-01", "2024-06-30"),
                   "note": B.sentence(rng, 8)})
  for k in range(3):
    orders.append({"id": 1001 + n_orders + k, "customer_id": 2, "status": "delivered",
                   "total": 2500.0 + k, "created": B.rand_date(rng), "note": "bulk order"})
  B.insert_rows(ctx, "orders", orders)
  B.write_docs(ctx, rng, "retail", ["returns_policy", "shipping", "tiers", "faq", "contacts"])
  delivered = [o["id"] for o in orders if o["status"] == "delivered"]
  other = [o["id"] for o in orders if o["status"] in ("pending", "shipped", "cancelled")]
  k = B.n_data_files(f)
  picks = rng.sample(delivered, k - k // 2) + rng.sample(other, k // 2)
  rng.shuffle(picks)
  for j, oid in enumerate(picks):
    cust = customers[orders[oid - 1001]["customer_id"] - 1]
    ctx.write(f"refund_requests/request_{j + 1:03d}.txt",
              f"From: {cust['email']}\nSubject: refund request\n\nHello, I would like a refund for order "
              f"#{oid}. {B.sentence(rng, 10)}\nRegards, {cust['name']}\n")


# -- tools

def _list_orders(ctx, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  return ctx.q("SELECT id, customer_id, status, total, created FROM orders WHERE status = ? ORDER BY id", status)


def _get_order(ctx, order_id):
  r = ctx.q1("SELECT * FROM orders WHERE id = ?", order_id)
  if r is None:
    raise ToolError(f"no order with id {order_id}")
  return r


def _get_customer(ctx, customer_id):
  r = ctx.q1("SELECT * FROM customers WHERE id = ?", customer_id)
  if r is None:
    raise ToolError(f"no customer with id {customer_id}")
  return r


def _list_customers(ctx, tier):
  if tier not in TIERS:
    raise ToolError(f"unknown tier {tier!r}; use one of {list(TIERS)}")
  return ctx.q("SELECT id, name, email, city, tier FROM customers WHERE tier = ? ORDER BY id", tier)


def _update_order_status(ctx, order_id, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  prev = _get_order(ctx, order_id)["status"]
  ctx.exec("UPDATE orders SET status = ? WHERE id = ?", status, order_id)
  return {"id": order_id, "status": status, "previous": prev}


TOOLS = (
    B.tool("list_orders", "List the orders with a given status: [{id, customer_id, status, total, created}].",
           _list_orders, required=("status",), status=B.p_str("order status", STATUSES)),
    B.tool("get_order", "Get one order with all its fields.", _get_order, required=("order_id",),
           order_id=B.p_int("order id")),
    B.tool("get_customer", "Get one customer with all fields.", _get_customer, required=("customer_id",),
           customer_id=B.p_int("customer id")),
    B.tool("list_customers", "List the customers of a loyalty tier: [{id, name, email, city, tier}].",
           _list_customers, required=("tier",), tier=B.p_str("loyalty tier", TIERS)),
    B.tool("update_order_status", "Set the status of one order.", _update_order_status,
           required=("order_id", "status"), order_id=B.p_int("order id"), status=B.p_str("new status", STATUSES)),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("retail", "An online shop's customers and orders.", SCHEMA, generate, TOOLS)


def _statuses(ctx):
  return {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM orders")}


def _state_check(ctx, expected, answer, new_status):
  want = dict(expected["statuses"])
  for oid in expected["targets"]:
    want[oid] = new_status
  return _statuses(ctx) == want


# -- tasks

PENDING_OVER_500 = """\
orders = tools["list_orders"](status="pending")
n = sum(1 for o in orders if o["total"] > 500)
print(n)
tools["submit_answer"](answer=n)
"""

TOP_GOLD = """\
gold = {c["id"]: c["name"] for c in tools["list_customers"](tier="gold")}
spend = {}
for o in tools["list_orders"](status="delivered"):
    if o["customer_id"] in gold:
        spend[o["customer_id"]] = spend.get(o["customer_id"], 0.0) + o["total"]
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
print(gold[best], round(spend[best], 2))
tools["submit_answer"](answer=gold[best])
"""

TOP_ANY_WRONG = """\
spend = {}
for o in tools["list_orders"](status="delivered"):
    spend[o["customer_id"]] = spend.get(o["customer_id"], 0.0) + o["total"]
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
tools["submit_answer"](answer=tools["get_customer"](customer_id=best)["name"])
"""

CANCEL_STALE = """\
n = 0
for o in tools["list_orders"](status="pending"):
    if o["created"] < "2024-03-01":
        tools["update_order_status"](order_id=o["id"], status="cancelled")
        n += 1
print("cancelled", n)
tools["submit_answer"]()
"""

REFUNDS = """\
import re
count = 0
for path in tools["list_files"](directory="refund_requests"):
    text = tools["read_file"](path=path)["content"]
    oid = int(re.search(r"#(\\d+)", text).group(1))
    if tools["get_order"](order_id=oid)["status"] == "delivered":
        tools["update_order_status"](order_id=oid, status="refunded")
        count += 1
print(count)
tools["submit_answer"](answer=count)
"""


def _top_gold(ctx):
  return ctx.scalar("SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id "
                    "WHERE o.status = 'delivered' AND c.tier = 'gold' GROUP BY c.id "
                    "ORDER BY -ROUND(SUM(o.total), 2), c.id LIMIT 1")


def _refund_expected(ctx):
  import re
  targets = []
  for rel in ctx.files("refund_requests"):
    oid = int(re.search(r"#(\d+)", ctx.read(rel)).group(1))
    if ctx.scalar("SELECT status FROM orders WHERE id = ?", oid) == "delivered":
      targets.append(oid)
  return {"answer": len(targets), "statuses": _statuses(ctx), "targets": targets}


TASKS = [
    B.Task(DOMAIN, "pending_over_500",
           "How many pending orders have a total above 500.00? Submit the count.", (PENDING_OVER_500,),
           lambda ctx: ctx.scalar("SELECT COUNT(*) FROM orders WHERE status = 'pending' AND total > 500"),
           answer="int", wrong=('if o["total"] > 500', "")),
    B.Task(DOMAIN, "top_gold_customer",
           "Among gold-tier customers, who has the largest total value of delivered orders? Submit the "
           "customer's name (on a tie, the customer with the smaller id).", (TOP_GOLD,), _top_gold,
           answer="text", wrong=TOP_ANY_WRONG),
    B.Task(DOMAIN, "cancel_stale_pending",
           "Cancel every pending order created before 2024-03-01 by setting its status to 'cancelled'. Do not "
           "change any other order.", (CANCEL_STALE,),
           lambda ctx: {"statuses": _statuses(ctx), "targets": [r["id"] for r in ctx.q(
               "SELECT id FROM orders WHERE status = 'pending' AND created < '2024-03-01'")]},
           check=lambda ctx, e, a: _state_check(ctx, e, a, "cancelled"),
           wrong=('"2024-03-01"', '"2024-02-01"')),
    B.Task(DOMAIN, "process_refund_requests",
           "Each file in refund_requests/ asks for a refund of one order (its number follows '#'). For every "
           "request whose order is currently 'delivered', set that order's status to 'refunded'; leave all "
           "other orders unchanged. Submit the number of orders you refunded.", (REFUNDS,), _refund_expected,
           answer="int", check=lambda ctx, e, a: _state_check(ctx, e, a, "refunded"),
           wrong=('if tools["get_order"](order_id=oid)["status"] == "delivered":', "if True:")),
]
