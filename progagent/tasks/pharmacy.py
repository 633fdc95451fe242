"""Pharmacy domain: drugs, patients, prescriptions and patient messages; recall notices (several formats) are
workspace files; the interaction checker answers in free text."""

from __future__ import annotations

import json
import random

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError
from progagent.tasks.workspace import read_records

GENERICS = {   # drug class -> generic names
    "penicillin": ("Amoxicillin", "Ampicillin", "Penicillin V"),
    "sulfonamide": ("Sulfamethoxazole", "Sulfasalazine"),
    "nsaid": ("Ibuprofen", "Naproxen", "Diclofenac", "Aspirin"),
    "anticoagulant": ("Warfarin", "Apixaban"),
    "statin": ("Atorvastatin", "Simvastatin"),
    "ssri": ("Sertraline", "Fluoxetine"),
    "opioid": ("Oxycodone", "Morphine", "Tramadol"),
    "benzodiazepine": ("Diazepam", "Lorazepam"),
    "antidiabetic": ("Metformin", "Gliclazide"),
    "antihistamine": ("Cetirizine", "Loratadine"),
}
CLASSES = tuple(GENERICS)
CONTROLLED = ("opioid", "benzodiazepine")
ALLERGENS = ("penicillin", "sulfonamide", "nsaid")
MAKERS = ("Aurel", "Borea", "Cantor", "Delmar", "Estra", "Farmis", "Galen", "Helix", "Iberis", "Juno", "Kalos",
          "Lumen")
FORMS = ("tablet", "capsule", "syrup", "injection")
# (class a, class b) -> (severity, effect), checked by the interaction checker
INTERACTIONS = {("anticoagulant", "nsaid"): ("major", "bleeding risk"),
                ("opioid", "benzodiazepine"): ("major", "respiratory depression"),
                ("anticoagulant", "ssri"): ("moderate", "bleeding risk"),
                ("ssri", "opioid"): ("moderate", "serotonin syndrome"),
                ("statin", "antidiabetic"): ("minor", "glucose changes")}

