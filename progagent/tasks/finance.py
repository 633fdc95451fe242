"""Finance domain: bank accounts and transactions; scanned receipts and bank exports (several formats) are
workspace files; monthly statements come as free text from a service that is sometimes still generating them."""

from __future__ import annotations

import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

ACCOUNTS = (("Household Checking", "checking"), ("Savings", "savings"), ("Travel Card", "credit"),
            ("Business Checking", "checking"), ("Joint Savings", "savings"), ("Credit Card", "credit"))
TYPES = ("checking", "savings", "credit")
MERCHANTS = {"groceries": ("FreshMart", "Green Grocer", "Daily Basket"), "dining": ("Cafe Lume", "Noodle Bar"),
             "travel": ("SkyJet", "RailOne", "Harbor Hotel"), "utilities": ("City Power", "AquaNet"),
             "entertainment": ("CineMax", "StreamBox"), "health": ("Pharma Plus", "Clinic Care"),
             "income": ("Employer Payroll",)}
CATEGORIES = tuple(MERCHANTS)
SPEND = CATEGORIES[:-1]
RANGES = {"groceries": (5, 120), "dining": (8, 90), "travel": (20, 600), "utilities": (30, 180),
          "entertainment": (5, 60), "health": (10, 400)}
MONTHS = tuple(f"2024-0{m}" for m in range(1, 7))

SCHEMA = """
CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT, type TEXT);
CREATE TABLE transactions (id INTEGER PRIMARY KEY, account_id INTEGER, date TEXT, amount REAL, category TEXT,
                           merchant TEXT, memo TEXT);
CREATE TABLE flags (id INTEGER PRIMARY KEY AUTOINCREMENT, transaction_id INTEGER, reason TEXT);
CREATE TABLE statement_busy (account_id INTEGER, month TEXT);
CREATE INDEX tx_account ON transactions(account_id);
"""


def _purchase(rng, cat, scale):
  lo, hi = RANGES[cat]
  return -round(rng.uniform(lo, hi) * scale, 2)


def _receipt(rng, fmt, merchant, date, total):
  if fmt == "json":
    at = f"{date}T{rng.randint(8, 21):02d}:{rng.randint(0, 59):02d}:00"
    return json.dumps({"store": merchant, "purchased_at": at,
                       "total_cents": round(total * 100), "items": rng.randint(1, 9)}, indent=1)
  if fmt == "csv":
    return f"merchant,date,total\n{merchant},{date},{total:.2f}\n"
  return f"Merchant: {merchant}\nDate: {date}\nTotal: {total:.2f}\n"


def _export(fmt, account, entries):
  if fmt == "json":
    return json.dumps({"account": account, "exported": "2024-06-30", "entries": [
        {"date": d, "merchant": m, "category": c, "amount_cents": round(a * 100)} for d, m, c, a in entries]}, indent=1)
  if fmt == "csv":
    return f"# account: {account}\ndate,merchant,category,amount\n" + "".join(
        f"{d},{m},{c},{a:.2f}\n" for d, m, c, a in entries)
  return f"Account: {account}\n\n" + "".join(f"{d} | {m} | {c} | {a:.2f} EUR\n" for d, m, c, a in entries)


