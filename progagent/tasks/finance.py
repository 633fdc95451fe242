"""Finance domain: bank accounts and transactions; scanned receipts are workspace files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

ACCOUNTS = (("Household Checking", "checking"), ("Savings", "savings"), ("Travel Card", "credit"),
            ("Business Checking", "checking"), ("Joint Savings", "savings"), ("Credit Card", "credit"))
MERCHANTS = {"groceries": ("FreshMart", "Green Grocer", "Daily Basket"), "dining": ("Cafe Lume", "Noodle Bar"),
             "travel": ("SkyJet", "RailOne", "Harbor Hotel"), "utilities": ("City Power", "AquaNet"),
             "entertainment": ("CineMax", "StreamBox"), "health": ("Pharma Plus", "Clinic Care"),
             "income": ("Employer Payroll",)}

SCHEMA = """
CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT, type TEXT);
CREATE TABLE transactions (id INTEGER PRIMARY KEY, account_id INTEGER, date TEXT, amount REAL, category TEXT,
                           merchant TEXT, memo TEXT);
CREATE TABLE flags (id INTEGER PRIMARY KEY AUTOINCREMENT, transaction_id INTEGER, reason TEXT);
CREATE INDEX tx_account ON transactions(account_id);
"""


def _amount(rng, cat, month):
  if cat == "income":
    return round(rng.uniform(1500, 3500), 2)
  if cat == "travel":   # travel dominates April-June ...
    return -round(rng.uniform(200, 1200) if month >= 4 else rng.uniform(5, 40), 2)
  if cat == "health" and month <= 3:   # ... and large health bills dominate the half year
    return -round(rng.uniform(800, 3000), 2)
  return -round(rng.uniform(3, 160), 2)


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  B.insert_rows(ctx, "accounts", [{"id": i + 1, "name": n, "type": t} for i, (n, t) in enumerate(ACCOUNTS)])
  cats = list(MERCHANTS)
  txs = []
  for i in range(850 * f):
    date = B.rand_date(rng)
    month = int(date[5:7])
    cat = rng.choices(cats, (30, 15, 8 if month >= 4 else 2, 8, 8, 8 if month <= 3 else 4, 4))[0]
    txs.append({"id": i + 1, "account_id": rng.randint(1, len(ACCOUNTS)), "date": date,
                "amount": _amount(rng, cat, month), "category": cat, "merchant": rng.choice(MERCHANTS[cat]),
                "memo": B.sentence(rng, 6)})
  for k in range(3 * f):   # duplicated postings (same account, date, merchant, amount; a later id)
    src = rng.choice(txs[:850 * f])
    txs.append(dict(src, id=len(txs) + 1, memo="posted twice"))
  B.insert_rows(ctx, "transactions", txs)
  B.write_docs(ctx, rng, "finance", ["budget", "categories", "reconciliation", "cards", "taxes"])
  purchases = [t for t in txs if t["amount"] < 0]
  for j in range(B.n_data_files(f)):
    t = rng.choice(purchases)
    if j % 4 == 1:   # a receipt with no matching transaction
      total, date, merchant = round(rng.uniform(3, 160), 2), t["date"], t["merchant"]
    else:
      total, date, merchant = -t["amount"], t["date"], t["merchant"]
    ctx.write(f"receipts/receipt_{j + 1:03d}.txt", f"Merchant: {merchant}\nDate: {date}\nTotal: {total:.2f}\n")


def _acct(ctx, account_id):
  if ctx.q1("SELECT id FROM accounts WHERE id = ?", account_id) is None:
    raise ToolError(f"no account with id {account_id}; list_accounts gives the ids")


def _list_tx(ctx, account_id, month=None):
  _acct(ctx, account_id)
  if month is None:
    return ctx.q("SELECT id, date, amount, category, merchant FROM transactions WHERE account_id = ? ORDER BY id",
                 account_id)
  if len(month) != 7 or month[4] != "-":
    raise ToolError(f"month must look like '2024-03', got {month!r}")
  return ctx.q("SELECT id, date, amount, category, merchant FROM transactions WHERE account_id = ? AND "
               "substr(date, 1, 7) = ? ORDER BY id", account_id, month)


def _get_tx(ctx, transaction_id):
  r = ctx.q1("SELECT * FROM transactions WHERE id = ?", transaction_id)
  if r is None:
    raise ToolError(f"no transaction with id {transaction_id}")
  return r


def _flag(ctx, transaction_id, reason):
  _get_tx(ctx, transaction_id)
  ctx.exec("INSERT INTO flags (transaction_id, reason) VALUES (?, ?)", transaction_id, reason)
  return {"transaction_id": transaction_id, "flagged": True}


TOOLS = (
    B.tool("list_accounts", "List the accounts: [{id, name, type}].",
           lambda ctx: ctx.q("SELECT * FROM accounts ORDER BY id")),
    B.tool("list_transactions", "List an account's transactions, optionally of one month: [{id, date, amount, "
           "category, merchant}] (purchases are negative amounts).", _list_tx, required=("account_id",),
           account_id=B.p_int("account id"), month=B.p_str("'YYYY-MM'; omit for all months")),
    B.tool("get_transaction", "Get one transaction with its memo.", _get_tx, required=("transaction_id",),
           transaction_id=B.p_int("transaction id")),
    B.tool("search_transactions", "Find transactions by exact merchant name across all accounts: [{id, "
           "account_id, date, amount, category}].",
           lambda ctx, merchant: ctx.q("SELECT id, account_id, date, amount, category FROM transactions "
                                       "WHERE merchant = ? ORDER BY id", merchant),
           required=("merchant",), merchant=B.p_str("merchant name")),
    B.tool("flag_transaction", "Flag a transaction for review with a reason.", _flag,
           required=("transaction_id", "reason"), transaction_id=B.p_int("transaction id"),
           reason=B.p_str("why it is flagged")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("finance", "A household's bank accounts and transactions.", SCHEMA, generate, TOOLS)

MARCH = """\
acct = next(a for a in tools["list_accounts"]() if a["name"] == "Household Checking")
net = round(sum(t["amount"] for t in tools["list_transactions"](account_id=acct["id"], month="2024-03")), 2)
print(net)
tools["submit_answer"](answer=net)
"""

DUPS = """\
seen = set()
for a in tools["list_accounts"]():
    for t in tools["list_transactions"](account_id=a["id"]):
        key = (t["date"], t["merchant"], t["amount"])
        if key in seen:
            tools["flag_transaction"](transaction_id=t["id"], reason="duplicate")
        seen.add(key)
    seen = set()
