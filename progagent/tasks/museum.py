"""Museum domain: artworks, artists, outgoing loans and provenance records; condition reports are workspace files."""

from __future__ import annotations

import csv
import datetime
import io
import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

GALLERIES = ("Renaissance", "Baroque", "Impressionism", "Modern", "Sculpture Hall", "Photography", "Storage")
MEDIUMS = ("oil", "watercolour", "ink", "bronze", "marble", "photograph")
NATIONALITIES = ("Portuguese", "Spanish", "French", "Dutch", "Italian", "German", "Flemish", "British")
BORROWERS = ("Prado Museum", "Rijksmuseum", "Louvre", "Uffizi Gallery", "Tate Britain", "Belvedere",
             "National Gallery of Art", "Gulbenkian Museum", "Kunsthaus Zurich", "Art Institute of Chicago")
DEALERS = ("Colnaghi", "Agnew's", "Knoedler", "Wildenstein", "Duveen Brothers", "Christie's", "Sotheby's")
ADJ = ("Silent Hidden Broken Golden Last Little Secret Distant Northern Burning Quiet Wandering Lost Bright "
       "Frozen Restless Crimson Hollow Endless Gentle Iron Painted Salt Second Seventh Sleeping Stolen Summer "
       "Tangled Winter").split()
NOUN = ("Garden River Harbor Letter Mountain Orchard Lantern Bridge Island Kingdom Mirror Station Forest "
        "Voyage Compass Archive Signal Cathedral Meadow Theory Engine Atlas Chronicle Promise Tower Valley "
        "Shadow Crown Season Window Portrait Still Life Dancer Shepherd Bather").split()

SCHEMA = """
CREATE TABLE artists (id INTEGER PRIMARY KEY, name TEXT, nationality TEXT, born INTEGER);
CREATE TABLE artworks (id INTEGER PRIMARY KEY, accession TEXT, title TEXT, artist_id INTEGER, year INTEGER,
                       medium TEXT, gallery TEXT, value_eur REAL, acquired TEXT);
CREATE TABLE loans (id INTEGER PRIMARY KEY, artwork_id INTEGER, borrower TEXT, start TEXT, end TEXT, status TEXT);
CREATE TABLE provenance (artwork_id INTEGER PRIMARY KEY, record TEXT, fails INTEGER);
CREATE INDEX artworks_artist ON artworks(artist_id);
CREATE INDEX loans_artwork ON loans(artwork_id);
"""


