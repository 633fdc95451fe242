"""Real-estate domain: agents, property listings (areas in mixed units) and buyers' offers; inspection reports
(several formats) are workspace files."""

from __future__ import annotations

import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

KINDS = ("apartment", "house", "studio")
PROP_STATUSES = ("listed", "under_offer", "sold")
OFFER_STATUSES = ("pending", "accepted", "rejected")
STREETS = ("Oak Elm Cedar Birch Maple Harbour Market Mill Castle Church Station River Garden Park Bridge Hill "
           "Orchard Meadow Chapel Quay").split()
SUFFIXES = ("Street", "Road", "Avenue", "Lane", "Square", "Terrace")
ITEMS = ("roof", "wiring", "plumbing", "foundations", "windows", "boiler", "damp", "insulation", "drainage")
SEVERITIES = ("minor", "moderate", "severe")
SQFT_M2 = 0.09290304
RATE = {"Lisbon": 5200, "Porto": 3600, "Madrid": 4800, "Lyon": 4100, "Berlin": 5600, "Oslo": 6900, "Krakow": 2700,
        "Dublin": 6100}

SCHEMA = """
CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT, office TEXT, commission_pct REAL);
CREATE TABLE properties (id INTEGER PRIMARY KEY, address TEXT, city TEXT, kind TEXT, bedrooms INTEGER, area TEXT,
                         price INTEGER, status TEXT, agent_id INTEGER, listed_date TEXT, sold_date TEXT,
                         sold_price INTEGER);
CREATE TABLE offers (id INTEGER PRIMARY KEY, property_id INTEGER, buyer TEXT, amount INTEGER, date TEXT,
                     expires TEXT, status TEXT);
CREATE INDEX offers_property ON offers(property_id);
"""


