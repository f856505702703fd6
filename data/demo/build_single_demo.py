"""Build `single_demo.json`: single-hop questions over the demo corpus, in official HotpotQA JSON.

Why this set exists: the two-hop questions of `hotpot_demo.json` are beyond SmolLM2-135M with or
without passages, so every method scores at the floor and the demo cannot show what retrieval
does. Here each answer is stated in one passage of `psgs_demo.tsv` and nowhere else, and the world
is invented, so a small model can only answer by copying from a retrieved passage.

The questions and answers below are hand-written. The script only does the mechanical parts, so the
file can be rebuilt and audited: it finds the gold sentence, picks distractor paragraphs and shuffles
the context. Before it writes anything it checks every rule the set promises (see `check`) and stops
on the first broken one with the question it belongs to.

    python data/demo/build_single_demo.py        # from any directory; standard library only
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
PASSAGES = HERE / "psgs_demo.tsv"
TWO_HOP = HERE / "hotpot_demo.json"
EXEMPLARS = (HERE / "exemplars.json", HERE / "exemplars_single.json")
OUT = HERE / "single_demo.json"

DISTRACTORS = 9  # 1 gold + 9 distractors = HotpotQA's 10 paragraphs
MAX_SAME_ANSWER = 2
# The same rule that reproduces every context paragraph of hotpot_demo.json from its passage.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
WORD = re.compile(r"[A-Za-z]{4,}")

# Titles of passages the two-hop exemplars reason over: no test question is about them.
TWO_HOP_EXEMPLAR_TITLES = {
    "Corrigall Rope Walk", "Silas Corrigall", "Remedies from the Hedgerow", "Helme Moyle", "Eulalie Berriman",
    "Oskerry Bridge", "Tiernan Lathorne", "Salt Kings' Procession", "Ysella Vellanoweth", "Kittiwake",
    "Faolan Wearne", "A History of the Margraves", "Hollis Nute", "Goodeve School of Drawing",
    "Harbourside Academy of Music", "Lucan Bellweather", "Petronel Brackwater",
}
# ... and the passages the single-hop exemplars (exemplars_single.json) are written from.
SINGLE_EXEMPLAR_TITLES = {
    "Ulla Farrowby", "Grey Heron", "Nevin Eddowes", "A New Map of Velloch", "Hollis Kenward", "Hask",
    "Colquist Bell Foundry", "Velmora Lantern Fair",
}

# (gold passage title, question, answer, kind of entity, kind of answer[, key]). The gold sentence is the one
# sentence of the passage that holds the answer. Where the answer is the passage's own subject, `key` is the
# phrase that states the fact instead: it picks the gold sentence and stands for the subject in the check that
# no other passage states the fact.
QUESTIONS = [
    # people
    ("Ottilie Rathmore", "In which town was the cartographer Ottilie Rathmore born?", "Crennick", "person", "town"),
    ("Dorran Jolliffe", "Under which shipwright did Dorran Jolliffe train?", "Ysella Rookwood", "person", "person"),
    ("Ilse Nithercott", "Which captain did Ilse Nithercott serve under as a young mate?", "Cador Lidstone",
     "person", "person"),
    ("Rafe Loveday", "Who taught the merchant Rafe Loveday?", "Tamsin Estercombe", "person", "person"),
    ("Verity Whitburn", "Under whom did the papermaker Verity Whitburn learn her trade?", "Maddox Penhallow",
     "person", "person"),
    ("Corwin Elphick", "In which town was the margrave Corwin Elphick born?", "Dunmarrow", "person", "town"),
    ("Helme Dauncey", "Where did the printer Helme Dauncey die?", "Harrowgale", "person", "town"),
    ("Nerys Isbell", "In which town was the printer Nerys Isbell born?", "Rushcombe", "person", "town"),
    ("Bram Scobell", "What was Bram Scobell's trade?", "weaver", "person", "occupation"),
    ("Liesl Yarnold", "Who was the teacher of the historian Liesl Yarnold?", "Elowen Kitto", "person", "person"),
    ("Ulric Menhenick", "Which astronomer taught Ulric Menhenick?", "Osric Fearnley", "person", "person"),
    ("Gideon Kettleby", "To which luthier was Gideon Kettleby apprenticed?", "Casimer Wyncote", "person", "person"),
    ("Senara Ebbitt", "In which town are the logbooks of the captain Senara Ebbitt kept?", "Mallowfirth",
     "person", "town"),
    ("Fenna Halloran", "Where did the shipwright Fenna Halloran die?", "Pennock Dale", "person", "town"),
    ("Yannick Vessey", "What was Yannick Vessey's occupation?", "papermaker", "person", "occupation"),
    ("Carys Abernay", "What did the father of the printer Carys Abernay do for a living?", "ferryman",
     "person", "occupation"),
    ("Thea Olver", "In which town was the papermaker Thea Olver born?", "Lissendry", "person", "town"),
    ("Osric Northey", "Whose pupil did the engineer Osric Northey become at sixteen?", "Ulric Quennell",
     "person", "person"),
    # organisations
    ("Weirholt Rope Walk", "What kind of rope was the Weirholt Rope Walk's speciality?", "bell ropes",
     "organisation", "thing"),
    ("Polglaze Bell Foundry", "Until what year was the Polglaze Bell Foundry in business?", "1752",
     "organisation", "year"),
    ("Morrowgate Cloth Hall", "What cloth made up most of the trade of the Morrowgate Cloth Hall?", "linen damask",
     "organisation", "thing"),
    ("Varnham Press", "In what year did the Varnham Press close?", "1869", "organisation", "year"),
    # ships
    ("Anwy Maid", "Which shipyard built the brig Anwy Maid?", "Vosper Shipyard", "ship", "organisation"),
    ("Storm Petrel", "At which port was the schooner Storm Petrel registered?", "Ebbernay", "ship", "town"),
    ("Tallis Rose", "In which town was the packet ship Tallis Rose broken up?", "Dunmarrow", "ship", "town"),
    ("Silver Sennet", "In what year was the ketch Silver Sennet wrecked?", "1784", "ship", "year"),
    # written and musical works
    ("Notes on the Ailments of Glassblowers", "Which press first printed Notes on the Ailments of Glassblowers?",
     "Three Herons Press", "work", "organisation"),
    ("Suite for the River Boats", "How many movements does Suite for the River Boats have?", "five",
     "work", "number"),
    ("A Flora of the Brevin Marshes", "Which press published A Flora of the Brevin Marshes?", "Varnham Press",
     "work", "organisation"),
    ("The River Trades of Ambrith", "In what year was The River Trades of Ambrith first printed?", "1883",
     "work", "year"),
    ("Lanterns over the Water", "In what year did Lanterns over the Water first appear in print?", "1897",
     "work", "year"),
    ("The Coastal Survey of Kestrany", "At what scale does The Coastal Survey of Kestrany record the coast?",
     "one inch to the mile", "work", "scale"),
    # towns
    ("Lissendry", "On which river does the small town of Lissendry stand?", "Brevin", "town", "river"),
    ("Quillhaven", "What did the fishing fleet of Quillhaven catch?", "cod and herring", "town", "thing"),
    ("Gallowmere", "In what year did Gallowmere receive its town charter?", "1383", "town", "year"),
    # buildings
    ("Ostravel Concert Hall", "In what year was the Ostravel Concert Hall completed?", "1796", "building", "year"),
    ("Dunmarrow Slate Quay", "When did the Dunmarrow Slate Quay open?", "1836", "building", "year"),
    ("Istrebly Clock Tower", "How was the building of the Istrebly Clock Tower paid for?", "public subscription",
     "building", "thing"),
    # festivals
    ("Heron Regatta", "In which town is the Heron Regatta held?", "Ostravel", "festival", "town"),
    ("Feast of the Rope Walks", "In which month is the Feast of the Rope Walks held?", "May", "festival", "month"),
    # rivers, lakes and mountains
    ("Tuvay", "How long is the river Tuvay?", "139 kilometres", "river", "length"),
    ("Lake Tallis", "Which fish, found in few other lakes of the Reaches, is taken from Lake Tallis?", "char",
     "lake or mountain", "thing"),
    ("Mount Valdrey", "How high is Mount Valdrey?", "1,088 metres", "lake or mountain", "height"),
    # instruments
    ("Glass Dulcimer", "In what year was the Glass Dulcimer devised?", "1877", "instrument", "year"),
    ("Tideharp", "What wood is the soundbox of the Tideharp carved from?", "willow", "instrument", "thing"),
    # ruling houses, provinces, seas
    ("House of Tarnaby", "Until what year did the House of Tarnaby rule Durrowen?", "1550", "ruling house", "year"),
    ("Isselmark", "Which is the smallest province of the Reaches?", "Isselmark", "province", "province",
     "smallest province"),
    ("Grey Sound", "Which stretch of coast was the first in the Reaches to be fully charted?", "Grey Sound", "sea",
     "sea", "fully charted"),
]


def key_of(entry: tuple) -> str | None:
    """The optional sixth field of a `QUESTIONS` entry."""
    return entry[5] if len(entry) > 5 else None


def passages() -> dict[str, str]:
    with open(PASSAGES, encoding="utf-8", newline="") as handle:
        return {row["title"]: row["text"] for row in csv.DictReader(handle, delimiter="\t")}


def contains(text: str, phrase: str) -> bool:
    """`phrase` as whole words (so "May" is not found in "mayor")."""
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def distractors(title: str, question: str, corpus: dict[str, str]) -> list[str]:
    """The passages sharing the most 4+-letter words with the gold passage and the question (ties: corpus order),
    so the context is made of paragraphs of the same kind, as in hotpot_demo.json."""
    target = words(corpus[title]) | words(question)
    scored = [(-len(target & words(f"{t} {text}")), position, t)
              for position, (t, text) in enumerate(corpus.items()) if t != title]
    return [t for _, _, t in sorted(scored)[:DISTRACTORS]]


def check(corpus: dict[str, str]) -> None:
    """Every rule the README promises; the first broken one stops the build with a message naming the question."""
    two_hop = json.loads(TWO_HOP.read_text(encoding="utf-8"))
    two_hop_gold = {title for q in two_hop for title, _ in q["supporting_facts"]}
    exemplar_answers = {e["answer"] for path in EXEMPLARS for e in json.loads(path.read_text(encoding="utf-8"))}
    questions = Counter(q[1] for q in QUESTIONS)
    answers = Counter(q[2] for q in QUESTIONS)
    for number, entry in enumerate(QUESTIONS, 1):
        title, question, answer = entry[:3]
        key = key_of(entry) or title
        where = f"question {number} ({question!r})"
        if title not in corpus:
            sys.exit(f"{where}: no passage titled {title!r} in {PASSAGES.name}")
        if title in two_hop_gold or title in TWO_HOP_EXEMPLAR_TITLES | SINGLE_EXEMPLAR_TITLES:
            sys.exit(f"{where}: {title!r} is a gold passage of a two-hop question or an exemplar's")
        if not contains(corpus[title], answer):
            sys.exit(f"{where}: the answer {answer!r} is not in the passage {title!r}")
        if answer in exemplar_answers:
            sys.exit(f"{where}: the answer {answer!r} is an exemplar's answer")
        if answers[answer] > MAX_SAME_ANSWER or questions[question] > 1:
            sys.exit(f"{where}: the answer is used {answers[answer]} times or the question repeats")
        # The fact is stated once: no other passage names both the subject (or `key`) and the answer.
        elsewhere = [t for t, text in corpus.items()
                     if t != title and contains(f"{t} {text}", key) and contains(f"{t} {text}", answer)]
        if elsewhere:
            sys.exit(f"{where}: {key!r} and {answer!r} also appear together in {', '.join(elsewhere)}")


def build(corpus: dict[str, str]) -> list[dict]:
    sentences = {t: SENTENCE_END.split(text) for t, text in corpus.items()}
    records = []
    for number, entry in enumerate(QUESTIONS, 1):
        title, question, answer = entry[:3]
        phrase = key_of(entry) or answer
        gold = [i for i, sentence in enumerate(sentences[title]) if contains(sentence, phrase)]
        if len(gold) != 1:
            sys.exit(f"question {number}: {phrase!r} is in {len(gold)} sentences of {title!r}, not 1")
        titles = [title, *distractors(title, question, corpus)]
        random.Random(number).shuffle(titles)
        records.append({
            "_id": f"single-{number:03d}",
            "question": question,
            "answer": answer,
            "type": "single-hop",
            "level": "easy",  # HotpotQA's level for single-hop questions (train-easy)
            "supporting_facts": [[title, gold[0]]],
            "context": [[t, sentences[t]] for t in titles],
        })
    return records


def main() -> int:
    corpus = passages()
    check(corpus)
    records = build(corpus)
    OUT.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    kinds = Counter(q[3] for q in QUESTIONS)
    answer_kinds = Counter(q[4] for q in QUESTIONS)
    print(f"wrote {OUT.name}: {len(records)} questions")
    print("entities:", ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print("answers:", ", ".join(f"{k} {n}" for k, n in answer_kinds.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
