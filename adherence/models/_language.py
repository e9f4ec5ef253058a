"""Which texts are not English: the bundled encoder (all-MiniLM-L6-v2) was trained on English, and its embeddings of
German, Chinese or Russian replies place an off-topic or rude reply as close to an English role as a good one.

A cheap check, no model: a text is in a non-Latin script when most of its letters are (Han, Kana, Hangul, Cyrillic,
Arabic, Hebrew, Devanagari, Thai, Greek), and in another Latin-script language when its common function words are
more often that language's than English's (German, French, Spanish, Italian, Portuguese, Dutch; at least three of them, twice as many as English ones, and
none that English shares: "a", "per", "no", "die", "van").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Iterable, Optional

__all__ = ["language_of", "language_note"]

_SCRIPTS = {
    "CJK": "Chinese or Japanese",
    "HIRAGANA": "Japanese",
    "KATAKANA": "Japanese",
    "HANGUL": "Korean",
    "CYRILLIC": "Russian or another Cyrillic-script language",
    "ARABIC": "Arabic",
    "HEBREW": "Hebrew",
    "DEVANAGARI": "Hindi or another Devanagari-script language",
    "THAI": "Thai",
    "GREEK": "Greek",
}
_FUNCTION_WORDS = {
    "English": "the and is are you your to of for with this that not have can will what it be on in".split(),
    "German": (
        "der das und ist sind sie ich nicht mit für ein eine zu auf den dem wir bitte auch wird von uns haben "
        "ihre ihr werden sich noch keine oder aber wie"
    ).split(),
    "French": "le la les et est sont vous je ne pas avec pour un une des du au nous votre merci sur dans mais".split(),
    "Spanish": "el la los las y es son usted yo con para un una de del que por su gracias".split(),
    "Italian": "il lo gli le e è sono lei io non con un una di del che grazie".split(),
    "Portuguese": "o os e é são você eu não com para um uma do que obrigado".split(),
    "Dutch": "het een en zijn u ik niet met voor dat wij uw bedankt".split(),
}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def language_of(text: str) -> Optional[str]:
    """The language ``text`` looks written in when it does not look English (None when it does, or is too short to
    tell)."""
    letters = [ch for ch in str(text or "") if ch.isalpha()]
    if len(letters) < 2:
        return None
    scripts: Counter = Counter()
    for ch in letters:
        name = unicodedata.name(ch, "")
        scripts[next((s for s in _SCRIPTS if name.startswith(s)), "LATIN")] += 1
    script, n = scripts.most_common(1)[0]
    if script != "LATIN" and n > len(letters) / 2:
        return _SCRIPTS[script]
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 4:
        return None
    hits = {lang: sum(w in set(fw) for w in words) for lang, fw in _FUNCTION_WORDS.items()}
    best = max(hits, key=lambda k: hits[k])
    if best != "English" and hits[best] >= 3 and hits[best] > 2 * hits["English"]:
        return best
    return None


def language_note(texts: Iterable, *, what: str = "replies", least: float = 0.02) -> Optional[str]:
    """One warning line when at least ``least`` of ``texts`` (and at least one) look written in a language the
    bundled encoder does not read, naming the languages; None otherwise."""
    found: Counter = Counter()
    n = 0
    for t in texts:
        if t is None:
            continue
        n += 1
        lang = language_of(t)
        if lang:
            found[lang] += 1
    total = sum(found.values())
    if not n or not total or total / n < least:
        return None
    langs = ", ".join(f"{lang} ({k})" for lang, k in found.most_common(4))
    return (
        f"{total} of {n} {what} ({total / n:.0%}) look written in another language than English: {langs}; the "
        "bundled encoder (all-MiniLM-L6-v2) was trained on English, and its scores of them are not to be trusted "
        "(label them separately, or use a multilingual encoder with --encoder)"
    )
