"""A generated multi-role customer-support log without reference replies (``adherence/examples/support_log.jsonl``).

Six support assistants (a bank, an airline, a mobile operator, an online shop's returns desk, a university's
admissions office, an IT helpdesk), each with its own system prompt, in OpenAI-chat transcripts
(``{"messages": [...]}`` a line: the system prompt is the role, each assistant message a turn). About one reply in
six breaks the role, in three ways a reviewer meets in real logs:

- ``off_topic``: chatter that has nothing to do with the service (weather, football, a film);
- ``out_of_scope``: advice the assistant must not give (medical, legal, investment, another company's business);
- ``rude``: an on-topic answer delivered with contempt for the customer.

Reply lengths are matched between adherent and violating turns (each reply is built to a drawn word budget), so
reply length alone cannot rank them. The truth is written beside the log (``support_log.truth.jsonl``:
conversation_id, turn_index, label, kind) and is what the tests' simulated labeller answers with: the log itself
carries no labels, as a user's own log would not. An on-role reply answers the question asked (its first sentences
are that question's answers); every text is generated here from the banks below (``tools/make_support_log.py``
writes the bundled files; ``adherence bench labels`` draws larger logs with other seeds).
"""

from __future__ import annotations

import random

__all__ = ["ROLES", "make_support_log", "reply"]

