"""Insurance domain: customers, policies, claims and letters; new claim forms arrive as workspace files."""

from __future__ import annotations

import datetime
import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

PRODUCTS = ("auto", "home", "travel", "pet", "life")
POLICY_STATUSES = ("active", "lapsed", "cancelled")
CLAIM_STATUSES = ("open", "approved", "rejected", "paid")
PREMIUM = {"auto": (300, 1200), "home": (150, 900), "travel": (30, 200), "pet": (120, 600), "life": (200, 1500)}
DEDUCTIBLE = {"travel": (50, 100)}
CATEGORY = {"auto": ("collision", "theft", "glass"), "home": ("water", "fire", "burglary"),
            "travel": ("medical", "luggage", "delay"), "pet": ("illness", "accident"), "life": ("benefit",)}
JUNE = ("2024-06-01", "2024-07-01")
JULY = ("2024-07-01", "2024-08-01")

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, city TEXT, birth_date TEXT);
CREATE TABLE policies (id INTEGER PRIMARY KEY, customer_id INTEGER, product TEXT, premium REAL, deductible REAL,
                       start_date TEXT, end_date TEXT, status TEXT);
CREATE TABLE claims (id INTEGER PRIMARY KEY, policy_id INTEGER, filed TEXT, amount REAL, category TEXT, status TEXT,
                     payout REAL, risk REAL, busy INTEGER);
