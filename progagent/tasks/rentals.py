"""Rentals domain: properties, tenants, rent payments and late fees; rent addenda are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

CITIES = ("Lisbon", "Porto", "Braga", "Faro")
MONTHS = ("2024-01", "2024-02", "2024-03", "2024-04", "2024-05", "2024-06")

SCHEMA = """
CREATE TABLE properties (id INTEGER PRIMARY KEY, address TEXT, city TEXT, bedrooms INTEGER, monthly_rent REAL,
                         notes TEXT);
CREATE TABLE tenants (id INTEGER PRIMARY KEY, name TEXT, email TEXT, property_id INTEGER, lease_start TEXT,
                      lease_end TEXT);
CREATE TABLE payments (id INTEGER PRIMARY KEY, tenant_id INTEGER, month TEXT, amount REAL, paid_date TEXT);
CREATE TABLE late_fees (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id INTEGER, month TEXT, amount REAL);
CREATE INDEX payments_tenant ON payments(tenant_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_prop = 220 * f
  props = [{"id": i + 1, "address": f"{rng.randint(1, 400)} {rng.choice(B.LAST)} Avenue, unit {i + 1}",
            "city": CITIES[i % 4] if i < 8 else rng.choice(CITIES), "bedrooms": rng.randint(1, 4),
            "monthly_rent": float(rng.randint(60, 250) * 10), "notes": B.sentence(rng, 10)} for i in range(n_prop)]
  B.insert_rows(ctx, "properties", props)
  names = B.unique_names(rng, 2 * n_prop)
  tenants, payments = [], []
  for p in props:
    if rng.random() < 0.3 or p["id"] == 2:   # a former tenant, lease ended in the spring (property 2: only one)
      i = len(tenants)
      tenants.append({"id": i + 1, "name": names[i], "email": B.email_of(names[i], i + 1), "property_id": p["id"],
                      "lease_start": "2023-03-01", "lease_end": rng.choice(("2024-02-29", "2024-03-31", "2024-04-30"))})
    if rng.random() < 0.85 and p["id"] != 2:
      i = len(tenants)
      start = rng.choice(("2022-09-01", "2023-01-01", "2023-06-01", "2024-01-01", "2024-05-01", "2024-07-01"))
      tenants.append({"id": i + 1, "name": names[i], "email": B.email_of(names[i], i + 1), "property_id": p["id"],
                      "lease_start": start, "lease_end": "2025-06-30"})
  for t in tenants:
    rent = props[t["property_id"] - 1]["monthly_rent"]
    for m in MONTHS:
      if not (t["lease_start"] <= f"{m}-01" <= t["lease_end"]) or rng.random() < 0.07:
        continue
      day = rng.randint(1, 4) if rng.random() < 0.8 else rng.randint(5, 20)
      payments.append({"id": len(payments) + 1, "tenant_id": t["id"], "month": m, "amount": rent,
                       "paid_date": f"{m}-{day:02d}"})
  B.insert_rows(ctx, "tenants", tenants)
  B.insert_rows(ctx, "payments", payments)
  ctx.conn.execute("UPDATE payments SET paid_date = '2024-05-05' WHERE id = (SELECT MIN(id) FROM payments "
                   "WHERE month = '2024-05')")   # paid exactly on the deadline
  B.write_docs(ctx, rng, "rentals", ["leasing", "late_fees", "maintenance", "inspections", "owners"])
  for j, p in enumerate(rng.sample(props, B.n_data_files(f))):
    new = p["monthly_rent"] + rng.choice((-50, 25, 50, 75, 100))
    status = "withdrawn" if j % 3 == 1 else "signed"
    ctx.write(f"addenda/addendum_{j + 1:03d}.txt", f"Property: {p['address']}\nNew monthly rent: {new:.2f}\n"
              f"Effective: 2024-08-01\nStatus: {status}\n")


def _tenant(ctx, tenant_id):
  r = ctx.q1("SELECT * FROM tenants WHERE id = ?", tenant_id)
  if r is None:
    raise ToolError(f"no tenant with id {tenant_id}")
  return r


def _list_properties(ctx, city):
  if city not in CITIES:
    raise ToolError(f"unknown city {city!r}; use one of {list(CITIES)}")
  return ctx.q("SELECT id, address, bedrooms, monthly_rent FROM properties WHERE city = ? ORDER BY id", city)


def _late_fee(ctx, tenant_id, month, amount):
  _tenant(ctx, tenant_id)
  if month not in MONTHS:
    raise ToolError(f"month must be one of {list(MONTHS)}")
  ctx.exec("INSERT INTO late_fees (tenant_id, month, amount) VALUES (?, ?, ?)", tenant_id, month, float(amount))
  return {"tenant_id": tenant_id, "month": month, "amount": float(amount)}


def _update_rent(ctx, property_id, monthly_rent):
  if ctx.q1("SELECT id FROM properties WHERE id = ?", property_id) is None:
    raise ToolError(f"no property with id {property_id}")
  ctx.exec("UPDATE properties SET monthly_rent = ? WHERE id = ?", float(monthly_rent), property_id)
  return {"property_id": property_id, "monthly_rent": float(monthly_rent)}


TOOLS = (
    B.tool("list_properties", "List the properties of a city: [{id, address, bedrooms, monthly_rent}].",
           _list_properties, required=("city",), city=B.p_str("city", CITIES)),
    B.tool("list_tenants", "List all tenants, current and former: [{id, name, email, property_id, lease_start, "
           "lease_end}].", lambda ctx: ctx.q("SELECT * FROM tenants ORDER BY id")),
    B.tool("get_tenant", "Get one tenant.", _tenant, required=("tenant_id",), tenant_id=B.p_int("tenant id")),
    B.tool("list_payments", "List a tenant's rent payments: [{month, amount, paid_date}].",
           lambda ctx, tenant_id: (_tenant(ctx, tenant_id), ctx.q(
               "SELECT month, amount, paid_date FROM payments WHERE tenant_id = ? ORDER BY id", tenant_id))[1],
           required=("tenant_id",), tenant_id=B.p_int("tenant id")),
    B.tool("record_late_fee", "Record a late fee for a tenant and month.", _late_fee,
           required=("tenant_id", "month", "amount"), tenant_id=B.p_int("tenant id"), month=B.p_str("'YYYY-MM'"),
           amount=B.p_num("fee amount")),
    B.tool("update_rent", "Set a property's monthly rent.", _update_rent, required=("property_id", "monthly_rent"),
           property_id=B.p_int("property id"), monthly_rent=B.p_num("new monthly rent")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("rentals", "A letting agency's properties, tenants and rent payments.", SCHEMA, generate, TOOLS)

UNPAID = """\
out = []
for t in tools["list_tenants"]():
    if t["lease_start"] <= "2024-06-01" and t["lease_end"] >= "2024-06-30":
        months = {p["month"] for p in tools["list_payments"](tenant_id=t["id"])}
        if "2024-06" not in months:
            out.append(t["email"])
print(out)
tools["submit_answer"](answer=out)
"""

LATE = """\
rent = {}
for city in ("Lisbon", "Porto", "Braga", "Faro"):
    for p in tools["list_properties"](city=city):
        rent[p["id"]] = p["monthly_rent"]
for t in tools["list_tenants"]():
    for p in tools["list_payments"](tenant_id=t["id"]):
        if p["month"] == "2024-05" and p["paid_date"] > "2024-05-05":
            tools["record_late_fee"](tenant_id=t["id"], month="2024-05", amount=round(0.05 * rent[t["property_id"]], 2))
tools["submit_answer"]()
"""

OCCUPANCY = """\
porto = [p["id"] for p in tools["list_properties"](city="Porto")]
let = {t["property_id"] for t in tools["list_tenants"]()
       if t["lease_start"] <= "2024-07-01" <= t["lease_end"]}
pct = round(100 * sum(1 for p in porto if p in let) / len(porto), 1)
print(pct)
tools["submit_answer"](answer=pct)
"""

ADDENDA = """\
by_address = {}
for city in ("Lisbon", "Porto", "Braga", "Faro"):
    for p in tools["list_properties"](city=city):
        by_address[p["address"]] = p["id"]
for path in tools["list_files"](directory="addenda"):
    fields = dict(l.split(": ", 1) for l in tools["read_file"](path=path)["content"].strip().splitlines())
    if fields["Status"] == "signed":
        tools["update_rent"](property_id=by_address[fields["Property"]], monthly_rent=float(fields["New monthly rent"]))
tools["submit_answer"]()
"""


def _fees(ctx):
  return sorted((r["tenant_id"], r["month"], round(r["amount"], 2)) for r in ctx.q("SELECT * FROM late_fees"))


def _rents(ctx):
  return {r["id"]: r["monthly_rent"] for r in ctx.q("SELECT id, monthly_rent FROM properties")}


def _addenda_expected(ctx):
  want = _rents(ctx)
  ids = {r["address"]: r["id"] for r in ctx.q("SELECT id, address FROM properties")}
  for rel in ctx.files("addenda"):
    fields = dict(line.split(": ", 1) for line in ctx.read(rel).strip().splitlines())
    if fields["Status"] == "signed":
      want[ids[fields["Property"]]] = float(fields["New monthly rent"])
  return want


TASKS = [
    B.Task(DOMAIN, "unpaid_june",
           "Which tenants whose lease covers all of June 2024 (starts on or before 2024-06-01 and ends on or "
           "after 2024-06-30) have no rent payment for the month 2024-06? Submit the list of their e-mails.",
           (UNPAID,), lambda ctx: [r["email"] for r in ctx.q(
               "SELECT email FROM tenants t WHERE lease_start <= '2024-06-01' AND lease_end >= '2024-06-30' AND NOT "
               "EXISTS (SELECT 1 FROM payments p WHERE p.tenant_id = t.id AND p.month = '2024-06')")],
           answer="set", wrong=('if t["lease_start"] <= "2024-06-01" and t["lease_end"] >= "2024-06-30":', "if True:")),
    B.Task(DOMAIN, "late_fees_may",
           "Record a late fee for May 2024 (month '2024-05') for every tenant whose May rent was paid after "
           "2024-05-05; the fee is 5% of the property's monthly rent, rounded to 2 decimals. Record no other fees.",
           (LATE,), lambda ctx: sorted((r["tenant_id"], "2024-05", round(0.05 * r["monthly_rent"], 2)) for r in ctx.q(
               "SELECT p.tenant_id, pr.monthly_rent FROM payments p JOIN tenants t ON t.id = p.tenant_id JOIN "
               "properties pr ON pr.id = t.property_id WHERE p.month = '2024-05' AND p.paid_date > '2024-05-05'")),
           check=lambda ctx, e, a: _fees(ctx) == [tuple(x) for x in e],
           wrong=('p["paid_date"] > "2024-05-05"', 'p["paid_date"] >= "2024-05-05"')),
    B.Task(DOMAIN, "porto_occupancy",
           "What percentage of the properties in Porto have a tenant whose lease covers 2024-07-01? Round it to "
           "1 decimal (e.g. 62.5).", (OCCUPANCY,),
           lambda ctx: round(100 * ctx.scalar(
               "SELECT COUNT(*) FROM properties p WHERE city = 'Porto' AND EXISTS (SELECT 1 FROM tenants t WHERE "
               "t.property_id = p.id AND t.lease_start <= '2024-07-01' AND t.lease_end >= '2024-07-01')")
                             / ctx.scalar("SELECT COUNT(*) FROM properties WHERE city = 'Porto'"), 1),
           answer="number", wrong=('\n       if t["lease_start"] <= "2024-07-01" <= t["lease_end"]', "")),
    B.Task(DOMAIN, "apply_rent_addenda",
           "Apply the rent addenda in addenda/: for every addendum whose status is 'signed', set the property's "
           "monthly rent to the new rent. Ignore withdrawn addenda and change nothing else.", (ADDENDA,),
           _addenda_expected, check=lambda ctx, e, a: _rents(ctx) == e,
           wrong=('if fields["Status"] == "signed":', "if True:")),
]
