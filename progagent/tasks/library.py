"""Library domain: books, members, loans and notices; donation lists and book-drop slips are workspace files."""

from __future__ import annotations

import datetime
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

GENRES = ("fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel")
CATALOG_W = (30, 10, 10, 10, 10, 10, 10, 10)   # most titles are fiction (loans follow seeded weights)
ADJ = ("Silent Hidden Broken Golden Last Little Secret Distant Northern Burning Quiet Wandering Lost Bright "
       "Frozen Restless Crimson Hollow Endless Gentle Iron Painted Salt Second Seventh Sleeping Stolen Summer "
       "Tangled Winter").split()
NOUN = ("Garden River Harbor Letter Mountain Orchard Lantern Bridge Island Kingdom Mirror Station Forest "
        "Voyage Compass Archive Signal Cathedral Meadow Theory Engine Atlas Chronicle Promise Tower Valley "
        "Shadow Crown Season Window").split()
AUTHOR = "Agatha Morland"
DISTRACTOR = "Agnes Morland"   # a namesake: a search for 'Morland' alone finds her books too
AUTHOR_LIKE = "Agatha Morlander"   # another author: a search for 'Agatha Morland' finds her books too

SCHEMA = """
CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT, author TEXT, genre TEXT, year INTEGER, copies INTEGER,
                    isbn TEXT);
CREATE TABLE members (id INTEGER PRIMARY KEY, name TEXT, email TEXT, joined TEXT);
CREATE TABLE loans (id INTEGER PRIMARY KEY, book_id INTEGER, member_id INTEGER, loan_date TEXT, due_date TEXT,
                    returned_date TEXT);
CREATE TABLE notices (id INTEGER PRIMARY KEY AUTOINCREMENT, member_id INTEGER, message TEXT);
CREATE INDEX loans_book ON loans(book_id);
"""


def _titles(rng: random.Random):
  pairs = [f"The {a} {n}" for a in ADJ for n in NOUN]
  pairs += [f"{t} of {c}" for t in pairs for c in G.CITIES]
  rng.shuffle(pairs)
  return pairs