def _area_m2(text: str) -> float:
  v = float(re.match(r"[\d.]+", text).group(0))
  return v * SQFT_M2 if "ft" in text else v


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_agents = 12 * f
  agents = [{"id": i + 1, "name": nm, "office": rng.choice(G.CITIES), "commission_pct": rng.randint(18, 35) / 10}
            for i, nm in enumerate(G.unique_names(rng, n_agents))]
  addresses = [f"{n} {s} {x}" for n in range(1, 200) for s in STREETS for x in SUFFIXES]
  rng.shuffle(addresses)
  props = []

  def add(city=None, kind=None, status=None, bedrooms=None, price=None, sqft=None):
    city = city or rng.choice(G.CITIES)
    kind = kind or rng.choices(KINDS, (50, 35, 15))[0]
    if bedrooms is None:
      bedrooms = 0 if kind == "studio" else rng.randint(1, 4) if kind == "apartment" else rng.randint(2, 6)
    m2 = rng.randint(25, 45) if kind == "studio" else rng.randint(40 + 15 * bedrooms, 60 + 25 * bedrooms)
    sqft = rng.random() < 0.3 if sqft is None else sqft
    area = f"{round(m2 / SQFT_M2)} sq ft" if sqft else f"{m2} m2"
    price = price or round(m2 * RATE[city] * rng.uniform(0.8, 1.25), -3)
    status = status or rng.choices(PROP_STATUSES, (50, 15, 35))[0]
    listed = G.rand_date(rng, "2023-09-01", "2024-06-15")
    sold = G.rand_date(rng, max(listed, "2024-01-01"), "2024-06-30") if status == "sold" else None
    props.append({"id": len(props) + 1, "address": f"{addresses[len(props)]}, {city}", "city": city, "kind": kind,
                  "bedrooms": bedrooms, "area": area, "price": int(price), "status": status,
                  "agent_id": rng.randint(1, n_agents), "listed_date": listed, "sold_date": sold,
                  "sold_price": int(round(price * rng.uniform(0.93, 1.03), -2)) if sold else None})
    return props[-1]

  for _ in range(300 * f):
    add()
  porto = [p["price"] for p in props if p["city"] == "Porto" and p["status"] == "listed" and p["bedrooms"] >= 3]
  low = min(porto, default=400000)
  add("Porto", "apartment", "listed", rng.randint(3, 4), low - rng.randint(1, 20) * 1000)     # the cheapest ...
  add("Porto", "house", "under_offer", rng.randint(3, 5), low - rng.randint(21, 40) * 1000)  # ... cheaper, taken
  add("Porto", "apartment", "listed", 2, low - rng.randint(41, 60) * 1000)                   # ... cheaper, small
  add("Lisbon", "apartment", "listed", sqft=True)
  # commission: a high-volume agent on the lowest rate
  volume = agents[rng.randrange(n_agents)]
  volume["commission_pct"] = 1.0
  q2 = [p for p in props if p["sold_date"] and p["sold_date"] >= "2024-04-01"]
  sums = {a["id"]: sum(p["sold_price"] for p in q2 if p["agent_id"] == a["id"]) for a in agents}
  while sums[volume["id"]] < max(v for a, v in sums.items() if a != volume["id"]) + 50000:
    p = add(status="sold")
    p["agent_id"], p["sold_date"] = volume["id"], G.rand_date(rng, "2024-04-01", "2024-06-30")
    p["listed_date"] = min(p["listed_date"], p["sold_date"])
    sums[volume["id"]] += p["sold_price"]
  G.insert_rows(ctx, "agents", agents)
  buyers = G.unique_names(rng, 150 * f)
  offers = []
  open_props = [p for p in props if p["status"] != "sold"]

  def offer(p, ratio, status, expires=None):
    d = G.rand_date(rng, "2024-04-01", "2024-06-30")
    offers.append({"id": len(offers) + 1, "property_id": p["id"], "buyer": rng.choice(buyers),
                   "amount": int(round(p["price"] * ratio, -2)), "date": d,
                   "expires": expires or G.rand_date(rng, "2024-07-02", "2024-08-31"), "status": status})

  for _ in range(450 * f):
    p = rng.choice(open_props)
    offer(p, rng.uniform(0.82, 0.985), rng.choices(OFFER_STATUSES[::2], (25, 75))[0])
  listed = [p for p in props if p["status"] == "listed"]
  full = rng.sample(listed, rng.randint(3, 5))
  for j, p in enumerate(full):    # full-price offers; the first one or two have expired
    offer(p, rng.uniform(1.0, 1.06), "pending",
          G.rand_date(rng, "2024-06-10", "2024-06-30") if j < 1 + (len(full) > 3) else None)
  offer(rng.choice([p for p in props if p["status"] == "under_offer"]), 1.02, "pending")   # not listed any more
  rng.shuffle(offers)
  for i, o in enumerate(offers):
    o["id"] = i + 1
  G.insert_rows(ctx, "offers", offers)
  G.write_docs(ctx, rng, "realestate", ["listing_rules", "commission", "inspections", "offers", "contacts"])
  k = B.n_data_files(f)
  fmts = ["txt", "json", "csv", rng.choice(("txt", "json", "csv"))] + [rng.choice(("txt", "json", "csv"))
                                                                        for _ in range(k - 4)]
  rng.shuffle(fmts)
  on = [p for p in props if p["status"] == "listed"]
  off = [p for p in props if p["status"] != "listed"]
  picks = rng.sample(on, 2 * k) + rng.sample(off, 2 * k)   # severe findings on listed and on other properties
  sev = [True] + [rng.random() < 0.3 for _ in range(2 * k - 1)]
  sev += [True] + [rng.random() < 0.3 for _ in range(2 * k - 1)]
  inspected = list(zip(picks, sev))
  rng.shuffle(inspected)
  for j, fmt in enumerate(fmts):
    rows = []
    for p, is_severe in inspected[4 * j:4 * j + 4]:
      finds = [(it, rng.choice(SEVERITIES[:2])) for it in rng.sample(ITEMS, rng.randint(1, 3))]
      if is_severe:
        finds.insert(rng.randint(0, len(finds)), (rng.choice(ITEMS), "severe"))
      rows.append((p["id"], finds))
    inspector = rng.choice(buyers)
    if fmt == "json":
      text = json.dumps({"inspector": inspector, "inspections": [
          {"property_id": pid, "findings": [{"item": it, "severity": sv} for it, sv in fs]} for pid, fs in rows]},
          indent=1)
    elif fmt == "csv":
      text = "property_id,item,severity\n" + "".join(f"{pid},{it},{sv}\n" for pid, fs in rows for it, sv in fs)
    else:
      text = f"Inspector: {inspector}\n\n" + "".join(
          f"Property #{pid}\n" + "".join(f"  {it}: {sv.upper()}\n" for it, sv in fs) + "\n" for pid, fs in rows)
    ctx.write(f"inspections/round_{j + 1:02d}.{fmt}", text)
  # The distractor of top_commission_agent_q2 without the quarter (base.Task.conditions; drawn last, so the rest
  # of the state is what it would be without it): sales in Q1 give another agent the most commission of the year.
  pct = {a["id"]: a["commission_pct"] for a in agents}
  earned = lambda aid, start: sum(p["sold_price"] * pct[aid] / 100 for p in props
                                  if p["agent_id"] == aid and p["sold_date"] and p["sold_date"] >= start)
  lead = min(pct, key=lambda a: (-round(earned(a, "2024-04-01"), 2), a))
  rival = rng.choice([a for a in pct if a != lead and pct[a] > 1.0])
  while earned(rival, "") <= earned(lead, ""):
    p = add(status="sold")
    p["agent_id"], p["sold_date"] = rival, G.rand_date(rng, "2024-01-01", "2024-03-31")
    p["listed_date"] = min(p["listed_date"], p["sold_date"])
  G.insert_rows(ctx, "properties", props)