SCHEMA = """
CREATE TABLE drugs (id INTEGER PRIMARY KEY, name TEXT UNIQUE, drug_class TEXT, form TEXT, stock INTEGER,
                    unit_price REAL, controlled INTEGER);
CREATE TABLE patients (id INTEGER PRIMARY KEY, name TEXT, birth TEXT, allergies TEXT);
CREATE TABLE prescriptions (id INTEGER PRIMARY KEY, patient_id INTEGER, drug_id INTEGER, quantity INTEGER,
                            prescribed TEXT, status TEXT, prescriber TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, patient_id INTEGER, text TEXT);
CREATE INDEX rx_status ON prescriptions(status);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  combos = [(c, g, s, m) for c, gs in GENERICS.items() for g in gs for s in (5, 10, 20, 50, 100, 250, 500)
            for m in MAKERS]
  picks = rng.sample(combos, 120 * f)
  drugs = [{"id": i + 1, "name": f"{g} {s} mg {m}", "drug_class": c, "form": rng.choice(FORMS),
            "stock": rng.randint(0, 600), "unit_price": round(rng.uniform(0.05, 9.5), 2),
            "controlled": int(c in CONTROLLED)} for i, (c, g, s, m) in enumerate(picks)]
  G.insert_rows(ctx, "drugs", drugs)
  n_pat = 300 * f
  names = G.unique_names(rng, n_pat)
  patients = []
  for i, nm in enumerate(names):
    al = [a for a in ALLERGENS if rng.random() < 0.07] + [x for x in ("latex", "peanuts") if rng.random() < 0.05]
    patients.append({"id": i + 1, "name": nm, "birth": G.rand_date(rng, "1940-01-01", "2010-12-31"),
                     "allergies": "; ".join(al) if al else "none"})
  doctors = [f"Dr. {n}" for n in G.unique_names(rng, 12)]
  rxs = []
  for i in range(900 * f):
    d = G.rand_date(rng, "2024-01-01", "2024-06-30")
    status = "open" if rng.random() < (0.04 if d < "2024-06-01" else 0.5) else rng.choice(("filled",) * 9 +
                                                                                             ("cancelled",))
    rxs.append({"id": i + 1, "patient_id": rng.randint(1, n_pat), "drug_id": rng.randint(1, len(drugs)),
                "quantity": rng.randint(10, 90), "prescribed": d, "status": status,
                "prescriber": rng.choice(doctors)})
  # Planted: allergy conflicts, a short-stocked backlog item, anticoagulant patients with a major interaction.
  by_class = {c: [d["id"] for d in drugs if d["drug_class"] == c] for c in CLASSES}
  open_rx = [r for r in rxs if r["status"] == "open"]
  planted = set()
  for r in rng.sample(open_rx, 3 * f):
    planted.add(r["id"])
    c = rng.choice(ALLERGENS)
    r["drug_id"] = rng.choice(by_class[c])
    p = patients[r["patient_id"] - 1]
    if c not in p["allergies"]:
      p["allergies"] = c if p["allergies"] == "none" else f"{p['allergies']}; {c}"
  for r in rng.sample(open_rx, 2 * f):
    r["drug_id"] = rng.choice(by_class["anticoagulant"])
    other = rng.choice(open_rx)
    other["patient_id"], other["drug_id"] = r["patient_id"], rng.choice(by_class["nsaid"])
    planted |= {r["id"], other["id"]}
  backlog = [r for r in rxs if r["status"] == "open" and r["prescribed"] < "2024-06-01"]
  short = rng.choice(backlog)
  drugs[short["drug_id"] - 1]["stock"] = 0
  ctx.exec("UPDATE drugs SET stock = 0 WHERE id = ?", short["drug_id"])
  G.insert_rows(ctx, "patients", patients)
  G.insert_rows(ctx, "prescriptions", rxs)
  G.write_docs(ctx, rng, "pharmacy", ["dispensing_rules", "controlled_drugs", "recalls", "opening_hours", "staff"])
  recalled = rng.sample(drugs, B.n_data_files(f))
  fmts = ["json", "csv", "txt"] + [rng.choice(("csv", "json", "txt")) for _ in range(len(recalled) - 3)]
  rng.shuffle(fmts)
  for j, d in enumerate(recalled):
    lot = f"L{rng.randint(10000, 99999)}"
    if fmts[j] == "json":   # this recall always hits a stocked product with an open prescription
      free = [r for r in rxs if r["status"] == "open" and r["prescribed"] >= "2024-06-01" and r["id"] not in planted]
      ctx.exec("UPDATE prescriptions SET drug_id = ? WHERE id = ?", d["id"], rng.choice(free)["id"])
    name = d["name"] if fmts[j] == "json" or rng.random() < 0.8 else d["name"].rsplit(" ", 1)[0] + " " + rng.choice(
        [m for m in MAKERS if not d["name"].endswith(m)])   # some recalls name a product the pharmacy lacks
    fmt = fmts[j]
    if fmt == "csv":
      text = f"product,lot,reason\n{name},{lot},{rng.choice(('contamination', 'mislabelling', 'potency'))}\n"
    elif fmt == "json":
      text = json.dumps({"recall": {"product": name, "lot": lot, "issued": G.rand_date(rng, "2024-06-01")}},
                        indent=1) + "\n"
    else:
      text = f"RECALL NOTICE\nProduct: {name}\nLot: {lot}\nIssued: {G.rand_date(rng, '2024-06-01')}\n" \
             f"{G.sentence(rng, 10)}\n"
    ctx.write(f"notices/recalls/recall_{j + 1:03d}.{fmt}", text)
  _plant_distractors(ctx, rng, drugs, n_pat, len(rxs), recalled[fmts.index("json")], doctors)


def _plant_distractors(ctx, rng, drugs, n_pat, n_rx, exact, doctors) -> None:
  """Rows that make each declared condition matter (base.Task.conditions; drawn after everything else, so the
  rest of the state is what it would be without them): a patient whose only anticoagulant prescription is filled
  but whose open opioid and benzodiazepine prescriptions interact (major_interactions without 'open' /
  'anticoagulant'), and an open prescription of '<a recalled product> XR', another product whose name contains
  the recalled one, for a patient without a recalled prescription (recalled_patients without the exact name)."""
  busy = {r["patient_id"] for r in ctx.q("SELECT DISTINCT patient_id FROM prescriptions WHERE status = 'open'")}
  free = [p for p in range(1, n_pat + 1) if p not in busy]
  lonely, other = rng.sample(free, 2)
  xr = {"id": len(drugs) + 1, "name": f"{exact['name']} XR", "drug_class": exact["drug_class"],
        "form": rng.choice(FORMS), "stock": rng.randint(100, 600), "unit_price": round(rng.uniform(0.05, 9.5), 2),
        "controlled": exact["controlled"]}
  G.insert_rows(ctx, "drugs", [xr])
  by_class = {c: [d["id"] for d in drugs if d["drug_class"] == c] for c in CLASSES}
  rows = [(lonely, rng.choice(by_class["anticoagulant"]), "filled"), (lonely, rng.choice(by_class["opioid"]), "open"),
          (lonely, rng.choice(by_class["benzodiazepine"]), "open"), (other, xr["id"], "open")]
  G.insert_rows(ctx, "prescriptions", [
      {"id": n_rx + 1 + i, "patient_id": p, "drug_id": d, "quantity": rng.randint(10, 90),
       "prescribed": G.rand_date(rng, "2024-06-01", "2024-06-30"), "status": st, "prescriber": rng.choice(doctors)}
      for i, (p, d, st) in enumerate(rows)])


def _rx(ctx, prescription_id):
  r = ctx.q1("SELECT * FROM prescriptions WHERE id = ?", prescription_id)
  if r is None:
    raise ToolError(f"no prescription with id {prescription_id}")
  return r


def _patient(ctx, patient_id):
  r = ctx.q1("SELECT * FROM patients WHERE id = ?", patient_id)
  if r is None:
    raise ToolError(f"no patient with id {patient_id}")
  return r


def _interactions(ctx, patient_id):
  p = _patient(ctx, patient_id)
  meds = ctx.q("SELECT d.name, d.drug_class FROM prescriptions r JOIN drugs d ON d.id = r.drug_id WHERE "
               "r.patient_id = ? AND r.status = 'open' ORDER BY r.id", patient_id)
  lines = [f"Patient: {p['name']} (id {patient_id})",
           "Active medicines: " + (", ".join(m["name"] for m in meds) if meds else "none") + "."]
  found = set()
  for a in meds:
    for b in meds:
      hit = INTERACTIONS.get((a["drug_class"], b["drug_class"]))
      if hit and (a["name"], b["name"]) not in found:
        found.add((a["name"], b["name"]))
        lines.append(f"WARNING ({hit[0]}): {a['name']} with {b['name']}: {hit[1]}.")
  if not any("(major)" in ln for ln in lines):
    lines.append("No major interactions found.")
  return {"patient_id": patient_id, "report": "\n".join(lines)}


def _fill(ctx, prescription_id):
  r = _rx(ctx, prescription_id)
  refused = {"ok": False, "prescription_id": prescription_id}   # a record, not an error result
  if r["status"] != "open":
    return {**refused, "error": f"prescription {prescription_id} is {r['status']}"}
  stock = ctx.scalar("SELECT stock FROM drugs WHERE id = ?", r["drug_id"])
  if stock < r["quantity"]:
    return {**refused, "error": f"insufficient stock: {stock} units on hand, {r['quantity']} prescribed"}
  ctx.exec("UPDATE drugs SET stock = stock - ? WHERE id = ?", r["quantity"], r["drug_id"])
  ctx.exec("UPDATE prescriptions SET status = 'filled' WHERE id = ?", prescription_id)
  return {"ok": True, "prescription_id": prescription_id, "dispensed": r["quantity"]}


def _send_message(ctx, patient_id, text):
  _patient(ctx, patient_id)
  if not text.strip():
    raise ToolError("the message is empty")
  ctx.exec("INSERT INTO messages (patient_id, text) VALUES (?, ?)", patient_id, text)
  return {"patient_id": patient_id, "sent": True}


TOOLS = (
    B.list_tool("list_drugs", "List drugs {id, name, drug_class, form, stock, unit_price, controlled}, optionally "
                "filtered.", table="drugs", columns="id, name, drug_class, form, stock, unit_price, controlled",
                filters=[B.Filter("name", "name LIKE ?", B.p_str("text the drug name contains"), like=True),
                         B.Filter("drug_class", "drug_class = ?", B.p_str("drug class", CLASSES)),
                         B.Filter("controlled", "controlled = ?", {"type": "boolean", "description":
                                                                  "only controlled (true) or other (false) drugs"})]),
    B.list_tool("list_patients", "List patients {id, name, birth, allergies}, optionally filtered.",
                table="patients", columns="id, name, birth, allergies", filters=[
                    B.Filter("patient_id", "id = ?", B.p_int("patient id")),
                    B.Filter("allergy", "allergies LIKE ?", B.p_str("text the allergy list contains"), like=True)]),
    B.list_tool("list_prescriptions", "List prescriptions {id, patient_id, drug_id, drug, quantity, prescribed, "
                "status}, optionally filtered.", table="prescriptions r JOIN drugs d ON d.id = r.drug_id",
                columns="r.id AS id, r.patient_id AS patient_id, r.drug_id AS drug_id, d.name AS drug, r.quantity "
                "AS quantity, r.prescribed AS prescribed, r.status AS status", order_by="r.id", filters=[
                    B.Filter("status", "r.status = ?", B.p_str("status", ("open", "filled", "cancelled"))),
                    B.Filter("patient_id", "r.patient_id = ?", B.p_int("patient id")),
                    B.Filter("drug_id", "r.drug_id = ?", B.p_int("drug id")),
                    B.Filter("drug_class", "d.drug_class = ?", B.p_str("class of the prescribed drug", CLASSES)),
                    B.Filter("controlled", "d.controlled = ?", {"type": "boolean", "description":
                                                               "only prescriptions of controlled drugs (true)"}),
                    B.Filter("prescribed_from", "r.prescribed >= ?", B.p_str("earliest date (YYYY-MM-DD)")),
                    B.Filter("prescribed_before", "r.prescribed < ?", B.p_str("only before this date"))]),
    B.tool("interaction_check", "Check the patient's open prescriptions for drug interactions: {patient_id, "
           "report} (free text).", _interactions, required=("patient_id",), patient_id=B.p_int("patient id")),
    B.tool("fill_prescription", "Dispense an open prescription from stock. Returns {ok: true, prescription_id, "
           "dispensed}, or {ok: false, prescription_id, error} when it cannot be filled.", _fill,
           required=("prescription_id",), prescription_id=B.p_int("prescription id")),
    B.tool("send_message", "Send a message to a patient.", _send_message, required=("patient_id", "text"),
           patient_id=B.p_int("patient id"), text=B.p_str("the message")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("pharmacy", "A community pharmacy's drugs, patients and prescriptions.", SCHEMA, generate, TOOLS)

CONTROLLED_VALUE = """\
value, offset = 0.0, 0
while offset is not None:
    page = tools["list_drugs"](controlled=True, limit=200, offset=offset)
    value += sum(d["stock"] * d["unit_price"] for d in page["items"])
    offset = page["next_offset"]
