"""Library domain: books, members, loans and notices; donation lists are workspace files."""

from __future__ import annotations

import datetime
import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

GENRES = ("fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel")
CATALOG_W = (30, 10, 10, 10, 10, 10, 10, 10)   # most titles are fiction ...
LOAN_W = (1, 6, 1, 1, 1, 1, 1, 1)              # ... but mysteries are borrowed most
ADJ = ("Silent Hidden Broken Golden Last Little Secret Distant Northern Burning Quiet Wandering Lost Bright "
       "Frozen Restless Crimson Hollow Endless Gentle Iron Painted Salt Second Seventh Sleeping Stolen Summer "
       "Tangled Winter").split()
NOUN = ("Garden River Harbor Letter Mountain Orchard Lantern Bridge Island Kingdom Mirror Station Forest "
        "Voyage Compass Archive Signal Cathedral Meadow Theory Engine Atlas Chronicle Promise Tower Valley "
        "Shadow Crown Season Window").split()
AUTHOR = "Agatha Morland"

SCHEMA = """
CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT, author TEXT, genre TEXT, year INTEGER, copies INTEGER,
                    isbn TEXT);
CREATE TABLE members (id INTEGER PRIMARY KEY, name TEXT, email TEXT, joined TEXT);
CREATE TABLE loans (id INTEGER PRIMARY KEY, book_id INTEGER, member_id INTEGER, loan_date TEXT, due_date TEXT,
                    returned_date TEXT);
CREATE TABLE notices (id INTEGER PRIMARY KEY AUTOINCREMENT, member_id INTEGER, message TEXT);
"""


def _titles(rng: random.Random):
  pairs = [f"The {a} {n}" for a in ADJ for n in NOUN]
  pairs += [f"{t} of {c}" for t in pairs for c in B.CITIES]
  rng.shuffle(pairs)
  return pairs


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  titles = _titles(rng)
  authors = B.unique_names(rng, 90 * f)
  books = []
  for i in range(320 * f):
    g = rng.choices(GENRES, CATALOG_W)[0]
    books.append({"id": i + 1, "title": titles[i], "author": rng.choice(authors), "genre": g,
                  "year": rng.randint(1890, 2023), "copies": rng.randint(1, 6), "isbn": f"978-{rng.randint(10**8, 10**9 - 1)}"})
  for j, (year, copies) in enumerate(((1926, 3), (1934, 1), (1947, 2), (1952, 4), (1971, 2))):
    i = len(books)
    books.append({"id": i + 1, "title": titles[i], "author": AUTHOR, "genre": "mystery", "year": year,
                  "copies": copies, "isbn": f"978-{rng.randint(10**8, 10**9 - 1)}"})
  B.insert_rows(ctx, "books", books)
  names = B.unique_names(rng, 250 * f)
  B.insert_rows(ctx, "members", [{"id": i + 1, "name": nm, "email": B.email_of(nm, i + 1), "joined":
                                  B.rand_date(rng, "2018-01-01", "2023-12-31")} for i, nm in enumerate(names)])
  weights = [LOAN_W[GENRES.index(b["genre"])] for b in books]
  loans = []
  for i in range(1190 * f):
    d = datetime.date.fromisoformat(B.rand_date(rng, "2024-01-01", "2024-06-28"))
    due = d + datetime.timedelta(days=21)
    returned = None
    if rng.random() < (0.8 if due.isoformat() < B.TODAY else 0.3):
      returned = min(due + datetime.timedelta(days=rng.randint(-15, 5)), datetime.date(2024, 6, 30)).isoformat()
      returned = max(returned, d.isoformat())
    loans.append({"id": i + 1, "book_id": rng.choices(books, weights)[0]["id"], "member_id": rng.randint(1, 250 * f),
                  "loan_date": d.isoformat(), "due_date": due.isoformat(), "returned_date": returned})
  B.insert_rows(ctx, "loans", loans)
  B.write_docs(ctx, rng, "library", ["lending_rules", "opening_hours", "donations", "events", "staff"])
  in_catalog = rng.sample([b["title"] for b in books], 2 * B.n_data_files(f))
  new = titles[len(books):len(books) + 2 * B.n_data_files(f)]
  pool = in_catalog + new
  rng.shuffle(pool)
  for j in range(B.n_data_files(f)):
    lst = pool[2 * j:2 * j + 2]
    donor = rng.choice(names)
    ctx.write(f"donations/donation_{j + 1:03d}.txt", f"Donor: {donor}\nReceived: {B.rand_date(rng)}\nTitles:\n" +
              "".join(f"- {t}\n" for t in lst) + f"\n{B.sentence(rng, 8)}\n")


def _list_books(ctx, genre):
  if genre not in GENRES:
    raise ToolError(f"unknown genre {genre!r}; use one of {list(GENRES)}")
  return ctx.q("SELECT id, title, author, year, copies FROM books WHERE genre = ? ORDER BY id", genre)


def _search_books(ctx, author):
  return ctx.q("SELECT id, title, author, genre, year, copies FROM books WHERE author LIKE ? ORDER BY id",
               f"%{author}%")


def _get_book(ctx, book_id):
  r = ctx.q1("SELECT * FROM books WHERE id = ?", book_id)
  if r is None:
    raise ToolError(f"no book with id {book_id}")
  return r


