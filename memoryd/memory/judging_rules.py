"""What a sentence states, for the offline judge: about whom, which attribute, which value.

The judge of supersession (``memoryd.memory.judging``) compares what two memories state,
so it reads each into claims here. A claim comes from a pattern per attribute (its verbs
and possessive nouns: "lives in", "moved to", "'s manager is"), never from a list of
whole sentences, so phrasings nobody wrote down still read. The value is what follows
the pattern up to a clause boundary ("Oslo last week" is "Oslo"); e-mail addresses and
phone numbers are read by their shape wherever they stand. The subject is the name that
opens the clause, with its possessive chain: "Ilvar's sister lives in Oslo" is about
Ilvar's sister, not Ilvar, and a clause without a name ("... and joined Halcyon") keeps
the sentence's subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ANY", "MAX_SENTENCE_CHARS", "MAX_TEXT_CHARS", "MULTI", "SINGLE", "Claim", "Subject",
           "mention_words", "read_claims", "relation_of", "text_words"]

SINGLE = frozenset({"residence", "employer", "role", "manager", "phone", "email", "address",
                    "vehicle", "pet", "relationship", "preference"})
MULTI = frozenset({"hobby", "visited", "allergy", "language", "child"})
MAX_TEXT_CHARS = 4_000
MAX_SENTENCE_CHARS = 400
ANY = "*"  # a generic change ("left X", "switched from X to Y"): the value tells the attribute


@dataclass(frozen=True)
class Subject:
    """Whom a claim is about: a name's words and the possessive chain after it."""

    names: frozenset[str]  # lower-cased words of the name; empty: unknown ("he", no antecedent)
    relations: tuple[str, ...] = ()  # ("sister",) for "Ilvar's sister"


_USER = Subject(frozenset({"user"}))  # "I", "my", "the user": whom the agent serves
_WE = Subject(frozenset({"we"}))
_UNKNOWN = Subject(frozenset())


@dataclass(frozen=True)
class Claim:
    """One attribute value a sentence states (or says no longer holds) for one subject."""

    subject: Subject
    attribute: str
    value: frozenset[str]  # normalised value words; empty: any value ("her old cat died")
    positive: bool = True  # False: the value no longer holds ("left X", "no longer lives in")
    cue: bool = False  # the clause says the value is new ("now", "moved to", "switched")
    strong: bool = True  # the pattern names the attribute; False: read from a loose verb
    topic: str | None = None  # a preference's topic ("drink"), when known
    also: bool = False  # "also", "another", "second": beside the old value, not instead


@dataclass(frozen=True)
class _Rule:
    """One pattern of one attribute, and what a match of it says."""

    attribute: str
    pattern: re.Pattern[str]
    positive: bool = True
    cue: bool = False
    strong: bool = True
    needs: frozenset[str] | None = None  # the value must hold one of these words
    proper: bool = False  # the value must start with a capital (a name)
    topic: str | None = None