def _formats(rng, n):
  """n file formats, a JSON one and a text one among them."""
  out = ["json", rng.choice(("csv", "txt"))] + [rng.choice(("csv", "txt", "json")) for _ in range(n - 2)]
  rng.shuffle(out)
  return out


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  accts = list(ACCOUNTS)
  rng.shuffle(accts)
  G.insert_rows(ctx, "accounts", [{"id": i + 1, "name": n, "type": t} for i, (n, t) in enumerate(accts)])
  scale = {c: rng.uniform(0.6, 1.6) for c in SPEND}
  peak = rng.choice(SPEND)   # the category that peaks in April-June (seed-dependent)
  txs = []
  for i in range(850 * f):
    date = G.rand_date(rng)
    q2 = date >= "2024-04-01"
    cat = rng.choices(CATEGORIES, (30, 15, 8, 8, 8, 8, 4))[0]
    amount = (round(rng.uniform(1500, 3500), 2) if cat == "income"
              else _purchase(rng, cat, scale[cat] * (2.5 if cat == peak and q2 else 1.0)))
    txs.append({"id": i + 1, "account_id": rng.randint(1, len(accts)), "date": date, "amount": amount,
                "category": cat, "merchant": rng.choice(MERCHANTS[cat]), "memo": G.sentence(rng, 6)})
  credit = {i + 1 for i, (_, t) in enumerate(accts) if t == "credit"}
  june_credit = [t for t in txs if t["account_id"] in credit and t["date"] >= "2024-06-01"]
  others = [t for t in txs if t["account_id"] not in credit or t["date"] < "2024-06-01"]
  order = {id(t): rng.random() for t in txs}   # ids follow a random order; a copy comes after its original
  for src in rng.sample(june_credit, rng.randint(2, 4) * f) + rng.sample(others, 2 * f):   # posted twice
    dup = dict(src, memo="posted twice")
    order[id(dup)] = rng.uniform(order[id(src)], 1.0)
    txs.append(dup)
  txs.sort(key=lambda t: order[id(t)])
  for i, t in enumerate(txs):
    t["id"] = i + 1
  G.insert_rows(ctx, "statement_busy", [{"account_id": a, "month": m} for a in range(1, len(accts) + 1)
                                        for m in MONTHS if rng.random() < 0.3])
  G.write_docs(ctx, rng, "finance", ["budget", "categories", "reconciliation", "cards", "taxes"])
  purchases = [t for t in txs if t["amount"] < 0]
  n = 2 * f   # receipts: half of the data files
  unmatched = set(rng.sample(range(n), rng.randint(1, n - 1)))
  misses = []   # (merchant, date, total) of the receipts without a transaction
  for j, (fmt, num) in enumerate(zip(_formats(rng, n), rng.sample(range(100000, 999999), n))):
    t = rng.choice(purchases)
    total = -t["amount"]
    if j in unmatched:
      total = round(max(1.0, total + rng.choice((-1, 1)) * rng.uniform(0.5, 9)), 2)
      misses.append((t["merchant"], t["date"], total, t["category"]))
    ctx.write(f"receipts/{num}.{fmt}", _receipt(rng, fmt, t["merchant"], t["date"], total))
  for fmt, num in zip(_formats(rng, n), rng.sample(range(1000, 9999), n)):   # bank exports: the other half
    acct = rng.randint(1, len(accts))
    mine = [t for t in txs if t["account_id"] == acct]
    entries = []
    for k in range(rng.randint(3, 5)):
      if k == 0 or rng.random() < 0.5:   # not recorded yet
        cat = rng.choice(SPEND)
        entries.append((G.rand_date(rng, "2024-06-01", "2024-06-30"), rng.choice(MERCHANTS[cat]), cat,
                        _purchase(rng, cat, 1.0)))
      else:
        t = rng.choice(mine)
        entries.append((t["date"], t["merchant"], t["category"], t["amount"]))
    rng.shuffle(entries)
    ctx.write(f"imports/export_{num}.{fmt}", _export(fmt, accts[acct - 1][0], entries))
  _plant_distractors(rng, accts, txs, misses)
  G.insert_rows(ctx, "transactions", txs)


def _plant_distractors(rng, accts, txs, misses) -> None:
  """Transactions that make each declared condition matter (base.Task.conditions; drawn after everything else,
  so the rest of the state is what it would be without them; the ids are renumbered): a transaction posted twice
  on a credit account in May and one on another account type in June (flag_duplicates without 'June' /
  'credit'), and a transaction with the merchant and amount of an unmatched receipt on another day, among the
  first ones (unmatched_receipts without 'same date')."""
  credit = [i + 1 for i, (_, t) in enumerate(accts) if t == "credit"]
  other = [i + 1 for i, (_, t) in enumerate(accts) if t != "credit"]
  for acct, month in ((rng.choice(credit), "05"), (rng.choice(other), "06")):
    cat = rng.choice(SPEND)
    src = {"id": 0, "account_id": acct, "date": G.rand_date(rng, f"2024-{month}-01", f"2024-{month}-28"),
           "amount": _purchase(rng, cat, 1.0), "category": cat, "merchant": rng.choice(MERCHANTS[cat]),
           "memo": G.sentence(rng, 6)}
    txs += [src, dict(src, memo="posted twice")]
  merchant, date, total, cat = rng.choice(misses)
  day = G.rand_date(rng)
  while day == date:
    day = G.rand_date(rng)
  txs.insert(rng.randrange(20), {"id": 0, "account_id": rng.randint(1, len(accts)), "date": day, "amount": -total,
                                 "category": cat, "merchant": merchant, "memo": G.sentence(rng, 6)})
  for i, t in enumerate(txs):
    t["id"] = i + 1