print(round(value, 2))
tools["submit_answer"](answer=round(value, 2))
"""

CONTROLLED_UNITS = """\
units, offset = 0, 0
while offset is not None:
    page = tools["list_prescriptions"](controlled=True, prescribed_from="2024-06-01", limit=200, offset=offset)
    units += sum(r["quantity"] for r in page["items"])
    offset = page["next_offset"]
print(units)
tools["submit_answer"](answer=units)
"""

ALLERGY = """\
classes = ["penicillin", "sulfonamide", "nsaid", "anticoagulant", "statin", "ssri", "opioid", "benzodiazepine",
           "antidiabetic", "antihistamine"]
conflicts = []
for c in classes:
    allergic = {p["id"] for p in tools["list_patients"](allergy=c, limit=200)["items"]
                if c in [a.strip() for a in p["allergies"].split(";")]}
    if not allergic:
        continue
    offset = 0
    while offset is not None:
        page = tools["list_prescriptions"](status="open", drug_class=c, limit=200, offset=offset)
        conflicts += [r["id"] for r in page["items"] if r["patient_id"] in allergic]
        offset = page["next_offset"]
print(len(conflicts))
tools["submit_answer"](answer=sorted(conflicts))
"""

BACKLOG = """\
backlog, offset = [], 0
while offset is not None:
    page = tools["list_prescriptions"](status="open", prescribed_before="2024-06-01", limit=200, offset=offset)
    backlog += page["items"]
    offset = page["next_offset"]