# --- word tables ------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Head words of a job title ("Senior Data Analyst"): "is a ..." states a role only with one.
TITLES = _words("""
    analyst engineer developer programmer designer architect manager director officer head
    lead chief president vp ceo cto cfo coo founder coordinator specialist consultant
    researcher scientist editor writer nurse teacher professor lecturer doctor surgeon lawyer
    counsel solicitor attorney accountant administrator technician associate planner producer
    stylist strategist supervisor assistant intern clerk secretary advisor adviser executive
    principal dean chef pilot mechanic electrician plumber pharmacist therapist paramedic
    firefighter librarian journalist photographer recruiter trainee apprentice operator
    inspector auditor economist translator curator representative controller treasurer coach
    instructor tutor vet veterinarian dentist physician psychologist paralegal buyer
    merchandiser foreman partner owner cashier barista receptionist
""")
# Words that make "bought a ..." or "has a ..." a vehicle: kinds and makes.
VEHICLES = _words("""
    car van truck pickup suv hatchback estate saloon sedan coupe convertible motorbike
    motorcycle scooter campervan camper minivan volvo mazda skoda tesla audi toyota subaru
    fiat kia ford honda peugeot renault jeep nissan volkswagen vw mini hyundai bmw lexus
    citroën citroen rover mercedes dacia polestar alfa seat opel vauxhall suzuki porsche
    chevrolet chevy dodge jaguar mitsubishi saab rivian cupra cadillac buick chrysler lancia
    ferrari lamborghini maserati bentley ducati yamaha kawasaki vespa prius golf corsa octavia
    focus leaf zoe jazz civic corolla
""")
# Words that make "has a ..." or "adopted a ..." a pet.
ANIMALS = _words("""
    pet dog dogs puppy cat cats kitten parrot rabbit bunny hamster gerbil guinea tortoise
    turtle snake python lizard gecko iguana dragon ferret budgie cockatiel canary finch
    goldfish fish horse pony donkey goat chicken hens rat mouse chinchilla hedgehog axolotl
    beagle collie dachshund labrador retriever poodle pug spaniel terrier husky whippet
    greyhound shiba corgi boxer bulldog schnauzer dalmatian chihuahua shepherd doberman
    rottweiler pomeranian mastiff setter pointer lurcher westie sheepdog tabby siamese persian
    coon ragdoll sphynx bengal burmese moggy
""")
# What else a value may be when it has no capital letter: "works at night" names no
# employer, "moved to the backend team" no place, "is seeing a therapist" no partner.
_PLACES = _words("""
    city town village suburb suburbs countryside coast seaside flat house apartment home place
    cottage island farm neighbourhood neighborhood district area street road outskirts centre
    center capital north south east west mountains country state province
""")
_ORGS = _words("""
    bakery bank hospital school university college startup start-up company firm shop store
    restaurant cafe café hotel factory agency studio lab laboratory library council ministry
    charity nonprofit ngo clinic practice warehouse farm garage salon pharmacy supermarket
    airline newspaper consultancy bar pub gym museum government army navy publisher brewery
    winery nursery theatre theater zoo magazine bookshop bookstore kitchen band
""")
_PERSONS = _words("""
    someone somebody guy girl man woman boy lady colleague coworker co-worker neighbour
    neighbor friend classmate teammate
""")
_DATE_WORDS = _words("""
    monday tuesday wednesday thursday friday saturday sunday january february march april may
    june july august september october november december today tomorrow tonight next later
    noon
""")
# Words of a drink: a preference's topic when the sentence does not name one.
_DRINKS = _words("""
    tea coffee latte lassi beer ale lager stout wine water juice cordial milk chocolate cocoa
    mate rooibos oolong kombucha lemonade cider kefir horchata americano cortado macchiato
    espresso cappuccino mocha brew earl souchong infusion tonic soda cola smoothie milkshake
    whisky whiskey gin vodka rum sake chai matcha ayran squash seltzer spritz prosecco
    champagne cocktail kvass decaf
""")
_TOPICS = {"drinks": "drink", "beverage": "drink", "tipple": "drink", "dish": "food",
           "meal": "food", "cuisine": "food", "foods": "food"}
# Possessive nouns that make another subject: "Ilvar's sister" is not Ilvar.
_RELATIONS = {
    **{w: w for w in (
        "sister", "brother", "mother", "father", "parent", "son", "daughter", "child", "cousin",
        "niece", "nephew", "aunt", "uncle", "grandmother", "grandfather", "grandparent",
        "neighbour", "landlord", "landlady", "tenant", "assistant", "accountant", "colleague",
        "friend", "roommate", "wife", "husband", "partner", "spouse", "girlfriend", "boyfriend",
        "fiancé", "fiancée", "boss", "manager", "employee", "teammate", "classmate", "lawyer",
        "doctor", "dentist", "therapist", "client", "sibling", "twin", "stepmother",
        "stepfather", "ex", "mentor", "nanny", "cleaner", "secretary", "agent", "tutor",
        "student", "supervisor", "flatmate", "housemate", "coworker", "co-worker", "in-laws",
        "grandson", "granddaughter", "stepson", "stepdaughter")},
    "mum": "mother", "mom": "mother", "dad": "father", "neighbor": "neighbour",
    "grandma": "grandmother", "grandpa": "grandfather", "kid": "child", "parents": "parent",
    "children": "child"}
_POSSESSIVE_PRONOUNS = frozenset({"my", "our", "his", "her", "their"})
_SELF_PRONOUNS = frozenset({"i", "me", "my", "myself"})
_WE_PRONOUNS = frozenset({"we", "us", "our", "team"})  # "the team decided ..."
_THIRD_PRONOUNS = frozenset({"he", "she", "they", "him", "them", "his", "her", "their"})
# Capitalised for opening a sentence far more often than for being a name.
_COMMON = _words("""
    a an the this that these those it its i i'm i've i'd we you he she they me my our your his
    her their there here in on at for to of from by with as and or but so if when then also
    after before yes ok okay please note is are was were be do does did has have had will
    would can could should what who why how where which all some any each every hi hello last
    next since now today yesterday tomorrow recently lately currently nowadays finally
    apparently sadly luckily unfortunately fortunately meanwhile earlier later eventually
    during while update fyi just still new old call ring text write email e-mail contact reach
    send message ask tell remember user mr mrs ms dr prof not no never because although though
    once both either neither one two three monday tuesday wednesday thursday friday saturday
    sunday january february march april june july august september october november december
    spring summer autumn winter like according despite following regarding given thanks unlike
    besides however therefore overall anyway well oh btw ps per plus
""")
# Words a value may carry that do not tell it apart ("the old Volvo" is "volvo").
_VALUE_FILLER = _words("""
    a an the his her their my our its new old current former some one now of named called
    brand brand-new
""")


def relation_of(word: str) -> str | None:
    """The relation a word names ("sister", "mum" is "mother"), if it names one."""
    return _relation(word.lower())