# -- tools

def _acct(ctx, account_id):
  r = ctx.q1("SELECT * FROM accounts WHERE id = ?", account_id)
  if r is None:
    raise ToolError(f"no account with id {account_id}; list_accounts gives the ids")
  return r


def _get_tx(ctx, transaction_id):
  r = ctx.q1("SELECT * FROM transactions WHERE id = ?", transaction_id)
  if r is None:
    raise ToolError(f"no transaction with id {transaction_id}")
  return r


def _flag(ctx, transaction_id, reason):
  _get_tx(ctx, transaction_id)
  ctx.exec("INSERT INTO flags (transaction_id, reason) VALUES (?, ?)", transaction_id, reason)
  return {"transaction_id": transaction_id, "flagged": True}


def _add_tx(ctx, account_id, date, amount, category, merchant):
  _acct(ctx, account_id)
  if category not in CATEGORIES:
    raise ToolError(f"unknown category {category!r}; use one of {list(CATEGORIES)}")
  if len(date) != 10 or date[4] != "-" or date[7] != "-":
    raise ToolError(f"date must look like '2024-06-03', got {date!r}")
  new = ctx.scalar("SELECT MAX(id) FROM transactions") + 1
  ctx.exec("INSERT INTO transactions (id, account_id, date, amount, category, merchant, memo) VALUES "
           "(?, ?, ?, ?, ?, ?, 'imported')", new, account_id, date, round(float(amount), 2), category, merchant)
  return {"id": new, "account_id": account_id}


def _check_month(month):
  if not isinstance(month, str) or len(month) != 7 or month[4] != "-":
    raise ToolError(f"month must look like '2024-03', got {month!r}")


def _statement_totals(ctx, account_id, month):
  """{category: (rounded total of its amounts, count)} of one account and month, as the statement shows."""
  return {r["category"]: (round(r["s"], 2), r["n"]) for r in ctx.q(
      "SELECT category, SUM(amount) AS s, COUNT(*) AS n FROM transactions WHERE account_id = ? AND "
      "substr(date, 1, 7) = ? GROUP BY category ORDER BY category", account_id, month)}


def _statement(ctx, account_id, month):
  a = _acct(ctx, account_id)
  _check_month(month)
  key = ("monthly_statement", account_id, month)
  n = ctx.calls.get(key, 0)
  ctx.calls[key] = n + 1
  if n == 0 and ctx.q1("SELECT 1 FROM statement_busy WHERE account_id = ? AND month = ?", account_id, month):
    return {"ok": False, "account_id": account_id, "month": month,
            "error": "the statement is still being generated; ask again"}
  lines = [f"Statement of {a['name']} ({a['type']}) for {month}"]
  for cat, (total, k) in _statement_totals(ctx, account_id, month).items():
    if total < 0:
      lines.append(f"  {cat}: spent {-total:,.2f} in {k} purchase{'s' * (k > 1)}")
    else:
      lines.append(f"  {cat}: received {total:,.2f} in {k} payment{'s' * (k > 1)}")
  lines.append("Amounts in EUR. Thank you for banking with us.")
  return {"ok": True, "account_id": account_id, "month": month, "statement": "\n".join(lines)}


