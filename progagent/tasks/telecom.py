"""Telecom domain: mobile subscribers, plans, monthly usage and invoices; partner carriers' roaming files (several
formats) are workspace files; the network monitor reports outages as free text and sometimes times out."""

from __future__ import annotations

import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

PLANS = (("Basic 1GB", 1), ("Lite 5GB", 5), ("Plus 20GB", 20), ("Max 50GB", 50), ("Unlimited 200GB", 200))
STATUSES = ("active", "suspended", "cancelled")
INVOICE_STATUSES = ("paid", "open", "overdue")
MONTHS = tuple(f"2024-0{m}" for m in range(1, 7))
CAUSES = ("power failure", "fiber cut", "software update", "storm damage", "hardware fault")
COUNTRIES = ("ES", "FR", "DE", "IT", "GB", "US", "MA", "CH")

SCHEMA = """
CREATE TABLE plans (id INTEGER PRIMARY KEY, name TEXT, monthly_fee REAL, data_gb INTEGER);
CREATE TABLE subscribers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, msisdn TEXT, city TEXT, plan_id INTEGER,
                          status TEXT, joined TEXT);
CREATE TABLE usage (id INTEGER PRIMARY KEY, subscriber_id INTEGER, month TEXT, data_mb INTEGER, minutes INTEGER,
                    sms INTEGER);
CREATE TABLE invoices (id INTEGER PRIMARY KEY, subscriber_id INTEGER, month TEXT, amount REAL, status TEXT);
CREATE TABLE sms (id INTEGER PRIMARY KEY AUTOINCREMENT, subscriber_id INTEGER, text TEXT);
CREATE TABLE outages (id INTEGER PRIMARY KEY, city TEXT, start TEXT, minutes INTEGER, cause TEXT);
CREATE TABLE monitor_busy (city TEXT PRIMARY KEY);
CREATE INDEX usage_sub ON usage(subscriber_id);
CREATE INDEX invoices_sub ON invoices(subscriber_id);
"""


