"""A generated knowledge base of fictional entities and the questions asked about it.

Everything is a pure function of `kb_seed`: countries, cities, people, organisations and works, each
with attributes and relations (born in, works for, founded by, headquartered in, created by, capital
of). Names are drawn from syllables so no model knows them, and come in families of look-alikes
(shared first names and surnames, one-vowel variants, shared title words) so that a careless query
retrieves a distractor.

Each entity has ONE passage, Search-R1/FlashRAG style: `contents = '"Title"\\ntext'`. A passage
states the entity's own facts only, so a k-hop question needs k searches, one per hop entity:

    hop 0: the entity named in the question -> its passage names hop 1 -> ... -> the answer.

`KnowledgeBase.question(seed)` draws one question (template and start entity) from the seed.
"""

from __future__ import annotations

import dataclasses
import random

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr",
           "st", "th", "sh", "gr", "vr", "ph", "sk", "ch")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ia", "ou", "ei")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "k", "x", "nd", "rn", "sh")
_FORMAL = ("Kingdom of", "Republic of", "Duchy of", "Free State of", "Federation of", "Principality of")
_ORG_KINDS = ("Guild", "Society", "Institute", "Company", "Academy", "League", "Foundation", "Trust")
_OCCUPATIONS = ("novelist", "composer", "painter", "cartographer", "astronomer", "merchant", "engineer",
                "physician", "architect", "botanist", "diplomat", "sculptor")
_ADJECTIVES = ("Silent", "Crimson", "Hollow", "Gilded", "Distant", "Broken", "Amber", "Frozen", "Hidden",
               "Iron", "Pale", "Restless", "Scarlet", "Sleeping", "Wandering", "Velvet", "Burning",
               "Forgotten", "Ivory", "Northern", "Quiet", "Shattered", "Sunken", "Twilight", "Emerald")
_NOUNS = ("Harbor", "Lantern", "Orchard", "Tide", "Meadow", "Citadel", "Mirror", "Garden", "Bridge",
          "Voyage", "Feather", "Compass", "Tower", "River", "Winter", "Chorus", "Garland", "Horizon",
          "Labyrinth", "Sparrow", "Tapestry", "Orchid", "Anchor", "Beacon", "Cathedral", "Falcon",
          "Glacier", "Harvest", "Island", "Juniper")
# work kind -> (creator occupation, verb in passages, question verb, creator role noun)
_WORK_KINDS = {"novel": ("novelist", "written", "wrote", "author"),
               "opera": ("composer", "composed", "composed", "composer"),
               "painting": ("painter", "painted", "painted", "painter")}
_TEMPLATE_WORDS = frozenset(
    "city country capital officially established founded born worked kingdom republic duchy free state "
    "federation principality headquartered written composed painted novel opera painting what which "
    "where when who year organisation founder author into such that their then there these they this "
    "will with".split())


@dataclasses.dataclass(frozen=True)
class Country:
    name: str
    formal: str
    capital: int  # city index
    established: int


@dataclasses.dataclass(frozen=True)
class City:
    name: str
    country: int
    founded: int


@dataclasses.dataclass(frozen=True)
class Person:
    name: str
    occupation: str
    birth_year: int
    birth_city: int
    employer: int  # org index


@dataclasses.dataclass(frozen=True)
class Org:
    name: str
    kind: str
    founder: int  # person index
    hq: int  # city index
    founded: int


@dataclasses.dataclass(frozen=True)
class Work:
    title: str
    kind: str
    creator: int  # person index
    year: int


@dataclasses.dataclass(frozen=True)
class Question:
    """One task: `hops[i]` is the entity name whose passage holds hop i's fact (search order)."""

    qid: int
    text: str
    golden_answers: tuple[str, ...]
    hops: tuple[str, ...]
    template: str