backlog.sort(key=lambda r: (r["prescribed"], r["id"]))
delayed = 0
for r in backlog:
    res = tools["fill_prescription"](prescription_id=r["id"])
    if not res["ok"]:
        tools["send_message"](patient_id=r["patient_id"],
                              text=f"Your prescription {r['id']} ({r['drug']}) is delayed: {res['error']}.")
        delayed += 1
print(len(backlog), delayed)
tools["submit_answer"]()
"""

RECALLS = """\
import csv, io, json, re
names = []
for path in tools["list_files"](directory="notices/recalls"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        names.append(json.loads(text)["recall"]["product"])
    elif path.endswith(".csv"):
        names += [row["product"] for row in csv.DictReader(io.StringIO(text))]
    else:
        names += re.findall(r"^Product: (.+)$", text, re.M)
patients = set()
for name in names:
    for d in tools["list_drugs"](name=name, limit=200)["items"]:
        if d["name"] != name:
            continue
        rows = tools["list_prescriptions"](status="open", drug_id=d["id"], limit=200)["items"]
        patients |= {r["patient_id"] for r in rows}
out = sorted(tools["list_patients"](patient_id=p)["items"][0]["name"] for p in patients)
print(len(names), out)
tools["submit_answer"](answer=out)
"""

INTERACT = """\
import re
rows, offset = [], 0
while offset is not None:
    page = tools["list_prescriptions"](status="open", drug_class="anticoagulant", limit=200, offset=offset)
    rows += page["items"]
    offset = page["next_offset"]
out = []
for pid in sorted({r["patient_id"] for r in rows}):
    report = tools["interaction_check"](patient_id=pid)["report"]
    if re.search(r"^WARNING \\(major\\)", report, re.M):
        out.append(re.search(r"^Patient: (.+) \\(id \\d+\\)$", report, re.M).group(1))
print(out)
tools["submit_answer"](answer=out)
"""


def _allergy(ctx):
  out = []
  for r in ctx.q("SELECT r.id, d.drug_class, p.allergies FROM prescriptions r JOIN drugs d ON d.id = r.drug_id "
                 "JOIN patients p ON p.id = r.patient_id WHERE r.status = 'open' ORDER BY r.id"):
    if r["drug_class"] in [a.strip() for a in r["allergies"].split(";")]:
      out.append(r["id"])
  return out


def _state(ctx):
  return {"rx": {r["id"]: r["status"] for r in ctx.q("SELECT id, status FROM prescriptions")},
          "stock": {r["id"]: r["stock"] for r in ctx.q("SELECT id, stock FROM drugs")}}


def _backlog_expected(ctx):
  st = _state(ctx)
  stock = st["stock"]
  delayed = []
  for r in ctx.q("SELECT id, patient_id, drug_id, quantity FROM prescriptions WHERE status = 'open' AND prescribed < "
                 "'2024-06-01' ORDER BY prescribed, id"):
    if stock[r["drug_id"]] >= r["quantity"]:
      stock[r["drug_id"]] -= r["quantity"]
      st["rx"][r["id"]] = "filled"
    else:
      delayed.append(r["patient_id"])
  return {"state": st, "delayed": sorted(delayed)}


def _backlog_check(ctx, e, a):
  st = _state(ctx)
  want = {k: {int(i): v for i, v in e["state"][k].items()} for k in ("rx", "stock")}
  msgs = ctx.q("SELECT patient_id, text FROM messages")
  return (st == want and sorted(m["patient_id"] for m in msgs) == e["delayed"]
          and all("delayed" in m["text"].lower() for m in msgs))


def _recalls(ctx):
  names = []
  for rel in ctx.files("notices/recalls"):
    field = "product" if rel.endswith((".json", ".csv")) else "Product"   # JSON, CSV or "Key: value" text
    names += [r[field] for r in read_records(rel, ctx.read(rel), key="recall")]
  out = set()
  for n in names:
    out |= {r["name"] for r in ctx.q("SELECT p.name FROM prescriptions r JOIN drugs d ON d.id = r.drug_id JOIN "
                                     "patients p ON p.id = r.patient_id WHERE r.status = 'open' AND d.name = ?", n)}
  return sorted(out)


def _interact(ctx):
  pids = [r["patient_id"] for r in ctx.q(
      "SELECT DISTINCT r.patient_id FROM prescriptions r JOIN drugs d ON d.id = r.drug_id WHERE r.status = 'open' "
      "AND d.drug_class = 'anticoagulant' ORDER BY r.patient_id")]
  return [ctx.scalar("SELECT name FROM patients WHERE id = ?", p) for p in pids
          if "WARNING (major)" in _interactions(ctx, p)["report"]]


TASKS = [
    B.Task(DOMAIN, "controlled_stock_value",
           "What is the total stock value (stock * unit_price, summed over drugs) of all controlled drugs? Round "
           "it to 2 decimals.", (CONTROLLED_VALUE,),
           lambda ctx: round(ctx.scalar("SELECT SUM(stock * unit_price) FROM drugs WHERE controlled = 1"), 2),
           answer="number", wrong=('d["stock"] * d["unit_price"]', 'd["unit_price"]'),
           conditions=(("controlled", ('controlled=True, ', '')),)),
    B.Task(DOMAIN, "controlled_units_june",
           "How many units of controlled drugs were prescribed from 2024-06-01 on (prescriptions of any status)? "
           "Submit the total quantity.", (CONTROLLED_UNITS,),
           lambda ctx: ctx.scalar("SELECT COALESCE(SUM(r.quantity), 0) FROM prescriptions r JOIN drugs d ON d.id = "
                                  "r.drug_id WHERE d.controlled = 1 AND r.prescribed >= '2024-06-01'"),
           answer="int", wrong=('r["quantity"] for', '1 for'),
           conditions=(("controlled", ('controlled=True, ', '')),
                       ("from June", (', prescribed_from="2024-06-01"', '')))),
    B.Task(DOMAIN, "allergy_conflicts",
           "Which open prescriptions are for a drug whose class (drug_class) appears in the patient's list of "
           "allergies? Submit the list of prescription ids.", (ALLERGY,), _allergy, answer="set",
           wrong=('for c in classes:', 'for c in classes[:1]:'), tags=("paging",),
           conditions=(("open", ('status="open", ', '')),)),
    B.Task(DOMAIN, "fill_backlog",
           "Fill every open prescription prescribed before 2024-06-01, oldest first (by prescribed date, then "
           "id). When a prescription cannot be filled, send its patient one message saying that it is delayed "
           "(the message must contain the word 'delayed'). Send no other messages.", (BACKLOG,),
           _backlog_expected, check=_backlog_check,
           wrong=('if not res["ok"]:', "if False:"),
           tags=("errors", "writeback"),
           conditions=(("open", ('status="open", ', '')), ("before June", (', prescribed_before="2024-06-01"', '')))),
    B.Task(DOMAIN, "recalled_patients",
           "Recall notices are in notices/recalls/. Which patients have an open prescription of a recalled "
           "product (the exact drug name)? Submit the list of their names.", (RECALLS,), _recalls, answer="set",
           wrong=('if path.endswith(".json"):', 'if False:'), tags=("explore",),
           conditions=(("open", ('status="open", ', '')),
                       ("exact name", ('        if d["name"] != name:\n            continue\n', '')))),
    B.Task(DOMAIN, "major_interactions",
           "Among the patients with an open prescription of an anticoagulant, which ones get at least one "
           "major interaction warning from the interaction checker? Submit the list of their names.",
           (INTERACT,), _interact, answer="set",
           wrong=('if re.search(r"^WARNING', 'if "major" in report or re.search(r"^WARNING'), tags=("errors",),
           conditions=(("open", ('status="open", ', '')), ("anticoagulant", (', drug_class="anticoagulant"', '')))),
]