def _roaming_file(rng, fmt, records):
  if fmt == "json":
    return json.dumps({"partner": rng.choice(("EuroTel", "AtlasMobile", "NordLink")), "period": "2024-Q2",
                       "records": [{"number": m.lstrip("+"), "country": c, "cost_cents": round(v * 100)}
                                   for m, c, v in records]}, indent=1)
  if fmt == "csv":
    return "msisdn,country,charge_eur\n" + "".join(f"{m},{c},{v:.2f}\n" for m, c, v in records)
  return "".join(f"MSISDN: {m[:4]} {m[4:7]} {m[7:10]} {m[10:]}\nCountry: {c}\nAmount: {v:.2f} EUR\n\n"
                 for m, c, v in records)


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  plan_ids = rng.sample(range(1, len(PLANS) + 1), len(PLANS))
  plans = [{"id": plan_ids[i], "name": n, "monthly_fee": round(rng.uniform(5, 15) + gb ** 0.5 * 3, 2), "data_gb": gb}
           for i, (n, gb) in enumerate(PLANS)]
  G.insert_rows(ctx, "plans", sorted(plans, key=lambda p: p["id"]))
  by_name = {p["name"]: p for p in plans}
  lite, plus = by_name["Lite 5GB"], by_name["Plus 20GB"]
  names = G.unique_names(rng, 120 * f)
  numbers = rng.sample(range(10 ** 7, 10 ** 8), 120 * f)
  subs = [{"id": i + 1, "name": nm, "email": G.email_of(nm, i + 1), "msisdn": f"+3519{numbers[i]}",
           "city": rng.choice(G.CITIES), "plan_id": rng.choices(plans, (3, 4, 4, 2, 1))[0]["id"],
           "status": rng.choices(STATUSES, (8, 1, 1))[0], "joined": G.rand_date(rng, "2019-01-01", "2023-12-31")}
          for i, nm in enumerate(names)]
  porto = rng.sample(subs, 2)
  for s, status in zip(porto, ("active", "suspended")):   # Porto has active and inactive lines
    s.update(city="Porto", status=status)
  gb = {p["id"]: p["data_gb"] for p in plans}
  usage = {(s["id"], m): int(min(gb[s["plan_id"]], 60) * 1024 * rng.uniform(0.2, 1.1)) for s in subs for m in MONTHS}
  # Lite lines over the allowance in April-June (or, for the distractors, not quite or not active)
  heavy = rng.sample([s for s in subs if s not in porto], rng.randint(2, 3) + 3)
  for k, s in enumerate(heavy):
    s.update(plan_id=lite["id"], status="suspended" if k == 0 else "active")
    for m in MONTHS[3:]:
      usage[(s["id"], m)] = rng.randint(5 * 1024 + 1, 9 * 1024)
    if k in (1, 2):   # over in two of the three months only
      usage[(s["id"], rng.choice(MONTHS[3:]))] = rng.randint(1024, 5 * 1024)
  rows = [{"id": i + 1, "subscriber_id": sid, "month": m, "data_mb": mb, "minutes": rng.randint(0, 900),
           "sms": rng.randint(0, 120)} for i, ((sid, m), mb) in enumerate(sorted(usage.items()))]
  G.insert_rows(ctx, "subscribers", subs)
  G.insert_rows(ctx, "usage", rows)
  fee = {p["id"]: p["monthly_fee"] for p in plans}
  invoices = []
  for s in subs:
    for m in MONTHS[3:]:
      invoices.append({"id": 90001 + len(invoices), "subscriber_id": s["id"], "month": m,
                       "amount": round(fee[s["plan_id"]] + rng.choice((0, 0, 0, rng.uniform(1, 40))), 2),
                       "status": rng.choices(INVOICE_STATUSES, (85, 11, 4))[0]})
  by_sub = {s["id"]: [i for i in invoices if i["subscriber_id"] == s["id"]] for s in subs}
  active = [s for s in subs if s["status"] == "active" and s not in heavy]
  late = rng.sample(active, rng.randint(2, 4)) + [rng.choice([s for s in subs if s["status"] != "active"])]
  for s in late:
    for i in rng.sample(by_sub[s["id"]], rng.randint(2, 3)):
      i["status"] = "overdue"
  gone = rng.choice([s for s in subs if s["status"] == "cancelled"])
  by_sub[gone["id"]][-1]["status"] = "open"
  G.insert_rows(ctx, "invoices", invoices)
  outages = []
  for city in G.CITIES:
    for _ in range(rng.randint(2, 4) * f):
      start = f"{G.rand_date(rng)} {rng.randint(0, 23):02d}:{rng.choice((0, 15, 30, 45)):02d}"
      outages.append({"id": len(outages) + 1, "city": city, "start": start, "minutes": rng.randint(10, 400),
                      "cause": rng.choice(CAUSES)})
  G.insert_rows(ctx, "outages", outages)
  G.insert_rows(ctx, "monitor_busy", [{"city": c} for c in rng.sample(G.CITIES, rng.randint(2, 4))])
  G.write_docs(ctx, rng, "telecom", ["plans", "billing", "roaming", "network", "support"])
  lites = [s for s in subs if s["plan_id"] == lite["id"]]
  files = ["json", "csv", "txt"] + [rng.choice(("json", "csv", "txt")) for _ in range(B.n_data_files(f) - 3)]
  rng.shuffle(files)
  for j, fmt in enumerate(files):
    who = [rng.choice(lites)] + [rng.choice(subs) for _ in range(rng.randint(1, 3))]
    rng.shuffle(who)
    records = [(s["msisdn"], rng.choice(COUNTRIES), round(rng.uniform(0.5, 60), 2)) for s in who]
    ctx.write(f"roaming/{fmt}_{rng.randint(1000, 9999)}_{j + 1:02d}.{fmt}", _roaming_file(rng, fmt, records))


# -- tools

