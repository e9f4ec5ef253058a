"""Regenerate adherence/examples/audit/: an HR-review-like application, its rubric and 12 artifacts.

Six employees, two generators: ``gen-a`` mostly follows the system prompt, ``gen-b`` slips (markdown
fences, long summaries, first person, a missing name). Written for this project.
"""

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "adherence" / "examples" / "audit"

SYSTEM_PROMPT = """You write performance review summaries for managers.
Input: the employee's name, role, a list of achievements and a rating from 1 to 5.
Return a JSON object with exactly the keys "summary", "strengths" and "growth_areas", and nothing else (no markdown).
The summary must start with the employee's name, mention the rating in its first sentence, be at most 60 words,
and be written in the third person (no first-person pronouns).
The strengths must mention at least two of the listed achievements word for word.
Keep a professional and encouraging tone, and make growth areas specific and actionable.
If the rating is below 3, add a development plan to the growth areas.
"""

PROMPT_TEMPLATE = (
    "Employee: {employee_name}\nRole: {role}\nAchievements:\n{bullets}\nRating: {rating}\n\nWrite the review."
)

EMPLOYEES = [
    (
        "Ana Silva",
        "Data Engineer",
        ["migrated the billing pipeline", "cut query costs by 30%", "mentored two interns"],
        4,
    ),
    ("Ben Okafor", "Support Lead", ["reduced ticket backlog", "wrote the escalation playbook", "trained new hires"], 5),
    ("Chen Wei", "Frontend Developer", ["shipped the new checkout", "improved accessibility scores"], 3),
    (
        "Dana Kowalski",
        "Account Manager",
        ["renewed the Acme contract", "grew upsell revenue", "ran quarterly reviews"],
        2,
    ),
    ("Eli Haddad", "QA Analyst", ["automated regression tests", "found the payment race condition"], 4),
    (
        "Fatima Noor",
        "Product Designer",
        ["redesigned onboarding", "ran twelve user interviews", "built the design system"],
        5,
    ),
]


def gen_a(name, role, ach, rating):
    summary = (
        f"{name} earned a rating of {rating} this cycle as {role}. "
        f"{name.split()[0]} delivered steady results and supported the team well."
    )
    strengths = f"{name.split()[0]} {ach[0]} and {ach[1]}, showing ownership and care."
    growth = "Share knowledge more widely by presenting one project per quarter." + (
        " Development plan: weekly check-ins with the manager for three months." if rating < 3 else ""
    )
    return json.dumps({"summary": summary, "strengths": strengths, "growth_areas": growth})


def gen_b(name, role, ach, rating, i):
    first = name.split()[0]
    if i % 3 == 0:
        summary = (
            f"I think {first} had a good year. With a rating of {rating}, we saw a lot of progress across many "
            "areas, and I would say the work was consistently solid, thoughtful and well-organised, even when "
            "deadlines were tight and priorities changed several times during the year, which they often did. "
            "Overall the whole team is happy with the progress and expects more of the same next year."
        )
    elif i % 3 == 1:
        summary = f"This year, {name} was rated {rating}. Good work overall as {role}."
    else:
        summary = f"{name} achieved a rating of {rating}. {first} is a dependable {role}."
    strengths = f"Strong contributor; {ach[0]}." if i % 2 else f"{first} {ach[0]} and {ach[-1]}."
    obj = {"summary": summary, "strengths": strengths, "growth_areas": "Keep it up."}
    if i % 2 == 0:
        obj["notes"] = "Generated automatically."
    text = json.dumps(obj, indent=2)
    return f"```json\n{text}\n```" if i % 2 == 0 else text


RUBRIC = {
    "questions": [
        {
            "id": "fmt_json",
            "category": "Format Adherence",
            "kind": "objective",
            "question": "Is the output a valid JSON object?",
            "check": {"type": "valid_json"},
        },
        {
            "id": "fmt_keys",
            "category": "Format Adherence",
            "kind": "objective",
            "question": "Does the JSON have exactly the keys summary, strengths and growth_areas?",
            "check": {"type": "exact_keys", "keys": ["summary", "strengths", "growth_areas"]},
        },
        {
            "id": "fmt_fences",
            "category": "Format Adherence",
            "kind": "objective",
            "question": "Is the output free of markdown code fences?",
            "check": {"type": "no_markdown_fences"},
        },
        {
            "id": "data_name",
            "category": "Data Field Utilization",
            "kind": "objective",
            "question": "Does the summary start with the employee's name?",
            "check": {"type": "starts_with", "field": "summary", "phrase": "{employee_name}"},
        },
        {
            "id": "data_rating",
            "category": "Data Field Utilization",
            "kind": "objective",
            "question": "Does the first sentence of the summary mention the rating?",
            "check": {"type": "first_sentence_contains", "field": "summary", "values": ["{rating}"]},
        },
        {
            "id": "data_achievements",
            "category": "Data Field Utilization",
            "kind": "objective",
            "question": "Do the strengths mention at least two of the listed achievements word for word?",
            "check": {"type": "contains_at_least", "field": "strengths", "values": ["{achievements}"], "min": 2},
        },
        {
            "id": "len_summary",
            "category": "Instruction Completeness",
            "kind": "objective",
            "question": "Is the summary at most 60 words long?",
            "check": {"type": "word_count", "field": "summary", "max": 60},
        },
        {
            "id": "style_person",
            "category": "Style Adherence",
            "kind": "objective",
            "question": "Does the summary avoid first-person pronouns?",
            "check": {"type": "first_person_pronoun", "field": "summary", "negate": True},
        },
        {
            "id": "style_tone",
            "category": "Style Adherence",
            "kind": "subjective",
            "question": "Is the tone professional and encouraging?",
        },
        {
            "id": "growth_specific",
            "category": "Instruction Completeness",
            "kind": "subjective",
            "question": "Are the growth areas specific and actionable?",
        },
        {
            "id": "style_third",
            "category": "Style Adherence",
            "kind": "subjective",
            "question": "Is the summary written in the third person?",
        },
    ],
    "ignored": [
        {
            "instruction": "If the rating is below 3, add a development plan to the growth areas.",
            "reason": "conditional instruction: applies only to some inputs",
        },
    ],
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "system_prompt.txt").write_text(SYSTEM_PROMPT, encoding="utf-8")
    import yaml

    (OUT / "rubric.yaml").write_text(yaml.safe_dump(RUBRIC, sort_keys=False, allow_unicode=True), encoding="utf-8")
    with open(OUT / "artifacts.jsonl", "w", encoding="utf-8") as fh:
        for i, (name, role, ach, rating) in enumerate(EMPLOYEES):
            prompt = PROMPT_TEMPLATE.format(
                employee_name=name, role=role, rating=rating, bullets="\n".join(f"- {a}" for a in ach)
            )
            for gen, output in (
                ("gen-a", gen_a(name, role, ach, rating)),
                ("gen-b", gen_b(name, role, ach, rating, i)),
            ):
                fh.write(
                    json.dumps(
                        {
                            "artifact_id": f"review-{i + 1:02d}",
                            "generator": gen,
                            "filled_prompt": prompt,
                            "output": output,
                            "employee_name": name,
                            "role": role,
                            "achievements": ach,
                            "rating": rating,
                        },
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