# -- tools

PROPERTY_COLUMNS = ("p.id AS id, p.address AS address, p.city AS city, p.kind AS kind, p.bedrooms AS bedrooms, "
                    "p.area AS area, p.price AS price, p.status AS status, p.agent_id AS agent_id, "
                    "p.listed_date AS listed_date, p.sold_date AS sold_date, p.sold_price AS sold_price, "
                    "(SELECT COUNT(*) FROM offers o WHERE o.property_id = p.id) AS offers")


def _get_property(ctx, property_id):
  r = ctx.q1(f"SELECT {PROPERTY_COLUMNS} FROM properties p WHERE p.id = ?", property_id)
  if r is None:
    raise ToolError(f"no property with id {property_id}")
  return r


def _respond(ctx, offer_id, decision):
  """Accepts or rejects a pending offer; an expired offer answers ok false (no exception)."""
  if decision not in ("accept", "reject"):
    raise ToolError("decision must be 'accept' or 'reject'")
  o = ctx.q1("SELECT * FROM offers WHERE id = ?", offer_id)
  if o is None:
    raise ToolError(f"no offer with id {offer_id}")
  if o["status"] != "pending":
    raise ToolError(f"offer {offer_id} is {o['status']}; only pending offers can be answered")
  if o["expires"] < B.TODAY:
    return {"offer_id": offer_id, "ok": False, "error": f"the offer expired on {o['expires']}"}
  if decision == "accept":
    st = ctx.scalar("SELECT status FROM properties WHERE id = ?", o["property_id"])
    if st != "listed":
      raise ToolError(f"property {o['property_id']} is {st}; offers can only be accepted on listed properties")
    ctx.exec("UPDATE properties SET status = 'under_offer' WHERE id = ?", o["property_id"])
  ctx.exec("UPDATE offers SET status = ? WHERE id = ?", "accepted" if decision == "accept" else "rejected", offer_id)
  return {"offer_id": offer_id, "ok": True, "status": "accepted" if decision == "accept" else "rejected"}


def _update_price(ctx, property_id, price):
  old = _get_property(ctx, property_id)
  if old["status"] != "listed":
    raise ToolError(f"property {property_id} is {old['status']}; only listed properties can be repriced")
  if price <= 0:
    raise ToolError("price must be positive")
  ctx.exec("UPDATE properties SET price = ? WHERE id = ?", price, property_id)
  return {"property_id": property_id, "price": price, "previous": old["price"]}