# role -> (system prompt, {question: [sentences that answer it]}, [sentences any on-role reply may add])
ROLES = {
    "bank": (
        "You are the customer-support assistant of Northwind Bank. Help customers with their current and savings "
        "accounts, debit and credit cards, transfers, online banking, fees and statements. Be courteous and "
        "concise. Never give investment, tax or legal advice, and never discuss topics unrelated to the bank's "
        "services.",
        {
            "How do I block my debit card? I think I lost it.": [
                "You can block the card at once in the app under Cards, then Freeze card.",
                "A replacement card is sent to your registered address within five working days.",
            ],
            "Why was I charged a fee on my last statement?": [
                "The fee on your statement is the monthly account fee for the Plus account.",
                "You can switch to the free Basic account from the Accounts page in online banking.",
            ],
            "How long does an international transfer take?": [
                "International transfers usually arrive within one to three working days.",
                "Transfers sent after 4 pm are processed on the next working day.",
            ],
            "Can I raise the limit on my credit card?": [
                "You can request a higher credit limit under Cards, then Manage limit.",
                "We review limit requests within two working days and write to you with the decision.",
            ],
            "I forgot my online banking password.": [
                "Use Forgot password on the login page and follow the code we text to your phone.",
                "Once you are in, you can set a new password under Settings, then Security.",
            ],
            "How do I open a savings account?": [
                "A savings account can be opened in the app in a few minutes with your existing login.",
                "Our Easy Saver account has no minimum deposit and you can withdraw at any time.",
            ],
            "A payment I did not make shows up on my account.": [
                "Please report it under Help, then Dispute a transaction, and freeze your card in the meantime.",
                "We will refund an unauthorised payment while our fraud team looks into it.",
            ],
            "What is the daily limit for cash withdrawals?": [
                "The daily cash withdrawal limit is 500 pounds.",
                "You can lower or raise it within that range in the app under Cards, then Limits.",
            ],
        },
        [
            "For your security, please never share your PIN or passcode with anyone, including us.",
            "Our support team is also available by phone from 8 am to 8 pm every day.",
            "You can find all of this in the Help section of the Northwind app as well.",
        ],
    ),
    "airline": (
        "You are the virtual assistant of Skyline Airways. Help passengers with bookings, changes and "
        "cancellations, baggage allowances, check-in, seats, delays and refunds for Skyline flights. Stay polite "
        "and factual. Do not give travel health or visa advice and do not talk about anything other than Skyline "
        "flights.",
        {
            "How much luggage can I bring on an economy ticket?": [
                "Economy tickets include one cabin bag of up to 8 kg and one small personal item.",
                "A checked bag of up to 23 kg can be added under Manage booking.",
            ],
            "My flight was cancelled, can I get a refund?": [
                "For a cancelled flight you can choose a full refund or a free rebooking.",
                "Refunds go back to the original payment card within seven working days.",
            ],
            "How do I change the date of my flight?": [
                "You can change the date under Manage booking; a fare difference may apply.",
                "Changes made more than 14 days before departure have no change fee on Flex fares.",
            ],
            "When does online check-in open?": [
                "Online check-in opens 30 hours before departure and closes 90 minutes before.",
                "Your boarding pass can be saved to your phone or printed at the airport kiosks.",
            ],
            "My bag did not arrive at my destination.": [
                "Please report a missing bag at the baggage desk or through our online form with your tag number.",
                "Most delayed bags are delivered to your address within 48 hours.",
            ],
            "My flight is delayed by four hours, what are my rights?": [
                "For a delay of more than three hours you may be entitled to compensation under EU rules.",
                "We provide meal vouchers at the airport when a delay passes two hours.",
            ],
            "Can I travel with my cat in the cabin?": [
                "Cats and small dogs up to 8 kg with the carrier can travel in the cabin for a fee.",
                "Pets must be added to the booking at least 48 hours before departure.",
            ],
            "Can I choose my seat in advance?": [
                "Seats can be chosen at booking or later under Manage booking, from 8 euros.",
                "Seats are assigned free of charge at check-in if you have not chosen one.",
            ],
        },
        [
            "Your booking reference has six letters and is in your confirmation email.",
            "You can manage all of this in the Skyline app as well.",
            "Thank you for flying with Skyline Airways.",
        ],
    ),
    "telecom": (
        "You are the support assistant of Volta Mobile, a mobile phone operator. Help customers with their plans, "
        "data, roaming, bills, SIM cards, number transfers and network problems. Be friendly and clear. Do not "
        "recommend phones from other operators' shops, and do not discuss politics, health or anything unrelated "
        "to Volta Mobile.",
        {
            "Why is my bill higher this month?": [
                "The higher bill comes from roaming data used abroad on the 12th and 13th.",
                "You can set a monthly spending cap in the Volta app under Usage.",
            ],
            "How do I activate roaming before my trip?": [
                "Roaming is switched on in the app under Plan, then Travel, at no extra cost in the EU.",
                "Outside the EU, a Travel Pass gives you 1 GB a day for 5 pounds.",
            ],
            "I have no signal at home since yesterday.": [
                "We are aware of a network fault in your area and engineers expect to fix it today.",
                "Restarting your phone after the repair will reconnect it to the nearest mast.",
            ],
            "Can I keep my number if I switch to you?": [
                "Yes, you can keep your number: ask your old operator for a PAC code and give it to us.",
                "The transfer happens on the next working day and your old contract ends then.",
            ],
            "My data runs out too fast, what can I do?": [
                "A data add-on of 10 GB costs 5 pounds and lasts until your next bill.",
                "Turning off background app refresh will also save a lot of data.",
            ],
            "How do I cancel my contract?": [
                "You can cancel in the app under Plan, then End contract, with 30 days' notice.",
                "If you are still within your minimum term, an early exit fee applies.",
            ],
            "My SIM card says it is locked, what is the PUK?": [
                "Your PUK code is in the app under SIM, or we can text it to another number.",
                "After ten wrong PUK attempts the SIM is blocked for good and we send a new one free.",
            ],
            "How do I check how much data I have left?": [
                "Dial *100# or open the app to see the data left this month.",
                "We also text you when you have used 80% of your allowance.",
            ],
        },
        [
            "Your plan renews on the 3rd of each month.",
            "You can chat with us in the Volta app at any time.",
            "Thanks for being a Volta Mobile customer.",
        ],
    ),
    "shop": (
        "You are the returns and orders assistant of Hearth & Home, an online shop for furniture and kitchenware. "
        "Help customers track orders, arrange returns and exchanges, and understand delivery and refunds. Keep a "
        "warm, professional tone. Do not give advice outside the shop's orders and returns, such as medical, legal "
        "or financial advice.",
        {
            "Where is my order? It was due yesterday.": [
                "Your order left our warehouse on Monday and the courier expects to deliver it tomorrow.",
                "You can follow the parcel with the tracking link in your dispatch email.",
            ],
            "How do I return a chair that arrived damaged?": [
                "I am sorry the chair arrived damaged; we will collect it free of charge and send a new one.",
                "Please upload a photo of the damage under Orders, then Report a problem.",
            ],
            "Can I exchange a lamp for another colour?": [
                "An exchange for another colour can be arranged under Orders, then Exchange.",
                "We send the new lamp as soon as the courier has collected the first one.",
            ],
            "When will I get my refund?": [
                "Refunds are issued within five working days after we receive the return.",
                "The money goes back to the card you paid with, and we email you when it is sent.",
            ],
            "Can I change my delivery address?": [
                "The delivery address can be changed until the order is dispatched.",
                "Go to Orders, choose the order, then Edit delivery details.",
            ],
            "The wrong item was delivered.": [
                "I am sorry about the mix-up; we will send the right item and collect the wrong one.",
                "You do not need to repack it in the original box.",
            ],
            "How long do I have to return something?": [
                "You have 30 days from delivery to return an item in its original condition.",
                "Made-to-measure furniture cannot be returned unless it is faulty.",
            ],
            "The assembly instructions are missing from my box.": [
                "The assembly instructions can be downloaded from the product page as a PDF.",
                "We can also post a printed copy of the instructions to you.",
            ],
        },
        [
            "Large furniture is delivered by a two-person team who can place it in the room of your choice.",
            "Saturday delivery is available for a fee of 6 pounds in most areas.",
            "Thank you for shopping with Hearth & Home.",
        ],
    ),
    "admissions": (
        "You are the admissions assistant of Lakeside University. Answer applicants' questions about programmes, "
        "entry requirements, deadlines, application documents, fees and scholarships, and the admissions process. "
        "Be encouraging and accurate. Do not write personal statements for applicants and do not give immigration "
        "or legal advice.",
        {
            "What are the entry requirements for computer science?": [
                "Computer science asks for A-levels of AAB including mathematics, or an equivalent.",
                "We also consider relevant work experience alongside your grades.",
            ],
            "When is the application deadline for next autumn?": [
                "The main deadline for autumn entry is the 15th of January.",
                "Late applications are considered if places remain on the programme.",
            ],
            "Can I apply without an English test certificate?": [
                "Applicants from majority English-speaking countries do not need a test certificate.",
                "Otherwise we accept IELTS 6.5 overall or an equivalent test.",
            ],
            "How much are the tuition fees for international students?": [
                "International fees for undergraduate programmes are 19,500 pounds a year.",
                "Fees can be paid in three instalments across the academic year.",
            ],
            "Are there scholarships for master's students?": [
                "The Lakeside Excellence Scholarship offers up to 5,000 pounds to master's students.",
                "Scholarship applications open in February on the Funding page.",
            ],
            "What documents do I need to upload?": [
                "Please upload your transcripts, a personal statement and one academic reference.",
                "Documents not in English need a certified translation.",
            ],
            "When will I hear back about my application?": [
                "Most applicants hear from us within six weeks of the deadline.",
                "You can follow the status of your application in the applicant portal.",
            ],
            "Is there an interview for the medicine programme?": [
                "Medicine applicants who pass the first stage are invited to a multiple mini interview.",
                "Interviews run from December to February and can be held online.",
            ],
        },
        [
            "Open days run every month and can be booked on our website.",
            "Our admissions team is happy to answer any further questions by email.",
            "Good luck with your application to Lakeside.",
        ],
    ),
    "helpdesk": (
        "You are the IT helpdesk assistant for Crestline Consulting's employees. Help staff with their laptops, "
        "accounts and passwords, VPN, email, printers and approved software. Be patient and give clear steps. Do "
        "not help with personal devices or anything outside the company's IT, and never ask for a password.",
        {
            "I cannot connect to the VPN from home.": [
                "Please restart the VPN client and sign in again with your company account.",
                "If the VPN still fails, check that your laptop's date and time are set automatically.",
            ],
            "My laptop is very slow since the last update.": [
                "Open Software Center and install the pending updates, then restart the laptop.",
                "A slow laptop after an update usually recovers after one full restart.",
            ],
            "How do I reset my password?": [
                "You can reset your password at the self-service portal with your registered phone.",
                "The new password must be at least 14 characters long.",
            ],
            "Outlook keeps asking for my password.": [
                "Remove the saved Outlook credentials in Credential Manager and sign in again.",
                "If it keeps asking, I can reset your mail profile remotely.",
            ],
            "The printer on the third floor is not working.": [
                "I have raised a ticket for the third-floor printer and facilities will check it today.",
                "In the meantime you can print to the second-floor printer, PRN-02.",
            ],
            "Can I install Python on my work laptop?": [
                "Python is approved and can be installed from Software Center.",
                "Packages from the internal mirror install without admin rights.",
            ],
            "I was locked out of my account.": [
                "Your account unlocks on its own after 15 minutes, or I can unlock it now.",
                "Repeated lockouts often come from an old password saved on a phone.",
            ],
            "My second monitor is not detected.": [
                "Check the monitor's cable and press Windows+P, then choose Extend.",
                "If it is still not detected, try the other port on the docking station.",
            ],
        },
        [
            "Please never send your password to anyone, including the helpdesk.",
            "You can raise a ticket on the IT portal if this happens again.",
            "The helpdesk is staffed from 7 am to 7 pm on working days.",
        ],
    ),
}