def _provenance(rng: random.Random, year: int, private: bool) -> str:
  owners = []
  y = year + rng.randint(1, 30)
  for _ in range(rng.randint(1, 3)):
    kind = rng.random()
    if kind < 0.4:
      owners.append(f"sold through {rng.choice(DEALERS)}, {min(y, 2020)}")
    elif kind < 0.7:
      owners.append(f"by descent in the artist's family until {min(y, 2020)}")
    else:
      owners.append(f"church of São {rng.choice(G.LAST)}, {rng.choice(G.CITIES)} ({min(y, 2020)})")
    y += rng.randint(5, 60)
  if private:
    name = f"{rng.choice(G.FIRST)} {rng.choice(G.LAST)}"
    owners.insert(rng.randrange(len(owners) + 1), rng.choice((
        f"Private Collection of {name}, {rng.choice(G.CITIES)}", f"{name} (private collection), {min(y, 2020)}",
        f"in a private collection, {rng.choice(G.CITIES)}")))
  return "; ".join(owners) + "."


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  n_art, n_works, n_loans = 60 * f, 300 * f, 70 * f
  names = G.unique_names(rng, n_art)
  artists = [{"id": i + 1, "name": nm, "nationality": rng.choice(NATIONALITIES), "born": rng.randint(1480, 1985)}
             for i, nm in enumerate(names)]
  G.insert_rows(ctx, "artists", artists)
  titles = [f"The {a} {n}" for a in ADJ for n in NOUN]
  titles += [f"{t} of {c}" for t in titles[:] for c in G.CITIES]
  rng.shuffle(titles)
  works, prov = [], []
  p_private = rng.uniform(0.25, 0.45)
  for i in range(n_works):
    a = rng.choice(artists)
    year = min(a["born"] + rng.randint(18, 60), 2023)
    medium = rng.choices(MEDIUMS, (30, 10, 8, 6, 5, 8 if year > 1850 else 0))[0]
    if medium == "photograph":
      gallery = rng.choice(("Photography", "Storage"))
    else:
      gallery = rng.choices(GALLERIES, (12, 10, 12, 14, 8 if medium in ("bronze", "marble") else 0, 0, 30))[0]
    acquired = G.rand_date(rng, "1950-01-01", "2024-06-30")
    works.append({"id": i + 1, "accession": f"{acquired[:4]}.{i + 1:04d}", "title": titles[i], "artist_id": a["id"],
                  "year": year, "medium": medium, "gallery": gallery, "value_eur": round(rng.uniform(2e3, 3e6), 2),
                  "acquired": acquired})
    prov.append({"artwork_id": i + 1, "record": _provenance(rng, year, rng.random() < p_private),
                 "fails": rng.choices((0, 1, 2), (6, 3, 1))[0]})
  photos = [w for w in works if w["medium"] == "photograph"]
  for w in rng.sample(photos, min(len(photos), rng.randint(2, 4) * f)):   # planted: recent photographs in storage
    w["gallery"], w["acquired"] = "Storage", G.rand_date(rng, "2015-01-01", "2024-06-30")
    w["accession"] = f"{w['acquired'][:4]}.{w['id']:04d}"
  loans = []
  for aw in rng.sample(works, n_loans):
    start = datetime.date.fromisoformat(G.rand_date(rng, "2023-01-01", "2024-06-15"))
    end = start + datetime.timedelta(days=rng.randint(60, 300))
    status = "active" if end.isoformat() >= B.TODAY or rng.random() < 0.35 else "returned"
    loans.append({"id": 501 + len(loans), "artwork_id": aw["id"], "borrower": rng.choice(BORROWERS),
                  "start": start.isoformat(), "end": end.isoformat(), "status": status})
  G.insert_rows(ctx, "loans", loans)
  G.write_docs(ctx, rng, "museum", ["collections_policy", "loans", "conservation", "visitor_services", "security"])
  # condition reports: 4 * f files in three formats; each artwork is reported at most once
  k = B.n_data_files(f)
  fmts = ["csv", "json", "txt"] + [rng.choice(("csv", "json", "txt")) for _ in range(k - 3)]
  rng.shuffle(fmts)
  pool = rng.sample(works, 7 * k)
  p_poor = rng.uniform(0.15, 0.3)
  for j, fmt in enumerate(fmts):
    items = pool[7 * j:7 * j + rng.randint(4, 7)]
    grades = [rng.choices(("good", "fair", "poor"), (1 - p_poor - 0.3, 0.3, p_poor))[0] for _ in items]
    grades[rng.randrange(len(items))] = "poor"
    inspector, date = f"{rng.choice(G.FIRST)} {rng.choice(G.LAST)}", G.rand_date(rng, "2024-04-01", "2024-06-28")
    if fmt == "csv":
      buf = io.StringIO()
      w = csv.writer(buf, lineterminator="\n")
      w.writerow(["artwork_id", "condition", "inspected_by", "date"])
      for aw, g in zip(items, grades):
        w.writerow([aw["id"], g.upper(), inspector, date])
      text = buf.getvalue()
    elif fmt == "json":
      text = json.dumps({"inspector": inspector, "date": date, "objects": [
          {"accession": aw["accession"], "state": g, "remarks": G.sentence(rng, 6)} for aw, g in zip(items, grades)]},
                        indent=2, ensure_ascii=False) + "\n"
    else:
      text = f"Condition survey by {inspector} on {date}\n\n" + "\n".join(
          f"Object: {aw['title']}\nCondition: {g.capitalize()}\nNote: {G.sentence(rng, 6)}\n"
          for aw, g in zip(items, grades))
    ctx.write(f"conservation/survey_{j + 1:03d}.{fmt}", text)
  # The distractor of hang_recent_photographs without 'Storage' (base.Task.conditions; drawn last, so the rest of
  # the state is what it would be without it): a recent photograph on show in the Modern gallery.
  a = rng.choice([a for a in artists if a["born"] > 1832])
  acquired = G.rand_date(rng, "2015-01-01", "2024-06-30")
  year = min(a["born"] + rng.randint(18, 60), 2023)
  works.append({"id": len(works) + 1, "accession": f"{acquired[:4]}.{len(works) + 1:04d}", "title": titles[len(works)],
                "artist_id": a["id"], "year": year, "medium": "photograph", "gallery": "Modern",
                "value_eur": round(rng.uniform(2e3, 3e6), 2), "acquired": acquired})
  prov.append({"artwork_id": len(works), "record": _provenance(rng, year, rng.random() < p_private),
               "fails": rng.choices((0, 1, 2), (6, 3, 1))[0]})
  G.insert_rows(ctx, "artworks", works)
  G.insert_rows(ctx, "provenance", prov)