class _Namer:
    """Draws unique syllable words; `variant` makes a one-vowel look-alike of an existing word."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = {w.lower() for w in _TEMPLATE_WORDS | set(_ADJECTIVES) | set(_NOUNS)}
        self.used |= {w.lower() for w in _OCCUPATIONS + _ORG_KINDS}

    def _take(self, word: str) -> str | None:
        key = word.lower()
        if len(key) < 4 or key in self.used:
            return None
        self.used.add(key)
        return word.capitalize()

    def word(self, n_syllables: int) -> str:
        while True:
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(n_syllables)]
            got = self._take("".join(parts) + self.rng.choice(_CODAS))
            if got:
                return got

    def variant(self, word: str) -> str | None:
        spots = [i for i, ch in enumerate(word.lower()) if ch in "aeiou"]
        for _ in range(8):
            i = self.rng.choice(spots)
            new = word[:i] + self.rng.choice([v for v in "aeiou" if v != word[i].lower()]) + word[i + 1:]
            got = self._take(new)
            if got:
                return got
        return None

    def pool(self, n: int, n_syllables: tuple[int, int]) -> list[str]:
        """n words, about a third of them one-vowel variants of the others (distractor families)."""
        out: list[str] = []
        while len(out) < n:
            if out and self.rng.random() < 0.35:
                v = self.variant(self.rng.choice(out))
                if v:
                    out.append(v)
                    continue
            out.append(self.word(self.rng.randint(*n_syllables)))
        return out


class KnowledgeBase:
    """The entities, their passages and the question generator for one `kb_seed`.

    Attributes:
      passages: list[str], contents '"Title"\\ntext' of each passage (one per entity).
      passage_of: dict[str, int], entity name -> index of its passage.
    """

    def __init__(self, kb_seed: int = 0, n_countries: int = 8, n_cities: int = 40, n_persons: int = 160,
                 n_orgs: int = 50, n_works: int = 90):
        rng = random.Random(f"searchqa-kb:{kb_seed}")
        namer = _Namer(rng)
        self.kb_seed = kb_seed
        country_names = namer.pool(n_countries, (2, 2))
        city_names = namer.pool(n_cities, (2, 3))
        self.cities = [City(name, i % n_countries, rng.randint(900, 1500))
                       for i, name in enumerate(city_names)]
        self.countries = [Country(name, f"{rng.choice(_FORMAL)} {name}", i, rng.randint(1000, 1600))
                          for i, name in enumerate(country_names)]
        firsts = namer.pool(max(2, n_persons // 3), (2, 2))
        lasts = namer.pool(max(2, n_persons // 3), (2, 3))
        pairs = rng.sample([(f, s) for f in firsts for s in lasts], n_persons)
        org_bases = namer.pool(max(2, (2 * n_orgs) // 3), (2, 2))
        org_names = rng.sample([f"{b} {k}" for b in org_bases for k in _ORG_KINDS], n_orgs)
        births = [rng.randint(1700, 1880) for _ in range(n_persons)]
        founders = [rng.randrange(n_persons) for _ in range(n_orgs)]
        self.orgs = [Org(name, name.split()[-1], founders[i], rng.randrange(n_cities),
                         births[founders[i]] + rng.randint(25, 60)) for i, name in enumerate(org_names)]
        self.persons = []
        for i, (first, last) in enumerate(pairs):
            employers = [j for j, o in enumerate(self.orgs) if o.founder != i]
            self.persons.append(Person(f"{first} {last}", _OCCUPATIONS[i % len(_OCCUPATIONS)], births[i],
                                       rng.randrange(n_cities), rng.choice(employers)))
        titles = rng.sample([f"The {a} {n}" for a in _ADJECTIVES for n in _NOUNS], n_works)
        self.works = []
        for title in titles:
            kind = rng.choice(sorted(_WORK_KINDS))
            creators = [i for i, p in enumerate(self.persons) if p.occupation == _WORK_KINDS[kind][0]]
            creator = rng.choice(creators)
            year = self.persons[creator].birth_year + rng.randint(20, 60)
            self.works.append(Work(title, kind, creator, year))
        self.passages: list[str] = []
        self.passage_of: dict[str, int] = {}
        for name, text in self._passage_texts():
            self.passage_of[name] = len(self.passages)
            self.passages.append(f'"{name}"\n{text}')
        self._questions: dict[int, Question] = {}

    def _passage_texts(self):
        for c in self.countries:
            cap = self.cities[c.capital].name
            yield c.name, (f"{c.name}, officially the {c.formal}, is a country. Its capital is {cap}. "
                           f"{c.name} was established in {c.established}.")
        for i, c in enumerate(self.cities):
            country = self.countries[c.country]
            extra = f" It is the capital of {country.name}." if country.capital == i else ""
            yield c.name, f"{c.name} is a city in {country.name}. {c.name} was founded in {c.founded}.{extra}"
        for p in self.persons:
            surname = p.name.split()[-1]
            yield p.name, (f"{p.name} was {_a(p.occupation)} born in {self.cities[p.birth_city].name} in "
                           f"{p.birth_year}. {surname} worked for the {self.orgs[p.employer].name}.")
        for o in self.orgs:
            founder, hq = self.persons[o.founder].name, self.cities[o.hq].name
            yield o.name, (f"The {o.name} is {_a(o.kind.lower())} founded in {o.founded} by {founder}. "
                           f"It is headquartered in {hq}.")
        for w in self.works:
            verb = _WORK_KINDS[w.kind][1]
            yield w.title, f"{w.title} is {_a(w.kind)} by {self.persons[w.creator].name}, {verb} in {w.year}."

    def _country_answers(self, idx: int) -> tuple[str, ...]:
        return self.countries[idx].name, self.countries[idx].formal

    def question(self, seed: int) -> Question:
        """The question of task `seed`: 40% single-hop, 40% two-hop, 20% three-hop."""
        if seed not in self._questions:
            self._questions[seed] = self._make_question(seed)
        return self._questions[seed]

    def _make_question(self, seed: int) -> Question:
        rng = random.Random(f"searchqa-q:{self.kb_seed}:{seed}")
        u = rng.random()
        n_hops = 1 if u < 0.4 else 2 if u < 0.8 else 3
        templates = sorted(name for name, (hops, _) in _TEMPLATES.items() if hops == n_hops)
        template = rng.choice(templates)
        for _ in range(100):  # a multi-hop question must not be answerable from its first passage
            text, answers, hops = _TEMPLATES[template][1](self, rng)
            first = self.passages[self.passage_of[hops[0]]]
            if n_hops == 1 or not any(a in first for a in answers):
                break
        return Question(seed, text, tuple(answers), tuple(hops), template)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _person(kb: KnowledgeBase, rng: random.Random) -> tuple[int, Person]:
    i = rng.randrange(len(kb.persons))
    return i, kb.persons[i]


def _t_birthplace(kb, rng):
    _, p = _person(kb, rng)
    return f"Where was {p.name} born?", [kb.cities[p.birth_city].name], [p.name]


def _t_birth_year(kb, rng):
    _, p = _person(kb, rng)
    return f"In which year was {p.name} born?", [str(p.birth_year)], [p.name]


def _t_occupation(kb, rng):
    _, p = _person(kb, rng)
    return f"What was the occupation of {p.name}?", [p.occupation], [p.name]


def _t_employer(kb, rng):
    _, p = _person(kb, rng)
    return f"Which organisation did {p.name} work for?", [kb.orgs[p.employer].name], [p.name]


def _t_capital(kb, rng):
    c = rng.choice(kb.countries)
    return f"What is the capital of {c.name}?", [kb.cities[c.capital].name], [c.name]


def _t_city_country(kb, rng):
    c = rng.choice(kb.cities)
    return f"In which country is {c.name}?", kb._country_answers(c.country), [c.name]


def _t_founder(kb, rng):
    o = rng.choice(kb.orgs)
    return f"Who founded the {o.name}?", [kb.persons[o.founder].name], [o.name]


def _t_hq(kb, rng):
    o = rng.choice(kb.orgs)
    return f"In which city is the {o.name} headquartered?", [kb.cities[o.hq].name], [o.name]


def _t_org_year(kb, rng):
    o = rng.choice(kb.orgs)
    return f"In which year was the {o.name} founded?", [str(o.founded)], [o.name]


def _t_creator(kb, rng):
    w = rng.choice(kb.works)
    return f"Who {_WORK_KINDS[w.kind][2]} {w.title}?", [kb.persons[w.creator].name], [w.title]


def _t_work_year(kb, rng):
    w = rng.choice(kb.works)
    return f"In which year was {w.title} {_WORK_KINDS[w.kind][1]}?", [str(w.year)], [w.title]


def _t_founder_birth_year(kb, rng):
    o = rng.choice(kb.orgs)
    f = kb.persons[o.founder]
    return f"In which year was the founder of the {o.name} born?", [str(f.birth_year)], [o.name, f.name]


def _t_founder_birthplace(kb, rng):
    o = rng.choice(kb.orgs)
    f = kb.persons[o.founder]
    return f"Where was the founder of the {o.name} born?", [kb.cities[f.birth_city].name], [o.name, f.name]


def _t_creator_birthplace(kb, rng):
    w = rng.choice(kb.works)
    c = kb.persons[w.creator]
    role = _WORK_KINDS[w.kind][3]
    return f"Where was the {role} of {w.title} born?", [kb.cities[c.birth_city].name], [w.title, c.name]


def _t_creator_birth_year(kb, rng):
    w = rng.choice(kb.works)
    c = kb.persons[w.creator]
    role = _WORK_KINDS[w.kind][3]
    return f"In which year was the {role} of {w.title} born?", [str(c.birth_year)], [w.title, c.name]


def _t_person_country(kb, rng):
    _, p = _person(kb, rng)
    city = kb.cities[p.birth_city]
    return f"In which country was {p.name} born?", kb._country_answers(city.country), [p.name, city.name]


def _t_employer_founder(kb, rng):
    _, p = _person(kb, rng)
    o = kb.orgs[p.employer]
    return (f"Who founded the organisation that {p.name} worked for?", [kb.persons[o.founder].name],
            [p.name, o.name])


def _t_hq_country(kb, rng):
    o = rng.choice(kb.orgs)
    city = kb.cities[o.hq]
    return (f"In which country is the {o.name} headquartered?", kb._country_answers(city.country),
            [o.name, city.name])


def _t_employer_hq(kb, rng):
    _, p = _person(kb, rng)
    o = kb.orgs[p.employer]
    return (f"In which city is the organisation that {p.name} worked for headquartered?",
            [kb.cities[o.hq].name], [p.name, o.name])


def _t_founder_country(kb, rng):
    o = rng.choice(kb.orgs)
    f = kb.persons[o.founder]
    city = kb.cities[f.birth_city]
    return (f"In which country was the founder of the {o.name} born?", kb._country_answers(city.country),
            [o.name, f.name, city.name])


def _t_birth_capital(kb, rng):
    _, p = _person(kb, rng)
    city = kb.cities[p.birth_city]
    country = kb.countries[city.country]
    return (f"What is the capital of the country where {p.name} was born?", [kb.cities[country.capital].name],
            [p.name, city.name, country.name])


def _t_creator_country(kb, rng):
    w = rng.choice(kb.works)
    c = kb.persons[w.creator]
    city = kb.cities[c.birth_city]
    role = _WORK_KINDS[w.kind][3]
    return (f"In which country was the {role} of {w.title} born?", kb._country_answers(city.country),
            [w.title, c.name, city.name])


def _t_employer_founder_birthplace(kb, rng):
    _, p = _person(kb, rng)
    o = kb.orgs[p.employer]
    f = kb.persons[o.founder]
    return (f"Where was the founder of the organisation that {p.name} worked for born?",
            [kb.cities[f.birth_city].name], [p.name, o.name, f.name])


# template name -> (number of hops, generator(kb, rng) -> (question, answers, hop entity names))
_TEMPLATES = {
    "birthplace": (1, _t_birthplace), "birth_year": (1, _t_birth_year), "occupation": (1, _t_occupation),
    "employer": (1, _t_employer), "capital": (1, _t_capital), "city_country": (1, _t_city_country),
    "founder": (1, _t_founder), "hq": (1, _t_hq), "org_year": (1, _t_org_year), "creator": (1, _t_creator),
    "work_year": (1, _t_work_year),
    "founder_birth_year": (2, _t_founder_birth_year), "founder_birthplace": (2, _t_founder_birthplace),
    "creator_birthplace": (2, _t_creator_birthplace), "creator_birth_year": (2, _t_creator_birth_year),
    "person_country": (2, _t_person_country), "employer_founder": (2, _t_employer_founder),
    "hq_country": (2, _t_hq_country), "employer_hq": (2, _t_employer_hq),
    "founder_country": (3, _t_founder_country), "birth_capital": (3, _t_birth_capital),
    "creator_country": (3, _t_creator_country),
    "employer_founder_birthplace": (3, _t_employer_founder_birthplace),
}
