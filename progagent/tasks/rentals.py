"""Rentals domain: properties, tenants, rent payments and late fees; rent addenda are workspace files."""

from __future__ import annotations

import csv
import io
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

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
CREATE INDEX tenants_property ON tenants(property_id);
"""


def _addendum(rng: random.Random, fmt: str, p: dict, new: float, status: str) -> tuple[str, str]:
  """(extension, text) of one addendum in one of three formats; the JSON one names the property by id."""
  if fmt == "txt":
    return "txt", (f"Property: {p['address']}\nNew monthly rent: {new:.2f}\nEffective: 2024-08-01\n"
                   f"Status: {status}\n")
  if fmt == "json":
    return "json", json.dumps({"property_id": p["id"], "rent": {"monthly": new, "currency": "EUR"},
                               "effective": "2024-08-01", "state": status}, indent=2) + "\n"
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(["address", "new_rent_eur", "effective_from", "status"])
  w.writerow([p["address"], f"{new:.2f}", "2024-08-01", status.upper()])
  return "csv", buf.getvalue()


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_prop = 220 * f
  props = [{"id": i + 1, "address": f"{rng.randint(1, 400)} {rng.choice(G.LAST)} Avenue, unit {i + 1}",
            "city": CITIES[i % 4] if i < 8 else rng.choice(CITIES), "bedrooms": rng.randint(1, 4),
            "monthly_rent": float(rng.randint(60, 250) * 10), "notes": G.sentence(rng, 10)} for i in range(n_prop)]
  G.insert_rows(ctx, "properties", props)
  names = G.unique_names(rng, 2 * n_prop)
  p_former, p_let, p_july = 0.3, 0.85, rng.uniform(0.04, 0.1)
  tenants, payments = [], []
  vacant = rng.choice([p["id"] for p in props if p["city"] == "Porto"])   # planted: only a former tenant
  for p in props:
    if rng.random() < p_former or p["id"] == vacant:   # a former tenant, lease ended in the spring
      i = len(tenants)
      tenants.append({"id": i + 1, "name": names[i], "email": G.email_of(names[i], i + 1), "property_id": p["id"],
                      "lease_start": "2023-03-01", "lease_end": rng.choice(("2024-02-29", "2024-03-31", "2024-04-30"))})
    if rng.random() < p_let and p["id"] != vacant:
      i = len(tenants)
      start = rng.choice(("2022-09-01", "2023-01-01", "2023-06-01", "2024-01-01", "2024-05-01", "2024-07-01"))
      end = "2024-07-31" if rng.random() < p_july and start < "2024-07-01" else "2025-06-30"
      tenants.append({"id": i + 1, "name": names[i], "email": G.email_of(names[i], i + 1), "property_id": p["id"],
                      "lease_start": start, "lease_end": end})
  for t in tenants:
    rent = props[t["property_id"] - 1]["monthly_rent"]
    for m in MONTHS:
      if not (t["lease_start"] <= f"{m}-01" <= t["lease_end"]) or rng.random() < 0.07:
        continue
      day = rng.randint(1, 4) if rng.random() < 0.8 else rng.randint(5, 20)
      payments.append({"id": len(payments) + 1, "tenant_id": t["id"], "month": m, "amount": rent,
                       "paid_date": f"{m}-{day:02d}"})
  for m in ("2024-05", "2024-06"):   # planted: some payments made exactly on the deadline (the 5th)
    for pay in rng.sample([x for x in payments if x["month"] == m], rng.randint(1, 3) * f):
      pay["paid_date"] = f"{m}-05"
  G.insert_rows(ctx, "payments", payments)
  G.write_docs(ctx, rng, "rentals", ["leasing", "late_fees", "maintenance", "inspections", "owners"])
  k = B.n_data_files(f)
  fmts = ["txt", "json", "csv"] + [rng.choice(("txt", "json", "csv")) for _ in range(k - 3)]
  rng.shuffle(fmts)
  statuses = ["signed" if rng.random() < 0.65 else "withdrawn" for _ in range(k)]
  a = rng.choice([j for j in range(k) if fmts[j] != "txt"])
  statuses[a] = "signed"   # at least one signed addendum that is not key: value text, and one withdrawn
  statuses[rng.choice([j for j in range(k) if j != a])] = "withdrawn"
  for j, p in enumerate(rng.sample(props, k)):
    new = p["monthly_rent"] + rng.choice((-50, 25, 50, 75, 100, 120, 150))
    ext, text = _addendum(rng, fmts[j], p, new, statuses[j])
    ctx.write(f"addenda/addendum_{j + 1:03d}.{ext}", text)
  # The distractor of porto_occupancy without the lease start (base.Task.conditions; drawn last, so the rest of
  # the state is what it would be without it): the vacant Porto property is let from August on.
  i = len(tenants)
  tenants.append({"id": i + 1, "name": names[i], "email": G.email_of(names[i], i + 1), "property_id": vacant,
                  "lease_start": rng.choice(("2024-08-01", "2024-09-01")), "lease_end": "2025-07-31"})
  G.insert_rows(ctx, "tenants", tenants)


# -- tools

def _late_fee(ctx, tenant_id, month, amount):
  if ctx.q1("SELECT id FROM tenants WHERE id = ?", tenant_id) is None:
    raise ToolError(f"no tenant with id {tenant_id}")
  if month not in MONTHS:
    raise ToolError(f"month must be one of {list(MONTHS)}")
  if not 0 < float(amount) < 10_000:
    raise ToolError(f"fee amount {amount} is out of range")
  ctx.exec("INSERT INTO late_fees (tenant_id, month, amount) VALUES (?, ?, ?)", tenant_id, month, float(amount))
  return {"tenant_id": tenant_id, "month": month, "amount": float(amount)}


def _update_rent(ctx, property_id, monthly_rent):
  if ctx.q1("SELECT id FROM properties WHERE id = ?", property_id) is None:
    raise ToolError(f"no property with id {property_id}")
  if not 0 < float(monthly_rent) < 100_000:
    raise ToolError(f"monthly rent {monthly_rent} is out of range")
  ctx.exec("UPDATE properties SET monthly_rent = ? WHERE id = ?", float(monthly_rent), property_id)
  return {"property_id": property_id, "monthly_rent": float(monthly_rent)}


DATE = "'YYYY-MM-DD'"

TOOLS = (
    B.list_tool("list_properties", "List properties (id, address, city, bedrooms, monthly_rent), optionally filtered.",
                table="properties", columns="id, address, city, bedrooms, monthly_rent",
                filters=[B.Filter("property_id", "id = ?", B.p_int("only the property with this id")),
                         B.Filter("city", "city = ?", B.p_str("city", CITIES)),
                         B.Filter("address", "address LIKE ?", B.p_str("only addresses containing this text"),
                                  like=True),
                         B.Filter("min_bedrooms", "bedrooms >= ?", B.p_int("at least this many bedrooms"))]),
    B.list_tool("list_tenants", "List tenants, current and former (id, name, email, property_id, city, lease_start, "
                "lease_end), optionally filtered.", table="tenants t JOIN properties p ON p.id = t.property_id",
                columns="t.id AS id, t.name AS name, t.email AS email, t.property_id AS property_id, p.city AS city, "
                        "t.lease_start AS lease_start, t.lease_end AS lease_end", order_by="t.id",
                filters=[B.Filter("property_id", "t.property_id = ?", B.p_int("only tenants of this property")),
                         B.Filter("city", "p.city = ?", B.p_str("only tenants of properties in this city", CITIES)),
                         B.Filter("starts_on_or_before", "t.lease_start <= ?", B.p_str(f"lease start <= {DATE}")),
                         B.Filter("ends_on_or_after", "t.lease_end >= ?", B.p_str(f"lease end >= {DATE}")),
                         B.Filter("ends_on_or_before", "t.lease_end <= ?", B.p_str(f"lease end <= {DATE}")),
                         B.Filter("unpaid_month", "NOT EXISTS (SELECT 1 FROM payments y WHERE y.tenant_id = t.id "
                                  "AND y.month = ?)", B.p_str("only tenants with no payment for this 'YYYY-MM'"))]),
    B.list_tool("list_payments", "List rent payments (id, tenant_id, property_id, month, amount, paid_date), "
                "optionally filtered.", table="payments y JOIN tenants t ON t.id = y.tenant_id",
                columns="y.id AS id, y.tenant_id AS tenant_id, t.property_id AS property_id, y.month AS month, "
                        "y.amount AS amount, y.paid_date AS paid_date", order_by="y.id",
                filters=[B.Filter("tenant_id", "y.tenant_id = ?", B.p_int("only this tenant's payments")),
                         B.Filter("month", "y.month = ?", B.p_str("only payments for this 'YYYY-MM'")),
                         B.Filter("paid_after", "y.paid_date > ?", B.p_str(f"only payments made after {DATE}"))]),
    B.tool("record_late_fee", "Record a late fee for a tenant and month.", _late_fee,
           required=("tenant_id", "month", "amount"), tenant_id=B.p_int("tenant id"), month=B.p_str("'YYYY-MM'"),
           amount=B.p_num("fee amount")),
    B.tool("update_rent", "Set a property's monthly rent.", _update_rent, required=("property_id", "monthly_rent"),
           property_id=B.p_int("property id"), monthly_rent=B.p_num("new monthly rent")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("rentals", "A letting agency's properties, tenants and rent payments.", SCHEMA, generate, TOOLS)

# -- tasks

ALL = B.paging_prelude("fetch", tool="tool_name", kwargs="kw", rows="out", offset="off", limit_first=False)

UNPAID = ALL + """\
rows = fetch("list_tenants", starts_on_or_before="2024-06-01", ends_on_or_after="2024-06-30", unpaid_month="2024-06")
out = [t["email"] for t in rows]
print(out)
tools["submit_answer"](answer=out)
"""

LATE = ALL + """\
rent = {}
n = 0
for pay in fetch("list_payments", month="2024-05", paid_after="2024-05-05"):
    pid = pay["property_id"]
    if pid not in rent:
        rent[pid] = tools["list_properties"](property_id=pid)["items"][0]["monthly_rent"]
    tools["record_late_fee"](tenant_id=pay["tenant_id"], month="2024-05", amount=round(0.05 * rent[pid], 2))
    n += 1
