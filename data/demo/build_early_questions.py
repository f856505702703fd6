"""Build `early_questions.json`: real-world general-knowledge questions for training DioR's early
detector on the demo, in TriviaQA's JSON layout (`format: triviaqa`).

Why this set exists: the early detector learns, from the Integrated-Gradients attribution of a bare
question, whether the model's own answer to it will be wrong (Alg. 1). The demo's QA sets are about an
invented world, so a model answering them without passages is wrong on nearly every one and the
detector would see a single class. Snyder et al. (2024), whose recipe DioR's early detector is, built
their data from templated T-REx relations ("What is the capital of X?", "Who founded X?", "Where was
X born?") plus TriviaQA; this set follows that shape with relations a 135M model sometimes knows
(the capital of France) and often does not (the capital of Tajikistan), so both labels occur.

The facts below were written by hand and kept to well-established ones; where a fact has two
accepted forms both are aliases (Kyiv / Kiev), and contested or changing facts (capitals being
moved, currencies being replaced, disputed inventors) were left out. The script does the mechanical
parts and checks before writing:

- every question and every id is unique;
- no answer or alias appears, as whole words after SQuAD normalisation, in its own question (an
  answer that echoes the question would be labelled correct for free);
- no alias is a common English word that a wrong answer would contain by accident (`WORDS`).

    python data/demo/build_early_questions.py        # from any directory; standard library only

The label itself is computed by `adaptive-rag detector-data --kind early`: an answer is correct when
it contains the value or an alias (`evaluation.metrics.contains_gold`, which this script's
normalisation mirrors).
"""

from __future__ import annotations

import json
import re
import string
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "early_questions.json"

# Words no alias may be: a wrong answer would contain them by accident ("I", "as", "won", "page", ...).
WORDS = {"i", "a", "as", "at", "be", "he", "in", "is", "it", "no", "on", "or", "so", "to", "us", "we", "won",
         "page", "wood", "wales", "real", "the", "an", "of"}

