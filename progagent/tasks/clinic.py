"""Clinic domain: doctors, patients, appointments and prescriptions; intake forms and a leave notice are files."""

from __future__ import annotations

import random

from progagent.tasks import base as B
from progagent.tasks.base import Ctx, ToolError

SPECIALTIES = ("cardiology",) * 3 + ("dermatology",) * 2 + ("pediatrics",) * 2 + ("neurology",) * 2 + ("general",)
DRUGS = ("amoxicillin", "ibuprofen", "metformin", "lisinopril", "atorvastatin", "omeprazole")
ALLERGIES = ("penicillin", "latex", "peanuts", "pollen", "none")
LEAVE = ("2024-07-08", "2024-07-19")

SCHEMA = """
CREATE TABLE doctors (id INTEGER PRIMARY KEY, name TEXT, specialty TEXT);
CREATE TABLE patients (id INTEGER PRIMARY KEY, name TEXT, birth_date TEXT, phone TEXT, address TEXT);
CREATE TABLE appointments (id INTEGER PRIMARY KEY, patient_id INTEGER, doctor_id INTEGER, date TEXT, time TEXT,
                           status TEXT, cancel_reason TEXT);
CREATE TABLE prescriptions (id INTEGER PRIMARY KEY, patient_id INTEGER, drug TEXT, dose TEXT, start_date TEXT,
                            active INTEGER);
CREATE INDEX appt_doctor ON appointments(doctor_id);
"""