# -- tools

def _move(ctx, artwork_id, gallery):
  if gallery not in GALLERIES:
    raise ToolError(f"unknown gallery {gallery!r}; use one of {list(GALLERIES)}")
  r = ctx.q1("SELECT gallery FROM artworks WHERE id = ?", artwork_id)
  if r is None:
    raise ToolError(f"no artwork with id {artwork_id}")
  if r["gallery"] == gallery:
    raise ToolError(f"artwork {artwork_id} is already in {gallery}")
  ctx.exec("UPDATE artworks SET gallery = ? WHERE id = ?", gallery, artwork_id)
  return {"artwork_id": artwork_id, "gallery": gallery, "previous": r["gallery"]}


LOAN_STATUSES = ("active", "returned", "overdue")


def _update_loan(ctx, loan_id, status):
  if status not in LOAN_STATUSES:
    raise ToolError(f"unknown loan status {status!r}; use one of {list(LOAN_STATUSES)}")
  r = ctx.q1("SELECT status FROM loans WHERE id = ?", loan_id)
  if r is None:
    raise ToolError(f"no loan with id {loan_id}")
  ctx.exec("UPDATE loans SET status = ? WHERE id = ?", status, loan_id)
  return {"loan_id": loan_id, "status": status, "previous": r["status"]}


def _provenance_record(ctx, artwork_id):
  r = ctx.q1("SELECT * FROM provenance WHERE artwork_id = ?", artwork_id)
  if r is None:
    raise ToolError(f"no artwork with id {artwork_id}")
  n = ctx.calls.get(("provenance", artwork_id), 0)
  ctx.calls[("provenance", artwork_id)] = n + 1
  if n < r["fails"]:   # transient failure, reported as data with an error field (no tool error): look and retry
    return {"artwork_id": artwork_id, "provenance": None, "error": "the provenance archive timed out (504); retry"}
  return {"artwork_id": artwork_id, "provenance": r["record"], "error": None}