TOOLS = (
    B.list_tool("list_properties", "List properties: items {id, address, city, kind, bedrooms, area, price (asking, "
                "EUR), status, agent_id, listed_date, sold_date, sold_price, offers (number received)}.",
                table="properties p", columns=PROPERTY_COLUMNS, order_by="p.id",
                filters=[B.Filter("city", "p.city = ?", B.p_str("only this city")),
                         B.Filter("kind", "p.kind = ?", B.p_str("only this kind", KINDS)),
                         B.Filter("status", "p.status = ?", B.p_str("only this status", PROP_STATUSES)),
                         B.Filter("min_bedrooms", "p.bedrooms >= ?", B.p_int("at least this many bedrooms")),
                         B.Filter("agent_id", "p.agent_id = ?", B.p_int("only this agent's properties")),
                         B.Filter("listed_before", "p.listed_date < ?", B.p_str("listed before this date, YYYY-MM-DD")),
                         B.Filter("sold_from", "p.sold_date >= ?", B.p_str("sold on or after this date")),
                         B.Filter("sold_to", "p.sold_date <= ?", B.p_str("sold on or before this date")),
                         B.Filter("max_offers", "(SELECT COUNT(*) FROM offers o WHERE o.property_id = p.id) <= ?",
                                  B.p_int("at most this many offers received"))]),
    B.tool("get_property", "Get one property (fields as in list_properties).", _get_property,
           required=("property_id",), property_id=B.p_int("property id")),
    B.list_tool("list_agents", "List the agents: items {id, name, office, commission_pct (percent of the sale "
                "price)}.", table="agents", columns="id, name, office, commission_pct",
                filters=[B.Filter("office", "office = ?", B.p_str("only this office's agents"))]),
    B.list_tool("list_offers", "List buyers' offers with their property's asking price and status: items {id, "
                "property_id, buyer, amount, date, status, asking_price, property_status}.",
                table="offers o JOIN properties p ON p.id = o.property_id",
                columns="o.id AS id, o.property_id AS property_id, o.buyer AS buyer, o.amount AS amount, "
                "o.date AS date, o.status AS status, p.price AS asking_price, p.status AS property_status",
                order_by="o.id",
                filters=[B.Filter("status", "o.status = ?", B.p_str("only offers with this status", OFFER_STATUSES)),
                         B.Filter("property_id", "o.property_id = ?", B.p_int("only offers on this property")),
                         B.Filter("property_status", "p.status = ?",
                                  B.p_str("only offers on properties with this status", PROP_STATUSES))]),
    B.tool("respond_to_offer", "Accept or reject a pending offer (accepting puts the property under offer); returns "
           "{offer_id, ok, status} or {offer_id, ok: false, error} when the offer cannot be answered.", _respond,
           required=("offer_id", "decision"), offer_id=B.p_int("offer id"),
           decision=B.p_str("accept or reject", ("accept", "reject"))),
    B.tool("update_listing_price", "Set the asking price (EUR) of a listed property.", _update_price,
           required=("property_id", "price"), property_id=B.p_int("property id"), price=B.p_int("new asking price")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("realestate", "An estate agency's listings, agents and buyers' offers.", SCHEMA, generate, TOOLS)

PAGES = B.paging_prelude("fetch", tool="tool", kwargs="kw", rows="out", offset="off", page="p")

CHEAPEST = PAGES + """\
props = fetch("list_properties", city="Porto", status="listed", min_bedrooms=3)
best = min(props, key=lambda p: (p["price"], p["id"]))
print(best["address"], best["price"])
tools["submit_answer"](answer=best["address"])
"""

COMMISSION = PAGES + """\
from collections import defaultdict
agents = fetch("list_agents")
rate = {a["id"]: a["commission_pct"] for a in agents}
name = {a["id"]: a["name"] for a in agents}
earned = defaultdict(float)
for p in fetch("list_properties", status="sold", sold_from="2024-04-01", sold_to="2024-06-30"):
    earned[p["agent_id"]] += p["sold_price"] * rate[p["agent_id"]] / 100
best = min(earned, key=lambda a: (-round(earned[a], 2), a))
print(name[best], round(earned[best], 2))
tools["submit_answer"](answer=name[best])
"""

INSPECT = PAGES + r"""
import csv, io, json, re
severe = set()
for path in tools["list_files"](directory="inspections"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        for ins in json.loads(text)["inspections"]:
            if any(f["severity"].lower() == "severe" for f in ins["findings"]):
                severe.add(ins["property_id"])
    elif path.endswith(".csv"):
        for r in csv.DictReader(io.StringIO(text)):
            if r["severity"].lower() == "severe":
                severe.add(int(r["property_id"]))
    else:
        pid = None
        for line in text.splitlines():
            m = re.match(r"Property #(\d+)", line)
            if m:
                pid = int(m.group(1))
            elif pid is not None and line.strip().lower().endswith(": severe"):
                severe.add(pid)
hits = sorted(p for p in severe if tools["get_property"](property_id=p)["status"] == "listed")
print(hits)
tools["submit_answer"](answer=hits)
"""

ACCEPT = PAGES + """\
expired = []
for o in fetch("list_offers", status="pending", property_status="listed"):
    if o["amount"] >= o["asking_price"]:
        r = tools["respond_to_offer"](offer_id=o["id"], decision="accept")
        if not r.get("ok"):
            expired.append(o["id"])
tools["write_file"](path="reports/expired_offers.txt", content="".join(f"{i}\\n" for i in sorted(expired)))
print(expired)
tools["submit_answer"]()
"""

CUTS = PAGES + """\
rows = ["property_id,old_price,new_price"]
for p in fetch("list_properties", status="listed", listed_before="2024-01-01", max_offers=0):
    new = round(p["price"] * 0.95)
    tools["update_listing_price"](property_id=p["id"], price=new)
    rows.append(f"{p['id']},{p['price']},{new}")
tools["write_file"](path="reports/price_cuts.csv", content="\\n".join(rows) + "\\n")
print(len(rows) - 1, "cuts")
tools["submit_answer"]()
"""

SQM = PAGES + r"""
import re
vals = []
for p in fetch("list_properties", city="Lisbon", kind="apartment", status="listed"):
    num = float(re.match(r"[\d.]+", p["area"]).group(0))
    m2 = num * 0.09290304 if "ft" in p["area"] else num
    vals.append(p["price"] / m2)
avg = round(sum(vals) / len(vals), 2)
print(len(vals), avg)
tools["submit_answer"](answer=avg)
"""


def _cheapest(ctx):
  return ctx.scalar("SELECT address FROM properties WHERE city = 'Porto' AND status = 'listed' AND bedrooms >= 3 "
                    "ORDER BY price, id LIMIT 1")


def _commission(ctx):
  return ctx.scalar("SELECT a.name FROM properties p JOIN agents a ON a.id = p.agent_id WHERE p.sold_date BETWEEN "
                    "'2024-04-01' AND '2024-06-30' GROUP BY a.id ORDER BY -ROUND(SUM(p.sold_price * "
                    "a.commission_pct / 100.0), 2), a.id LIMIT 1")


def _inspect(ctx):
  severe = set()
  for rel in ctx.files("inspections"):
    text = ctx.read(rel)
    if rel.endswith(".json"):
      severe |= {i["property_id"] for i in read_records(rel, text, key="inspections")
                 if any(x["severity"] == "severe" for x in i["findings"])}
    elif rel.endswith(".csv"):
      severe |= {int(r["property_id"]) for r in read_records(rel, text) if r["severity"] == "severe"}
    else:
      for block in text.split("Property #")[1:]:
        if "SEVERE" in block:
          severe.add(int(block.split("\n", 1)[0]))
  listed = {r["id"] for r in ctx.q("SELECT id FROM properties WHERE status = 'listed'")}
  return sorted(severe & listed)


def _state(ctx):
  return ({r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM offers")},
          {r["id"]: (r["status"], r["price"]) for r in ctx.q("SELECT id, status, price FROM properties")})


def _accept_expected(ctx):
  offers, props = _state(ctx)
  expired = []
  for r in ctx.q("SELECT o.id, o.property_id, o.expires FROM offers o JOIN properties p ON p.id = o.property_id "
                 "WHERE o.status = 'pending' AND p.status = 'listed' AND o.amount >= p.price ORDER BY o.id"):
    if r["expires"] < B.TODAY:
      expired.append(r["id"])
    else:
      offers[r["id"]] = "accepted"
      props[r["property_id"]] = ("under_offer", props[r["property_id"]][1])
  return {"offers": offers, "props": props, "expired": expired}


def _lines(ctx, rel):
  text = ctx.read(rel)
  return None if text is None else [line.strip().replace(" ", "") for line in text.splitlines() if line.strip()]


def _accept_check(ctx, e, a):
  offers, props = _state(ctx)
  return (offers == e["offers"] and props == e["props"] and
          _lines(ctx, "reports/expired_offers.txt") == [str(i) for i in e["expired"]])


def _cuts_expected(ctx):
  offers, props = _state(ctx)
  cut = {}
  for r in ctx.q("SELECT id, price FROM properties p WHERE status = 'listed' AND listed_date < '2024-01-01' AND "
                 "NOT EXISTS (SELECT 1 FROM offers o WHERE o.property_id = p.id)"):
    cut[r["id"]] = (r["price"], round(r["price"] * 0.95))
    props[r["id"]] = ("listed", cut[r["id"]][1])
  return {"props": props, "cut": cut}


def _cuts_check(ctx, e, a):
  if _state(ctx)[1] != {int(k): tuple(v) for k, v in e["props"].items()}:
    return False
  lines = _lines(ctx, "reports/price_cuts.csv")
  want = ["property_id,old_price,new_price"] + [f"{k},{o},{n}" for k, (o, n) in e["cut"].items()]
  return lines is not None and lines[0] == want[0] and sorted(lines[1:]) == sorted(want[1:])


def _sqm(ctx):
  vals = [r["price"] / _area_m2(r["area"]) for r in ctx.q(
      "SELECT price, area FROM properties WHERE city = 'Lisbon' AND kind = 'apartment' AND status = 'listed'")]
  return round(sum(vals) / len(vals), 2)


TASKS = [
    B.Task(DOMAIN, "cheapest_porto_3bed",
           "What is the address of the cheapest property in Porto with at least 3 bedrooms that is still on the "
           "market (status 'listed')? Submit the address exactly as recorded.", (CHEAPEST,), _cheapest,
           answer="text", wrong=(', status="listed"', ""),
           conditions=(("Porto", ('city="Porto", ', '')), ("3 bedrooms", (', min_bedrooms=3', '')))),
    B.Task(DOMAIN, "top_commission_agent_q2",
           "Which agent earned the most commission on properties sold from 2024-04-01 to 2024-06-30? An agent's "
           "commission on a sale is the sale price times the agent's commission percentage. Submit the agent's "
           "name (on a tie, the agent with the smaller id).", (COMMISSION,), _commission, answer="text",
           wrong=('p["sold_price"] * rate[p["agent_id"]] / 100', 'p["sold_price"]'),
           conditions=(("Q2", (', sold_from="2024-04-01", sold_to="2024-06-30"', '')),)),
    B.Task(DOMAIN, "severe_inspection_listings",
           "The inspection reports are in inspections/ (the files do not all use the same format). Which "
           "properties that are still listed (status 'listed') have at least one finding of severity 'severe'? "
           "Submit the list of their property ids.", (INSPECT,), _inspect, answer="set",
           wrong=('if tools["get_property"](property_id=p)["status"] == "listed"', ""), tags=("explore",)),
    B.Task(DOMAIN, "accept_full_price_offers",
           "Accept every pending offer whose amount is at least the asking price of its property, for properties "
           "that are still listed. Some of these offers have expired and cannot be accepted: write their offer ids "
           "to reports/expired_offers.txt, one per line in increasing order (an empty file if there are none). "
           "Change nothing else.", (ACCEPT,), _accept_expected, check=_accept_check,
           wrong=('if not r.get("ok"):', "if False:"), tags=("errors", "writeback")),
    B.Task(DOMAIN, "cut_stale_listings",
           "Cut by 5% (rounded to the nearest euro) the asking price of every listed property that was listed "
           "before 2024-01-01 and has not received a single offer, and record the cuts in reports/price_cuts.csv "
           "with the header 'property_id,old_price,new_price' and one row per property.", (CUTS,), _cuts_expected,
           check=_cuts_check, wrong=(", max_offers=0", ""), tags=("writeback",),
           conditions=(("before 2024", (', listed_before="2024-01-01"', '')),)),
    B.Task(DOMAIN, "lisbon_price_per_sqm",
           "What is the average asking price per square metre of the listed apartments in Lisbon (the mean over "
           "those apartments of price / area)? Areas are not all recorded in the same unit (1 sq ft = 0.09290304 "
           "m2). Submit the value in EUR per m2 rounded to 2 decimals.", (SQM,), _sqm, answer="number",
           wrong=('m2 = num * 0.09290304 if "ft" in p["area"] else num', "m2 = num"), tags=("explore",),
           conditions=(("Lisbon", ('city="Lisbon", ', '')), ("apartment", ('kind="apartment", ', '')),
                       ("listed", (', status="listed"', '')))),
]