# (relation, question template, answer type, [(subject, value, *aliases), ...])
RELATIONS = [
    ("capital", "What is the capital of {}?", "WikipediaEntity", [
        ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
        ("China", "Beijing", "Peking"), ("Russia", "Moscow"), ("the United Kingdom", "London"), ("Egypt", "Cairo"),
        ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasília", "Brasilia"),
        ("Argentina", "Buenos Aires"), ("India", "New Delhi"), ("Portugal", "Lisbon"), ("Greece", "Athens"),
        ("Turkey", "Ankara"), ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Switzerland", "Bern", "Berne"),
        ("the Netherlands", "Amsterdam"), ("Belgium", "Brussels"), ("Sweden", "Stockholm"), ("Norway", "Oslo"),
        ("Denmark", "Copenhagen"), ("Finland", "Helsinki"), ("Ireland", "Dublin"), ("Hungary", "Budapest"),
        ("the Czech Republic", "Prague"), ("Romania", "Bucharest"), ("Ukraine", "Kyiv", "Kiev"),
        ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("South Korea", "Seoul"), ("North Korea", "Pyongyang"),
        ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("the Philippines", "Manila"), ("Iran", "Tehran", "Teheran"),
        ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"), ("Pakistan", "Islamabad"), ("Afghanistan", "Kabul"),
        ("Peru", "Lima"), ("Chile", "Santiago"), ("Colombia", "Bogotá", "Bogota"), ("Venezuela", "Caracas"),
        ("Cuba", "Havana"), ("Morocco", "Rabat"), ("Algeria", "Algiers"), ("Ethiopia", "Addis Ababa"),
        ("Ghana", "Accra"), ("New Zealand", "Wellington"), ("Iceland", "Reykjavík", "Reykjavik"),
        ("Croatia", "Zagreb"), ("Serbia", "Belgrade"), ("Slovakia", "Bratislava"), ("Lithuania", "Vilnius"),
        ("Latvia", "Riga"), ("Estonia", "Tallinn"), ("Mongolia", "Ulaanbaatar", "Ulan Bator"),
        ("Nepal", "Kathmandu"), ("Bangladesh", "Dhaka", "Dacca"), ("Syria", "Damascus"), ("Jordan", "Amman"),
        ("the United Arab Emirates", "Abu Dhabi"), ("Zimbabwe", "Harare"), ("Jamaica", "Kingston"),
        ("Uzbekistan", "Tashkent"), ("Cambodia", "Phnom Penh"),
    ]),
    ("state-capital", "What is the capital of the US state of {}?", "WikipediaEntity", [
        ("California", "Sacramento"), ("Texas", "Austin"), ("New York", "Albany"), ("Florida", "Tallahassee"),
        ("Illinois", "Springfield"), ("Pennsylvania", "Harrisburg"), ("Nevada", "Carson City"),
        ("Alaska", "Juneau"), ("Oregon", "Salem"), ("Michigan", "Lansing"), ("Ohio", "Columbus"),
    ]),
    ("author", "Who wrote {}?", "WikipediaEntity", [
        ("Hamlet", "William Shakespeare", "Shakespeare"), ("Pride and Prejudice", "Jane Austen", "Austen"),
        ("Nineteen Eighty-Four", "George Orwell", "Orwell", "Eric Arthur Blair"),
        ("War and Peace", "Leo Tolstoy", "Tolstoy"),
        ("Crime and Punishment", "Fyodor Dostoevsky", "Dostoevsky", "Dostoyevsky"),
        ("Don Quixote", "Miguel de Cervantes", "Cervantes"), ("Moby-Dick", "Herman Melville", "Melville"),
        ("The Great Gatsby", "F. Scott Fitzgerald", "Fitzgerald"), ("the novel Ulysses", "James Joyce", "Joyce"),
        ("the Odyssey", "Homer"), ("the Divine Comedy", "Dante Alighieri", "Dante"),
        ("Faust", "Johann Wolfgang von Goethe", "Goethe"), ("Les Misérables", "Victor Hugo", "Hugo"),
        ("Madame Bovary", "Gustave Flaubert", "Flaubert"), ("Oliver Twist", "Charles Dickens", "Dickens"),
        ("Jane Eyre", "Charlotte Brontë", "Charlotte Bronte"),
        ("Wuthering Heights", "Emily Brontë", "Emily Bronte"),
        ("Frankenstein", "Mary Shelley", "Mary Wollstonecraft Shelley"), ("Dracula", "Bram Stoker", "Stoker"),
        ("The Adventures of Tom Sawyer", "Mark Twain", "Twain", "Samuel Clemens", "Samuel Langhorne Clemens"),
        ("To Kill a Mockingbird", "Harper Lee"), ("The Catcher in the Rye", "J. D. Salinger", "Salinger"),
        ("One Hundred Years of Solitude", "Gabriel García Márquez", "García Márquez", "Garcia Marquez"),
        ("The Old Man and the Sea", "Ernest Hemingway", "Hemingway"),
        ("On the Origin of Species", "Charles Darwin", "Darwin"),
        ("The Communist Manifesto", "Karl Marx", "Marx", "Friedrich Engels", "Engels"),
        ("The Prince", "Niccolò Machiavelli", "Machiavelli"), ("The Metamorphosis", "Franz Kafka", "Kafka"),
        ("The Lord of the Rings", "J. R. R. Tolkien", "Tolkien"),
        ("Alice's Adventures in Wonderland", "Lewis Carroll", "Carroll", "Charles Lutwidge Dodgson"),
        ("Treasure Island", "Robert Louis Stevenson", "Stevenson"), ("Robinson Crusoe", "Daniel Defoe", "Defoe"),
        ("Gulliver's Travels", "Jonathan Swift", "Swift"), ("Brave New World", "Aldous Huxley", "Huxley"),
        ("Lolita", "Vladimir Nabokov", "Nabokov"),
        ("The Little Prince", "Antoine de Saint-Exupéry", "Saint-Exupéry", "Saint-Exupery"),
        ("The Grapes of Wrath", "John Steinbeck", "Steinbeck"), ("The War of the Worlds", "H. G. Wells", "Wells"),
        ("Around the World in Eighty Days", "Jules Verne", "Verne"),
        ("The Three Musketeers", "Alexandre Dumas", "Dumas"), ("The Jungle Book", "Rudyard Kipling", "Kipling"),
        ("The Picture of Dorian Gray", "Oscar Wilde", "Wilde"), ("Things Fall Apart", "Chinua Achebe", "Achebe"),
        ("The Handmaid's Tale", "Margaret Atwood", "Atwood"),
    ]),
    ("symbol", "What is the chemical symbol of {}?", "FreeForm", [
        ("gold", "Au"), ("silver", "Ag"), ("iron", "Fe"), ("copper", "Cu"), ("lead", "Pb"), ("tin", "Sn"),
        ("mercury", "Hg"), ("sodium", "Na"), ("potassium", "K"), ("tungsten", "W"), ("oxygen", "O"),
        ("hydrogen", "H"), ("carbon", "C"), ("nitrogen", "N"), ("neon", "Ne"), ("calcium", "Ca"),
        ("magnesium", "Mg"), ("zinc", "Zn"), ("nickel", "Ni"), ("chlorine", "Cl"), ("sulfur", "S"),
        ("phosphorus", "P"), ("uranium", "U"), ("platinum", "Pt"), ("aluminium", "Al"), ("silicon", "Si"),
        ("lithium", "Li"), ("titanium", "Ti"),
    ]),
    ("country", "In which country is {}?", "WikipediaEntity", [
        ("the Eiffel Tower", "France"), ("the Colosseum", "Italy"), ("Machu Picchu", "Peru"),
        ("the Taj Mahal", "India"), ("Angkor Wat", "Cambodia"),
        ("Stonehenge", "England", "United Kingdom", "UK", "Britain"), ("the Sagrada Família", "Spain"),
        ("the Christ the Redeemer statue", "Brazil"),
        ("the Statue of Liberty", "United States", "USA", "United States of America", "America"),
        ("the Sydney Opera House", "Australia"), ("Mount Fuji", "Japan"), ("Chichen Itza", "Mexico"),
        ("the Great Pyramid of Giza", "Egypt"), ("Neuschwanstein Castle", "Germany"),
        ("the Leaning Tower of Pisa", "Italy"), ("Mount Kilimanjaro", "Tanzania"),
        ("the Hagia Sophia", "Turkey", "Türkiye"),
        ("the Burj Khalifa", "the United Arab Emirates", "United Arab Emirates", "UAE"),
        ("the Golden Gate Bridge", "United States", "USA", "United States of America", "America"),
        ("the Louvre", "France"), ("Easter Island", "Chile"), ("Timbuktu", "Mali"), ("Marrakesh", "Morocco"),
        ("Kyoto", "Japan"), ("Venice", "Italy"), ("Barcelona", "Spain"), ("Munich", "Germany"),
        ("Toronto", "Canada"), ("Rio de Janeiro", "Brazil"), ("Mumbai", "India"), ("Istanbul", "Turkey", "Türkiye"),
        ("Salzburg", "Austria"), ("Geneva", "Switzerland"), ("Edinburgh", "Scotland", "United Kingdom", "UK"),
        ("Melbourne", "Australia"), ("Auckland", "New Zealand"), ("Cape Town", "South Africa"),
        ("Shanghai", "China"), ("Ho Chi Minh City", "Vietnam"), ("the Hermitage Museum", "Russia"),
    ]),
    ("language", "What language is spoken in {}?", "WikipediaEntity", [
        ("France", "French"), ("Germany", "German"), ("Italy", "Italian"), ("Spain", "Spanish", "Castilian"),
        ("Portugal", "Portuguese"), ("Brazil", "Portuguese"), ("Japan", "Japanese"),
        ("China", "Chinese", "Mandarin"), ("Russia", "Russian"), ("Greece", "Greek"), ("Turkey", "Turkish"),
        ("Poland", "Polish"), ("the Netherlands", "Dutch"), ("Sweden", "Swedish"), ("Norway", "Norwegian"),
        ("Finland", "Finnish", "Swedish"), ("Hungary", "Hungarian", "Magyar"), ("Iran", "Persian", "Farsi"),
        ("Israel", "Hebrew"), ("Egypt", "Arabic"), ("South Korea", "Korean"), ("Vietnam", "Vietnamese"),
        ("Thailand", "Thai"), ("Indonesia", "Indonesian", "Bahasa Indonesia"), ("Iceland", "Icelandic"),
        ("Czechia", "Czech"), ("Ukraine", "Ukrainian"), ("Bangladesh", "Bengali", "Bangla"), ("Cambodia", "Khmer"),
        ("Ethiopia", "Amharic"),
    ]),
    ("currency", "What is the currency of {}?", "WikipediaEntity", [
        ("Japan", "yen"), ("the United Kingdom", "pound sterling", "pound", "sterling", "pounds"),
        ("the United States", "United States dollar", "US dollar", "dollar", "dollars"),
        ("India", "Indian rupee", "rupee", "rupees"), ("China", "renminbi", "yuan", "RMB"),
        ("Russia", "Russian ruble", "ruble", "rouble", "rubles", "roubles"),
        ("Switzerland", "Swiss franc", "franc", "francs"), ("Mexico", "Mexican peso", "peso", "pesos"),
        ("Brazil", "Brazilian real", "reais"), ("South Africa", "South African rand", "rand"),
        ("South Korea", "South Korean won", "Korean won"), ("Sweden", "Swedish krona", "krona", "kronor"),
        ("Norway", "Norwegian krone", "krone", "kroner"), ("Poland", "Polish złoty", "złoty", "zloty"),
        ("Turkey", "Turkish lira", "lira"), ("Israel", "new shekel", "shekel", "shekels"),
        ("Thailand", "Thai baht", "baht"), ("Indonesia", "Indonesian rupiah", "rupiah"),
        ("Saudi Arabia", "Saudi riyal", "riyal"), ("Nigeria", "Nigerian naira", "naira"),
        ("Hungary", "Hungarian forint", "forint"), ("Ukraine", "Ukrainian hryvnia", "hryvnia"),
        ("Germany", "euro", "euros"), ("Italy", "euro", "euros"), ("Canada", "Canadian dollar"),
        ("Australia", "Australian dollar"),
    ]),
    ("painter", "Who painted {}?", "WikipediaEntity", [
        ("the Mona Lisa", "Leonardo da Vinci", "Leonardo", "da Vinci"),
        ("The Last Supper", "Leonardo da Vinci", "Leonardo", "da Vinci"),
        ("The Starry Night", "Vincent van Gogh", "van Gogh"), ("Guernica", "Pablo Picasso", "Picasso"),
        ("The Persistence of Memory", "Salvador Dalí", "Dalí", "Dali"), ("The Scream", "Edvard Munch", "Munch"),
        ("Girl with a Pearl Earring", "Johannes Vermeer", "Vermeer"), ("The Night Watch", "Rembrandt"),
        ("The Birth of Venus", "Sandro Botticelli", "Botticelli"),
        ("the ceiling of the Sistine Chapel", "Michelangelo"), ("The Kiss", "Gustav Klimt", "Klimt"),
        ("Impression, Sunrise", "Claude Monet", "Monet"),
        ("The Garden of Earthly Delights", "Hieronymus Bosch", "Bosch"),
        ("Las Meninas", "Diego Velázquez", "Velázquez", "Velazquez"), ("American Gothic", "Grant Wood"),
        ("The Great Wave off Kanagawa", "Katsushika Hokusai", "Hokusai"),
        ("Liberty Leading the People", "Eugène Delacroix", "Delacroix"), ("The School of Athens", "Raphael"),
        ("Nighthawks", "Edward Hopper", "Hopper"), ("The Third of May 1808", "Francisco Goya", "Goya"),
    ]),
    ("composer", "Who composed {}?", "WikipediaEntity", [
        ("The Magic Flute", "Wolfgang Amadeus Mozart", "Mozart"),
        ("The Marriage of Figaro", "Wolfgang Amadeus Mozart", "Mozart"),
        ("the Moonlight Sonata", "Ludwig van Beethoven", "Beethoven"),
        ("Für Elise", "Ludwig van Beethoven", "Beethoven"), ("The Four Seasons", "Antonio Vivaldi", "Vivaldi"),
        ("Swan Lake", "Pyotr Ilyich Tchaikovsky", "Tchaikovsky"),
        ("The Nutcracker", "Pyotr Ilyich Tchaikovsky", "Tchaikovsky"),
        ("The Blue Danube", "Johann Strauss II", "Johann Strauss", "Strauss"),
        ("the opera Carmen", "Georges Bizet", "Bizet"), ("La traviata", "Giuseppe Verdi", "Verdi"),
        ("the opera Aida", "Giuseppe Verdi", "Verdi"), ("The Ring of the Nibelung", "Richard Wagner", "Wagner"),
        ("Boléro", "Maurice Ravel", "Ravel"), ("The Rite of Spring", "Igor Stravinsky", "Stravinsky"),
        ("the piano piece Clair de lune", "Claude Debussy", "Debussy"),
        ("the oratorio Messiah", "George Frideric Handel", "Handel", "Händel"),
        ("the Brandenburg Concertos", "Johann Sebastian Bach", "Bach"), ("The Planets", "Gustav Holst", "Holst"),
        ("Rhapsody in Blue", "George Gershwin", "Gershwin"), ("Madama Butterfly", "Giacomo Puccini", "Puccini"),
        ("The Barber of Seville", "Gioachino Rossini", "Rossini", "Giovanni Paisiello", "Paisiello"),
        ("The Carnival of the Animals", "Camille Saint-Saëns", "Saint-Saëns", "Saint-Saens"),
    ]),
    ("continent", "On which continent is {}?", "WikipediaEntity", [
        ("Kenya", "Africa"), ("Brazil", "South America"), ("Mongolia", "Asia"), ("Portugal", "Europe"),
        ("Peru", "South America"), ("Nepal", "Asia"), ("Ghana", "Africa"), ("Chile", "South America"),
        ("Norway", "Europe"), ("Canada", "North America"), ("Vietnam", "Asia"), ("Morocco", "Africa"),
        ("Bolivia", "South America"), ("Madagascar", "Africa"), ("Argentina", "South America"),
        ("Thailand", "Asia"), ("Finland", "Europe"), ("Nigeria", "Africa"), ("Poland", "Europe"), ("Japan", "Asia"),
    ]),
    ("birthplace", "Where was {} born?", "WikipediaEntity", [
        ("Wolfgang Amadeus Mozart", "Salzburg"), ("Ludwig van Beethoven", "Bonn"), ("Albert Einstein", "Ulm"),
        ("William Shakespeare", "Stratford-upon-Avon", "Stratford"), ("Napoleon Bonaparte", "Ajaccio", "Corsica"),
        ("Pablo Picasso", "Málaga", "Malaga"), ("Mahatma Gandhi", "Porbandar"), ("Marie Curie", "Warsaw"),
        ("Karl Marx", "Trier"), ("Galileo Galilei", "Pisa"), ("Vincent van Gogh", "Zundert", "Groot-Zundert"),
        ("Johann Sebastian Bach", "Eisenach"), ("Franz Kafka", "Prague"), ("Hans Christian Andersen", "Odense"),
        ("Nelson Mandela", "Mvezo"), ("Elvis Presley", "Tupelo"), ("Martin Luther King Jr.", "Atlanta"),
        ("John Lennon", "Liverpool"), ("Walt Disney", "Chicago"), ("Barack Obama", "Honolulu", "Hawaii"),
        ("Adolf Hitler", "Braunau am Inn", "Braunau"), ("Charles Darwin", "Shrewsbury"),
        ("Dante Alighieri", "Florence"), ("Christopher Columbus", "Genoa"), ("Joseph Stalin", "Gori"),
    ]),
    ("founder", "Who founded {}?", "WikipediaEntity", [
        ("Microsoft", "Bill Gates", "Gates", "Paul Allen"),
        ("Apple", "Steve Jobs", "Jobs", "Steve Wozniak", "Wozniak", "Ronald Wayne"),
        ("Amazon", "Jeff Bezos", "Bezos"), ("Facebook", "Mark Zuckerberg", "Zuckerberg"),
        ("Google", "Larry Page", "Sergey Brin", "Brin"), ("SpaceX", "Elon Musk", "Musk"), ("Alibaba", "Jack Ma"),
        ("Wikipedia", "Jimmy Wales", "Larry Sanger", "Sanger"), ("IKEA", "Ingvar Kamprad", "Kamprad"),
        ("the Red Cross", "Henry Dunant", "Dunant"),
        ("the Mongol Empire", "Genghis Khan", "Chinggis Khan", "Temujin"), ("Sikhism", "Guru Nanak", "Nanak"),
        ("the Salvation Army", "William Booth", "Booth"),
    ]),
    ("director", "Who directed the film {}?", "WikipediaEntity", [
        ("Jaws", "Steven Spielberg", "Spielberg"), ("Psycho", "Alfred Hitchcock", "Hitchcock"),
        ("The Godfather", "Francis Ford Coppola", "Coppola"), ("Pulp Fiction", "Quentin Tarantino", "Tarantino"),
        ("2001: A Space Odyssey", "Stanley Kubrick", "Kubrick"),
        ("Schindler's List", "Steven Spielberg", "Spielberg"), ("Citizen Kane", "Orson Welles", "Welles"),
        ("Seven Samurai", "Akira Kurosawa", "Kurosawa"), ("Vertigo", "Alfred Hitchcock", "Hitchcock"),
        ("The Shining", "Stanley Kubrick", "Kubrick"), ("Spirited Away", "Hayao Miyazaki", "Miyazaki"),
        ("Jurassic Park", "Steven Spielberg", "Spielberg"),
    ]),
]