def _get_sub(ctx, subscriber_id):
  r = ctx.q1("SELECT * FROM subscribers WHERE id = ?", subscriber_id)
  if r is None:
    raise ToolError(f"no subscriber with id {subscriber_id}")
  return r


def _update_sub(ctx, subscriber_id, plan_id=None, status=None):
  s = _get_sub(ctx, subscriber_id)
  if plan_id is None and status is None:
    raise ToolError("give a new plan_id, a new status, or both")
  if plan_id is not None and ctx.q1("SELECT id FROM plans WHERE id = ?", plan_id) is None:
    raise ToolError(f"no plan with id {plan_id}; list_plans gives the ids")
  if status is not None and status not in STATUSES:
    raise ToolError(f"unknown status {status!r}; use one of {list(STATUSES)}")
  plan_id = s["plan_id"] if plan_id is None else plan_id
  status = s["status"] if status is None else status
  ctx.exec("UPDATE subscribers SET plan_id = ?, status = ? WHERE id = ?", plan_id, status, subscriber_id)
  return {"subscriber_id": subscriber_id, "plan_id": plan_id, "status": status}


def _send_sms(ctx, subscriber_id, text):
  _get_sub(ctx, subscriber_id)
  if not text.strip():
    raise ToolError("the message is empty")
  ctx.exec("INSERT INTO sms (subscriber_id, text) VALUES (?, ?)", subscriber_id, text)
  return {"subscriber_id": subscriber_id, "sent": True}


def _duration(minutes: int) -> str:
  return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _network_status(ctx, city):
  if city not in G.CITIES:
    raise ToolError(f"we have no network in {city!r}; cities: {list(G.CITIES)}")
  key = ("network_status", city)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if n == 0 and ctx.q1("SELECT 1 FROM monitor_busy WHERE city = ?", city):
    return {"ok": False, "city": city, "error": "monitoring backend timed out; try again"}
  rows = ctx.q("SELECT * FROM outages WHERE city = ? ORDER BY start", city)
  text = f"{city}: {len(rows)} incident{'s' * (len(rows) != 1)} recorded in 2024." + "".join(
      f" {r['start']}: {r['cause']}, service restored after {_duration(r['minutes'])}." for r in rows)
  return {"ok": True, "city": city, "report": text}