tools["submit_answer"]()
"""

DUPS_WRONG = """\
from collections import defaultdict
for a in tools["list_accounts"]():
    groups = defaultdict(list)
    for t in tools["list_transactions"](account_id=a["id"]):
        groups[(t["date"], t["merchant"], t["amount"])].append(t["id"])
    for ids in groups.values():
        if len(ids) > 1:
            for i in ids:
                tools["flag_transaction"](transaction_id=i, reason="duplicate")
tools["submit_answer"]()
"""

RECEIPTS = """\
out = []
for path in tools["list_files"](directory="receipts"):
    fields = dict(l.split(": ", 1) for l in tools["read_file"](path=path)["content"].strip().splitlines())
    total = float(fields["Total"])
    hits = tools["search_transactions"](merchant=fields["Merchant"])
    if not any(h["date"] == fields["Date"] and abs(h["amount"] + total) < 0.005 for h in hits):
        out.append(path)
print(out)
tools["submit_answer"](answer=out)
"""

Q2 = """\
from collections import Counter
spend = Counter()
for a in tools["list_accounts"]():
    for t in tools["list_transactions"](account_id=a["id"]):
        if "2024-04-01" <= t["date"] <= "2024-06-30" and t["amount"] < 0:
            spend[t["category"]] += -t["amount"]
best = min(spend, key=lambda c: (-round(spend[c], 2), c))
print(best, round(spend[best], 2))
tools["submit_answer"](answer=best)
"""


def _dups(ctx):
  return sorted(r["id"] for r in ctx.q(
      "SELECT t.id FROM transactions t WHERE EXISTS (SELECT 1 FROM transactions u WHERE u.id < t.id AND "
      "u.account_id = t.account_id AND u.date = t.date AND u.merchant = t.merchant AND u.amount = t.amount)"))


def _receipts(ctx):
  out = []
  for rel in ctx.files("receipts"):
    fields = dict(line.split(": ", 1) for line in ctx.read(rel).strip().splitlines())
    if ctx.scalar("SELECT COUNT(*) FROM transactions WHERE merchant = ? AND date = ? AND ABS(amount + ?) < 0.005",
                  fields["Merchant"], fields["Date"], float(fields["Total"])) == 0:
      out.append(rel)
  return out


TASKS = [
    B.Task(DOMAIN, "march_net_household",
           "What is the net sum of all transactions of the account 'Household Checking' in March 2024 (income "
           "positive, purchases negative)? Round it to 2 decimals.", (MARCH,),
           lambda ctx: round(ctx.scalar("SELECT SUM(amount) FROM transactions WHERE account_id = 1 AND "
                                        "date LIKE '2024-03-%'"), 2), answer="number",
           wrong=('t["amount"] for t', 'abs(t["amount"]) for t')),
    B.Task(DOMAIN, "flag_duplicates",
           "A transaction is a duplicate when an earlier transaction (smaller id) of the same account has the "
           "same date, merchant and amount. Flag every duplicate with the reason 'duplicate' (flag_transaction) "
           "and flag nothing else; the first occurrence is not a duplicate.", (DUPS,), _dups,
           check=lambda ctx, e, a: sorted(
               (r["transaction_id"], r["reason"]) for r in ctx.q("SELECT * FROM flags")) == [(i, "duplicate") for i in e],
           wrong=DUPS_WRONG),
    B.Task(DOMAIN, "unmatched_receipts",
           "Which receipt files in receipts/ have no transaction with the same merchant, the same date and the "
           "same amount (receipts show positive totals; purchases are stored as negative amounts)? Submit the "
           "list of their paths, e.g. 'receipts/receipt_001.txt'.", (RECEIPTS,), _receipts, answer="set",
           wrong=('abs(h["amount"] + total)', 'abs(h["amount"] - total)')),
    B.Task(DOMAIN, "top_category_q2",
           "Across all accounts, which category has the largest spending (the sum of its negative amounts, as a "
           "positive number) from 2024-04-01 to 2024-06-30? Submit the category (on a tie, the alphabetically "
           "first).", (Q2,),
           lambda ctx: ctx.scalar("SELECT category FROM transactions WHERE amount < 0 AND date BETWEEN "
                                  "'2024-04-01' AND '2024-06-30' GROUP BY category "
                                  "ORDER BY -ROUND(SUM(-amount), 2), category LIMIT 1"),
           answer="text", wrong=('"2024-04-01" <= t["date"] <= "2024-06-30" and ', "")),
]