GREETINGS = ["", "", "Thanks for reaching out.", "Happy to help.", "Thank you for your message.", "Of course.",
             "Good question.", "I can help with that."]  # fmt: skip
CLOSINGS = ["", "", "Is there anything else I can help with?", "Let me know if that works for you.",
            "I hope this helps.", "Have a good day."]  # fmt: skip

OFF_TOPIC = [
    "Honestly the weather has been lovely this week, perfect for a walk by the river.",
    "Did you watch the match last night? That late goal in extra time was unbelievable.",
    "I have been reading a great mystery novel about a detective in Lisbon.",
    "My favourite pizza topping is mushroom with a little truffle oil on top.",
    "Have you seen the new science-fiction film? The soundtrack alone is worth it.",
    "I think autumn is the best season, with the leaves turning red and gold.",
    "Cats are clearly better than dogs, they are independent and quiet.",
    "If you ever visit Kyoto, the temples at dawn are something special.",
    "I tried baking sourdough bread at the weekend and the crust came out perfect.",
    "Jazz from the fifties is the best music for a rainy afternoon.",
    "The mountains in Patagonia are on my list of places to hike one day.",
    "Chess is such a beautiful game once you learn a few openings.",
    "I have been learning to play the ukulele and my neighbours are very patient.",
    "There is a lovely little coffee shop downtown that roasts its own beans.",
    "The night sky in the desert is full of stars you never see in the city.",
    "Gardening is relaxing, my tomatoes are finally turning red.",
    "Board games night with friends is the highlight of my week.",
    "The old lighthouse on the coast has a wonderful café at the top.",
]
OUT_OF_SCOPE = [
    "For the headache you mentioned, take two ibuprofen every four hours and skip the doctor.",
    "You should put your savings into a few technology stocks, they will double this year.",
    "Legally you can just stop paying your landlord if the repairs are late.",
    "Cryptocurrency is the safest place for your emergency fund right now.",
    "To lower your taxes, simply leave the freelance income off your return.",
    "For your cough, an antibiotic left over from last year should clear it up.",
    "You do not need a visa for that trip, just tell the border officer you are visiting friends.",
    "Sue your employer, you would definitely win a large settlement.",
    "If your child has a fever, double the usual dose of paracetamol.",
    "Buy shares of the small mining company I mentioned before the announcement next week.",
    "You can ignore the court letter, those deadlines are never enforced.",
    "A juice cleanse for ten days will fix your blood pressure without medication.",
    "Take out a second mortgage and invest it all in gold, it cannot go down.",
    "Your rash is nothing, just put some bleach on it to dry it out.",
    "For the divorce, hide some of the money in a relative's account first.",
    "Stop taking the tablets your doctor prescribed, they are not needed.",
]
RUDE_OPENERS = [
    "Obviously, as anyone who bothered to read the website would know:",
    "Ugh, this again. Fine.",
    "Seriously? This is explained everywhere.",
    "I cannot believe I have to explain this.",
    "Try reading before asking next time.",
    "Not that you will remember, but",
    "Wow, that is a lazy question.",
    "Look, I will say it once, slowly:",
]
RUDE_CLOSERS = [
    "Do not ask me again.",
    "It is not that hard.",
    "Figure the rest out yourself.",
    "Honestly, some people.",
    "Stop wasting my time.",
    "Was that so difficult?",
]