# Questions of no single template: (relation, question, answer type, value, *aliases).
FREE = [
    ("year", "In which year did World War II end?", "Numerical", "1945"),
    ("year", "In which year did World War I begin?", "Numerical", "1914"),
    ("year", "In which year did the Berlin Wall fall?", "Numerical", "1989"),
    ("year", "In which year did the Titanic sink?", "Numerical", "1912"),
    ("year", "In which year did Christopher Columbus first reach the Americas?", "Numerical", "1492"),
    ("year", "In which year did humans first land on the Moon?", "Numerical", "1969"),
    ("year", "In which year did the French Revolution begin?", "Numerical", "1789"),
    ("year", "In which year was the United States Declaration of Independence adopted?", "Numerical", "1776"),
    ("year", "In which year was the Battle of Hastings fought?", "Numerical", "1066"),
    ("year", "In which year was the Soviet Union dissolved?", "Numerical", "1991"),
    ("person", "Who was the first President of the United States?", "WikipediaEntity", "George Washington",
     "Washington"),
    ("person", "Who was the first person to walk on the Moon?", "WikipediaEntity", "Neil Armstrong", "Armstrong"),
    ("person", "Who was the first human to travel into space?", "WikipediaEntity", "Yuri Gagarin", "Gagarin"),
    ("person", "Who developed the theory of general relativity?", "WikipediaEntity", "Albert Einstein", "Einstein"),
    ("person", "Who formulated the law of universal gravitation?", "WikipediaEntity", "Isaac Newton", "Newton"),
    ("person", "Who proposed the theory of evolution by natural selection?", "WikipediaEntity", "Charles Darwin",
     "Darwin", "Alfred Russel Wallace"),
    ("person", "Who discovered penicillin?", "WikipediaEntity", "Alexander Fleming", "Fleming"),
    ("person", "Who was the first woman to win a Nobel Prize?", "WikipediaEntity", "Marie Curie", "Curie"),
    ("science", "What is the largest planet in the Solar System?", "WikipediaEntity", "Jupiter"),
    ("science", "Which planet is known as the Red Planet?", "WikipediaEntity", "Mars"),
    ("science", "Which planet is closest to the Sun?", "WikipediaEntity", "Mercury"),
    ("science", "What is the largest ocean on Earth?", "WikipediaEntity", "Pacific Ocean", "Pacific"),
    ("science", "What is the highest mountain above sea level?", "WikipediaEntity", "Mount Everest", "Everest"),
    ("science", "What is the longest river in Africa?", "WikipediaEntity", "Nile"),
    ("science", "What is the chemical formula of water?", "FreeForm", "H2O"),
    ("science", "Which gas do plants take in from the air for photosynthesis?", "FreeForm", "carbon dioxide",
     "CO2"),
    ("science", "How many legs does a spider have?", "Numerical", "eight", "8"),
    ("science", "How many sides does a hexagon have?", "Numerical", "six", "6"),
    ("science", "At how many degrees Celsius does water boil at sea level?", "Numerical", "100",
     "one hundred"),
    ("science", "What is the hardest natural substance?", "FreeForm", "diamond"),
    ("science", "Which organ pumps blood through the human body?", "FreeForm", "heart"),
    ("science", "What is the largest animal that has ever lived?", "FreeForm", "blue whale"),
    ("science", "Which element has the atomic number 1?", "WikipediaEntity", "hydrogen"),
    ("science", "What is the largest country in the world by area?", "WikipediaEntity", "Russia"),
    ("sport", "In which sport is the Stanley Cup awarded?", "FreeForm", "ice hockey", "hockey"),
    ("sport", "Which sport is played at the Wimbledon Championships?", "FreeForm", "tennis"),
    ("sport", "In which sport is the Tour de France contested?", "FreeForm", "cycling", "bicycle racing"),
    ("sport", "In which sport is the Ryder Cup contested?", "FreeForm", "golf"),
    ("sport", "In which sport do England and Australia play for the Ashes?", "FreeForm", "cricket"),
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalise(text: str) -> str:
    """SQuAD normalisation, as `adaptive_rag.evaluation.metrics.normalize_answer` does it."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(text: str, phrase: str) -> bool:
    """`phrase` occurs in `text` as whole words after normalisation (the label's containment test)."""
    return f" {normalise(phrase)} " in f" {normalise(text)} "


def entries() -> list[tuple[str, str, str, list[str]]]:
    """(relation, question, answer type, [value, *aliases]) in file order."""
    out = []
    for relation, template, kind, rows in RELATIONS:
        for subject, *answers in rows:
            out.append((relation, template.format(subject), kind, list(answers)))
    for relation, question, kind, *answers in FREE:
        out.append((relation, question, kind, list(answers)))
    return out


def check(rows: list[tuple[str, str, str, list[str]]]) -> None:
    """Refuse a repeated question, an answer the question gives away, an alias a wrong answer would hold."""
    repeated = [q for q, n in Counter(normalise(q) for _, q, _, _ in rows).items() if n > 1]
    if repeated:
        raise SystemExit(f"question asked twice: {repeated[0]!r}")
    for _, question, _, answers in rows:
        if len(set(answers)) != len(answers) or not all(a.strip() for a in answers):
            raise SystemExit(f"{question!r}: empty or repeated answer in {answers}")
        for answer in answers:
            if contains(question, answer):
                raise SystemExit(f"{question!r}: the question contains its answer {answer!r}")
            if normalise(answer) in WORDS or not normalise(answer):
                raise SystemExit(f"{question!r}: alias {answer!r} is a common word a wrong answer would contain")


def build(rows: list[tuple[str, str, str, list[str]]]) -> dict:
    records = []
    counts: Counter = Counter()
    for relation, question, kind, (value, *aliases) in rows:
        counts[relation] += 1
        records.append({"QuestionId": f"early-{relation}-{counts[relation]:03d}", "Question": question,
                        "Relation": relation, "Answer": {"Value": value, "Aliases": aliases, "Type": kind}})
    return {"Data": records, "Domain": "general knowledge", "Version": 1.0,
            "VersionNote": "adaptive-rag demo: early-detection training questions (build_early_questions.py)"}


def main() -> int:
    rows = entries()
    check(rows)
    OUT.write_text(json.dumps(build(rows), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    counts = Counter(relation for relation, *_ in rows)
    print(f"{OUT.name}: {len(rows)} questions ({', '.join(f'{r} {n}' for r, n in counts.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