TOOLS = (
    B.list_tool("list_accounts", "List the accounts [{id, name, type}].", table="accounts", columns="id, name, type",
                filters=[B.Filter("type", "type = ?", B.p_str("account type", TYPES))]),
    B.list_tool("list_transactions", "List transactions [{id, account_id, date, amount, category, merchant}] "
                "(purchases are negative amounts), optionally filtered.", table="transactions",
                columns="id, account_id, date, amount, category, merchant", filters=[
                    B.Filter("account_id", "account_id = ?", B.p_int("account id")),
                    B.Filter("month", "substr(date, 1, 7) = ?", B.p_str("'YYYY-MM'")),
                    B.Filter("date_from", "date >= ?", B.p_str("first date (YYYY-MM-DD), inclusive")),
                    B.Filter("date_to", "date <= ?", B.p_str("last date (YYYY-MM-DD), inclusive")),
                    B.Filter("category", "category = ?", B.p_str("category", CATEGORIES)),
                    B.Filter("merchant", "merchant = ?", B.p_str("exact merchant name")),
                    B.Filter("min_amount", "amount >= ?", B.p_num("smallest amount")),
                    B.Filter("max_amount", "amount <= ?", B.p_num("largest amount"))]),
    B.tool("get_transaction", "Get one transaction with its memo.", _get_tx, required=("transaction_id",),
           transaction_id=B.p_int("transaction id")),
    B.tool("flag_transaction", "Flag a transaction for review with a reason.", _flag,
           required=("transaction_id", "reason"), transaction_id=B.p_int("transaction id"),
           reason=B.p_str("why it is flagged")),
    B.tool("add_transaction", "Record a new transaction (purchases negative); returns {id, account_id}.", _add_tx,
           required=("account_id", "date", "amount", "category", "merchant"), account_id=B.p_int("account id"),
           date=B.p_str("YYYY-MM-DD"), amount=B.p_num("amount in EUR, negative for purchases"),
           category=B.p_str("category", CATEGORIES), merchant=B.p_str("merchant name")),
    B.tool("monthly_statement", "The bank's monthly statement of one account: {ok, account_id, month, statement} "
           "with the statement as text, or {ok: false, account_id, month, error} when it is not ready.",
           _statement, required=("account_id", "month"), account_id=B.p_int("account id"),
           month=B.p_str("'YYYY-MM'")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("finance", "A household's bank accounts and transactions.", SCHEMA, generate, TOOLS)

# -- tasks

MARCH = """\
acct = next(a for a in tools["list_accounts"](type="checking")["items"] if a["name"] == "Household Checking")
rows, offset = [], 0
while offset is not None:
    page = tools["list_transactions"](account_id=acct["id"], month="2024-03", offset=offset)
    rows += page["items"]
    offset = page["next_offset"]
net = round(sum(t["amount"] for t in rows), 2)
print(len(rows), net)
tools["submit_answer"](answer=net)
"""

DUPS = """\
for a in tools["list_accounts"](type="credit")["items"]:
    rows, offset = [], 0
    while offset is not None:
        page = tools["list_transactions"](account_id=a["id"], month="2024-06", offset=offset)
        rows += page["items"]
        offset = page["next_offset"]
    seen = set()
    for t in rows:
        key = (t["date"], t["merchant"], t["amount"])
        if key in seen:
            tools["flag_transaction"](transaction_id=t["id"], reason="duplicate")
        seen.add(key)
tools["submit_answer"]()
"""

DUPS_WRONG = """\
from collections import defaultdict
for a in tools["list_accounts"](type="credit")["items"]:
    groups = defaultdict(list)
    for t in tools["list_transactions"](account_id=a["id"], month="2024-06", limit=200)["items"]:
        groups[(t["date"], t["merchant"], t["amount"])].append(t["id"])
    for ids in groups.values():
        if len(ids) > 1:
            for i in ids:
                tools["flag_transaction"](transaction_id=i, reason="duplicate")
tools["submit_answer"]()
"""

RECEIPTS = """\
import json
def parse(path, text):
    if path.endswith(".json"):
        d = json.loads(text)
        return d["store"], d["purchased_at"][:10], d["total_cents"] / 100
    if path.endswith(".csv"):
        head, row = text.strip().splitlines()[:2]
        d = dict(zip(head.split(","), row.split(",")))
        return d["merchant"], d["date"], float(d["total"])
    d = dict(l.split(": ", 1) for l in text.strip().splitlines())
    return d["Merchant"], d["Date"], float(d["Total"])
out = []
for path in tools["list_files"](directory="receipts"):
    merchant, date, total = parse(path, tools["read_file"](path=path)["content"])
    hits = tools["list_transactions"](merchant=merchant, date_from=date, date_to=date)["items"]
    if not any(abs(h["amount"] + total) < 0.005 for h in hits):
        out.append(path)
print(out)
tools["submit_answer"](answer=out)
"""

Q2 = """\
import re
from collections import Counter
spend = Counter()
for a in tools["list_accounts"]()["items"]:
    for month in ("2024-04", "2024-05", "2024-06"):
        for attempt in range(5):
            r = tools["monthly_statement"](account_id=a["id"], month=month)
            if r["ok"]:
                break
        else:
            raise RuntimeError(f"no statement for {a['name']} {month}")
        for line in r["statement"].splitlines():
            m = re.match(r"\\s*(\\w+): spent ([\\d,]+\\.\\d\\d)", line)
            if m:
                spend[m.group(1)] += float(m.group(2).replace(",", ""))
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
print(best, round(spend[best], 2))
tools["submit_answer"](answer=[best, round(spend[best], 2)])
"""

IMPORT = """\
import json
def entries(path, text):
    if path.endswith(".json"):
        d = json.loads(text)
        return d["account"], [(e["date"], e["merchant"], e["category"], e["amount_cents"] / 100) for e in d["entries"]]
    lines = [l for l in text.strip().splitlines() if l.strip()]
    if path.endswith(".csv"):
        account = lines[0].split(":", 1)[1].strip()
        out = []
        for l in lines[2:]:
            d, m, c, a = l.split(",")
            out.append((d, m, c, float(a)))
        return account, out
    account = lines[0].split(":", 1)[1].strip()
    out = []
    for l in lines[1:]:
        d, m, c, a = [x.strip() for x in l.split("|")]
        out.append((d, m, c, float(a.split()[0])))
    return account, out
ids = {a["name"]: a["id"] for a in tools["list_accounts"]()["items"]}
added = skipped = 0
for path in tools["list_files"](directory="imports"):
    account, rows = entries(path, tools["read_file"](path=path)["content"])
    for date, merchant, category, amount in rows:
        hits = tools["list_transactions"](account_id=ids[account], merchant=merchant, date_from=date, date_to=date)
        if any(abs(h["amount"] - amount) < 0.005 for h in hits["items"]):
            skipped += 1
        else:
            tools["add_transaction"](account_id=ids[account], date=date, amount=round(amount, 2), category=category,
                                     merchant=merchant)
            added += 1
tools["write_file"](path="reports/import_summary.txt", content=f"added: {added}\\nskipped: {skipped}\\n")
print(added, skipped)
tools["submit_answer"]()
"""


def _dups(ctx):
  return sorted(r["id"] for r in ctx.q(
      "SELECT t.id FROM transactions t JOIN accounts a ON a.id = t.account_id WHERE a.type = 'credit' AND "
      "t.date LIKE '2024-06-%' AND EXISTS (SELECT 1 FROM transactions u WHERE u.id < t.id AND "
      "u.account_id = t.account_id AND u.date = t.date AND u.merchant = t.merchant AND u.amount = t.amount)"))


def _parse_receipt(path, text):
  d = read_records(path, text)[0]
  if path.endswith(".json"):
    return d["store"], d["purchased_at"][:10], d["total_cents"] / 100
  if path.endswith(".csv"):
    return d["merchant"], d["date"], float(d["total"])
  return d["Merchant"], d["Date"], float(d["Total"])


def _receipts(ctx):
  out = []
  for rel in ctx.files("receipts"):
    merchant, date, total = _parse_receipt(rel, ctx.read(rel))
    if ctx.scalar("SELECT COUNT(*) FROM transactions WHERE merchant = ? AND date = ? AND ABS(amount + ?) < 0.005",
                  merchant, date, total) == 0:
      out.append(rel)
  return out


def _q2(ctx):
  spend: dict[str, float] = {}
  for a in ctx.q("SELECT id FROM accounts ORDER BY id"):
    for month in ("2024-04", "2024-05", "2024-06"):
      for cat, (total, _) in _statement_totals(ctx, a["id"], month).items():
        if total < 0:
          spend[cat] = spend.get(cat, 0.0) + float(f"{-total:.2f}")
  best = min(spend, key=lambda c: (-round(spend[c], 2), c))
  return [best, round(spend[best], 2)]


def _parse_export(path, text):
  if path.endswith(".json"):
    d = json.loads(text)
    return d["account"], [(e["date"], e["merchant"], e["category"], e["amount_cents"] / 100) for e in d["entries"]]
  lines = [line for line in text.strip().splitlines() if line.strip()]
  account = lines[0].split(":", 1)[1].strip()
  if path.endswith(".csv"):
    return account, [(d, m, c, float(a)) for d, m, c, a in (line.split(",") for line in lines[2:])]
  return account, [(d.strip(), m.strip(), c.strip(), float(a.split()[0]))
                   for d, m, c, a in (line.split("|") for line in lines[1:])]


def _tx_rows(ctx, where="1", *args):
  return sorted((r["account_id"], r["date"], r["merchant"], round(r["amount"], 2), r["category"]) for r in ctx.q(
      f"SELECT * FROM transactions WHERE {where}", *args))


def _import_expected(ctx):
  ids = {r["name"]: r["id"] for r in ctx.q("SELECT id, name FROM accounts")}
  present = [(r[0], r[1], r[2], r[3]) for r in _tx_rows(ctx)]
  added, skipped = [], 0
  for rel in ctx.files("imports"):
    account, rows = _parse_export(rel, ctx.read(rel))
    for date, merchant, category, amount in rows:
      key = (ids[account], date, merchant)
      if any(p[:3] == key and abs(p[3] - amount) < 0.005 for p in present):
        skipped += 1
      else:
        added.append((ids[account], date, merchant, round(amount, 2), category))
        present.append((ids[account], date, merchant, round(amount, 2)))
  last = ctx.scalar("SELECT MAX(id) FROM transactions")
  return {"last": last, "before": ctx.q("SELECT * FROM transactions ORDER BY id"), "added": sorted(added),
          "summary": f"added: {len(added)}\nskipped: {skipped}"}


def _import_check(ctx, e, a):
  text = ctx.read("reports/import_summary.txt")
  return (text is not None and text.strip() == e["summary"]
          and ctx.q("SELECT * FROM transactions WHERE id <= ? ORDER BY id", e["last"]) == e["before"]
          and _tx_rows(ctx, "id > ?", e["last"]) == e["added"]
          and ctx.scalar("SELECT COUNT(*) FROM flags") == 0)


TASKS = [
    B.Task(DOMAIN, "march_net_household",
           "What is the net sum of all transactions of the account 'Household Checking' in March 2024 (income "
           "positive, purchases negative)? Round it to 2 decimals.", (MARCH,),
           lambda ctx: round(ctx.scalar("SELECT SUM(t.amount) FROM transactions t JOIN accounts a ON "
                                        "a.id = t.account_id WHERE a.name = 'Household Checking' AND "
                                        "t.date LIKE '2024-03-%'"), 2), answer="number",
           wrong=('t["amount"] for t', 'abs(t["amount"]) for t'),
           conditions=(("account", ('account_id=acct["id"], month="2024-03", ', 'month="2024-03", ')),
                       ("March", ('account_id=acct["id"], month="2024-03", ', 'account_id=acct["id"], ')))),
    B.Task(DOMAIN, "flag_duplicates",
           "Reconcile the June 2024 transactions of the credit-type accounts. One of them is a duplicate when an "
           "earlier transaction (smaller id) of the same account has the same date, merchant and amount. Flag "
           "every such duplicate with the reason 'duplicate' (flag_transaction) and flag nothing else; the first "
           "occurrence is not a duplicate.", (DUPS,), _dups,
           check=lambda ctx, e, a: sorted((r["transaction_id"], r["reason"]) for r in ctx.q(
               "SELECT * FROM flags")) == [(i, "duplicate") for i in e],
           wrong=DUPS_WRONG,
           conditions=(("June", (', month="2024-06", offset=offset', ', offset=offset')),
                       ("credit", ('tools["list_accounts"](type="credit")', 'tools["list_accounts"]()')))),
    B.Task(DOMAIN, "unmatched_receipts",
           "The receipts in receipts/ were scanned by different apps. Which of them have no transaction with the "
           "same merchant, the same date and the same amount (purchases are stored as negative amounts)? Submit "
           "the list of their paths, e.g. 'receipts/123456.txt'.", (RECEIPTS,), _receipts, answer="set",
           wrong=('abs(h["amount"] + total)', 'abs(h["amount"] - total)'), tags=("explore",),
           conditions=(("same date", (', date_from=date, date_to=date', '')),)),
    B.Task(DOMAIN, "top_category_q2",
           "Using the banks' monthly statements (monthly_statement) of all accounts for April, May and June 2024, "
           "which category has the largest spending in that quarter? Submit a list [category, spending], the "
           "spending as a positive number rounded to 2 decimals (on a tie, the alphabetically first category).",
           (Q2,), _q2, answer="list",
           wrong=('for month in ("2024-04", "2024-05", "2024-06"):', 'for month in ("2024-04", "2024-05"):'),
           tags=("errors",)),
    B.Task(DOMAIN, "import_bank_exports",
           "The files in imports/ are bank exports, each for one account (named in the file). For every exported "
           "transaction: if that account already has a transaction with the same date, merchant and amount, "
           "skip it; otherwise record it with add_transaction. Then write reports/import_summary.txt with "
           "exactly two lines, 'added: <n>' and 'skipped: <m>'. Change nothing else.", (IMPORT,),
           _import_expected, check=_import_check, wrong=('["amount_cents"] / 100', '["amount_cents"]'),
           tags=("explore", "writeback")),
]