TOOLS = (
    B.list_tool("list_plans", "List the tariff plans [{id, name, monthly_fee, data_gb}].", table="plans",
                columns="id, name, monthly_fee, data_gb",
                filters=[B.Filter("name", "name LIKE ?", B.p_str("text the plan name contains"), like=True)]),
    B.list_tool("list_subscribers", "List subscribers [{id, name, msisdn, city, plan_id, status}], optionally "
                "filtered.", table="subscribers", columns="id, name, msisdn, city, plan_id, status", filters=[
                    B.Filter("subscriber_id", "id = ?", B.p_int("one subscriber id")),
                    B.Filter("city", "city = ?", B.p_str("city", G.CITIES)),
                    B.Filter("status", "status = ?", B.p_str("line status", STATUSES)),
                    B.Filter("plan_id", "plan_id = ?", B.p_int("plan id")),
                    B.Filter("msisdn", "msisdn = ?", B.p_str("exact phone number, e.g. '+351912345678'")),
                    B.Filter("name", "name LIKE ?", B.p_str("text the name contains"), like=True)]),
    B.list_tool("list_usage", "List monthly usage records [{subscriber_id, month, data_mb, minutes, sms}], "
                "optionally filtered.", table="usage", columns="subscriber_id, month, data_mb, minutes, sms",
                order_by="subscriber_id, month", filters=[
                    B.Filter("subscriber_id", "subscriber_id = ?", B.p_int("subscriber id")),
                    B.Filter("month", "month = ?", B.p_str("'YYYY-MM'")),
                    B.Filter("month_from", "month >= ?", B.p_str("first month 'YYYY-MM', inclusive")),
                    B.Filter("min_data_mb", "data_mb >= ?", B.p_int("smallest data use in MB"))]),
    B.list_tool("list_invoices", "List invoices [{id, subscriber_id, month, amount, status}], optionally "
                "filtered.", table="invoices", columns="id, subscriber_id, month, amount, status", filters=[
                    B.Filter("subscriber_id", "subscriber_id = ?", B.p_int("subscriber id")),
                    B.Filter("month", "month = ?", B.p_str("'YYYY-MM'")),
                    B.Filter("status", "status = ?", B.p_str("invoice status", INVOICE_STATUSES))]),
    B.tool("update_subscriber", "Change a subscriber's plan and/or line status.", _update_sub,
           required=("subscriber_id",), subscriber_id=B.p_int("subscriber id"), plan_id=B.p_int("new plan id"),
           status=B.p_str("new line status", STATUSES)),
    B.tool("send_sms", "Send a text message to a subscriber.", _send_sms, required=("subscriber_id", "text"),
           subscriber_id=B.p_int("subscriber id"), text=B.p_str("the message")),
    B.tool("network_status", "The network monitor's incident report for one city: {ok, city, report} with the "
           "report as text, or {ok: false, city, error} when the monitor does not answer.", _network_status,
           required=("city",), city=B.p_str("city", G.CITIES)),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("telecom", "A mobile operator's subscribers, plans, usage and billing.", SCHEMA, generate, TOOLS)

# -- tasks

PAGES = B.paging_prelude("every", kwargs="kw", rows="out", limit=None)

PORTO = PAGES + """\
mb = 0
for s in every("list_subscribers", city="Porto", status="active"):
    for u in tools["list_usage"](subscriber_id=s["id"], month="2024-05")["items"]:
        mb += u["data_mb"]
print(mb, round(mb / 1024, 2))
tools["submit_answer"](answer=round(mb / 1024, 2))
"""

SUSPEND = PAGES + """\
from collections import Counter
late = Counter(i["subscriber_id"] for i in every("list_invoices", status="overdue"))
done = []
for sid, k in sorted(late.items()):
    if k < 2:
        continue
    if tools["list_subscribers"](subscriber_id=sid)["items"][0]["status"] != "active":
        continue
    tools["update_subscriber"](subscriber_id=sid, status="suspended")
    tools["send_sms"](subscriber_id=sid, text=f"Your line is suspended: {k} overdue invoices. Please pay them.")
    done.append(sid)
print(done)
tools["submit_answer"]()
"""

OUTAGES = """\
import re
total = 0
for city in ("Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Krakow", "Dublin"):
    for attempt in range(5):
        r = tools["network_status"](city=city)
        if r["ok"]:
            break
    else:
        raise RuntimeError(f"no report for {city}")
    incidents = re.findall(r"(\\d{4}-\\d\\d-\\d\\d) \\d\\d:\\d\\d: [^,]+, service restored after "
                           r"(?:(\\d+) h )?(\\d+) min", r["report"])
    for day, h, m in incidents:
        if "2024-04-01" <= day <= "2024-06-30":
            total += int(h or 0) * 60 + int(m)
print(total)
tools["submit_answer"](answer=total)
"""

ROAMING = PAGES + """\
import json, re
def records(path, text):
    if path.endswith(".json"):
        return [(r["number"], r["cost_cents"] / 100) for r in json.loads(text)["records"]]
    if path.endswith(".csv"):
        return [(l.split(",")[0], float(l.split(",")[2])) for l in text.strip().splitlines()[1:]]
    out = []
    for block in text.strip().split("\\n\\n"):
        d = dict(line.split(": ", 1) for line in block.strip().splitlines())
        out.append((d["MSISDN"], float(d["Amount"].split()[0])))
    return out
lite = next(p for p in every("list_plans") if p["name"] == "Lite 5GB")
plan_of = {}
total = 0.0
for path in tools["list_files"](directory="roaming"):
    for number, eur in records(path, tools["read_file"](path=path)["content"]):
        msisdn = "+" + re.sub(r"\\D", "", number)
        if msisdn not in plan_of:
            plan_of[msisdn] = tools["list_subscribers"](msisdn=msisdn)["items"][0]["plan_id"]
        if plan_of[msisdn] == lite["id"]:
            total += eur
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

UPGRADE = PAGES + """\
plans = {p["name"]: p for p in every("list_plans")}
lite, plus = plans["Lite 5GB"], plans["Plus 20GB"]
allowance = lite["data_gb"] * 1024
candidates = every("list_subscribers", plan_id=lite["id"], status="active")   # all pages before any change
moved = []
for s in candidates:
    usage = tools["list_usage"](subscriber_id=s["id"], month_from="2024-04")["items"]
    over = [u for u in usage if u["month"] <= "2024-06" and u["data_mb"] > allowance]
    if len(over) == 3:
        tools["update_subscriber"](subscriber_id=s["id"], plan_id=plus["id"])
        tools["send_sms"](subscriber_id=s["id"], text="Good news: your line now has the Plus 20GB plan.")
        moved.append(s["id"])
print(moved)
tools["submit_answer"]()
"""

BALANCE = PAGES + """\
total = 0.0
for s in every("list_subscribers", status="cancelled"):
    for i in tools["list_invoices"](subscriber_id=s["id"])["items"]:
        if i["status"] in ("open", "overdue"):
            total += i["amount"]
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""


def _subs(ctx):
  return {r["id"]: (r["plan_id"], r["status"]) for r in ctx.q("SELECT id, plan_id, status FROM subscribers")}


def _sms_check(ctx, e):
  rows = ctx.q("SELECT subscriber_id, text FROM sms")
  got = {r["subscriber_id"]: r["text"] for r in rows}
  return (_subs(ctx) == e["subs"] and len(rows) == len(got) and sorted(map(str, got)) == sorted(e["sms"])
          and all(e["sms"][str(k)].lower() in got[k].lower() for k in got))


def _suspend_expected(ctx):
  want, sms = _subs(ctx), {}
  for r in ctx.q("SELECT i.subscriber_id AS s, COUNT(*) AS k FROM invoices i JOIN subscribers s ON "
                 "s.id = i.subscriber_id WHERE i.status = 'overdue' AND s.status = 'active' GROUP BY i.subscriber_id "
                 "HAVING COUNT(*) >= 2"):
    want[r["s"]] = (want[r["s"]][0], "suspended")
    sms[str(r["s"])] = f"{r['k']} overdue invoices"
  return {"subs": want, "sms": sms}


def _upgrade_expected(ctx):
  want, sms = _subs(ctx), {}
  lite = ctx.q1("SELECT * FROM plans WHERE name = 'Lite 5GB'")
  plus = ctx.scalar("SELECT id FROM plans WHERE name = 'Plus 20GB'")
  for r in ctx.q("SELECT s.id FROM subscribers s WHERE s.plan_id = ? AND s.status = 'active' AND (SELECT COUNT(*) "
                 "FROM usage u WHERE u.subscriber_id = s.id AND u.month BETWEEN '2024-04' AND '2024-06' AND "
                 "u.data_mb > ?) = 3", lite["id"], lite["data_gb"] * 1024):
    want[r["id"]] = (plus, "active")
    sms[str(r["id"])] = "Plus 20GB"
  return {"subs": want, "sms": sms}


def _outage_expected(ctx):
  return ctx.scalar("SELECT SUM(minutes) FROM outages WHERE start BETWEEN '2024-04-01' AND '2024-06-30 99'")


def _roaming_expected(ctx):
  lite = ctx.scalar("SELECT id FROM plans WHERE name = 'Lite 5GB'")
  total = 0.0
  for rel in ctx.files("roaming"):
    rows = read_records(rel, ctx.read(rel), key="records")
    if rel.endswith(".json"):
      recs = [(r["number"], r["cost_cents"] / 100) for r in rows]
    elif rel.endswith(".csv"):
      recs = [(r["msisdn"], float(r["charge_eur"])) for r in rows]
    else:
      recs = [(r["MSISDN"], float(r["Amount"].removesuffix(" EUR"))) for r in rows]
    for number, eur in recs:
      if ctx.scalar("SELECT plan_id FROM subscribers WHERE msisdn = ?", "+" + re.sub(r"\D", "", number)) == lite:
        total += eur
  return round(total, 2)


TASKS = [
    B.Task(DOMAIN, "may_data_porto",
           "How much mobile data did the active subscribers living in Porto use in May 2024? Submit it in GB "
           "(1 GB = 1024 MB), rounded to 2 decimals.", (PORTO,),
           lambda ctx: round(ctx.scalar("SELECT SUM(u.data_mb) FROM usage u JOIN subscribers s ON s.id = "
                                        "u.subscriber_id WHERE s.city = 'Porto' AND s.status = 'active' AND "
                                        "u.month = '2024-05'") / 1024, 2),
           answer="number", wrong=(', status="active"', ""),
           conditions=(("Porto", ('city="Porto", ', '')), ("May", (', month="2024-05"', '')))),
    B.Task(DOMAIN, "suspend_overdue",
           "Suspend every active subscriber who has at least two overdue invoices: set their line status to "
           "'suspended' and send them exactly one SMS that says how many overdue invoices they have, in the form "
           "'<n> overdue invoices'. Change nothing else and send no other SMS.", (SUSPEND,), _suspend_expected,
           check=lambda ctx, e, a: _sms_check(ctx, e), wrong=("if k < 2:", "if k < 1:"), tags=("writeback",),
           conditions=(("active", ('!= "active":\n        continue', '!= "active":\n        pass')),)),
    B.Task(DOMAIN, "outage_minutes",
           "Using the network monitor (network_status) for each of our cities (Lisbon, Porto, Madrid, Lyon, "
           "Berlin, Oslo, Krakow and Dublin), what was the total outage time in minutes of the incidents that "
           "started between 2024-04-01 and 2024-06-30 (inclusive)?", (OUTAGES,), _outage_expected, answer="int",
           wrong=('if "2024-04-01" <= day <= "2024-06-30":', "if True:"), tags=("errors",)),
    B.Task(DOMAIN, "roaming_lite",
           "Partner carriers sent their roaming charges as files in roaming/, each carrier in its own format. What "
           "is the total roaming charge in EUR of the subscribers whose plan is 'Lite 5GB'? Round it to 2 "
           "decimals.", (ROAMING,), _roaming_expected, answer="number",
           wrong=('["cost_cents"] / 100', '["cost_cents"]'), tags=("explore",)),
    B.Task(DOMAIN, "upgrade_heavy_lite",
           "Every active subscriber on the plan 'Lite 5GB' who used more data than the plan includes (data_gb x "
           "1024 MB) in each of April, May and June 2024 gets the plan 'Plus 20GB': change their plan and send "
           "each of them exactly one SMS that mentions 'Plus 20GB'. Change nothing else and send no other SMS.",
           (UPGRADE,), _upgrade_expected, check=lambda ctx, e, a: _sms_check(ctx, e),
           wrong=("if len(over) == 3:", "if len(over) >= 1:"), tags=("writeback",),
           conditions=(("active", ('plan_id=lite["id"], status="active"', 'plan_id=lite["id"]')),)),
    B.Task(DOMAIN, "cancelled_balance",
           "How much do cancelled subscribers still owe, i.e. the sum of their invoices whose status is 'open' or "
           "'overdue'? Round it to 2 decimals.", (BALANCE,),
           lambda ctx: round(ctx.scalar("SELECT SUM(i.amount) FROM invoices i JOIN subscribers s ON s.id = "
                                        "i.subscriber_id WHERE s.status = 'cancelled' AND i.status IN "
                                        "('open', 'overdue')"), 2),
           answer="number", wrong=('("open", "overdue")', '("overdue",)'),
           conditions=(("cancelled", ('"list_subscribers", status="cancelled"', '"list_subscribers"')),)),
]