def _isbn(rng):
  return f"978-{rng.randint(10**8, 10**9 - 1)}"


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  titles = _titles(rng)
  authors = G.unique_names(rng, 90 * f, exclude=(AUTHOR, DISTRACTOR))
  books = []
  for i in range(320 * f):
    books.append({"title": titles[i], "author": rng.choice(authors), "genre": rng.choices(GENRES, CATALOG_W)[0],
                  "year": rng.randint(1890, 2023), "copies": rng.randint(1, 6), "isbn": _isbn(rng)})
  # The planted author: how many books, their years and copies are all drawn here (some on either side of 1950,
  # sometimes one published in 1950 itself), plus a namesake's older books.
  k = rng.randint(4, 8)
  years = [rng.randint(1900, 1949) for _ in range(rng.randint(2, k - 1))]
  years += [rng.choice((1950, rng.randint(1951, 1999))) for _ in range(k - len(years))]
  t = 320 * f
  for y in years:
    books.append({"title": titles[t], "author": AUTHOR, "genre": "mystery", "year": y,
                  "copies": rng.randint(2, 25), "isbn": _isbn(rng)})
    t += 1
  for _ in range(rng.randint(1, 3)):
    books.append({"title": titles[t], "author": DISTRACTOR, "genre": "mystery", "year": rng.randint(1900, 1949),
                  "copies": rng.randint(2, 25), "isbn": _isbn(rng)})
    t += 1
  rng.shuffle(books)
  for i, b in enumerate(books):
    b["id"] = i + 1
  n_mem = 250 * f
  names = G.unique_names(rng, n_mem)
  G.insert_rows(ctx, "members", [{"id": i + 1, "name": nm, "email": G.email_of(nm, i + 1), "joined":
                                  G.rand_date(rng, "2018-01-01", "2023-12-31")} for i, nm in enumerate(names)])
  # Which genre is borrowed most differs per seed; fiction titles (the largest shelf) are borrowed least.
  loan_w = [1] + [rng.randint(2, 12) for _ in GENRES[1:]]
  loan_w[rng.randint(1, len(GENRES) - 1)] = rng.randint(8, 14)
  weights = [loan_w[GENRES.index(b["genre"])] for b in books]
  loans = []
  for i in range(1190 * f):
    d = datetime.date.fromisoformat(G.rand_date(rng, "2024-01-01", "2024-06-28"))
    due = d + datetime.timedelta(days=21)
    returned = None
    if rng.random() < (0.96 if due.isoformat() < B.TODAY else 0.3):
      returned = min(due + datetime.timedelta(days=rng.randint(-15, 5)), datetime.date(2024, 6, 30)).isoformat()
      returned = max(returned, d.isoformat())
    loans.append({"id": i + 1, "book_id": rng.choices(books, weights)[0]["id"], "member_id": rng.randint(1, n_mem),
                  "loan_date": d.isoformat(), "due_date": due.isoformat(), "returned_date": returned})
  G.insert_rows(ctx, "loans", loans)
  G.write_docs(ctx, rng, "library", ["lending_rules", "opening_hours", "donations", "events", "staff"])
  # Data files: half donation lists (three formats), half book-drop slips.
  n_files = B.n_data_files(f)
  n_don = n_files // 2
  sizes = [rng.randint(2, 5) for _ in range(n_don)]
  in_catalog = rng.sample([b["title"] for b in books], sum(sizes))
  new = titles[t:t + sum(sizes)]
  pool = [x for pair in zip(in_catalog, new) for x in pair]
  rng.shuffle(pool)
  pos = 0
  fmts = ["json", "csv"] + [rng.choice(("txt", "csv", "json")) for _ in range(n_don - 2)]
  rng.shuffle(fmts)
  known = set(in_catalog)
  start = sum(sizes[:fmts.index("json")])   # the JSON list always holds a catalogue title
  span = range(start, start + sizes[fmts.index("json")])
  if not any(pool[i] in known for i in span):
    k = next(i for i in range(sum(sizes), len(pool)) if pool[i] in known)
    pool[span[0]], pool[k] = pool[k], pool[span[0]]
  for j, size in enumerate(sizes):
    lst = pool[pos:pos + size]
    pos += size
    donor = rng.choice(names)
    received = G.rand_date(rng)
    fmt = fmts[j]
    if fmt == "txt":
      text = (f"Donor: {donor}\nReceived: {received}\nTitles:\n" + "".join(f"- {x}\n" for x in lst) +
              f"\n{G.sentence(rng, 8)}\n")
    elif fmt == "csv":
      text = "title,condition,donor\n" + "".join(f"\"{x}\",{rng.choice(('good', 'fair', 'worn'))},{donor}\n"
                                                 for x in lst)
    else:
      text = json.dumps({"donor": donor, "received": received,
                         "books": [{"title": x, "condition": rng.choice(("good", "fair", "worn"))} for x in lst]},
                        indent=1) + "\n"
    ctx.write(f"donations/donation_{j + 1:03d}.{fmt}", text)
  late = [ln["id"] for ln in loans if ln["returned_date"] is None and ln["due_date"] < B.TODAY]
  on_time = [ln["id"] for ln in loans if ln["returned_date"] is None and ln["due_date"] >= B.TODAY]
  k_late = rng.randint(1, n_files - n_don)
  picks = rng.sample(late, k_late) + rng.sample(on_time, rng.randint(1, 2 * (n_files - n_don)))
  rng.shuffle(picks)
  per = -(-len(picks) // (n_files - n_don))
  for j in range(n_files - n_don):
    chunk = picks[j * per:(j + 1) * per]
    ctx.write(f"returns/slip_{j + 1:03d}.txt", "Book drop slip\n" + "".join(f"Loan: {x}\n" for x in chunk) +
              f"Emptied by: {rng.choice(names)}\n")
  # The distractor of morland_copies without the exact author name (base.Task.conditions; drawn last, so the
  # rest of the state is what it would be without it): books before 1950 by an author whose name contains hers.
  t += sum(sizes)
  for _ in range(rng.randint(1, 2)):
    books.append({"id": len(books) + 1, "title": titles[t], "author": AUTHOR_LIKE, "genre": "mystery",
                  "year": rng.randint(1900, 1949), "copies": rng.randint(2, 25), "isbn": _isbn(rng)})
    t += 1
  G.insert_rows(ctx, "books", [{"id": b["id"], **{c: b[c] for c in ("title", "author", "genre", "year", "copies",
                                                                       "isbn")}} for b in books])


def _get_member(ctx, member_id):
  r = ctx.q1("SELECT * FROM members WHERE id = ?", member_id)
  if r is None:
    raise ToolError(f"no member with id {member_id}")
  return r


def _send_notice(ctx, member_id, message):
  _get_member(ctx, member_id)
  if not message.strip():
    raise ToolError("the message is empty")
  ctx.exec("INSERT INTO notices (member_id, message) VALUES (?, ?)", member_id, message)
  return {"member_id": member_id, "sent": True}


def _record_return(ctx, loan_id, date):
  r = ctx.q1("SELECT * FROM loans WHERE id = ?", loan_id)
  if r is None:
    raise ToolError(f"no loan with id {loan_id}")
  if r["returned_date"] is not None:
    raise ToolError(f"loan {loan_id} was already returned on {r['returned_date']}")
  try:
    datetime.date.fromisoformat(date)
  except ValueError:
    raise ToolError(f"date must be YYYY-MM-DD, got {date!r}") from None
  ctx.exec("UPDATE loans SET returned_date = ? WHERE id = ?", date, loan_id)
  return {"loan_id": loan_id, "member_id": r["member_id"], "due_date": r["due_date"], "returned_date": date}


_LOAN_COLS = ("l.id AS id, l.book_id AS book_id, l.member_id AS member_id, l.loan_date AS loan_date, "
              "l.due_date AS due_date, l.returned_date AS returned_date")

TOOLS = (
    B.list_tool("list_books", "List catalogue books {id, title, author, genre, year, copies}, optionally filtered.",
                table="books", columns="id, title, author, genre, year, copies", filters=[
                    B.Filter("genre", "genre = ?", B.p_str("genre", GENRES)),
                    B.Filter("author", "author LIKE ?", B.p_str("text the author's name contains"), like=True),
                    B.Filter("title", "title = ?", B.p_str("exact title")),
                    B.Filter("min_year", "year >= ?", B.p_int("earliest publication year")),
                    B.Filter("max_year", "year <= ?", B.p_int("latest publication year"))]),
    B.list_tool("list_loans", "List loans {id, book_id, member_id, loan_date, due_date, returned_date}, "
                "optionally filtered.", table="loans l JOIN books b ON b.id = l.book_id", columns=_LOAN_COLS,
                order_by="l.id", filters=[
                    B.Filter("status", "(CASE WHEN l.returned_date IS NULL THEN 'open' ELSE 'returned' END) = ?",
                             B.p_str("open (not yet returned) or returned", ("open", "returned"))),
                    B.Filter("member_id", "l.member_id = ?", B.p_int("member id")),
                    B.Filter("book_id", "l.book_id = ?", B.p_int("book id")),
                    B.Filter("genre", "b.genre = ?", B.p_str("genre of the borrowed book", GENRES)),
                    B.Filter("due_before", "l.due_date < ?", B.p_str("only loans due before this date "
                                                                     "(YYYY-MM-DD)"))]),
    B.tool("get_member", "Get one member.", _get_member, required=("member_id",), member_id=B.p_int("member id")),
    B.tool("send_notice", "Send a notice message to a member.", _send_notice, required=("member_id", "message"),
           member_id=B.p_int("member id"), message=B.p_str("the notice text")),
    B.tool("record_return", "Mark an open loan as returned on a date; returns {loan_id, member_id, due_date, "
           "returned_date}.", _record_return, required=("loan_id", "date"), loan_id=B.p_int("loan id"),
           date=B.p_str("return date, YYYY-MM-DD")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("library", "A public library's catalogue, members and loans.", SCHEMA, generate, TOOLS)

NOTICES = """\
from collections import Counter
overdue = Counter()
offset = 0
while offset is not None:
    page = tools["list_loans"](status="open", due_before="2024-07-01", limit=200, offset=offset)
    overdue.update(l["member_id"] for l in page["items"])
    offset = page["next_offset"]
for member_id, k in sorted(overdue.items()):
    tools["send_notice"](member_id=member_id, message=f"You have {k} overdue books. Please return them.")
print(len(overdue), "notices")
tools["submit_answer"]()
"""

GENRE = """\
genres = ["fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel"]
counts = {g: tools["list_loans"](genre=g, limit=1)["total"] for g in genres}
best = min(genres, key=lambda g: (-counts[g], g))
print(counts)
tools["submit_answer"](answer=[best, counts[best]])
"""

GENRE_WRONG = """\
genres = ["fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel"]
sizes = {g: tools["list_books"](genre=g, limit=1)["total"] for g in genres}
best = max(genres, key=lambda g: sizes[g])
tools["submit_answer"](answer=[best, tools["list_loans"](genre=best, limit=1)["total"]])
"""

MORLAND = """\
books = tools["list_books"](author="Agatha Morland", max_year=1949, limit=200)["items"]
n = sum(b["copies"] for b in books if b["author"] == "Agatha Morland")
print(len(books), n)
tools["submit_answer"](answer=n)
"""

DONATIONS = """\
import csv, io, json
titles = []
for path in tools["list_files"](directory="donations"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        titles += [b["title"] for b in json.loads(text)["books"]]
    elif path.endswith(".csv"):
        titles += [row["title"] for row in csv.DictReader(io.StringIO(text))]
    else:
        titles += [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]
found = [t for t in titles if tools["list_books"](title=t, limit=1)["total"] > 0]
print(len(titles), len(found))
tools["submit_answer"](answer=sorted(set(found)))
"""

RETURNS = """\
import re
rows = []
for path in tools["list_files"](directory="returns"):
    for loan_id in re.findall(r"Loan: (\\d+)", tools["read_file"](path=path)["content"]):
        r = tools["record_return"](loan_id=int(loan_id), date="2024-07-01")
        late = r["due_date"] < "2024-07-01"
        if late:
            tools["send_notice"](member_id=r["member_id"], message=f"Loan {r['loan_id']}: late return recorded.")
        rows.append((r["loan_id"], r["member_id"], "yes" if late else "no"))
rows.sort()
tools["write_file"](path="reports/returns_2024-07-01.csv",
                    content="loan_id,member_id,late\\n" + "".join(f"{a},{b},{c}\\n" for a, b, c in rows))
print(len(rows), "returns")
tools["submit_answer"]()
"""


def _overdue(ctx):
  return {r["member_id"]: r["k"] for r in ctx.q(
      "SELECT member_id, COUNT(*) AS k FROM loans WHERE returned_date IS NULL AND due_date < ? GROUP BY member_id",
      B.TODAY)}


def _notices_check(ctx, e, a):
  rows = ctx.q("SELECT member_id, message FROM notices")
  got = {r["member_id"]: r["message"] for r in rows}
  e = {int(k): v for k, v in e.items()}
  return (len(rows) == len(got) and got.keys() == e.keys()
          and all(f"{e[m]} overdue" in got[m] for m in e))


def _donated_titles(ctx):
  out = []
  for rel in ctx.files("donations"):
    text = ctx.read(rel)
    if rel.endswith((".json", ".csv")):
      out += [b["title"] for b in read_records(rel, text, key="books")]
    else:
      out += [ln[2:].strip() for ln in text.splitlines() if ln.startswith("- ")]
  return out


def _donations(ctx):
  catalog = {r["title"] for r in ctx.q("SELECT title FROM books")}
  return sorted({t for t in _donated_titles(ctx) if t in catalog})


def _returns_expected(ctx):
  import re
  ids = sorted(int(x) for rel in ctx.files("returns") for x in re.findall(r"Loan: (\d+)", ctx.read(rel)))
  loans = {r["id"]: r for r in ctx.q("SELECT * FROM loans")}
  rows = [(i, loans[i]["member_id"], "yes" if loans[i]["due_date"] < B.TODAY else "no") for i in ids]
  return {"loans": {i: r["returned_date"] for i, r in loans.items()}, "rows": rows}


def _returns_check(ctx, e, a):
  want = {int(k): v for k, v in e["loans"].items()}
  rows = [tuple(r) for r in e["rows"]]
  for i, _, _ in rows:
    want[i] = B.TODAY
  if {r["id"]: r["returned_date"] for r in ctx.q("SELECT id, returned_date FROM loans")} != want:
    return False
  notices = ctx.q("SELECT member_id, message FROM notices")
  if sorted(n["member_id"] for n in notices) != sorted(m for _, m, late in rows if late == "yes"):
    return False
  if not all("late" in n["message"].lower() for n in notices):
    return False
  text = ctx.read("reports/returns_2024-07-01.csv")
  if text is None:
    return False
  lines = [ln.strip() for ln in text.strip().splitlines()]
  return lines == ["loan_id,member_id,late"] + [f"{i},{m},{late}" for i, m, late in rows]


TASKS = [
    B.Task(DOMAIN, "overdue_notices",
           "Send exactly one notice to every member who has at least one unreturned loan whose due date is "
           "before today. The message must state how many overdue books they have, in the form '<n> overdue'. "
           "Send no other notices.", (NOTICES,), _overdue, check=_notices_check,
           wrong=('due_before="2024-07-01", ', ""),
           conditions=(("unreturned", ('status="open", ', '')),)),
    B.Task(DOMAIN, "popular_genre",
           "Which genre has the most loans in total (returned or not), and how many loans is that? Submit a "
           "list [genre, number of loans] (on a tie, the alphabetically first genre).", (GENRE,),
           lambda ctx: list(ctx.q1("SELECT b.genre AS g, COUNT(*) AS n FROM loans l JOIN books b ON b.id = "
                                   "l.book_id GROUP BY b.genre ORDER BY COUNT(*) DESC, b.genre LIMIT 1").values()),
           answer="list", wrong=GENRE_WRONG),
    B.Task(DOMAIN, "morland_copies",
           "How many copies in total does the library hold of books by Agatha Morland published before 1950?",
           (MORLAND,), lambda ctx: ctx.scalar("SELECT SUM(copies) FROM books WHERE author = ? AND year < 1950",
                                              AUTHOR), answer="int", wrong=('b["copies"] for', "1 for"),
           conditions=(("before 1950", (', max_year=1949', '')),
                       ("exact author", (' if b["author"] == "Agatha Morland"', '')))),
    B.Task(DOMAIN, "donations_in_catalog",
           "The files in donations/ list donated books. Which of the donated titles are already in the "
           "catalogue (exactly the same title)? Submit the list of those titles.", (DONATIONS,), _donations,
           answer="set", wrong=('if path.endswith(".json"):', 'if path.endswith(".jsonx"):'), tags=("explore",)),
    B.Task(DOMAIN, "process_returns",
           "The slips in returns/ list the loans (by loan id) found in the book drop today. Record each of "
           "those loans as returned today. For every one of them that was past its due date, send the member "
           "one notice saying it was a late return (the message must contain the word 'late'). Finally write "
           "reports/returns_2024-07-01.csv with the header line 'loan_id,member_id,late' and one line per "
           "returned loan, sorted by loan id, where late is 'yes' or 'no'.", (RETURNS,), _returns_expected,
           check=_returns_check, wrong=("if late:", "if False:"), tags=("writeback",)),
]