TOOLS = (
    B.list_tool("list_artworks", "List artworks (id, accession, title, artist, artist_born, year, medium, gallery, "
                "value_eur, acquired), optionally filtered; gallery 'Storage' means not on display.",
                table="artworks w JOIN artists a ON a.id = w.artist_id",
                columns="w.id AS id, w.accession AS accession, w.title AS title, a.name AS artist, a.born AS "
                        "artist_born, w.year AS year, w.medium AS medium, w.gallery AS gallery, w.value_eur AS "
                        "value_eur, w.acquired AS acquired", order_by="w.id",
                filters=[B.Filter("artwork_id", "w.id = ?", B.p_int("only the artwork with this id")),
                         B.Filter("accession", "w.accession = ?", B.p_str("only the artwork with this accession "
                                                                          "number")),
                         B.Filter("title", "w.title LIKE ?", B.p_str("only titles containing this text"), like=True),
                         B.Filter("artist", "a.name LIKE ?", B.p_str("only artists whose name contains this text"),
                                  like=True),
                         B.Filter("medium", "w.medium = ?", B.p_str("medium", MEDIUMS)),
                         B.Filter("gallery", "w.gallery = ?", B.p_str("gallery", GALLERIES)),
                         B.Filter("acquired_from", "w.acquired >= ?", B.p_str("acquired on or after 'YYYY-MM-DD'")),
                         B.Filter("acquired_to", "w.acquired <= ?", B.p_str("acquired on or before 'YYYY-MM-DD'"))]),
    B.list_tool("list_loans", "List outgoing loans to other institutions (id, artwork_id, title, borrower, start, "
                "end, status), optionally filtered.", table="loans l JOIN artworks w ON w.id = l.artwork_id",
                columns="l.id AS id, l.artwork_id AS artwork_id, w.title AS title, l.borrower AS borrower, "
                        "l.start AS start, l.end AS end, l.status AS status", order_by="l.id",
                filters=[B.Filter("status", "l.status = ?", B.p_str("loan status", LOAN_STATUSES)),
                         B.Filter("artwork_id", "l.artwork_id = ?", B.p_int("only loans of this artwork")),
                         B.Filter("borrower", "l.borrower LIKE ?", B.p_str("only borrowers containing this text"),
                                  like=True),
                         B.Filter("ends_before", "l.end < ?", B.p_str("only loans ending before 'YYYY-MM-DD'"))]),
    B.tool("move_artwork", "Move an artwork to a gallery (or to 'Storage').", _move,
           required=("artwork_id", "gallery"), artwork_id=B.p_int("artwork id"), gallery=B.p_str("gallery", GALLERIES)),
    B.tool("update_loan", "Set the status of an outgoing loan.", _update_loan, required=("loan_id", "status"),
           loan_id=B.p_int("loan id"), status=B.p_str("new status", LOAN_STATUSES)),
    B.tool("get_provenance", "Get an artwork's provenance record from the archive: {artwork_id, provenance, error}; "
           "provenance is free text (owners separated by ';'), or null with an error message when the archive did "
           "not answer.", _provenance_record,
           required=("artwork_id",), artwork_id=B.p_int("artwork id")),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("museum", "An art museum's collection, outgoing loans, provenance and conservation records.",
                  SCHEMA, generate, TOOLS)

# -- tasks

ALL = B.paging_prelude("fetch", tool="tool_name", kwargs="kw", rows="out", offset="off", limit_first=False)

ACQUIRED = ALL + """\
works = fetch("list_artworks", acquired_from="2023-01-01", acquired_to="2023-12-31")
total = round(sum(w["value_eur"] for w in works if w["gallery"] != "Storage"), 2)
print(len(works), total)
tools["submit_answer"](answer=total)
"""

OLD_MASTERS = ALL + """\
titles = []
for loan in fetch("list_loans", status="active"):
    w = tools["list_artworks"](artwork_id=loan["artwork_id"])["items"][0]
    if w["artist_born"] < 1850:
        titles.append(w["title"])
print(titles)
tools["submit_answer"](answer=sorted(set(titles)))
"""

RECALLS = ALL + """\
late = fetch("list_loans", status="active", ends_before="2024-07-01")
for loan in late:
    tools["update_loan"](loan_id=loan["id"], status="overdue")
    tools["write_file"](path=f"letters/recall_{loan['id']}.txt",
                        content=f"To: {loan['borrower']}\\nRe: loan {loan['id']}, {loan['title']}\\n\\n"
                                f"The loan ended on {loan['end']}. Please return the work.\\n")
print(len(late), "recalled")
tools["submit_answer"]()
"""

CONDITION = ALL + r"""
import csv, io, json
poor = []   # (filter name, value)
for path in tools["list_files"](directory="conservation"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".csv"):
        for row in csv.DictReader(io.StringIO(text)):
            if row["condition"].strip().lower() == "poor":
                poor.append(("artwork_id", int(row["artwork_id"])))
    elif path.endswith(".json"):
        for o in json.loads(text)["objects"]:
            if o["state"].lower() == "poor":
                poor.append(("accession", o["accession"]))
    else:
        title = None
        for line in text.splitlines():
            if line.startswith("Object: "):
                title = line[len("Object: "):].strip()
            elif line.startswith("Condition: ") and line.split(": ", 1)[1].strip().lower() == "poor":
                poor.append(("title", title))
moved = 0
for key, value in poor:
    column = "id" if key == "artwork_id" else key
    hits = [w for w in fetch("list_artworks", **{key: value}) if w[column] == value]
    w = hits[0]
    if w["gallery"] != "Storage":
        tools["move_artwork"](artwork_id=w["id"], gallery="Storage")
        moved += 1
print(len(poor), "poor,", moved, "moved")
tools["submit_answer"]()
"""

CONDITION_WRONG = r"""
import csv, io
for path in tools["list_files"](directory="conservation"):
    if path.endswith(".csv"):
        for row in csv.DictReader(io.StringIO(tools["read_file"](path=path)["content"])):
            if row["condition"].strip().lower() == "poor":
                w = tools["list_artworks"](artwork_id=int(row["artwork_id"]))["items"][0]
                if w["gallery"] != "Storage":
                    tools["move_artwork"](artwork_id=w["id"], gallery="Storage")
tools["submit_answer"]()
"""

PROVENANCE = ALL + """\
found = []
for w in fetch("list_artworks", gallery="Baroque"):
    for attempt in range(6):
        rec = tools["get_provenance"](artwork_id=w["id"])
        if rec["provenance"] is not None:
            break
        print("retry", w["id"], rec["error"])
    else:
        raise RuntimeError(f"no provenance for {w['id']}")
    if "private collection" in rec["provenance"].lower():
        found.append(w["accession"])
print(found)
tools["submit_answer"](answer=found)
"""

PROVENANCE_WRONG = ALL + """\
found = []
for w in fetch("list_artworks", gallery="Baroque"):
    rec = tools["get_provenance"](artwork_id=w["id"])
    if "private collection" in str(rec["provenance"]).lower():
        found.append(w["accession"])
tools["submit_answer"](answer=found)
"""

PHOTOS = ALL + """\
photos = fetch("list_artworks", medium="photograph", gallery="Storage", acquired_from="2015-01-01")
for w in photos:
    tools["move_artwork"](artwork_id=w["id"], gallery="Photography")
print(len(photos), "moved")
tools["submit_answer"]()
"""


def _galleries(ctx):
  return {r["id"]: r["gallery"] for r in ctx.q("SELECT id, gallery FROM artworks")}


def _gallery_check(ctx, e, a):
  return _galleries(ctx) == {int(k): v for k, v in e.items()}


def _condition_expected(ctx):
  want = _galleries(ctx)
  by_acc = {r["accession"]: r["id"] for r in ctx.q("SELECT id, accession FROM artworks")}
  by_title = {r["title"]: r["id"] for r in ctx.q("SELECT id, title FROM artworks")}
  for rel in ctx.files("conservation"):
    recs = read_records(rel, ctx.read(rel), key="objects")
    if rel.endswith(".csv"):
      ids = [int(r["artwork_id"]) for r in recs if r["condition"].lower() == "poor"]
    elif rel.endswith(".json"):
      ids = [by_acc[o["accession"]] for o in recs if o["state"] == "poor"]
    else:
      ids = [by_title[b["Object"]] for b in recs if b["Condition"].lower() == "poor"]
    for i in ids:
      want[i] = "Storage"
  return want


def _recall_expected(ctx):
  rows = ctx.q("SELECT l.id, l.borrower, w.title FROM loans l JOIN artworks w ON w.id = l.artwork_id WHERE "
               "l.status = 'active' AND l.end < ? ORDER BY l.id", B.TODAY)
  statuses = {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM loans")}
  for r in rows:
    statuses[r["id"]] = "overdue"
  return {"statuses": statuses, "letters": [(r["id"], r["borrower"], r["title"]) for r in rows]}


def _recall_check(ctx, e, a):
  if {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM loans")} != {int(k): v for k, v in
                                                                              e["statuses"].items()}:
    return False
  letters = {f"letters/recall_{i}.txt": (b, t) for i, b, t in e["letters"]}
  if set(ctx.files("letters")) != set(letters):
    return False
  return all(b in ctx.read(p) and t in ctx.read(p) for p, (b, t) in letters.items())


TASKS = [
    B.Task(DOMAIN, "on_display_2023_value",
           "What is the total insured value (value_eur) of the artworks acquired during 2023 that are on display "
           "(in any gallery other than Storage)? Round it to 2 decimals.", (ACQUIRED,),
           lambda ctx: round(ctx.scalar("SELECT COALESCE(SUM(value_eur), 0) FROM artworks WHERE acquired BETWEEN "
                                        "'2023-01-01' AND '2023-12-31' AND gallery != 'Storage'"), 2),
           answer="number", wrong=('if w["gallery"] != "Storage"', ""),
           conditions=(("2023", (', acquired_from="2023-01-01", acquired_to="2023-12-31"', '')),)),
    B.Task(DOMAIN, "old_masters_on_loan",
           "Which artworks that are currently out on an active loan were made by artists born before 1850? "
           "Submit the list of their titles.", (OLD_MASTERS,),
           lambda ctx: [r["title"] for r in ctx.q(
               "SELECT DISTINCT w.title FROM loans l JOIN artworks w ON w.id = l.artwork_id JOIN artists a ON "
               "a.id = w.artist_id WHERE l.status = 'active' AND a.born < 1850")],
           answer="set", wrong=('if w["artist_born"] < 1850:', 'if w["year"] < 1850:'),
           conditions=(("active", ('"list_loans", status="active"', '"list_loans"')),)),
    B.Task(DOMAIN, "recall_overdue_loans",
           "Some active outgoing loans have an end date before today. Set the status of each of them to "
           "'overdue', and write a recall letter to the borrower for each, as the file letters/recall_<loan id>.txt, "
           "that names the borrower and the artwork's title. Change no other loan and write no other letters.",
           (RECALLS,), _recall_expected, check=_recall_check,
           wrong=('status="active", ends_before="2024-07-01"', 'ends_before="2024-07-01"'), tags=("writeback",),
           conditions=(("ended", (', ends_before="2024-07-01"', '')),)),
    B.Task(DOMAIN, "store_poor_condition",
           "The conservators have filed condition surveys somewhere in the workspace. Move every artwork that a "
           "survey rates in poor condition to Storage (those already in Storage stay there). Move no other "
           "artwork.", (CONDITION,), _condition_expected, check=_gallery_check, wrong=CONDITION_WRONG,
           tags=("explore",)),
    B.Task(DOMAIN, "baroque_private_provenance",
           "Which artworks in the Baroque gallery passed through a private collection at some point, according "
           "to their provenance records? Submit the list of their accession numbers.", (PROVENANCE,),
           lambda ctx: [r["accession"] for r in ctx.q(
               "SELECT w.accession FROM artworks w JOIN provenance p ON p.artwork_id = w.id WHERE w.gallery = "
               "'Baroque' AND LOWER(p.record) LIKE '%private collection%'")],
           answer="set", wrong=PROVENANCE_WRONG, tags=("errors",),
           conditions=(("Baroque", ('"list_artworks", gallery="Baroque"', '"list_artworks"')),)),
    B.Task(DOMAIN, "hang_recent_photographs",
           "Move every photograph that is in Storage and was acquired on or after 2015-01-01 to the Photography "
           "gallery. Move no other artwork.", (PHOTOS,),
           lambda ctx: {**_galleries(ctx), **{r["id"]: "Photography" for r in ctx.q(
               "SELECT id FROM artworks WHERE medium = 'photograph' AND gallery = 'Storage' AND acquired >= "
               "'2015-01-01'")}}, check=_gallery_check,
           wrong=('medium="photograph", gallery="Storage", acquired_from="2015-01-01"',
                  'medium="photograph", gallery="Storage"'),
           conditions=(("photograph", ('medium="photograph", ', '')),
                       ("Storage", ('gallery="Storage", ', ''),
                        ('for w in photos:', 'for w in [w for w in photos if w["gallery"] != "Photography"]:')))),
]