def _relation(word: str) -> str | None:
    word = word.replace("\u2019", "'").removesuffix("'s")
    if word in _RELATIONS:
        return _RELATIONS[word]
    return _RELATIONS.get(word[:-1]) if word.endswith("s") else None


def _topic_name(topic: str) -> str:
    topic = topic.lower()
    return _TOPICS.get(topic, topic)


def _topic_of(value: str) -> str | None:
    """A preference's topic from its value ("matcha latte" is a drink), if a word says."""
    found = {w.lower() for w in re.findall(r"[^\W\d_]+", value)}
    return "drink" if found & _DRINKS or "flat white" in value.lower() else None


# --- the pieces patterns are made of ------------------------------------------------------

_STOPS = (r"and|but|because|since|after|before|when|where|while|who|which|whom|whose|though|"
          r"although|if|than|so|then|too|also|last|this|next|ago|recently|lately|yesterday|"
          r"today|tonight|now|instead|anymore|any\s+more|these\s+days|nowadays|for|in|from|"
          r"more\s+than|most|best|above|every|each|as|with|at|to|on|over|during|until|till|"
          r"earlier|once|again|already")
_END = rf"(?=\s*(?:[,;:!?()\u2014\u2013]|\.(?:\s|$)|$)|\s+(?:{_STOPS})\b)"
_TOKENS = r"[^\s,;:!?()]+(?:\s+[^\s,;:!?()]+)*?"
_V = rf"(?P<v>{_TOKENS}){_END}"
_OLD = rf"(?P<old>{_TOKENS})"
_UPPER = "A-Z\u00c0-\u00d6\u00d8-\u00de"
_NAME = rf"(?-i:[{_UPPER}][\w'\u2019-]*(?:\s+[{_UPPER}][\w'\u2019-]*){{0,3}})"
_VNAME = rf"\b(?P<v>{_NAME})"
_ADV = (r"(?:(?:[a-z]+ly|now|still|currently|also|just|recently|finally|actually|really|happily|"
        r"already|officially|no\s+longer|not|never|nowadays|these\s+days)\s+)*")
_DET = r"(?:(?:a|an|the|his|her|their|my|our|its|one)\s+)?"
_POSS = r"(?:['\u2019]s|\b(?:my|his|her|their|our))\s+"
_NEWISH = r"(?:(?:new|current|present|latest)\s+)?"
_HOME = r"(?:home|house|flat|apartment|place|condo|cottage|bungalow|loft)"
_PARTNER = (r"(?:partner|girlfriend|boyfriend|wife|husband|fianc[\u00e9e]e?|spouse|"
            r"other\s+half|significant\s+other)")
_BOSS = r"(?:line\s+manager|manager|boss|supervisor|team\s+lead(?:er)?)"
_EMAIL = r"[\w.+'-]+@[\w-]+(?:\.[\w-]+)+"
_PHONE = r"(?<![\w.+])\+?\(?\d[\d ().-]{5,}\d(?![\w@])"


def _r(attribute: str, body: str, *, positive: bool = True, cue: bool = False,
       strong: bool = True, needs: frozenset[str] | None = None, proper: bool = False,
       topic: str | None = None) -> _Rule:
    return _Rule(attribute, re.compile(body, re.IGNORECASE), positive, cue, strong, needs,
                 proper, topic)


# The kinds of value an attribute takes when no rule names its own (a capital also fits).
_VALUE_KINDS = {"residence": _PLACES, "employer": _ORGS, "manager": TITLES,
                "relationship": _PERSONS, "vehicle": VEHICLES}