CREATE TABLE letters (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER, subject TEXT, body TEXT);
CREATE INDEX claims_policy ON claims(policy_id);
"""


def _plus(date: str, days: int) -> str:
  return (datetime.date.fromisoformat(date) + datetime.timedelta(days=days)).isoformat()


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_cust = 150 * f
  names = G.unique_names(rng, n_cust)
  G.insert_rows(ctx, "customers", [{"id": i + 1, "name": nm, "email": G.email_of(nm, i + 1, "post.example"),
                                    "city": rng.choice(G.CITIES), "birth_date": G.rand_date(rng, "1945-01-01",
                                                                                            "2004-12-31")}
                                   for i, nm in enumerate(names)])
  policies = []

  def policy(product=None, start=None, status=None) -> dict:
    product = product or rng.choices(PRODUCTS, (3, 3, 2, 2, 1))[0]
    start = start or G.rand_date(rng, "2022-07-01", "2024-06-30")
    end = _plus(start, 364)
    lo, hi = PREMIUM[product]
    p = {"id": len(policies) + 1, "customer_id": rng.randint(1, n_cust), "product": product,
         "premium": round(rng.uniform(lo, hi), 2), "deductible": float(rng.choice(DEDUCTIBLE.get(product, (0, 100, 250,
                                                                                                      500)))),
         "start_date": start, "end_date": end,
         "status": status or ("lapsed" if end < B.TODAY else rng.choices(("active", "cancelled"), (9, 1))[0])}
    policies.append(p)
    return p

  for _ in range(400 * f):
    policy()
  # Policies ending in July 2024 (seeded counts): active auto and home ones, and a cancelled auto one.
  for product, n in (("auto", rng.randint(2, 6) * f), ("home", rng.randint(1, 4) * f)):
    for _ in range(n):
      policy(product, G.rand_date(rng, "2023-07-02", "2023-08-01"), "active")
  policy("auto", G.rand_date(rng, "2023-07-02", "2023-08-01"), "cancelled")
  rng.shuffle(policies)   # the planted policies get no telltale ids
  for i, p in enumerate(policies):
    p["id"] = i + 1
  claims = []

  def claim(p, filed=None, amount=None, status=None, risk=None, busy=None) -> dict:
    filed = filed or G.rand_date(rng, p["start_date"], min(p["end_date"], "2024-06-30"))
    amount = amount or round(rng.uniform(50, 3000) if p["product"] == "travel" else rng.uniform(80, 15000), 2)
    status = status or rng.choices(CLAIM_STATUSES, (25, 15, 15, 45))[0]
    payout = (None if status == "open" else 0.0 if status == "rejected"
              else round(max(0.0, amount - p["deductible"]), 2))
    c = {"id": 70001 + len(claims), "policy_id": p["id"], "filed": filed, "amount": amount,
         "category": rng.choice(CATEGORY[p["product"]]), "status": status, "payout": payout,
         "risk": risk if risk is not None else round(rng.uniform(0.01, 0.79), 2),
         "busy": busy if busy is not None else rng.choice((0, 0, 1, 2))}
    claims.append(c)
    return c

  for _ in range(500 * f):
    claim(rng.choice(policies))
  # Large open claims filed in June 2024 (fraud review): a seeded few score high, one of them after a retry.
  june_pols = [p for p in policies if p["start_date"] < JUNE[0] and p["end_date"] >= JUNE[1]]
  big = [claim(rng.choice(june_pols), G.rand_date(rng, *(JUNE[0], "2024-06-30")), round(rng.uniform(5001, 25000), 2),
               "open") for _ in range(rng.randint(3, 6) * f)]
  for j, c in enumerate(rng.sample(big, rng.randint(1, 3) * f)):
    c["risk"] = round(rng.uniform(0.8, 0.99), 2)
    if j == 0:
      c["busy"] = rng.randint(1, 2)
  # Open travel claims filed in June 2024 (approval task); one is below its deductible.
  travel = [p for p in june_pols if p["product"] == "travel"] or [policy("travel", "2024-01-15", "active")]
  for j in range(rng.randint(2, 4) * f):
    p = rng.choice(travel)
    claim(p, G.rand_date(rng, JUNE[0], "2024-06-30"), round(rng.uniform(20, 45), 2) if j == 0 else None, "open")
  # A customer with a large rejected pet claim (the trap of the top pet claimant task).
  pet = {p["id"]: p for p in policies if p["product"] == "pet"}
  everything, paid = {}, {}
  for c in claims:
    if c["policy_id"] in pet:
      cust = pet[c["policy_id"]]["customer_id"]
      everything[cust] = everything.get(cust, 0.0) + c["amount"]
      paid[cust] = paid.get(cust, 0.0) + (c["amount"] if c["status"] == "paid" else 0.0)
  leader = max(paid, key=lambda k: (paid[k], -k))
  trap = rng.choice([p for p in pet.values() if p["customer_id"] != leader])
  top = max(everything.values())
  claim(trap, amount=round(top - everything.get(trap["customer_id"], 0.0) + rng.uniform(1000, 5000), 2),
        status="rejected")
  rng.shuffle(claims)
  for i, c in enumerate(claims):
    c["id"] = 70001 + i
  G.write_docs(ctx, rng, "insurance", ["products", "claims_handling", "renewals", "fraud", "contacts"])
  # New claim forms in three formats (amount in EUR text, plain EUR, or cents); some policies are not active.
  k = B.n_data_files(f)
  n_act = rng.randint(1, k - 1)
  forms = (rng.sample([p for p in policies if p["status"] == "active"], n_act)
           + rng.sample([p for p in policies if p["status"] != "active"], k - n_act))
  rng.shuffle(forms)
  for j, p in enumerate(forms):
    amount = round(rng.uniform(100, 9000), 2)
    form = f"F-{rng.randint(10_000, 99_999)}"
    fmt = (j + rng.randrange(3)) % 3
    stem = f"intake/forms/claim_form_{j + 1:03d}"
    if fmt == 0:
      ctx.write(f"{stem}.json", json.dumps({"form": form, "policy": p["id"], "claimed": f"{amount:,.2f} EUR",
                                            "description": G.sentence(rng, 8)}, indent=1) + "\n")
    elif fmt == 1:
      ctx.write(f"{stem}.txt", f"Claim form {form}\nPolicy number: {p['id']}\nAmount claimed: EUR {amount:.2f}\n\n"
                f"{G.sentence(rng, 12)}\n")
    else:
      ctx.write(f"{stem}.csv", f"form_id,policy_id,amount_cents\n{form},{p['id']},{round(amount * 100)}\n")
  _plant_distractors(rng, policies, claims, policy, claim)
  G.insert_rows(ctx, "policies", policies)
  G.insert_rows(ctx, "claims", claims)


def _plant_distractors(rng, policies, claims, policy, claim) -> None:
  """Data that makes each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): a cancelled home policy ending in July (renewal_letters
  without 'active'); high-risk claims of at least 5,000 that are not open, or filed in May, and a high-risk open
  June claim below 5,000 (fraud_review without 'open' / 'June' / '5000'); paid claims on another product that
  put a customer ahead of the top pet claimant (top_pet_claimant without 'pet')."""
  policy("home", G.rand_date(rng, "2023-07-02", "2023-08-01"), "cancelled")
  held = [p for p in policies if p["product"] in ("auto", "home", "life") and p["start_date"] < "2024-05-01"
          and p["end_date"] >= JUNE[1]]
  for filed, amount, status in ((G.rand_date(rng, JUNE[0], "2024-06-30"), rng.uniform(5001, 25000), "rejected"),
                                (G.rand_date(rng, "2024-05-01", "2024-05-31"), rng.uniform(5001, 25000), "open"),
                                (G.rand_date(rng, JUNE[0], "2024-06-30"), rng.uniform(1000, 4999), "open")):
    claim(rng.choice(held), filed, round(amount, 2), status, risk=round(rng.uniform(0.8, 0.99), 2))
  owner = {p["id"]: p for p in policies}
  pet, every = {}, {}
  for c in claims:
    if c["status"] == "paid":
      p = owner[c["policy_id"]]
      every[p["customer_id"]] = every.get(p["customer_id"], 0.0) + c["amount"]
      if p["product"] == "pet":
        pet[p["customer_id"]] = pet.get(p["customer_id"], 0.0) + c["amount"]
  leader = min(pet, key=lambda k: (-round(pet[k], 2), k))
  rival = policy("life", G.rand_date(rng, "2023-09-01", "2024-03-31"), "active")
  while rival["customer_id"] == leader:
    rival["customer_id"] = rng.randint(1, max(p["customer_id"] for p in policies))
  gap = every[leader] - every.get(rival["customer_id"], 0.0)
  while gap >= 0:
    gap -= claim(rival, G.rand_date(rng, rival["start_date"], "2024-06-30"), status="paid")["amount"]


# -- tools

def _get_policy(ctx, policy_id):
  r = ctx.q1("SELECT * FROM policies WHERE id = ?", policy_id)
  if r is None:
    raise ToolError(f"no policy with id {policy_id}")
  return r


def _get_customer(ctx, customer_id):
  r = ctx.q1("SELECT * FROM customers WHERE id = ?", customer_id)
  if r is None:
    raise ToolError(f"no customer with id {customer_id}")
  return r


def _get_claim(ctx, claim_id):
  r = ctx.q1("SELECT * FROM claims WHERE id = ?", claim_id)
  if r is None:
    raise ToolError(f"no claim with id {claim_id}")
  return r


def _fraud_check(ctx, claim_id):
  c = _get_claim(ctx, claim_id)
  key = ("fraud_check", claim_id)
  ctx.calls[key] = ctx.calls.get(key, 0) + 1
  if ctx.calls[key] <= c["busy"]:   # an error object, not a failed call: the program must look at it
    return {"ok": False, "claim_id": claim_id, "error": "scoring model is warming up, no score computed; retry"}
  level = "high: refer to the investigation unit" if c["risk"] >= 0.8 else "normal: no action needed"
  return {"claim_id": claim_id, "assessment": f"Model v3 assessment of claim {claim_id}: risk score "
                                               f"{c['risk']:.2f} ({level})."}


def _decide_claim(ctx, claim_id, status, payout=None):
  c = _get_claim(ctx, claim_id)
  if status not in ("approved", "rejected"):
    raise ToolError("status must be 'approved' or 'rejected'")
  if c["status"] != "open":
    raise ToolError(f"claim {claim_id} is {c['status']}, not open")
  if status == "approved" and (payout is None or payout < 0):
    raise ToolError("an approved claim needs a payout >= 0")
  payout = 0.0 if status == "rejected" else round(float(payout), 2)
  ctx.exec("UPDATE claims SET status = ?, payout = ? WHERE id = ?", status, payout, claim_id)
  return {"claim_id": claim_id, "status": status, "payout": payout}


def _send_letter(ctx, customer_id, subject, body):
  _get_customer(ctx, customer_id)
  if not body.strip():
    raise ToolError("the letter body is empty")
  ctx.exec("INSERT INTO letters (customer_id, subject, body) VALUES (?, ?, ?)", customer_id, subject, body)
  return {"customer_id": customer_id, "sent": True}


TOOLS = (
    B.list_tool("list_policies", "List policies {id, customer_id, product, premium, start_date, end_date, status}, "
                "filtered.", table="policies", columns="id, customer_id, product, premium, start_date, end_date, "
                "status", filters=[
                    B.Filter("customer_id", "customer_id = ?", B.p_int("only this customer's policies")),
                    B.Filter("product", "product = ?", B.p_str("product", PRODUCTS)),
                    B.Filter("status", "status = ?", B.p_str("policy status", POLICY_STATUSES)),
                    B.Filter("ends_from", "end_date >= ?", B.p_str("only policies ending on or after this date "
                                                                   "(YYYY-MM-DD)")),
                    B.Filter("ends_before", "end_date < ?", B.p_str("only policies ending before this date "
                                                                    "(YYYY-MM-DD)"))]),
    B.tool("get_policy", "Get one policy with all fields (deductible included).", _get_policy,
           required=("policy_id",), policy_id=B.p_int("policy id")),
    B.tool("get_customer", "Get one customer.", _get_customer, required=("customer_id",),
           customer_id=B.p_int("customer id")),
    B.list_tool("list_claims", "List claims {id, policy_id, product, filed, amount, status, payout}, filtered.",
                table="claims c JOIN policies p ON p.id = c.policy_id",
                columns="c.id AS id, c.policy_id AS policy_id, p.product AS product, c.filed AS filed, "
                "c.amount AS amount, c.status AS status, c.payout AS payout", order_by="c.id", filters=[
                    B.Filter("policy_id", "c.policy_id = ?", B.p_int("policy id")),
                    B.Filter("product", "p.product = ?", B.p_str("product of the claim's policy", PRODUCTS)),
                    B.Filter("status", "c.status = ?", B.p_str("claim status", CLAIM_STATUSES)),
                    B.Filter("filed_from", "c.filed >= ?", B.p_str("only claims filed on or after this date "
                                                                   "(YYYY-MM-DD)")),
                    B.Filter("filed_before", "c.filed < ?", B.p_str("only claims filed before this date "
                                                                    "(YYYY-MM-DD)")),
                    B.Filter("min_amount", "c.amount >= ?", B.p_num("only claims of at least this amount"))]),
    B.tool("fraud_check", "The fraud model's assessment of a claim: {claim_id, assessment} (free text), or {ok: false, "
           "claim_id, error} when no score could be computed.", _fraud_check, required=("claim_id",),
           claim_id=B.p_int("claim id")),
    B.tool("decide_claim", "Approve (with a payout) or reject an open claim.", _decide_claim,
           required=("claim_id", "status"), claim_id=B.p_int("claim id"),
           status=B.p_str("the decision", ("approved", "rejected")), payout=B.p_num("amount paid out (approved)")),
    B.tool("send_letter", "Send a letter to a customer.", _send_letter, required=("customer_id", "subject", "body"),
           customer_id=B.p_int("customer id"), subject=B.p_str("subject line"), body=B.p_str("letter text")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("insurance", "An insurer's customers, policies and claims.", SCHEMA, generate, TOOLS)

PAGES = B.paging_prelude("fetch_all", limit=None)

PREMIUMS = """\
pols = fetch_all("list_policies", product="auto", status="active", ends_from="2024-07-01", ends_before="2024-08-01")
total = round(sum(p["premium"] for p in pols), 2)
print(len(pols), total)
tools["submit_answer"](answer=total)
"""

RENEWALS = """\
pols = fetch_all("list_policies", product="home", status="active", ends_from="2024-07-01", ends_before="2024-08-01")
lines = ["policy_id,new_premium"]
for p in pols:
    new = round(p["premium"] * 1.05, 2)
    tools["send_letter"](customer_id=p["customer_id"], subject="Renewal",
                         body=f"Your home insurance policy {p['id']} renews next month; the new yearly premium is "
                              f"{new:.2f} EUR.")
    lines.append(f"{p['id']},{new:.2f}")
