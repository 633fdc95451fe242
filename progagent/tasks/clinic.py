"""Clinic domain: doctors, patients, appointments and prescriptions; intake forms (several formats), cancellation
requests and a leave notice are workspace files."""

from __future__ import annotations

import collections
import datetime
import json
import random
import re

from progagent.tasks import base as B
from progagent.tasks import generators as G
from progagent.tasks.base import Ctx, ToolError

SPECIALTIES = ("cardiology",) * 3 + ("dermatology",) * 2 + ("pediatrics",) * 2 + ("neurology",) * 2 + ("general",)
SPECIALTY_NAMES = ("cardiology", "dermatology", "pediatrics", "neurology", "general")
APPT_STATUSES = ("scheduled", "completed", "no-show", "cancelled")
DRUGS = ("amoxicillin", "ibuprofen", "metformin", "lisinopril", "atorvastatin", "omeprazole")
ALLERGIES = ("penicillin", "latex", "peanuts", "pollen", "sulfa", "aspirin")

SCHEMA = """
CREATE TABLE doctors (id INTEGER PRIMARY KEY, name TEXT, specialty TEXT);
CREATE TABLE patients (id INTEGER PRIMARY KEY, name TEXT, birth_date TEXT, phone TEXT);
CREATE TABLE appointments (id INTEGER PRIMARY KEY, patient_id INTEGER, doctor_id INTEGER, date TEXT, time TEXT,
                           status TEXT, cancel_reason TEXT);
CREATE TABLE prescriptions (id INTEGER PRIMARY KEY, patient_id INTEGER, drug TEXT, dose TEXT, start_date TEXT,
                            active INTEGER);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, patient_id INTEGER, text TEXT);
CREATE INDEX appt_doctor ON appointments(doctor_id);
CREATE INDEX appt_date ON appointments(date);
"""


def _day(iso: str, delta: int) -> str:
  return (datetime.date.fromisoformat(iso) + datetime.timedelta(days=delta)).isoformat()