_RULES: tuple[_Rule, ...] = (
    # where someone lives
    _r("residence", rf"\b(?:lives?|living|resides?|residing)\s+{_ADV}"
                    rf"(?:(?:with|alongside)\s+{_TOKENS}\s+)?in\s+{_V}"),
    _r("residence", rf"\b(?:is|are)\s+{_ADV}(?:based|settled|living)\s+(?:out\s+)?(?:in|of)\s+"
                    rf"{_V}"),
    _r("residence", rf"\b(?:settled|set\s+up\s+home)\s+in\s+{_V}", cue=True),
    _r("residence", rf"{_POSS}{_NEWISH}{_HOME}\s+{_ADV}is\s+{_ADV}in\s+{_V}"),
    _r("residence", rf"\b(?:has|owns|rents)\s+{_DET}(?:new\s+|small\s+)?{_HOME}\s+in\s+{_V}"),
    _r("residence", rf"\b(?:moved|moving|moves|relocated|relocating|relocates|emigrated)\s+"
                    rf"(?:house\s+|home\s+|back\s+|over\s+)?to\s+{_V}", cue=True),
    _r("residence", rf"\b(?:moved|moving|relocated|relocating)\s+(?:house\s+|home\s+)?from\s+"
                    rf"{_OLD}\s+to\s+{_V}", cue=True),
    _r("residence", rf"\b(?:moved|moving)\s+(?:away\s+from|out\s+of)\s+{_V}", positive=False,
       cue=True),
    _r("address", rf"{_POSS}(?:(?:new|home|postal|mailing|street|current)\s+)*address\s+{_ADV}"
                  rf"is\s+{_V}"),
    _r("address", rf"\blives?\s+{_ADV}at\s+(?=\d){_V}"),
    # who someone works for, and as what
    _r("employer", rf"\bwork(?:s|ing)?\s+{_ADV}(?:at|for)\s+{_V}"),
    _r("employer", rf"\bwork(?:s|ing)?\s+as\s+{_TOKENS}\s+(?:at|for)\s+{_V}"),
    _r("employer", rf"\bemployed\s+{_ADV}(?:by|at|with)\s+{_V}"),
    _r("employer", rf"\b(?:has|have|had)\s+{_ADV}{_DET}(?:job|position|post)\s+(?:at|with)\s+{_V}"),
    _r("employer", rf"\b(?:got|took|started|landed|accepted|found|began|secured)\s+{_DET}"
                   rf"(?:new\s+)?(?:job|position|post|role)\s+(?:at|with)\s+{_V}", cue=True),
    _r("employer", rf"{_POSS}{_NEWISH}(?:employer|company|workplace)\s+{_ADV}is\s+{_V}"),
    _r("employer", rf"{_POSS}{_NEWISH}job\s+{_ADV}is\s+(?:at|with)\s+{_V}"),
    _r("employer", rf"\bjoined\s+(?:the\s+team\s+at\s+)?{_V}", cue=True, proper=True),
    _r("employer", rf"\b(?:hired|recruited|headhunted|taken\s+on)\s+by\s+{_V}", cue=True),
    _r("employer", rf"\bstarted\s+(?:work(?:ing)?\s+)?at\s+{_V}", cue=True),
    _r("employer", rf"\b(?:quit|resigned\s+from|retired\s+from|(?:laid\s+off|fired|let\s+go|made\s+"
                   rf"redundant)\s+(?:from|by|at))\s+(?:(?:his|her|their|the)\s+job\s+at\s+)?{_V}",
       positive=False, cue=True),
    _r("role", rf"{_POSS}{_NEWISH}(?:official\s+)?(?:job\s+)?(?:title|position)\s+{_ADV}is\s+"
               rf"{_DET}{_V}"),
    _r("role", rf"{_POSS}{_NEWISH}(?:job|role)\s+{_ADV}is\s+{_DET}{_V}", needs=TITLES),
    _r("role", rf"\bemployed\s+{_ADV}as\s+{_DET}{_V}"),
    _r("role", rf"\bwork(?:s|ing)?\s+{_ADV}as\s+{_DET}{_V}"),
    _r("role", rf"\bpromoted\s+(?:to|as)\s+{_DET}{_V}", cue=True),
    _r("role", rf"\b(?:became|has\s+become|(?:was|has\s+been|got)\s+(?:made|named|appointed)|"
               rf"started\s+as|hired\s+as|joined\s+as)\s+(?:as\s+)?{_DET}{_V}", cue=True,
       needs=TITLES),
    _r("role", rf"\b(?:is|serves\s+as)\s+{_ADV}{_DET}{_V}", needs=TITLES),
    # whom someone reports to
    _r("manager", rf"\breport(?:s|ing)?\s+{_ADV}(?:directly\s+)?to\s+{_V}"),
    _r("manager", rf"{_POSS}{_NEWISH}(?:direct\s+)?{_BOSS}\s+{_ADV}is\s+{_ADV}{_V}"),
    _r("manager", rf"\b(?:has|got)\s+{_DET}new\s+{_BOSS}[,:]?\s+{_V}", cue=True),
    _r("manager", rf"{_VNAME}\s+{_ADV}(?:manages|supervises|line-manages)\s+"
                  rf"(?P<s>{_TOKENS}){_END}"),
    _r("manager", rf"{_VNAME}\s+(?:is|has\s+become|became)\s+{_ADV}(?P<s>{_NAME})['\u2019]s\s+"
                  rf"{_NEWISH}{_BOSS}\b"),
    # how to reach someone: by the value's shape
    _r("email", rf"(?P<v>{_EMAIL})"),
    _r("phone", rf"(?P<v>{_PHONE})"),
    # what someone drives, which pet they have
    _r("vehicle", rf"\bdriv(?:es|ing|e)\s+{_ADV}{_DET}(?:new\s+)?{_V}"),
    _r("vehicle", rf"{_POSS}{_NEWISH}(?:car|vehicle|motorbike|motorcycle|van)\s+{_ADV}is\s+"
                  rf"{_DET}{_V}"),
    _r("vehicle", rf"\b(?:bought|purchased|leased|got|ordered)\s+{_DET}(?:new\s+)?{_V}", cue=True,
       needs=VEHICLES),
    _r("vehicle", rf"\b(?:has|owns|runs)\s+{_ADV}{_DET}{_V}", needs=VEHICLES),
    _r("pet", rf"\b(?:has|have|owns|keeps|lives\s+with)\s+{_ADV}{_DET}{_V}", needs=ANIMALS),
    _r("pet", rf"\b(?:adopted|rescued|got|bought|took\s+in)\s+{_DET}(?:new\s+)?{_V}", cue=True,
       needs=ANIMALS),
    _r("pet", rf"{_POSS}{_NEWISH}pet\s+{_ADV}is\s+{_DET}{_V}"),
    _r("pet", rf"\b(?:old\s+|previous\s+|late\s+)?(?:pet|dog|cat)(?:\s+{_NAME})?\s+(?:has\s+)?"
              r"(?:died|passed\s+away|ran\s+away|was\s+put\s+down)", positive=False, cue=True),
    # partner and relationship status
    _r("relationship", rf"\b(?:is|are)\s+{_ADV}(?:dating|seeing|going\s+out\s+with|engaged\s+to|"
                       rf"married\s+to|in\s+a\s+relationship\s+with|together\s+with)\s+{_V}"),
    _r("relationship", rf"\b(?:started|begun|began)\s+(?:dating|seeing|going\s+out\s+with)\s+{_V}",
       cue=True),
    _r("relationship", rf"\b(?:got|is\s+getting)\s+(?:engaged|married)\s+to\s+{_V}", cue=True),
    _r("relationship", rf"\b(?:married|wed)\s+{_VNAME}", cue=True),
    _r("relationship", rf"\bgot\s+together\s+with\s+{_V}", cue=True),
    _r("relationship", rf"{_POSS}{_NEWISH}{_PARTNER}\s+{_ADV}is\s+{_ADV}{_V}"),
    _r("relationship", rf"\b(?:has|got)\s+{_DET}new\s+{_PARTNER}[,:]?\s+{_V}", cue=True),
    _r("relationship", rf"\band\s+{_VNAME}\s+(?:are|have\s+been)\s+{_ADV}(?:dating|together|"
                       rf"engaged|married|a\s+couple|an\s+item|seeing\s+each\s+other)\b"),
    _r("relationship", rf"\band\s+{_VNAME}\s+(?:have\s+|had\s+)?(?:broke|broken|split|separated|"
                       rf"divorced)\b", positive=False, cue=True),
    _r("relationship", rf"{_VNAME}\s+is\s+{_ADV}(?P<s>{_NAME})['\u2019]s\s+{_NEWISH}{_PARTNER}\b"),
    _r("relationship", r"\b(?:is|are)\s+(?:now\s+)?(?:single|divorced|separated|widowed)\b",
       positive=False, cue=True),
    # preferences and decisions
    _r("preference", rf"{_POSS}{_NEWISH}(?:all-time\s+|absolute\s+)?favou?rite\s+"
                     rf"(?P<topic>[a-z]+(?:\s+[a-z]+)?)\s+{_ADV}(?:is|are)\s+{_ADV}{_V}"),
    _r("preference", rf"\bprefers?\s+{_ADV}{_V}"),
    _r("preference", rf"\b(?:loves?|likes?|adores?|enjoys?)\s+{_DET}{_V}\s+(?:more\s+than\s+"
                     rf"(?:anything|everything)|most|best|above\s+all)"),
    _r("preference", rf"\b(?:loves?|likes?|adores?|enjoys?|is\s+(?:a\s+)?(?:big\s+)?fan\s+of|"
                     rf"is\s+(?:mad|crazy)\s+about)\s+{_ADV}{_V}", strong=False),
    _r("preference", rf"\bdrinks?\s+{_ADV}{_V}", strong=False, topic="drink"),
    _r("preference", rf"\b(?:hates?|dislikes?|detests?|can['\u2019]?t\s+stand|cannot\s+stand|"
                     rf"is\s+(?:sick|tired)\s+of|is\s+done\s+with|(?:has\s+)?(?:gone|went|goes)\s+off|"
                     rf"(?:has\s+)?(?:given|gave)\s+up|stopped\s+(?:drinking|eating|liking))\s+{_DET}{_V}",
       positive=False, cue=True),
    _r("preference", rf"\b(?:decided|agreed|chose|opted)\s+(?:to\s+(?:use|go\s+with|adopt|stick\s+"
                     rf"with)|on)\s+{_DET}{_V}", strong=False, topic="decision"),
    _r("preference", rf"\b(?:decided|agreed|chose|opted)\s+(?:against|not\s+to\s+(?:use|go\s+with|"
                     rf"adopt))\s+{_DET}{_V}", positive=False, cue=True, topic="decision"),
    # generic changes: the value says which attribute
    _r(ANY, rf"\b(?:left|quit|ditched|dropped|abandoned|sold|rehomed|stopped\s+using|gave\s+away|"
            rf"got\s+rid\s+of|moved\s+on\s+from|broke\s+up\s+with|split\s+(?:up\s+)?(?:with|from)|"
            rf"separated\s+from|divorced|dumped)\s+{_DET}(?:old\s+)?{_V}", positive=False,
       cue=True),
    _r(ANY, rf"\b(?:switched|changed|moved|migrated|swapped|converted|went)\s+(?:\w+\s+)?"
            rf"(?:over\s+|back\s+)?from\s+{_DET}{_OLD}\s+to\s+{_DET}{_V}", cue=True),
    _r(ANY, rf"\b(?:switched|migrated|swapped|converted|changed\s+over)\s+(?:over\s+|back\s+)?to\s+"
            rf"{_DET}{_V}", cue=True),
    # attributes that hold many values at once
    _r("hobby", rf"\b(?:took|taken|takes|taking)\s+up\s+{_DET}{_V}"),
    _r("hobby", rf"\b(?:is|are|has\s+been|have\s+been|got)\s+{_ADV}into\s+{_DET}{_V}"),
    _r("hobby", rf"\bspends?\s+(?:(?:most|all|her|his|their|the|my)\s+)*(?:weekends?|evenings?|"
                rf"free\s+time|spare\s+time|time|mornings?)\s+(?:on|doing)\s+{_DET}{_V}"),
    _r("hobby", rf"\bhobb(?:y|ies)\s+(?:is|are|include)\s+{_DET}{_V}"),
    _r("hobby", rf"\bstarted\s+{_V}\s+as\s+an?\s+(?:\w+\s+)?hobby"),
    _r("hobby", rf"\b(?:plays|practises|practices)\s+{_DET}{_V}"),
    _r("visited", rf"\b(?:visited|toured|travel(?:l)?ed\s+to|went\s+to|has\s+been\s+to|flew\s+to|"
                  rf"holidayed\s+in|vacationed\s+in)\s+{_V}"),
    _r("visited", rf"\bspent\s+(?:\w+\s+){{1,3}}?(?:weeks?|days?|months?|holiday|vacation|weekend|"
                  rf"summer|winter|fortnight|time|nights?)\s+in\s+{_V}"),
    _r("visited", rf"\b(?:got|came|is|returned)\s+(?:back\s+)?from\s+(?:a\s+trip\s+to\s+)?{_V}"),
    _r("visited", rf"\b(?:trip|holiday|vacation|visit)\s+to\s+{_V}"),
    _r("allergy", rf"\ballerg(?:ic|y)\s+to\s+{_V}"),
    _r("language", rf"\b(?:speaks|is\s+(?:learning|fluent\s+in|studying)|fluent\s+in)\s+{_V}"),
    _r("child", r"\b(?:has|had|have|welcomed)\s+(?:a|an|two|three|four|\d+)\s+(?:\w+\s+)?"
                r"(?:son|daughter|child|children|kids?|baby|babies|twins)\b"),
)