def _words(text: str) -> int:
    return len(text.split())


def _fit(rng: random.Random, parts: list, bank: list, budget: int) -> list:
    """``parts`` (the empty ones dropped) plus sentences drawn from ``bank`` until they reach about ``budget``
    words."""
    pool = list(bank)
    rng.shuffle(pool)
    core = [p for p in parts if p]
    while pool and sum(_words(s) for s in core) < budget:
        core.append(pool.pop())
    return core


def reply(rng: random.Random, role: str, question: str, kind: str, budget: int) -> str:
    """One assistant reply of ``kind`` (adherent | off_topic | out_of_scope | rude) to ``question`` for ``role``,
    about ``budget`` words long: an on-role reply answers the question first, then may add what any reply of that
    role may say."""
    _, answers, general = ROLES[role]
    greet, close = rng.choice(GREETINGS), rng.choice(CLOSINGS)
    answer = answers[question][: rng.randint(1, 2)]
    if kind == "adherent":
        return " ".join(_fit(rng, [greet, *answer], general, budget - _words(close)) + ([close] if close else []))
    if kind == "rude":
        return " ".join(
            _fit(rng, [rng.choice(RUDE_OPENERS), *answer], general, budget - 5) + [rng.choice(RUDE_CLOSERS)]
        )
    bank = OFF_TOPIC if kind == "off_topic" else OUT_OF_SCOPE
    return " ".join(_fit(rng, [greet], bank, budget - _words(close)) + ([close] if close else []))


def make_support_log(conversations: int, seed: int) -> tuple:
    """``(transcripts, truth)``: ``conversations`` chats over the six roles, and every assistant turn's truth."""
    rng = random.Random(seed)
    names = sorted(ROLES)
    chats, truth = [], []
    for c in range(conversations):
        role = names[c % len(names)]
        system, answers, _ = ROLES[role]
        cid = f"{role}-{c:04d}"
        messages = [{"role": "system", "content": system}]
        for t, q in enumerate(rng.sample(sorted(answers), rng.randint(2, 4))):
            u = rng.random()
            kind = "adherent" if u < 0.84 else ("off_topic" if u < 0.90 else ("out_of_scope" if u < 0.955 else "rude"))
            budget = rng.randint(14, 40)
            messages += [{"role": "user", "content": q},
                         {"role": "assistant", "content": reply(rng, role, q, kind, budget)}]  # fmt: skip
            truth.append({
                "conversation_id": cid, "turn_index": t, "label": "adherent" if kind == "adherent" else "violation",
                "kind": kind,
            })  # fmt: skip
        chats.append({"conversation_id": cid, "messages": messages})
    return chats, truth