def generate(ctx: Ctx, rng: random.Random, f: int) -> None:
  docs = [f"Dr. {n}" for n in B.unique_names(rng, len(SPECIALTIES))]
  B.insert_rows(ctx, "doctors", [{"id": i + 1, "name": n, "specialty": s} for i, (n, s) in enumerate(zip(docs, SPECIALTIES))])
  n_pat = 270 * f
  B.insert_rows(ctx, "patients", [{"id": i + 1, "name": n, "birth_date": B.rand_date(rng, "1940-01-01", "2020-12-31"),
                                   "phone": f"+351 91 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
                                   "address": f"{rng.randint(1, 300)} {rng.choice(B.LAST)} Street"}
                                  for i, n in enumerate(B.unique_names(rng, n_pat))])
  on_leave = rng.randint(1, len(docs))
  appts = []
  for i in range(1250 * f):
    date = B.rand_date(rng, "2024-01-02", "2024-07-31")
    status = "scheduled" if date >= B.TODAY else rng.choices(("completed", "no-show", "cancelled"), (75, 15, 10))[0]
    appts.append({"id": i + 1, "patient_id": rng.randint(1, n_pat), "doctor_id": rng.randint(1, len(docs)),
                  "date": date, "time": f"{rng.randint(8, 17):02d}:{rng.choice(('00', '20', '40'))}",
                  "status": status, "cancel_reason": None})
  for d in ("2024-07-05", LEAVE[0], "2024-07-12", LEAVE[1], "2024-07-22"):   # around and on the leave bounds
    appts.append({"id": len(appts) + 1, "patient_id": rng.randint(1, n_pat), "doctor_id": on_leave, "date": d,
                  "time": "09:00", "status": "scheduled", "cancel_reason": None})
  B.insert_rows(ctx, "appointments", appts)
  rx = [{"id": i + 1, "patient_id": rng.randint(1, n_pat), "drug": rng.choice(DRUGS), "dose": f"{rng.choice((5, 10, 20, 250, 500))} mg",
         "start_date": B.rand_date(rng), "active": int(rng.random() < 0.7)} for i in range(225 * f)]
  rx.append({"id": len(rx) + 1, "patient_id": 1, "drug": "amoxicillin", "dose": "500 mg", "start_date": "2024-06-20", "active": 1})
  rx.append({"id": len(rx) + 1, "patient_id": 2, "drug": "amoxicillin", "dose": "250 mg", "start_date": "2024-06-21", "active": 1})
  B.insert_rows(ctx, "prescriptions", rx)
  B.write_docs(ctx, rng, "clinic", ["scheduling", "no_show_policy", "prescribing", "privacy", "triage"])
  ctx.write("leave/leave_notice.txt", f"Staff notice\n\n{docs[on_leave - 1]} will be on leave from {LEAVE[0]} to "
            f"{LEAVE[1]} (both days included).\n")
  amox = sorted({r["patient_id"] for r in rx if r["drug"] == "amoxicillin" and r["active"]} - {1, 2})
  k = B.n_data_files(f)
  others = [p for p in range(3, n_pat + 1) if p not in amox]
  chosen = [1, 2] + rng.sample(amox, min(len(amox), k // 2 - 1)) 
  chosen += rng.sample(others, k - len(chosen))
  for j, pid in enumerate(chosen):
    allergy = "penicillin" if pid == 1 else "latex" if pid == 2 else rng.choice(ALLERGIES)
    ctx.write(f"intake/patient_{pid:05d}.txt", f"Patient: {ctx.scalar('SELECT name FROM patients WHERE id = ?', pid)} "
              f"(id {pid})\nAllergies: {allergy.capitalize()}\nNotes: {B.sentence(rng, 9)}\n")


def _list_appts(ctx, doctor_id):
  if ctx.q1("SELECT id FROM doctors WHERE id = ?", doctor_id) is None:
    raise ToolError(f"no doctor with id {doctor_id}; list_doctors gives the ids")
  return ctx.q("SELECT id, patient_id, date, time, status FROM appointments WHERE doctor_id = ? ORDER BY id", doctor_id)


def _get_patient(ctx, patient_id):
  r = ctx.q1("SELECT * FROM patients WHERE id = ?", patient_id)
  if r is None:
    raise ToolError(f"no patient with id {patient_id}")
  return r


def _cancel(ctx, appointment_id, reason):
  r = ctx.q1("SELECT status FROM appointments WHERE id = ?", appointment_id)
  if r is None:
    raise ToolError(f"no appointment with id {appointment_id}")
  if r["status"] != "scheduled":
    raise ToolError(f"appointment {appointment_id} is {r['status']}; only scheduled ones can be cancelled")
  ctx.exec("UPDATE appointments SET status = 'cancelled', cancel_reason = ? WHERE id = ?", reason, appointment_id)
  return {"appointment_id": appointment_id, "status": "cancelled"}


def _list_rx(ctx, drug):
  return ctx.q("SELECT id, patient_id, dose, start_date, active FROM prescriptions WHERE drug = ? ORDER BY id",
               drug.lower())


TOOLS = (
    B.tool("list_doctors", "List the doctors: [{id, name, specialty}].",
           lambda ctx: ctx.q("SELECT * FROM doctors ORDER BY id")),
    B.tool("list_appointments", "List a doctor's appointments: [{id, patient_id, date, time, status}] with status "
           "scheduled, completed, no-show or cancelled.", _list_appts, required=("doctor_id",),
           doctor_id=B.p_int("doctor id")),
    B.tool("get_patient", "Get one patient.", _get_patient, required=("patient_id",), patient_id=B.p_int("patient id")),
    B.tool("cancel_appointment", "Cancel a scheduled appointment, giving a reason.", _cancel,
           required=("appointment_id", "reason"), appointment_id=B.p_int("appointment id"),
           reason=B.p_str("why it is cancelled")),
    B.tool("list_prescriptions", "List the prescriptions of a drug: [{id, patient_id, dose, start_date, active}].",
           _list_rx, required=("drug",), drug=B.p_str("drug name, e.g. 'ibuprofen'")),
    B.LIST_FILES, B.READ_FILE,
)

DOMAIN = B.Domain("clinic", "A clinic's doctors, patients, appointments and prescriptions.", SCHEMA, generate, TOOLS)

LEAVE_PROG = r"""
import re
text = tools["read_file"](path="leave/leave_notice.txt")["content"]
m = re.search(r"(Dr\. .+?) will be on leave from (\d{4}-\d\d-\d\d) to (\d{4}-\d\d-\d\d)", text)
name, start, end = m.groups()
doc = next(d for d in tools["list_doctors"]() if d["name"] == name)
for a in tools["list_appointments"](doctor_id=doc["id"]):
    if a["status"] == "scheduled" and start <= a["date"] <= end:
        tools["cancel_appointment"](appointment_id=a["id"], reason="doctor on leave")
tools["submit_answer"]()
"""

NOSHOW = """\
n = 0
for d in tools["list_doctors"]():
    if d["specialty"] == "cardiology":
        n += sum(1 for a in tools["list_appointments"](doctor_id=d["id"])
                 if a["status"] == "no-show" and a["date"] <= "2024-03-31")
print(n)
tools["submit_answer"](answer=n)
"""

ALLERGY = r"""
import re
active = {p["patient_id"] for p in tools["list_prescriptions"](drug="amoxicillin") if p["active"]}
out = []
for path in tools["list_files"](directory="intake"):
    text = tools["read_file"](path=path)["content"]
    pid = int(re.search(r"\(id (\d+)\)", text).group(1))
    allergies = re.search(r"Allergies: (.*)", text).group(1).lower()
    if pid in active and "penicillin" in allergies:
        out.append(pid)
print(sorted(out))
tools["submit_answer"](answer=sorted(out))
"""

BUSIEST = """\
from collections import Counter
c = Counter()
for d in tools["list_doctors"]():
    for a in tools["list_appointments"](doctor_id=d["id"]):
        if a["status"] == "completed" and a["date"].startswith("2024-06"):
            c[a["date"]] += 1
best = min(c, key=lambda day: (-c[day], day))
print(best, c[best])
tools["submit_answer"](answer=best)
"""


def _appts(ctx):
  return {r["id"]: (r["status"], r["cancel_reason"]) for r in ctx.q("SELECT id, status, cancel_reason FROM appointments")}


def _leave_expected(ctx):
  import re
  name = re.search(r"(Dr\. .+?) will be on leave", ctx.read("leave/leave_notice.txt")).group(1)
  want = _appts(ctx)
  for r in ctx.q("SELECT a.id FROM appointments a JOIN doctors d ON d.id = a.doctor_id WHERE d.name = ? AND "
                 "a.status = 'scheduled' AND a.date BETWEEN ? AND ?", name, *LEAVE):
    want[r["id"]] = ("cancelled", "doctor on leave")
  return want


def _allergy(ctx):
  import re
  active = {r["patient_id"] for r in ctx.q("SELECT patient_id FROM prescriptions WHERE drug = 'amoxicillin' AND active = 1")}
  out = []
  for rel in ctx.files("intake"):
    text = ctx.read(rel)
    pid = int(re.search(r"\(id (\d+)\)", text).group(1))
    if pid in active and "penicillin" in re.search(r"Allergies: (.*)", text).group(1).lower():
      out.append(pid)
  return sorted(out)


TASKS = [
    B.Task(DOMAIN, "cancel_leave_appointments",
           "Cancel, with the reason 'doctor on leave', every scheduled appointment of the doctor named in "
           "leave/leave_notice.txt that falls within the leave (both end dates included). Change nothing else.",
           (LEAVE_PROG,), _leave_expected, check=lambda ctx, e, a: _appts(ctx) == e,
           wrong=('start <= a["date"] <= end', 'start <= a["date"] < end')),
    B.Task(DOMAIN, "cardiology_noshows_q1",
           "How many appointments of cardiology doctors dated from 2024-01-01 to 2024-03-31 ended as 'no-show'?",
           (NOSHOW,), lambda ctx: ctx.scalar(
               "SELECT COUNT(*) FROM appointments a JOIN doctors d ON d.id = a.doctor_id WHERE d.specialty = "
               "'cardiology' AND a.status = 'no-show' AND a.date <= '2024-03-31'"),
           answer="int", wrong=(' and a["date"] <= "2024-03-31"', "")),
    B.Task(DOMAIN, "amoxicillin_allergy_conflicts",
           "Which patients have an active amoxicillin prescription although their intake form in intake/ lists a "
           "penicillin allergy? Submit the list of their patient ids.", (ALLERGY,), _allergy, answer="set",
           wrong=(' and "penicillin" in allergies', "")),
    B.Task(DOMAIN, "busiest_june_day",
           "On which date in June 2024 did the clinic have the most completed appointments (all doctors "
           "together)? Submit the date as YYYY-MM-DD (on a tie, the earliest date).", (BUSIEST,),
           lambda ctx: ctx.scalar("SELECT date FROM appointments WHERE status = 'completed' AND date LIKE '2024-06-%' "
                                  "GROUP BY date ORDER BY COUNT(*) DESC, date LIMIT 1"), answer="text",
           wrong=("best = min(c, key=lambda day: (-c[day], day))", "best = sorted(c, key=lambda day: (-c[day], day))[1]")),
]