# --- what a clause says around a pattern --------------------------------------------------

_SENTENCE_END = re.compile(r"(?<!\bMr\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<=[.!?])\s+|\n+")
_SEPARATOR = re.compile(r";|,?\s+(?:and|but|so|then|while|whereas)\s+|\s[\u2014\u2013-]\s")
# Before a value: it no longer holds ("no longer lives in", "'s old number was", "from").
_NEGATOR = re.compile(r"\b(?:not|no\s+longer|never|stopped|quit|no\s+more|used\s+to|formerly|"
                      r"previously)\b|n['\u2019]t\b|\b(?:old|former|previous)\s+(?:[a-z-]+\s+)"
                      r"{0,2}(?:was|were|is)\s*$|\bfrom\s*$", re.IGNORECASE)
# A clause saying its value is the new one: before the value, and (fewer) after it.
_CUE = re.compile(r"\b(?:now|new|newly|no\s+longer|any\s*more|these\s+days|nowadays|since|"
                  r"recently|just|changed|switched|instead|latest|current(?:ly)?|became|"
                  r"has\s+become|moved|relocated)\b|\b(?:Now|These\s+days|Nowadays|Since|"
                  r"Recently|Currently|Just|Changed|Switched)\b")
_CUE_AFTER = re.compile(r"\b(?:now|these\s+days|nowadays|any\s*more|instead|since|from\s+now\s+"
                        r"on|at\s+the\s+moment)\b", re.IGNORECASE)