def _intake_text(rng: random.Random, fmt: str, pid: int, name: str, allergies: list[str]) -> str:
  note = G.sentence(rng, 9)
  if fmt == "json":
    return json.dumps({"patient_id": pid, "name": name, "allergies": allergies, "notes": note}, indent=1)
  if fmt == "csv":
    return f"patient_id,name,allergies,notes\n{pid},{name},{';'.join(allergies) or 'none'},{note}\n"
  return (f"Patient: {name} (id {pid})\nAllergies: {', '.join(a.capitalize() for a in allergies) or 'None'}\n"
          f"Notes: {note}\n")


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  docs = [f"Dr. {n}" for n in G.unique_names(rng, len(SPECIALTIES))]
  G.insert_rows(ctx, "doctors", [{"id": i + 1, "name": n, "specialty": s}
                                 for i, (n, s) in enumerate(zip(docs, SPECIALTIES))])
  n_pat = 240 * f
  names = G.unique_names(rng, n_pat)
  G.insert_rows(ctx, "patients", [{"id": i + 1, "name": n, "birth_date": G.rand_date(rng, "1940-01-01", "2020-12-31"),
                                   "phone": f"+351 91 {rng.randint(100, 999)} {rng.randint(1000, 9999)}"}
                                  for i, n in enumerate(names)])
  appts = []

  def add(date, doctor, status=None, patient=None):
    if status is None:
      status = "scheduled" if date >= B.TODAY else rng.choices(("completed", "no-show", "cancelled"), (75, 15, 10))[0]
    appts.append({"id": len(appts) + 1, "patient_id": patient or rng.randint(1, n_pat), "doctor_id": doctor,
                  "date": date, "time": f"{rng.randint(8, 17):02d}:{rng.choice(('00', '20', '40'))}",
                  "status": status, "cancel_reason": None})

  for _ in range(1000 * f):
    add(G.rand_date(rng, "2024-01-02", "2024-07-31"), rng.randint(1, len(docs)))
  busy = G.rand_date(rng, "2024-06-01", "2024-06-30")       # the busiest June day, by a margin
  for _ in range(rng.randint(6, 14) * f):
    add(busy, rng.randint(1, len(docs)), "completed")
  on_leave = rng.randint(1, len(docs))
  start = G.rand_date(rng, "2024-07-03", "2024-07-16")
  end = _day(start, rng.randint(4, 11))
  inside = [_day(start, rng.randint(1, 3)) for _ in range(rng.randint(1, 3))]
  for d in [_day(start, -1), start, end, _day(end, 1)] + inside:
    add(d, on_leave, "scheduled")
  for p in rng.sample(range(1, n_pat + 1), rng.randint(1, 3)):   # patients with two Q2 no-shows
    for _ in range(2):
      add(G.rand_date(rng, "2024-04-01", "2024-06-30"), rng.randint(1, len(docs)), "no-show", p)
  rx = [{"id": i + 1, "patient_id": rng.randint(1, n_pat), "drug": rng.choice(DRUGS),
         "dose": f"{rng.choice((5, 10, 20, 250, 500))} mg", "start_date": G.rand_date(rng),
         "active": int(rng.random() < 0.7)} for i in range(225 * f)]
  k = B.n_data_files(f)
  n_intake = k - f
  pids = rng.sample(range(1, n_pat + 1), n_intake)
  conflicts = pids[:rng.randint(1, max(1, n_intake // 2))]
  for pid in conflicts + pids[-1:]:   # the last: amoxicillin active, allergic to something else
    rx.append({"id": len(rx) + 1, "patient_id": pid, "drug": "amoxicillin", "dose": f"{rng.choice((250, 500))} mg",
               "start_date": G.rand_date(rng, "2024-05-01", "2024-06-30"), "active": 1})
  active_amox = {r["patient_id"] for r in rx if r["drug"] == "amoxicillin" and r["active"]}
  G.write_docs(ctx, rng, "clinic", ["scheduling", "no_show_policy", "prescribing", "privacy", "triage"])
  ctx.write("leave/leave_notice.txt", f"Staff notice\n\n{docs[on_leave - 1]} will be on leave from {start} to "
            f"{end} (both days included).\n")
  fmts = (["txt", "json", "csv"] * n_intake)[:n_intake]
  rng.shuffle(fmts)
  for j, pid in enumerate(pids):
    others = [a for a in ALLERGIES if a != "penicillin"]
    allergies = rng.sample(others, rng.randint(0, 2))
    if pid in conflicts or (pid not in active_amox and rng.random() < 0.5):
      allergies.insert(rng.randint(0, len(allergies)), "penicillin")
    if pid == pids[-1]:
      allergies = [a for a in allergies if a != "penicillin"]
    ctx.write(f"intake/patient_{pid:05d}.{fmts[j]}", _intake_text(rng, fmts[j], pid, names[pid - 1], allergies))
  past = [a["id"] for a in appts if a["status"] != "scheduled"]
  future = [a["id"] for a in appts if a["status"] == "scheduled" and a["doctor_id"] != on_leave]
  sizes = [(rng.randint(2, 4), rng.randint(1, 2)) for _ in range(f)]
  fut = rng.sample(future, sum(a for a, _ in sizes))
  old = rng.sample(past, sum(b for _, b in sizes))
  for j, (a, b) in enumerate(sizes):
    ids = [fut.pop() for _ in range(a)] + [old.pop() for _ in range(b)]
    rng.shuffle(ids)
    ctx.write(f"requests/cancellations_{j + 1:02d}.txt", "Patients asked to cancel these appointments:\n" +
              "".join(f"- appointment {i}\n" for i in ids))
  # Distractors of the declared conditions (base.Task.conditions), drawn after everything else so that the rest
  # of the state is what it would be without them.
  # busiest_june_day: a June day with more appointments of all statuses (extra cancelled ones) but fewer
  # completed, and a day before June with more completed appointments than the busiest June day.
  per_day = collections.Counter(a["date"] for a in appts)
  done = collections.Counter(a["date"] for a in appts if a["status"] == "completed")
  crowded = rng.choice([d for d in _days("2024-06-01", "2024-06-30") if d != busy])
  for _ in range(per_day[busy] - per_day[crowded] + rng.randint(1, 4)):
    add(crowded, rng.randint(1, len(docs)), "cancelled")
  spring = G.rand_date(rng, "2024-02-01", "2024-05-31")
  for _ in range(done[busy] - done[spring] + rng.randint(1, 4)):
    add(spring, rng.randint(1, len(docs)), "completed")
  # amoxicillin_allergy_conflicts: a penicillin-allergic intake patient with an inactive amoxicillin and an active
  # ibuprofen prescription (the conflict needs both the drug and 'active').
  j = rng.choice([i for i, pid in enumerate(pids[:-1]) if pid not in conflicts])
  pid = pids[j]
  for r in rx:
    if r["patient_id"] == pid and r["drug"] == "amoxicillin":
      r["active"] = 0
  for drug, active in (("amoxicillin", 0), ("ibuprofen", 1)):
    rx.append({"id": len(rx) + 1, "patient_id": pid, "drug": drug, "dose": f"{rng.choice((250, 500))} mg",
               "start_date": G.rand_date(rng, "2024-01-01", "2024-06-30"), "active": active})
  allergies = rng.sample([a for a in ALLERGIES if a != "penicillin"], rng.randint(0, 2)) + ["penicillin"]
  rng.shuffle(allergies)
  ctx.write(f"intake/patient_{pid:05d}.{fmts[j]}", _intake_text(rng, fmts[j], pid, names[pid - 1], allergies))
  G.insert_rows(ctx, "appointments", appts)
  G.insert_rows(ctx, "prescriptions", rx)


def _days(start: str, end: str) -> list[str]:
  """The ISO dates from start to end (both included)."""
  out = [start]
  while out[-1] < end:
    out.append(_day(out[-1], 1))
  return out


# -- tools

def _get_patient(ctx, patient_id):
  r = ctx.q1("SELECT * FROM patients WHERE id = ?", patient_id)
  if r is None:
    raise ToolError(f"no patient with id {patient_id}")
  return r


def _cancel(ctx, appointment_id, reason):
  """Cancels a scheduled appointment; for any other status it answers ok false (no exception)."""
  r = ctx.q1("SELECT status FROM appointments WHERE id = ?", appointment_id)
  if r is None:
    raise ToolError(f"no appointment with id {appointment_id}")
  if r["status"] != "scheduled":
    return {"appointment_id": appointment_id, "ok": False,
            "error": f"appointment is {r['status']}; only scheduled appointments can be cancelled"}
  ctx.exec("UPDATE appointments SET status = 'cancelled', cancel_reason = ? WHERE id = ?", reason, appointment_id)
  return {"appointment_id": appointment_id, "ok": True, "status": "cancelled"}


def _send_message(ctx, patient_id, text):
  _get_patient(ctx, patient_id)
  if not text.strip():
    raise ToolError("the message is empty")
  ctx.exec("INSERT INTO messages (patient_id, text) VALUES (?, ?)", patient_id, text)
  return {"patient_id": patient_id, "sent": True}


TOOLS = (
    B.list_tool("list_doctors", "List the doctors: items {id, name, specialty}.", table="doctors",
                columns="id, name, specialty",
                filters=[B.Filter("specialty", "specialty = ?", B.p_str("specialty", SPECIALTY_NAMES)),
                         B.Filter("name", "name LIKE ?", B.p_str("part of the doctor's name"), like=True)]),
    B.list_tool("list_appointments", "List appointments: items {id, patient_id, doctor_id, date, time, status} with "
                "status scheduled, completed, no-show or cancelled.", table="appointments",
                columns="id, patient_id, doctor_id, date, time, status", order_by="date, time, id",
                filters=[B.Filter("doctor_id", "doctor_id = ?", B.p_int("only this doctor")),
                         B.Filter("patient_id", "patient_id = ?", B.p_int("only this patient")),
                         B.Filter("status", "status = ?", B.p_str("only this status", APPT_STATUSES)),
                         B.Filter("date_from", "date >= ?", B.p_str("earliest date, YYYY-MM-DD (included)")),
                         B.Filter("date_to", "date <= ?", B.p_str("latest date, YYYY-MM-DD (included)"))]),
    B.tool("get_patient", "Get one patient: {id, name, birth_date, phone}.", _get_patient, required=("patient_id",),
           patient_id=B.p_int("patient id")),
    B.tool("cancel_appointment", "Cancel a scheduled appointment, giving a reason; returns {appointment_id, ok, "
           "status} or {appointment_id, ok: false, error} when it cannot be cancelled.", _cancel,
           required=("appointment_id", "reason"), appointment_id=B.p_int("appointment id"),
           reason=B.p_str("why it is cancelled")),
    B.list_tool("list_prescriptions", "List prescriptions: items {id, patient_id, drug, dose, start_date, active} "
                "(active 1 or 0).", table="prescriptions", columns="id, patient_id, drug, dose, start_date, active",
                filters=[B.Filter("drug", "drug = lower(?)", B.p_str("drug name, e.g. 'ibuprofen'")),
                         B.Filter("patient_id", "patient_id = ?", B.p_int("only this patient")),
                         B.Filter("active", "active = ?", B.p_int("1: only active ones, 0: only ended ones"))]),
    B.flaky(B.tool("send_message", "Send a text message to a patient; returns {patient_id, sent}.", _send_message,
                   required=("patient_id", "text"), patient_id=B.p_int("patient id"), text=B.p_str("the message")),
            message="SMS gateway busy (503); retry the same call"),
    B.LIST_FILES, B.READ_FILE, B.WRITE_FILE,
)

DOMAIN = B.Domain("clinic", "A clinic's doctors, patients, appointments and prescriptions.", SCHEMA, generate, TOOLS)

PAGES = B.paging_prelude("fetch", tool="tool", kwargs="kw", rows="out", offset="off", page="p")

LEAVE_PROG = PAGES + r"""
import re
text = tools["read_file"](path="leave/leave_notice.txt")["content"]
m = re.search(r"(Dr\. .+?) will be on leave from (\d{4}-\d\d-\d\d) to (\d{4}-\d\d-\d\d)", text)
name, start, end = m.groups()
doc = next(d for d in fetch("list_doctors", name=name) if d["name"] == name)
for a in fetch("list_appointments", doctor_id=doc["id"], status="scheduled", date_from=start, date_to=end):
    tools["cancel_appointment"](appointment_id=a["id"], reason="doctor on leave")
tools["submit_answer"]()
"""

NOSHOW = PAGES + """\
ids = []
for d in fetch("list_doctors", specialty="cardiology"):
    ids += [a["id"] for a in fetch("list_appointments", doctor_id=d["id"], status="no-show", date_from="2024-01-01",
                                   date_to="2024-03-31")]
print(len(ids))
tools["submit_answer"](answer=sorted(ids))
"""

ALLERGY = PAGES + r"""
import csv, io, json, re
active = {p["patient_id"] for p in fetch("list_prescriptions", drug="amoxicillin", active=1)}
out = []
for path in tools["list_files"](directory="intake"):
    text = tools["read_file"](path=path)["content"]
    if path.endswith(".json"):
        d = json.loads(text)
        pid, allergies = d["patient_id"], " ".join(d["allergies"])
    elif path.endswith(".csv"):
        row = next(csv.DictReader(io.StringIO(text)))
        pid, allergies = int(row["patient_id"]), row["allergies"]
    else:
        pid = int(re.search(r"\(id (\d+)\)", text).group(1))
        allergies = re.search(r"Allergies: (.*)", text).group(1)
    if pid in active and "penicillin" in allergies.lower():
        out.append(pid)
print(sorted(out))
tools["submit_answer"](answer=sorted(out))
"""

BUSIEST = PAGES + """\
from collections import Counter
c = Counter(a["date"] for a in fetch("list_appointments", status="completed", date_from="2024-06-01",
                                     date_to="2024-06-30"))
best = min(c, key=lambda day: (-c[day], day))
print(best, c[best])
tools["submit_answer"](answer=[best, c[best]])
"""

REQUESTS = PAGES + r"""
import re
failed = []
for path in tools["list_files"](directory="requests"):
    for m in re.finditer(r"appointment (\d+)", tools["read_file"](path=path)["content"]):
        r = tools["cancel_appointment"](appointment_id=int(m.group(1)), reason="patient request")
        if not r.get("ok"):
            failed.append(int(m.group(1)))
print(failed)
tools["submit_answer"](answer=sorted(failed))
"""

WARNINGS = PAGES + """\
from collections import Counter
c = Counter(a["patient_id"] for a in fetch("list_appointments", status="no-show", date_from="2024-04-01",
                                           date_to="2024-06-30"))
rows = ["patient_id,no_shows"]
for pid in sorted(p for p, k in c.items() if k >= 2):
    text = f"You missed {c[pid]} appointments between April and June. Please cancel appointments you cannot attend."
    for attempt in range(5):
        try:
            tools["send_message"](patient_id=pid, text=text)
            break
        except Exception as e:
            print("retrying:", e)
    else:
        raise RuntimeError(f"could not message patient {pid}")
    rows.append(f"{pid},{c[pid]}")
tools["write_file"](path="reports/no_show_warnings.csv", content="\\n".join(rows) + "\\n")
tools["submit_answer"]()
"""


def _appts(ctx):
  return {r["id"]: (r["status"], r["cancel_reason"])
          for r in ctx.q("SELECT id, status, cancel_reason FROM appointments")}


def _leave_expected(ctx):
  name, start, end = re.search(r"(Dr\. .+?) will be on leave from (\S+) to (\S+) ",
                               ctx.read("leave/leave_notice.txt")).groups()
  want = _appts(ctx)
  for r in ctx.q("SELECT a.id FROM appointments a JOIN doctors d ON d.id = a.doctor_id WHERE d.name = ? AND "
                 "a.status = 'scheduled' AND a.date BETWEEN ? AND ?", name, start, end):
    want[r["id"]] = ("cancelled", "doctor on leave")
  return want


def _allergy(ctx):
  active = {r["patient_id"] for r in ctx.q(
      "SELECT patient_id FROM prescriptions WHERE drug = 'amoxicillin' AND active = 1")}
  out = []
  for rel in ctx.files("intake"):
    pid = int(re.search(r"patient_(\d+)\.", rel).group(1))
    text = ctx.read(rel)
    allergic = ("penicillin" in json.loads(text)["allergies"] if rel.endswith(".json") else
                "penicillin" in text.lower())
    if pid in active and allergic:
      out.append(pid)
  return sorted(out)


def _busiest(ctx):
  r = ctx.q1("SELECT date, COUNT(*) AS n FROM appointments WHERE status = 'completed' AND date LIKE '2024-06-%' "
             "GROUP BY date ORDER BY n DESC, date LIMIT 1")
  return [r["date"], r["n"]]


def _requests_expected(ctx):
  want, failed = _appts(ctx), []
  for rel in ctx.files("requests"):
    for m in re.finditer(r"appointment (\d+)", ctx.read(rel)):
      i = int(m.group(1))
      if want[i][0] == "scheduled":
        want[i] = ("cancelled", "patient request")
      else:
        failed.append(i)
  return {"answer": sorted(failed), "appts": want}


def _warnings(ctx):
  return {r["patient_id"]: r["k"] for r in ctx.q(
      "SELECT patient_id, COUNT(*) AS k FROM appointments WHERE status = 'no-show' AND date BETWEEN '2024-04-01' "
      "AND '2024-06-30' GROUP BY patient_id HAVING k >= 2")}


def _warnings_check(ctx, e, a):
  rows = ctx.q("SELECT patient_id, text FROM messages")
  got = {r["patient_id"]: r["text"] for r in rows}
  if len(rows) != len(got) or got.keys() != e.keys() or not all(re.search(rf"\b{e[p]}\b", got[p]) for p in e):
    return False
  text = ctx.read("reports/no_show_warnings.csv")
  lines = [] if text is None else [line.strip().replace(" ", "") for line in text.splitlines() if line.strip()]
  return lines == ["patient_id,no_shows"] + [f"{p},{e[p]}" for p in sorted(e)]


TASKS = [
    B.Task(DOMAIN, "cancel_leave_appointments",
           "Cancel, with the reason 'doctor on leave', every scheduled appointment of the doctor named in "
           "leave/leave_notice.txt that falls within the leave (both end dates included). Change nothing else.",
           (LEAVE_PROG,), _leave_expected, check=lambda ctx, e, a: _appts(ctx) == e,
           wrong=("date_to=end", 'date_to=end[:8] + "%02d" % (int(end[8:]) - 1)'),
           conditions=(("doctor", ('doctor_id=doc["id"], ', '')),
                       ("leave dates", (', date_from=start, date_to=end', '')))),
    B.Task(DOMAIN, "cardiology_noshows_q1",
           "Which appointments with cardiology doctors dated from 2024-01-01 to 2024-03-31 ended as 'no-show'? "
           "Submit the list of their appointment ids.", (NOSHOW,), lambda ctx: [r["id"] for r in ctx.q(
               "SELECT a.id FROM appointments a JOIN doctors d ON d.id = a.doctor_id WHERE d.specialty = "
               "'cardiology' AND a.status = 'no-show' AND a.date BETWEEN '2024-01-01' AND '2024-03-31'")],
           answer="set", wrong=('date_to="2024-03-31"', 'date_to="2024-04-30"'),
           conditions=(("cardiology", ('"list_doctors", specialty="cardiology"', '"list_doctors"')),
                       ("no-show", ('status="no-show", ', '')),
                       ("Q1", (', date_from="2024-01-01"', ''), ('date_to="2024-03-31"', '')))),
    B.Task(DOMAIN, "amoxicillin_allergy_conflicts",
           "Which patients have an active amoxicillin prescription although their intake form in intake/ lists a "
           "penicillin allergy? The forms do not all use the same format. Submit the list of their patient ids.",
           (ALLERGY,), _allergy, answer="set", wrong=(' and "penicillin" in allergies.lower()', ""),
           tags=("explore",),
           conditions=(("amoxicillin", ('drug="amoxicillin", ', '')), ("active", (', active=1', '')))),
    B.Task(DOMAIN, "busiest_june_day",
           "On which date in June 2024 did the clinic have the most completed appointments (all doctors "
           "together), and how many were there? Submit a list [date as YYYY-MM-DD, count] (on a tie, the earliest "
           "date).", (BUSIEST,), _busiest, answer="list",
           wrong=("best = min(c, key=lambda day: (-c[day], day))",
                  "best = sorted(c, key=lambda day: (-c[day], day))[1]"),
           conditions=(("completed", ('status="completed", ', '')),
                       ("June", (', date_from="2024-06-01"', ''), ('date_to="2024-06-30"', '')))),
    B.Task(DOMAIN, "process_cancellation_requests",
           "The files in requests/ list appointments that patients asked to cancel. Cancel each of them with the "
           "reason 'patient request'. Some of them cannot be cancelled any more; submit the list of the ids of "
           "those appointments.", (REQUESTS,), _requests_expected, answer="set",
           check=lambda ctx, e, a: _appts(ctx) == e["appts"], wrong=('if not r.get("ok"):', "if False:"),
           tags=("errors",)),
    B.Task(DOMAIN, "no_show_warnings",
           "Warn every patient who missed (status 'no-show') at least two appointments dated from 2024-04-01 to "
           "2024-06-30: send each of them exactly one message that states the number of missed appointments, and "
           "write reports/no_show_warnings.csv with the header 'patient_id,no_shows' and one row per warned patient "
           "in increasing patient id order. Send no other messages.", (WARNINGS,), _warnings, check=_warnings_check,
           wrong=("if k >= 2", "if k >= 1"), tags=("writeback", "errors"),
           conditions=(("no-show", ('status="no-show", ', '')),
                       ("April-June", (', date_from="2024-04-01"', ''), ('date_to="2024-06-30"', '')))),
]