def _list_loans(ctx, status):
  if status not in ("open", "returned"):
    raise ToolError("status must be 'open' (not yet returned) or 'returned'")
  cond = "returned_date IS NULL" if status == "open" else "returned_date IS NOT NULL"
  return ctx.q(f"SELECT * FROM loans WHERE {cond} ORDER BY id")


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


TOOLS = (
    B.tool("list_books", "List the books of a genre: [{id, title, author, year, copies}].", _list_books,
           required=("genre",), genre=B.p_str("genre", GENRES)),
    B.tool("search_books", "Find books whose author contains the given text: [{id, title, author, genre, year, "
           "copies}].", _search_books, required=("author",), author=B.p_str("author name or part of it")),
    B.tool("get_book", "Get one book with all fields.", _get_book, required=("book_id",), book_id=B.p_int("book id")),
    B.tool("list_loans", "List loans by status: [{id, book_id, member_id, loan_date, due_date, returned_date}].",
           _list_loans, required=("status",), status=B.p_str("open or returned", ("open", "returned"))),
    B.tool("get_member", "Get one member.", _get_member, required=("member_id",), member_id=B.p_int("member id")),
    B.tool("send_notice", "Send a notice message to a member.", _send_notice, required=("member_id", "message"),
           member_id=B.p_int("member id"), message=B.p_str("the notice text")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("library", "A public library's catalogue, members and loans.", SCHEMA, generate, TOOLS)

NOTICES = """\
from collections import Counter
overdue = Counter(l["member_id"] for l in tools["list_loans"](status="open") if l["due_date"] < "2024-07-01")
for member_id, k in sorted(overdue.items()):
    tools["send_notice"](member_id=member_id, message=f"You have {k} overdue books. Please return them.")
print(len(overdue), "notices")
tools["submit_answer"]()
"""

GENRE = """\
from collections import Counter
genres = ["fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel"]
genre_of = {}
for g in genres:
    for b in tools["list_books"](genre=g):
        genre_of[b["id"]] = g
counts = Counter()
for status in ("open", "returned"):
    for loan in tools["list_loans"](status=status):
        counts[genre_of[loan["book_id"]]] += 1
best = min(counts, key=lambda g: (-counts[g], g))
print(counts.most_common(3))
tools["submit_answer"](answer=best)
"""

GENRE_WRONG = """\
genres = ["fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel"]
sizes = {g: len(tools["list_books"](genre=g)) for g in genres}
tools["submit_answer"](answer=max(genres, key=lambda g: sizes[g]))
"""

MORLAND = """\
books = tools["search_books"](author="Agatha Morland")
n = sum(b["copies"] for b in books if b["year"] < 1950)
print(n)
tools["submit_answer"](answer=n)
"""

DONATIONS = """\
genres = ["fiction", "mystery", "science", "history", "fantasy", "biography", "poetry", "travel"]
catalog = {b["title"] for g in genres for b in tools["list_books"](genre=g)}
n = 0
for path in tools["list_files"](directory="donations"):
    for line in tools["read_file"](path=path)["content"].splitlines():
        if line.startswith("- ") and line[2:].strip() in catalog:
            n += 1
print(n)
tools["submit_answer"](answer=n)
"""


def _overdue(ctx):
  return {r["member_id"]: r["k"] for r in ctx.q(
      "SELECT member_id, COUNT(*) AS k FROM loans WHERE returned_date IS NULL AND due_date < ? GROUP BY member_id",
      B.TODAY)}


def _notices_check(ctx, e, a):
  rows = ctx.q("SELECT member_id, message FROM notices")
  got = {r["member_id"]: r["message"] for r in rows}
  return (len(rows) == len(got) and got.keys() == e.keys()
          and all(f"{e[m]} overdue" in got[m] for m in e))


def _donations(ctx):
  catalog = {r["title"] for r in ctx.q("SELECT title FROM books")}
  return sum(1 for rel in ctx.files("donations") for line in ctx.read(rel).splitlines()
             if line.startswith("- ") and line[2:].strip() in catalog)


TASKS = [
    B.Task(DOMAIN, "overdue_notices",
           "Send exactly one notice to every member who has at least one unreturned loan whose due date is "
           "before today. The message must state how many overdue books they have, in the form '<n> overdue'. "
           "Send no other notices.", (NOTICES,), _overdue, check=_notices_check,
           wrong=(' if l["due_date"] < "2024-07-01"', "")),
    B.Task(DOMAIN, "popular_genre",
           "Which genre has the most loans in total (returned or not)? Submit the genre (on a tie, the "
           "alphabetically first).", (GENRE,),
           lambda ctx: ctx.scalar("SELECT b.genre FROM loans l JOIN books b ON b.id = l.book_id GROUP BY b.genre "
                                  "ORDER BY COUNT(*) DESC, b.genre LIMIT 1"), answer="text", wrong=GENRE_WRONG),
    B.Task(DOMAIN, "morland_copies",
           "How many copies in total does the library hold of books by Agatha Morland published before 1950?",
           (MORLAND,), lambda ctx: ctx.scalar("SELECT SUM(copies) FROM books WHERE author = ? AND year < 1950",
                                              AUTHOR), answer="int", wrong=('b["copies"] for', "1 for")),
    B.Task(DOMAIN, "donations_in_catalog",
           "The files in donations/ list donated titles (lines starting with '- '). How many of the donated "
           "titles are already in the catalogue (same title)?", (DONATIONS,), _donations, answer="int",
           wrong=(' and line[2:].strip() in catalog', "")),
]