tools["write_file"](path="renewals.csv", content="\\n".join(lines) + "\\n")
print(len(pols))
tools["submit_answer"]()
"""

FRAUD = r"""
import re
flagged = []
for c in fetch_all("list_claims", status="open", filed_from="2024-06-01", filed_before="2024-07-01", min_amount=5000):
    for attempt in range(5):
        res = tools["fraud_check"](claim_id=c["id"])
        if res.get("ok", True):
            break
    m = re.search(r"risk score ([\d.]+)", res.get("assessment", ""))
    if m and float(m.group(1)) >= 0.8:
        flagged.append(c["id"])
print(flagged)
tools["submit_answer"](answer=flagged)
"""

FORMS = r"""
import json, re
total = 0.0
for path in tools["list_files"]():
    if "form" not in path:
        continue
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        d = json.loads(text)
        pid, amount = d["policy"], float(d["claimed"].split()[0].replace(",", ""))
    elif path.endswith(".csv"):
        row = text.strip().splitlines()[1].split(",")
        pid, amount = int(row[1]), int(row[2]) / 100
    else:
        pid = int(re.search(r"Policy number: (\d+)", text).group(1))
        amount = float(re.search(r"Amount claimed: EUR ([\d.]+)", text).group(1))
    if tools["get_policy"](policy_id=pid)["status"] == "active":
        total += amount