_PHONE_WORDS = re.compile(r"\b(?:phone|mobile|cell|number|call|called|ring|text|reach|reached|"
                          r"tel|telephone|whatsapp|sms|landline)\b", re.IGNORECASE)
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}")
_ALSO = re.compile(r"\b(?:also|another|second|as\s+well|too|in\s+addition|additionally)\b",
                   re.IGNORECASE)
_TOKEN = re.compile(r"[^\W\d_][\w'\u2019-]*")
_DIGITS = re.compile(r"\d")
_VALUE_WORD = re.compile(r"[\w+#&'\u2019-]+")


def read_claims(text: str) -> list[Claim]:
    """Every claim of ``text``, sentence by sentence; a pronoun ("she moved to Oslo")
    refers to the last subject named before it.

    Only the first ``MAX_TEXT_CHARS`` are read, and of each sentence its first
    ``MAX_SENTENCE_CHARS``: a value's pattern may scan to its clause's end from every
    word, so a sentence costs the square of its length (8,000 characters without a stop
    took 0.2 s), and a changed fact is stated in a short sentence near the start.
    """
    claims: list[Claim] = []
    carried: Subject | None = None
    for sentence in _SENTENCE_END.split(text[:MAX_TEXT_CHARS]):
        found, carried = _sentence_claims(sentence.strip()[:MAX_SENTENCE_CHARS], carried)
        claims.extend(found)
    return _distinct(claims)


