"""Retail domain: customers, orders and carrier tracking; refund requests arrive as workspace files."""

from __future__ import annotations

import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

STATUSES = ("pending", "shipped", "delivered", "cancelled", "refunded")
TIERS = ("bronze", "silver", "gold")
JUNE = "2024-06-01"

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, city TEXT, tier TEXT, joined TEXT,
                        address TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, status TEXT, total REAL, created TEXT,
                     note TEXT);
CREATE TABLE tracking (order_id INTEGER PRIMARY KEY, state TEXT, place TEXT, eta TEXT, busy INTEGER);
CREATE TABLE notices (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER, message TEXT);
CREATE INDEX orders_status ON orders(status);
CREATE INDEX orders_customer ON orders(customer_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_cust, n_orders = 90 * f, 690 * f
  names = G.unique_names(rng, n_cust)
  customers = [{"id": i + 1, "name": nm, "email": G.email_of(nm, i + 1), "city": rng.choice(G.CITIES),
                "tier": rng.choices(TIERS, (5, 3, 2))[0], "joined": G.rand_date(rng, "2020-01-01", "2023-12-31"),
                "address": f"{rng.randint(1, 300)} {rng.choice(G.LAST)} Street"} for i, nm in enumerate(names)]
  customers[rng.randrange(n_cust)]["tier"] = "gold"
  # The distractor of top_gold_customer: a big spender who is not gold (which one and how much: seeded).
  big = rng.choice([c for c in customers if c["tier"] != "gold"])
  G.insert_rows(ctx, "customers", customers)
  weights = (rng.randint(12, 24), rng.randint(15, 25), 45, 10, 5)   # the share of pending orders varies
  orders = []
  extra = rng.randint(0, 60) * f   # recent large pending orders (seeded count), in place of ordinary ones
  for i in range(n_orders - extra):
    orders.append({"id": 1001 + i, "customer_id": rng.randint(1, n_cust),
                   "status": rng.choices(STATUSES, weights)[0],
                   "total": round(rng.uniform(5, 950), 2), "created": G.rand_date(rng, "2023-10-01", "2024-06-30"),
                   "note": G.sentence(rng, 5)})
  for _ in range(extra):
    orders.append({"id": 1001 + len(orders), "customer_id": rng.randint(1, n_cust), "status": "pending",
                   "total": round(rng.uniform(500.01, 950), 2), "created": G.rand_date(rng, "2024-03-01"),
                   "note": G.sentence(rng, 5)})
  for _ in range(rng.randint(2, 4) * f):
    orders.append({"id": 1001 + len(orders), "customer_id": big["id"], "status": "delivered",
                   "total": round(rng.uniform(1800, 2600), 2), "created": G.rand_date(rng), "note": "bulk order"})
  # Carrier tracking of shipped orders; a seeded handful of the June shipments are lost (and a few older).
  shipped = [o for o in orders if o["status"] == "shipped"]
  june = [o["id"] for o in shipped if o["created"] >= JUNE]
  older = [o["id"] for o in shipped if o["created"] < JUNE]
  lost = set(rng.sample(june, min(len(june), rng.randint(2, 4) * f))) | set(rng.sample(older, 2 * f))
  track = []
  for o in shipped:
    state = "lost" if o["id"] in lost else rng.choices(("transit", "delayed"), (3, 1))[0]
    track.append({"order_id": o["id"], "state": state, "place": rng.choice(G.CITIES),
                  "eta": G.rand_date(rng, "2024-07-02", "2024-07-20"),
                  "busy": 1 if o["id"] in lost and o["created"] >= JUNE else rng.choice((0, 0, 1, 2))})
  G.insert_rows(ctx, "tracking", track)
  G.write_docs(ctx, rng, "retail", ["returns_policy", "shipping", "tiers", "faq", "contacts"])
  # Refund requests: one per file, in three formats; a seeded number of them concern delivered orders.
  delivered = [o["id"] for o in orders if o["status"] == "delivered"]
  other = [o["id"] for o in orders if o["status"] in ("pending", "shipped", "cancelled")]
  k = B.n_data_files(f)
  n_del = rng.randint(1, k - 1)
  picks = rng.sample(delivered, n_del) + rng.sample(other, k - n_del)
  rng.shuffle(picks)
  for j, oid in enumerate(picks):
    cust = customers[orders[oid - 1001]["customer_id"] - 1]
    fmt = (j + rng.randrange(3)) % 3
    stem = f"inbox/refund_requests/request_{j + 1:03d}"
    if fmt == 0:
      ctx.write(f"{stem}.txt", f"From: {cust['email']}\nSubject: refund request\n\nHello, I would like a refund "
                f"for order #{oid}. {G.sentence(rng, 10)}\nRegards, {cust['name']}\n")
    elif fmt == 1:
      ctx.write(f"{stem}.json", json.dumps({"customer_email": cust["email"], "order_id": oid,
                                            "reason": G.sentence(rng, 6)}, indent=1) + "\n")
    else:
      ctx.write(f"{stem}.csv", f"customer,order,reason\n{cust['email']},{oid},{G.sentence(rng, 5)}\n")
  # The distractor of top_gold_customer without 'delivered' (base.Task.conditions; drawn last, so the rest of the
  # state is what it would be without it): cancelled orders that put another gold customer first when every
  # order counts.
  gold = [c["id"] for c in customers if c["tier"] == "gold"]
  spent = lambda cid, statuses: sum(o["total"] for o in orders if o["customer_id"] == cid and o["status"] in statuses)
  best = min(gold, key=lambda c: (-round(spent(c, ("delivered",)), 2), c))
  rival = rng.choice([c for c in gold if c != best])
  while spent(rival, STATUSES) <= spent(best, STATUSES):
    orders.append({"id": 1001 + len(orders), "customer_id": rival, "status": "cancelled",
                   "total": round(rng.uniform(500, 950), 2), "created": G.rand_date(rng), "note": G.sentence(rng, 5)})
  G.insert_rows(ctx, "orders", orders)


# -- tools

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


def _update_order_status(ctx, order_id, status):
  if status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  prev = _get_order(ctx, order_id)["status"]
  ctx.exec("UPDATE orders SET status = ? WHERE id = ?", status, order_id)
  return {"id": order_id, "status": status, "previous": prev}


def _track_shipment(ctx, order_id):
  o = _get_order(ctx, order_id)
  t = ctx.q1("SELECT * FROM tracking WHERE order_id = ?", order_id)
  if t is None:   # an error object, not a failed call: the program must look at it
    return {"ok": False, "order_id": order_id, "error": f"no shipment registered (order status {o['status']})"}
  key = ("track_shipment", order_id)
  ctx.calls[key] = ctx.calls.get(key, 0) + 1
  if ctx.calls[key] <= t["busy"]:   # `busy` (hidden): how often the carrier's service is busy first
    return {"ok": False, "order_id": order_id, "error": "carrier service busy (503), no report; try again"}
  if t["state"] == "lost":
    text = (f"Carrier investigation closed: the parcel of order #{order_id} could not be located after the "
            f"last scan in {t['place']} and is declared lost.")
  elif t["state"] == "delayed":
    text = f"Parcel of order #{order_id} is delayed at the {t['place']} depot; new estimate {t['eta']}."
  else:
    text = f"Parcel of order #{order_id} is in transit, last scanned at the {t['place']} hub; expected {t['eta']}."
  return {"order_id": order_id, "report": text}


def _send_notice(ctx, customer_id, message):
  _get_customer(ctx, customer_id)
  if not message.strip():
    raise ToolError("the message is empty")
  ctx.exec("INSERT INTO notices (customer_id, message) VALUES (?, ?)", customer_id, message)
  return {"customer_id": customer_id, "sent": True}


TOOLS = (
    B.list_tool("list_orders", "List orders {id, customer_id, status, total, created}, filtered.", table="orders",
                columns="id, customer_id, status, total, created", filters=[
                    B.Filter("status", "status = ?", B.p_str("order status", STATUSES)),
                    B.Filter("customer_id", "customer_id = ?", B.p_int("only this customer's orders")),
                    B.Filter("total_above", "total > ?", B.p_num("only orders whose total is greater than this")),
                    B.Filter("created_from", "created >= ?", B.p_str("only orders created on or after this "
                                                                     "date (YYYY-MM-DD)")),
                    B.Filter("created_before", "created < ?", B.p_str("only orders created before this date "
                                                                      "(YYYY-MM-DD)"))]),
    B.tool("get_order", "Get one order with all its fields.", _get_order, required=("order_id",),
           order_id=B.p_int("order id")),
    B.list_tool("list_customers", "List customers {id, name, email, city, tier}, filtered.", table="customers",
                columns="id, name, email, city, tier", filters=[
                    B.Filter("tier", "tier = ?", B.p_str("loyalty tier", TIERS)),
                    B.Filter("city", "city = ?", B.p_str("city")),
                    B.Filter("name", "name LIKE ?", B.p_str("part of the name"), like=True)]),
    B.tool("get_customer", "Get one customer with all fields.", _get_customer, required=("customer_id",),
           customer_id=B.p_int("customer id")),
    B.tool("update_order_status", "Set the status of one order.", _update_order_status,
           required=("order_id", "status"), order_id=B.p_int("order id"), status=B.p_str("new status", STATUSES)),
    B.tool("track_shipment", "The carrier's tracking report of a shipped order: {order_id, report} (free text), or "
           "{ok: false, order_id, error} when the order has no shipment or the carrier's service is busy.",
           _track_shipment, required=("order_id",), order_id=B.p_int("order id")),
    B.tool("send_notice", "Send a notice message to a customer.", _send_notice, required=("customer_id", "message"),
           customer_id=B.p_int("customer id"), message=B.p_str("the notice text")),
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
page = tools["list_orders"](status="pending", total_above=500, limit=1)
n = page["total"]
print(n)
tools["submit_answer"](answer=n)
"""

TOP_GOLD = """\
gold, offset = {}, 0
while offset is not None:
    page = tools["list_customers"](tier="gold", limit=200, offset=offset)
    gold.update({c["id"]: c["name"] for c in page["items"]})
    offset = page["next_offset"]
spend = {}
for cid in sorted(gold):
    offset = 0
    while offset is not None:
        page = tools["list_orders"](status="delivered", customer_id=cid, limit=200, offset=offset)
        for o in page["items"]:
            spend[cid] = spend.get(cid, 0.0) + o["total"]
        offset = page["next_offset"]
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
print(gold[best], round(spend[best], 2))
tools["submit_answer"](answer=gold[best])
"""

TOP_ANY_WRONG = """\
spend, offset = {}, 0
while offset is not None:
    page = tools["list_orders"](status="delivered", limit=200, offset=offset)
    for o in page["items"]:
        spend[o["customer_id"]] = spend.get(o["customer_id"], 0.0) + o["total"]
    offset = page["next_offset"]
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
tools["submit_answer"](answer=tools["get_customer"](customer_id=best)["name"])
"""

CANCEL_STALE = """\
stale, offset = [], 0
while offset is not None:   # collect first: cancelling while paging would shift the pages
    page = tools["list_orders"](status="pending", created_before="2024-03-01", limit=200, offset=offset)
    stale += [o["id"] for o in page["items"]]
    offset = page["next_offset"]
for oid in stale:
    tools["update_order_status"](order_id=oid, status="cancelled")
print("cancelled", len(stale))
tools["submit_answer"]()
"""

REFUNDS = """\
import json, re
paths = [p for p in tools["list_files"]() if "refund" in p]
count = 0
for path in paths:
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        oid = int(json.loads(text)["order_id"])
    elif path.endswith(".csv"):
        oid = int(text.splitlines()[1].split(",")[1])
    else:
        oid = int(re.search(r"#(\\d+)", text).group(1))
    if tools["get_order"](order_id=oid)["status"] == "delivered":
        tools["update_order_status"](order_id=oid, status="refunded")
        count += 1
print(count)
tools["submit_answer"](answer=count)
"""

LOST = """\
shipped, offset = [], 0
while offset is not None:
    page = tools["list_orders"](status="shipped", created_from="2024-06-01", limit=200, offset=offset)
    shipped += page["items"]
    offset = page["next_offset"]
lost = []
for o in shipped:
    for attempt in range(5):   # the carrier's service is sometimes busy: ask again
        res = tools["track_shipment"](order_id=o["id"])
        if res.get("ok", True):
            break
    rep = res.get("report", "")
    if "declared lost" in rep:
        lost.append(o)
for o in lost:
    tools["update_order_status"](order_id=o["id"], status="refunded")
    tools["send_notice"](customer_id=o["customer_id"],
                         message=f"We are sorry: the parcel of your order #{o['id']} was lost; it has been refunded.")
print("lost", [o["id"] for o in lost])
tools["submit_answer"](answer=len(lost))
"""


def _top_gold(ctx):
  return ctx.scalar("SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id "
                    "WHERE o.status = 'delivered' AND c.tier = 'gold' GROUP BY c.id "
                    "ORDER BY -ROUND(SUM(o.total), 2), c.id LIMIT 1")


def _request_order(rel, text):
  if rel.endswith(".json"):
    return int(read_records(rel, text)[0]["order_id"])
  if rel.endswith(".csv"):
    return int(read_records(rel, text)[0]["order"])
  return int(re.search(r"#(\d+)", text).group(1))


def _refund_expected(ctx):
  targets = []
  for rel in ctx.files("inbox/refund_requests"):
    oid = _request_order(rel, ctx.read(rel))
    if ctx.scalar("SELECT status FROM orders WHERE id = ?", oid) == "delivered":
      targets.append(oid)
  return {"answer": len(targets), "statuses": _statuses(ctx), "targets": targets}


def _lost_expected(ctx):
  rows = ctx.q("SELECT o.id, o.customer_id FROM orders o JOIN tracking t ON t.order_id = o.id "
               "WHERE o.status = 'shipped' AND o.created >= ? AND t.state = 'lost'", JUNE)
  return {"answer": len(rows), "statuses": _statuses(ctx), "targets": [r["id"] for r in rows],
          "notices": sorted([r["customer_id"], r["id"]] for r in rows)}


def _lost_check(ctx, e, a):
  if not _state_check(ctx, e, a, "refunded"):
    return False
  got = []
  for r in ctx.q("SELECT customer_id, message FROM notices"):
    ids = [int(x) for x in re.findall(r"#(\d+)", r["message"])]
    if len(ids) != 1:
      return False
    got.append([r["customer_id"], ids[0]])
  return sorted(got) == e["notices"]


TASKS = [
    B.Task(DOMAIN, "pending_over_500",
           "How many pending orders have a total above 500.00? Submit the count.", (PENDING_OVER_500,),
           lambda ctx: ctx.scalar("SELECT COUNT(*) FROM orders WHERE status = 'pending' AND total > 500"),
           answer="int", wrong=('status="pending", total_above=500', 'total_above=500'),
           conditions=(("above 500", ('status="pending", total_above=500', 'status="pending"')),)),
    B.Task(DOMAIN, "top_gold_customer",
           "Among gold-tier customers, who has the largest total value of delivered orders? Submit the "
           "customer's name (on a tie, the customer with the smaller id).", (TOP_GOLD,), _top_gold,
           answer="text", wrong=TOP_ANY_WRONG,
           conditions=(("delivered", ('status="delivered", customer_id=cid', 'customer_id=cid')),)),
    B.Task(DOMAIN, "cancel_stale_pending",
           "Cancel every pending order created before 2024-03-01 by setting its status to 'cancelled'. Do not "
           "change any other order.", (CANCEL_STALE,),
           lambda ctx: {"statuses": _statuses(ctx), "targets": [r["id"] for r in ctx.q(
               "SELECT id FROM orders WHERE status = 'pending' AND created < '2024-03-01'")]},
           check=lambda ctx, e, a: _state_check(ctx, e, a, "cancelled"),
           wrong=('"2024-03-01"', '"2024-02-01"'),
           conditions=(("pending", ('status="pending", ', '')),
                       ("before March", (', created_before="2024-03-01"', '')))),
    B.Task(DOMAIN, "process_refund_requests",
           "Customers' refund requests have been saved as files somewhere in the workspace, one request per "
           "file (the formats differ). For every request whose order is currently 'delivered', set that "
           "order's status to 'refunded'; leave all other orders unchanged. Submit the number of orders you "
           "refunded.", (REFUNDS,), _refund_expected,
           answer="int", check=lambda ctx, e, a: _state_check(ctx, e, a, "refunded"),
           wrong=('if tools["get_order"](order_id=oid)["status"] == "delivered":', "if True:"), tags=("explore",)),
    B.Task(DOMAIN, "lost_parcels",
           "Some parcels of shipped orders were lost by the carrier. Check the tracking report of every order "
           "with status 'shipped' created on or after 2024-06-01. For each one the carrier declares lost, set "
           "the order's status to 'refunded' and send its customer one notice that names the order as "
           "'#<order id>'. Change nothing else. Submit the number of lost parcels.", (LOST,), _lost_expected,
           answer="int", check=_lost_check, wrong=("for attempt in range(5):", "for attempt in range(1):"),
           tags=("errors", "writeback"),
           conditions=(("from June", (', created_from="2024-06-01"', '')),)),
]