print(n, "fees")
tools["submit_answer"]()
"""

OCCUPANCY = ALL + """\
porto = [p["id"] for p in fetch("list_properties", city="Porto")]
covers = dict(starts_on_or_before="2024-07-01", ends_on_or_after="2024-07-01")
let = {t["property_id"] for t in fetch("list_tenants", city="Porto", **covers)}
pct = round(100 * sum(1 for p in porto if p in let) / len(porto), 1)
print(pct)
tools["submit_answer"](answer=pct)
"""

ADDENDA = r"""
import csv, io, json
applied = 0
for path in tools["list_files"](directory="addenda"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        d = json.loads(text)
        pid, new, status = d["property_id"], float(d["rent"]["monthly"]), d["state"]
    else:
        if path.endswith(".csv"):
            row = next(csv.DictReader(io.StringIO(text)))
            address, new, status = row["address"], float(row["new_rent_eur"]), row["status"]
        else:
            fields = dict(l.split(": ", 1) for l in text.strip().splitlines())
            address, new, status = fields["Property"], float(fields["New monthly rent"]), fields["Status"]
        matches = [p for p in tools["list_properties"](address=address)["items"] if p["address"] == address]
        pid = matches[0]["id"]
    if status.strip().lower() == "signed":
        tools["update_rent"](property_id=pid, monthly_rent=new)
        applied += 1
print(applied, "applied")
tools["submit_answer"]()
"""

ADDENDA_WRONG = r"""
for path in tools["list_files"](directory="addenda"):
    if not path.endswith(".txt"):
        continue
    fields = dict(l.split(": ", 1) for l in tools["read_file"](path=path)["content"].strip().splitlines())
    if fields["Status"] == "signed":
        p = tools["list_properties"](address=fields["Property"])["items"][0]
        tools["update_rent"](property_id=p["id"], monthly_rent=float(fields["New monthly rent"]))
tools["submit_answer"]()
"""

RENEWALS = ALL + """\
ending = fetch("list_tenants", ends_on_or_after="2024-07-01", ends_on_or_before="2024-07-31")
for t in ending:
    p = tools["list_properties"](property_id=t["property_id"])["items"][0]
    new = round(p["monthly_rent"] * 1.03, 2)
    tools["update_rent"](property_id=p["id"], monthly_rent=new)
    tools["write_file"](path=f"offers/tenant_{t['id']}.txt",
                        content=f"Dear {t['name']},\\nwe offer to renew your lease of {p['address']} from 2024-08-01 "
                                f"at a monthly rent of {new:.2f} EUR.\\n")
print(len(ending), "offers")
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
    d = read_records(rel, ctx.read(rel))[0]
    if rel.endswith(".json"):
      pid, new, status = d["property_id"], float(d["rent"]["monthly"]), d["state"]
    elif rel.endswith(".csv"):
      pid, new, status = ids[d["address"]], float(d["new_rent_eur"]), d["status"]
    else:
      pid, new, status = ids[d["Property"]], float(d["New monthly rent"]), d["Status"]
    if status.lower() == "signed":
      want[pid] = new
  return want


def _renewal_expected(ctx):
  rows = ctx.q("SELECT t.id, t.name, t.property_id, p.monthly_rent FROM tenants t JOIN properties p ON "
               "p.id = t.property_id WHERE t.lease_end BETWEEN '2024-07-01' AND '2024-07-31' ORDER BY t.id")
  rents = _rents(ctx)
  for r in rows:
    rents[r["property_id"]] = round(r["monthly_rent"] * 1.03, 2)
  return {"rents": rents, "offers": [(r["id"], r["name"], f"{rents[r['property_id']]:.2f}") for r in rows]}


def _renewal_check(ctx, e, a):
  if _rents(ctx) != {int(k): v for k, v in e["rents"].items()}:
    return False
  offers = {f"offers/tenant_{tid}.txt": (name, rent) for tid, name, rent in e["offers"]}
  if set(ctx.files("offers")) != set(offers):
    return False
  return all(name in ctx.read(p) and rent in ctx.read(p) for p, (name, rent) in offers.items())


TASKS = [
    B.Task(DOMAIN, "unpaid_june",
           "Which tenants whose lease covers all of June 2024 (starts on or before 2024-06-01 and ends on or "
           "after 2024-06-30) have no rent payment for the month 2024-06? Submit the list of their e-mails.",
           (UNPAID,), lambda ctx: [r["email"] for r in ctx.q(
               "SELECT email FROM tenants t WHERE lease_start <= '2024-06-01' AND lease_end >= '2024-06-30' AND NOT "
               "EXISTS (SELECT 1 FROM payments p WHERE p.tenant_id = t.id AND p.month = '2024-06')")],
           answer="set", wrong=('starts_on_or_before="2024-06-01", ends_on_or_after="2024-06-30", ', "")),
    B.Task(DOMAIN, "late_fees_may",
           "Record a late fee for May 2024 (month '2024-05') for every tenant whose May rent was paid after "
           "2024-05-05; the fee is 5% of the property's monthly rent, rounded to 2 decimals. Record no other fees.",
           (LATE,), lambda ctx: sorted((r["tenant_id"], "2024-05", round(0.05 * r["monthly_rent"], 2)) for r in ctx.q(
               "SELECT p.tenant_id, pr.monthly_rent FROM payments p JOIN tenants t ON t.id = p.tenant_id JOIN "
               "properties pr ON pr.id = t.property_id WHERE p.month = '2024-05' AND p.paid_date > '2024-05-05'")),
           check=lambda ctx, e, a: _fees(ctx) == [tuple(x) for x in e],
           wrong=('paid_after="2024-05-05"', 'paid_after="2024-05-04"'),
           conditions=(("May", ('month="2024-05", ', '')),)),
    B.Task(DOMAIN, "porto_occupancy",
           "What percentage of the properties in Porto have a tenant whose lease covers 2024-07-01? Round it to "
           "1 decimal (e.g. 62.5).", (OCCUPANCY,),
           lambda ctx: round(100 * ctx.scalar(
               "SELECT COUNT(*) FROM properties p WHERE city = 'Porto' AND EXISTS (SELECT 1 FROM tenants t WHERE "
               "t.property_id = p.id AND t.lease_start <= '2024-07-01' AND t.lease_end >= '2024-07-01')")
                             / ctx.scalar("SELECT COUNT(*) FROM properties WHERE city = 'Porto'"), 1),
           answer="number", wrong=(', ends_on_or_after="2024-07-01")', ")"),
           conditions=(("lease start", ('starts_on_or_before="2024-07-01", ', '')),)),
    B.Task(DOMAIN, "apply_rent_addenda",
           "Apply the rent addenda in addenda/: for every addendum that was signed, set the property's monthly "
           "rent to the new rent. Ignore withdrawn addenda and change nothing else.", (ADDENDA,),
           _addenda_expected, check=lambda ctx, e, a: _rents(ctx) == {int(k): v for k, v in e.items()},
           wrong=ADDENDA_WRONG, tags=("explore",)),
    B.Task(DOMAIN, "lease_renewal_offers",
           "Every tenant whose lease ends in July 2024 gets a renewal offer: raise the monthly rent of the tenant's "
           "property by 3% (rounded to 2 decimals), and write the offer letter offers/tenant_<tenant id>.txt that "
           "names the tenant and states the new monthly rent with 2 decimals (e.g. 1545.00). Change no other "
           "rent and write no other offers.", (RENEWALS,), _renewal_expected, check=_renewal_check,
           wrong=('ends_on_or_after="2024-07-01", ', ""), tags=("writeback",),
           conditions=(("ends by July 31", (', ends_on_or_before="2024-07-31"', '')),)),
]