print(round(total, 2))
tools["submit_answer"](answer=round(total, 2))
"""

TOP_PET = """\
owner = {p["id"]: p["customer_id"] for p in fetch_all("list_policies", product="pet")}
paid = {}
for c in fetch_all("list_claims", product="pet", status="paid"):
    cust = owner[c["policy_id"]]
    paid[cust] = paid.get(cust, 0.0) + c["amount"]
best = min(paid, key=lambda k: (-round(paid[k], 2), k))
name = tools["get_customer"](customer_id=best)["name"]
print(name, round(paid[best], 2))
tools["submit_answer"](answer=name)
"""

APPROVE = """\
for c in fetch_all("list_claims", product="travel", status="open", filed_from="2024-06-01", filed_before="2024-07-01"):
    ded = tools["get_policy"](policy_id=c["policy_id"])["deductible"]
    tools["decide_claim"](claim_id=c["id"], status="approved", payout=round(max(0.0, c["amount"] - ded), 2))
tools["submit_answer"]()
"""


def _july(ctx, product):
  return ctx.q("SELECT * FROM policies WHERE product = ? AND status = 'active' AND end_date >= ? AND end_date < ? "
               "ORDER BY id", product, *JULY)


def _renewals_check(ctx, e, a):
  want = {p: (c, new) for p, c, new in e}
  letters = ctx.q("SELECT customer_id, body FROM letters")
  if len(letters) != len(want):
    return False
  seen = set()
  for r in letters:
    ids = [int(x) for x in re.findall(r"policy (\d+)", r["body"]) if int(x) in want]
    if len(ids) != 1 or ids[0] in seen:
      return False
    c, new = want[ids[0]]
    if r["customer_id"] != c or f"{new:.2f}" not in r["body"]:
      return False
    seen.add(ids[0])
  text = ctx.read("renewals.csv")
  if text is None:
    return False
  rows = {}
  for line in text.strip().splitlines()[1:]:
    parts = [x.strip() for x in line.split(",")]
    try:
      rows[int(parts[0])] = float(parts[1])
    except (ValueError, IndexError):
      return False
  return rows.keys() == want.keys() and all(abs(rows[p] - want[p][1]) <= 0.006 for p in rows)


def _forms(ctx):
  total = 0.0
  for rel in ctx.files("intake/forms"):
    text = ctx.read(rel)
    if rel.endswith(".json"):
      d = read_records(rel, text)[0]
      pid, amount = d["policy"], float(d["claimed"].split()[0].replace(",", ""))
    elif rel.endswith(".csv"):
      d = read_records(rel, text)[0]
      pid, amount = int(d["policy_id"]), int(d["amount_cents"]) / 100
    else:
      pid = int(re.search(r"Policy number: (\d+)", text).group(1))
      amount = float(re.search(r"Amount claimed: EUR ([\d.]+)", text).group(1))
    if ctx.scalar("SELECT status FROM policies WHERE id = ?", pid) == "active":
      total += amount
  return round(total, 2)


def _top_pet(ctx):
  return ctx.scalar("SELECT cu.name FROM claims c JOIN policies p ON p.id = c.policy_id JOIN customers cu ON "
                    "cu.id = p.customer_id WHERE p.product = 'pet' AND c.status = 'paid' GROUP BY cu.id "
                    "ORDER BY -ROUND(SUM(c.amount), 2), cu.id LIMIT 1")


def _decisions(ctx):
  return {r["id"]: (r["status"], r["payout"]) for r in ctx.q("SELECT id, status, payout FROM claims")}


def _approve_expected(ctx):
  want = _decisions(ctx)
  for r in ctx.q("SELECT c.id, c.amount, p.deductible FROM claims c JOIN policies p ON p.id = c.policy_id WHERE "
                 "p.product = 'travel' AND c.status = 'open' AND c.filed >= ? AND c.filed < ?", *JUNE):
    want[r["id"]] = ("approved", round(max(0.0, r["amount"] - r["deductible"]), 2))
  return want


def _approve_check(ctx, e, a):
  got = _decisions(ctx)
  return got.keys() == e.keys() and all(
      got[k][0] == e[k][0] and (got[k][1] == e[k][1] if e[k][1] is None or got[k][1] is None
                                else abs(got[k][1] - e[k][1]) <= 0.006) for k in e)


TASKS = [
    B.Task(DOMAIN, "auto_premiums_july",
           "What is the total yearly premium of the active auto policies that end in July 2024? Submit the amount "
           "rounded to 2 decimals.", (PAGES, PREMIUMS),
           lambda ctx: round(sum(p["premium"] for p in _july(ctx, "auto")), 2),
           answer="number", wrong=(' status="active",', ""),
           conditions=(("auto", ('product="auto", ', '')),
                       ("July", (', ends_from="2024-07-01", ends_before="2024-08-01"', '')))),
    B.Task(DOMAIN, "renewal_letters",
           "Active home policies that end in July 2024 renew with a 5% higher premium: round(premium * 1.05, 2). "
           "Send each such policy's customer one letter (subject 'Renewal') whose text names the policy as "
           "'policy <id>' and states the new premium with 2 decimals. Also write renewals.csv with the header "
           "line 'policy_id,new_premium' and one line per renewed policy. Send no other letters.",
           (PAGES, RENEWALS), lambda ctx: [[p["id"], p["customer_id"], round(p["premium"] * 1.05, 2)]
                                           for p in _july(ctx, "home")],
           check=_renewals_check, wrong=('ends_before="2024-08-01"', 'ends_before="2024-09-01"'),
           tags=("writeback",),
           conditions=(("home", ('product="home", ', '')), ("active", (' status="active",', '')),
                       ("July", (', ends_from="2024-07-01", ends_before="2024-08-01"', '')))),
    B.Task(DOMAIN, "fraud_review",
           "Run the fraud check on every open claim filed in June 2024 with an amount of at least 5,000. Which of "
           "them get a risk score of 0.80 or more? Submit their claim ids.", (PAGES, FRAUD),
           lambda ctx: [r["id"] for r in ctx.q("SELECT id FROM claims WHERE status = 'open' AND filed >= ? AND "
                                               "filed < ? AND amount >= 5000 AND risk >= 0.8", *JUNE)],
           answer="set", wrong=("for attempt in range(5):", "for attempt in range(1):"), tags=("errors",),
           conditions=(("open", ('status="open", ', '')),
                       ("June", (', filed_from="2024-06-01", filed_before="2024-07-01"', '')),
                       ("5000", (', min_amount=5000', '')))),
    B.Task(DOMAIN, "claim_forms_active_total",
           "New claim forms were saved as files somewhere in the workspace (one form per file; the formats "
           "differ). What is the total amount claimed, in EUR, by the forms whose policy is currently active? "
           "Submit it rounded to 2 decimals.", (PAGES, FORMS), _forms, answer="number",
           wrong=('if tools["get_policy"](policy_id=pid)["status"] == "active":', "if True:"), tags=("explore",)),
    B.Task(DOMAIN, "top_pet_claimant",
           "Which customer has received the largest total of paid claims on pet policies (sum of the claim "
           "amounts of claims with status 'paid')? Submit the customer's name (on a tie, the smaller customer "
           "id).", (PAGES, TOP_PET), _top_pet, answer="text",
           wrong=(', status="paid")', ")"), tags=("paging",),
           conditions=(("pet", ('fetch_all("list_policies", product="pet")', 'fetch_all("list_policies")'),
                               ('"list_claims", product="pet", ', '"list_claims", ')),)),
    B.Task(DOMAIN, "approve_travel_claims",
           "Approve every open travel claim filed in June 2024: set its status to 'approved' with the payout "
           "max(0, amount - the policy's deductible), rounded to 2 decimals. Change no other claim.",
           (PAGES, APPROVE), _approve_expected, check=_approve_check,
           wrong=('payout=round(max(0.0, c["amount"] - ded), 2)', 'payout=c["amount"]'),
           conditions=(("travel", ('product="travel", ', '')),
                       ("June", (', filed_from="2024-06-01", filed_before="2024-07-01"', '')))),
]