def mention_words(text: str) -> frozenset[str]:
    """The lower-cased words of every name in ``text`` (capitalised, not a common word)."""
    out: set[str] = set()
    for start, end, _ in _mentions(text):
        out.update(_name_words(text[start:end]))
    return frozenset(out)


def _sentence_claims(sentence: str, carried: Subject | None) -> tuple[list[Claim], Subject | None]:
    """The sentence's claims and its subject: the name before its first pattern (a clause
    without a name of its own, "... and joined Halcyon", is about that one)."""
    found = [(rule, match) for rule in _RULES for match in rule.pattern.finditer(sentence)]
    if not found:
        return [], _subject_in(sentence, carried) or carried
    first = min(match.start() for _, match in found)
    opening = _subject_in(sentence[:first], carried, last=True) or carried
    cuts = [(m.start(), m.end()) for m in _SEPARATOR.finditer(sentence)]
    claims = [claim for rule, match in found
              for claim in _claims(rule, match, sentence, cuts, opening)]
    named = [c.subject for c in claims if c.subject.names]
    return claims, named[-1] if named else opening


def _claims(rule: _Rule, match: re.Match[str], sentence: str, cuts: list[tuple[int, int]],
            opening: Subject | None) -> list[Claim]:
    """The claims of one pattern match: its value (and the value it replaces, if named)."""
    raw = match.group("v") if "v" in rule.pattern.groupindex else None
    raw = raw.rstrip(".'\u2019") if raw else raw
    if raw is not None and not _fits(rule, raw, sentence):
        return []
    begin = max((end for start, end in cuts if end <= match.start()), default=0)
    finish = min((start for start, _ in cuts if start >= match.end()), default=len(sentence))
    subject = _subject(match, sentence[begin:match.start()], opening)
    value_at = match.start("v") if raw is not None and match.start("v") > match.start() else \
        match.end()
    before = sentence[begin:value_at][-48:]
    value_end = match.end("v") if raw is not None else match.end()
    cue = rule.cue or bool(_CUE.search(sentence[begin:value_end])) or \
        bool(_CUE_AFTER.search(sentence[value_end:finish]))
    clause = sentence[begin:finish]
    positive = rule.positive and not _NEGATOR.search(before)
    topic = rule.topic or _topic(match) or (_topic_of(raw) if raw else None)
    claim = Claim(subject, rule.attribute, _value_key(raw or ""), positive, cue, rule.strong,
                  topic, bool(_ALSO.search(clause)))
    if "old" not in rule.pattern.groupindex:
        return [claim]
    old = Claim(subject, rule.attribute, _value_key(match.group("old")), False, True,
                rule.strong, topic)
    return [claim, old]


def _fits(rule: _Rule, raw: str, sentence: str) -> bool:
    """Whether the value is of the kind the attribute holds: an animal for "has a ...", a
    name or a place word for a residence (not "moved to Thursday"), a phone number where
    the sentence speaks of phones or the number starts with "+" (not a date)."""
    if rule.proper and not raw[:1].isupper():
        return False
    if rule.attribute == "phone":
        return len(_DIGITS.findall(raw)) >= 7 and not _DATE.search(raw) and (
            raw.startswith("+") or bool(_PHONE_WORDS.search(sentence)))
    found = [w.lower() for w in _VALUE_WORD.findall(raw)]
    if rule.needs is not None:
        return not rule.needs.isdisjoint(found)
    kind = _VALUE_KINDS.get(rule.attribute)
    if kind is None:
        return True
    if not found or found[0] in _DATE_WORDS:
        return False
    return any(c.isupper() for c in raw) or not kind.isdisjoint(found)


def _topic(match: re.Match[str]) -> str | None:
    """The topic a "favourite <topic> is" pattern names, normalised ("drinks" is "drink")."""
    if "topic" not in match.re.groupindex or not match.group("topic"):
        return None
    return _topic_name(match.group("topic"))


def _subject(match: re.Match[str], before: str, opening: Subject | None) -> Subject:
    """Whom the match is about: a subject the pattern captured ("X manages Ilvar"), else
    the clause's opening name, else the sentence's (which a pronoun refers to)."""
    if "s" in match.re.groupindex:
        return _subject_in(match.group("s"), opening) or _UNKNOWN
    head = match.group(0).split(maxsplit=1)[0].lower()
    if head in _POSSESSIVE_PRONOUNS:
        before += " " + head
    # The clause nearest the match first: "After the team change, Ilvar's boss is ..."
    # is about Ilvar, not the team of the opening phrase.
    nearest = re.split(r"[,;:]", before)[-1]
    return (_subject_in(nearest, opening, last=True) or _subject_in(before, opening, last=True)
            or opening or _UNKNOWN)


def _subject_in(chunk: str, carried: Subject | None, *, last: bool = False) -> Subject | None:
    """The first name or pronoun of ``chunk`` (``last``: the one nearest its end, the
    subject of a statement that follows: "Nadia said that their father lives in ..." is
    about Nadia's father), with the relatives its possessive names."""
    mentions = {start: end for start, end, _ in _mentions(chunk)}
    found: Subject | None = None
    for token in _TOKEN.finditer(chunk):
        low = token.group().lower().replace("\u2019", "'")
        bare = low.removesuffix("'s")
        base, possessive, end = None, False, token.end()
        if token.start() in mentions:
            end = mentions[token.start()]
            base = Subject(_name_words(chunk[token.start():end]))
            possessive = chunk[token.start():end].endswith(("'s", "\u2019s"))
            possessive = possessive or chunk[end:end + 2] in ("'s", "\u2019s")
        elif low in _SELF_PRONOUNS or bare == "user":
            base, possessive = _USER, low in _POSSESSIVE_PRONOUNS or low != bare
        elif low in _WE_PRONOUNS:
            base, possessive = _WE, low in _POSSESSIVE_PRONOUNS
        elif low in _THIRD_PRONOUNS:
            base, possessive = carried or _UNKNOWN, low in _POSSESSIVE_PRONOUNS
        if base is None:
            continue
        found = base if not possessive else Subject(
            base.names, base.relations + _relations(chunk[end:]))
        if not last:
            return found
    return found


def _relations(chain: str) -> tuple[str, ...]:
    """The relatives a possessive chain names, in order ("'s brother's wife")."""
    found = (_relation(t.group().lower()) for t in _TOKEN.finditer(chain))
    return tuple(dict.fromkeys(r for r in found if r))


def _mentions(text: str) -> list[tuple[int, int, str]]:
    """Runs of capitalised words that are not common words: (start, end, text)."""
    runs: list[tuple[int, int, str]] = []
    start = end = -1
    for token in _TOKEN.finditer(text):
        word = token.group()
        bare = word.lower().removesuffix("'s").removesuffix("\u2019s")
        is_name = word[0].isupper() and bare not in _COMMON
        if is_name and start >= 0 and text[end:token.start()].isspace():
            end = token.end()
        elif is_name:
            if start >= 0:
                runs.append((start, end, text[start:end]))
            start, end = token.start(), token.end()
        elif start >= 0:
            runs.append((start, end, text[start:end]))
            start = -1
    if start >= 0:
        runs.append((start, end, text[start:end]))
    return runs


def _name_words(name: str) -> frozenset[str]:
    """A name's words as keywords: lower-cased, without "'s" and common words."""
    parts = (t.group().lower().replace("\u2019", "'").removesuffix("'s")
             for t in _TOKEN.finditer(name))
    return frozenset(p for p in parts if p not in _COMMON)


def text_words(text: str) -> frozenset[str]:
    """Every word of ``text`` as values are compared (``_value_key``'s words)."""
    found = (w.lower().replace("\u2019", "'") for w in _VALUE_WORD.findall(text))
    return frozenset(w for w in found if w not in _VALUE_FILLER)


def _value_key(raw: str) -> frozenset[str]:
    """A value's comparable form: a phone number's last nine digits, an address whole,
    else its words without articles and the like ("the old Volvo" is "volvo")."""
    if "@" in raw:
        return frozenset({raw.lower()})
    digits = "".join(_DIGITS.findall(raw))
    if len(digits) >= 7 and re.fullmatch(_PHONE, raw.strip()):
        return frozenset({digits[-9:]})
    found = (w.lower().replace("\u2019", "'") for w in _VALUE_WORD.findall(raw))
    return frozenset(w for w in found if w not in _VALUE_FILLER)


def _distinct(claims: list[Claim]) -> list[Claim]:
    """One claim per (subject, attribute, value, sign): the strongest, with any cue."""
    best: dict[tuple[object, ...], Claim] = {}
    for claim in claims:
        if claim.positive and not claim.value and claim.attribute not in MULTI:
            continue
        key = (claim.subject, claim.attribute, claim.value, claim.positive)
        kept = best.get(key)
        if kept is None or (claim.strong, claim.cue) > (kept.strong, kept.cue):
            best[key] = claim
    return list(best.values())
