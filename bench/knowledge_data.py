"""The phrasing tables and value pools of ``bench/knowledge.py`` (data, not logic).

Each single-valued attribute kind has a question, four phrasings of the old value and
four of the new one, split two and two into a ``tune`` half and a ``held-out`` half, so a
change tuned on one half can be scored on phrasings it never saw. ``{p}`` is the person,
``{v}`` the value the sentence states, ``{old}`` (new phrasings only) the value it replaces.
A distractor states the same kind of value for someone else close to the person; additive
pairs state two values of an attribute that holds many at once.

Every pool's entries are distinct and none is a substring of another entry of any pool
(the unit tests check it), so a value names exactly one memory.
"""

from __future__ import annotations

from typing import Any

# kind -> question, pool, old/new phrasings by half, distractor phrasings.
KINDS: dict[str, dict[str, Any]] = {
    "residence": {
        "question": "Where does {p} live?",
        "pool": "city",
        "old": {"tune": ["{p} lives in {v}.", "{p} has a flat in {v}."],
                "held-out": ["{p}'s home is in {v}.",
                             "{p} is based in {v}, renting an apartment near the station."]},
        "new": {"tune": ["{p} moved to {v} last week.", "{p} has relocated to {v}."],
                "held-out": ["{p} just finished moving house from {old} to {v}.",
                             "{p} now lives in {v}."]},
        "distractor": ["{p}'s sister lives in {v}.", "{p}'s parents still live in {v}."],
    },
    "employer": {
        "question": "Who does {p} work for?",
        "pool": "company",
        "old": {"tune": ["{p} works at {v}.", "{p} is employed by {v}."],
                "held-out": ["{p} has a job at {v}.", "{p} works for {v} in the city centre."]},
        "new": {"tune": ["{p} left {old} and joined {v}.", "{p} started a new job at {v}."],
                "held-out": ["{p} now works for {v}.",
                             "{p} switched employers and is at {v} now."]},
        "distractor": ["{p}'s colleague from the book club works at {v}.",
                       "{p}'s cousin got a job at {v}."],
    },
    "job_title": {
        "question": "What is {p}'s job title?",
        "pool": "title",
        "old": {"tune": ["{p}'s job title is {v}.", "{p} is employed as {v}."],
                "held-out": ["{p} holds the title of {v}.", "{p}'s business card says {v}."]},
        "new": {"tune": ["{p} was promoted to {v}.", "{p}'s new title is {v}."],
                "held-out": ["{p} has taken on the role of {v}.",
                             "After the reorganisation {p} is {v}."]},
        "distractor": ["{p}'s brother's job title is {v}.", "{p}'s flatmate works as {v}."],
    },
    "manager": {
        "question": "Who is {p}'s manager?",
        "pool": "name",
        "old": {"tune": ["{p} reports to {v}.", "{p}'s manager is {v}."],
                "held-out": ["{p}'s boss is {v}.", "{v} manages {p}'s team."]},
        "new": {"tune": ["{p} has a new manager, {v}.", "{p} now reports to {v}."],
                "held-out": ["{v} took over from {old} as {p}'s manager.",
                             "After the team change, {p}'s boss is {v}."]},
        "distractor": ["{p}'s roommate's manager is {v}.", "{p}'s wife reports to {v}."],
    },
    "phone": {
        "question": "What is {p}'s phone number?",
        "pool": "phone",
        "old": {"tune": ["{p}'s phone number is {v}.", "You can reach {p} at {v}."],
                "held-out": ["{p}'s mobile: {v}.", "Call {p} on {v}."]},
        "new": {"tune": ["{p} changed number to {v}.", "{p}'s new phone number is {v}."],
                "held-out": ["{p} got a new mobile number: {v}.",
                             "{p} can now be reached at {v}."]},
        "distractor": ["{p}'s mother's phone number is {v}.",
                       "{p}'s landlord can be called on {v}."],
    },
    "email": {
        "question": "What is {p}'s email address?",
        "pool": "email",
        "old": {"tune": ["{p}'s email address is {v}.", "Write to {p} at {v}."],
                "held-out": ["{p} reads mail at {v}.", "{p}'s email: {v}."]},
        "new": {"tune": ["{p} changed email address to {v}.", "{p}'s new email is {v}."],
                "held-out": ["{p} stopped using {old}; write to {v} instead.",
                             "{p} can now be emailed at {v}."]},
        "distractor": ["{p}'s assistant's email address is {v}.",
                       "{p}'s accountant uses {v}."],
    },
    "car": {
        "question": "What car does {p} drive?",
        "pool": "car",
        "old": {"tune": ["{p} drives a {v}.", "{p}'s car is a {v}."],
                "held-out": ["{p} gets around in a {v}.", "{p} owns a {v}."]},
        "new": {"tune": ["{p} sold the {old} and bought a {v}.", "{p} now drives a {v}."],
                "held-out": ["{p} traded the old car in for a {v}.", "{p}'s new car is a {v}."]},
        "distractor": ["{p}'s brother drives a {v}.", "{p}'s neighbour just bought a {v}."],
    },
    "pet": {
        "question": "What pet does {p} have?",
        "pool": "pet",
        "old": {"tune": ["{p} has a {v}.", "{p} lives with a {v}."],
                "held-out": ["{p}'s pet is a {v}.", "{p} walks a {v} every morning."]},
        "new": {"tune": ["{p}'s old pet died last year, and {p} has adopted a {v}.",
                         "{p} rehomed the {old} and now has a {v}."],
                "held-out": ["{p}'s pet these days is a {v}.",
                             "{p} brought home a {v} from the shelter."]},
        "distractor": ["{p}'s niece has a {v}.", "{p}'s downstairs neighbour keeps a {v}."],
    },
    "partner": {
        "question": "Who is {p}'s partner?",
        "pool": "name",
        "old": {"tune": ["{p} is dating {v}.", "{p}'s partner is {v}."],
                "held-out": ["{p} is in a relationship with {v}.", "{p} and {v} are a couple."]},
        "new": {"tune": ["{p} and {old} broke up; {p} is now seeing {v}.",
                         "{p}'s new partner is {v}."],
                "held-out": ["{p} got together with {v}.",
                             "{p} is now in a relationship with {v}."]},
        "distractor": ["{p}'s best friend is dating {v}.", "{p}'s sister is engaged to {v}."],
    },
    "favourite_drink": {
        "question": "What is {p}'s favourite drink?",
        "pool": "drink",
        "old": {"tune": ["{p}'s favourite drink is {v}.", "{p} loves {v} more than anything."],
                "held-out": ["{p} always orders {v}.", "{p} can't start the day without {v}."]},
        "new": {"tune": ["{p} has gone off {old} and now prefers {v}.",
                         "These days {p}'s favourite drink is {v}."],
                "held-out": ["{p} switched from {old} to {v}.",
                             "{p} can't stand {old} any more; it's {v} now."]},
        "distractor": ["{p}'s father's favourite drink is {v}.", "{p}'s partner drinks {v}."],
    },
}

# Attributes that hold several values at once: an early statement and a later one that
# adds to it (never replaces it).
ADDITIVE: dict[str, dict[str, Any]] = {
    "hobby": {"pool": "hobby",
              "first": ["{p} has been into {v} for years.", "{p} spends weekends on {v}."],
              "second": ["{p} has also taken up {v}.", "{p} started {v} as a second hobby."]},
    "visited": {"pool": "city",
                "first": ["{p} visited {v} last spring.", "{p} once spent a holiday in {v}."],
                "second": ["{p} also spent a week in {v}.", "{p} just got back from {v}."]},
}

# Facts about the person unrelated to any question: (phrasing, its values).
UNRELATED: list[tuple[str, list[str]]] = [
    ("{p} is allergic to {v}.", ["peanuts", "shellfish", "pollen", "penicillin", "latex",
                                 "sesame"]),
    ("{p}'s birthday is in {v}.", ["January", "March", "May", "August", "October",
                                   "December"]),
]

FIRST_NAMES = [
    "Ilvar", "Mirren", "Tovah", "Quill", "Saoirse", "Bexley", "Orla", "Dashiel", "Ysolde",
    "Caspian", "Wrenna", "Idris", "Lumi", "Anselm", "Petra", "Zephyr", "Marisol", "Fenwick",
    "Ottilie", "Rasmus", "Calla", "Tiberius", "Eluned", "Jory", "Sunniva", "Barnaby",
    "Imke", "Leocadia", "Osric", "Nell",
]
LAST_NAMES = [
    "Ostberg", "Quarrington", "Vellacott", "Drummage", "Harrowby", "Kestevan", "Pellinore",
    "Tressider", "Ambrosetti", "Lindqvale", "Mortlake", "Fairbrook", "Castellane",
    "Oakhurst", "Brennagh", "Wexcombe", "Halloran", "Stavely", "Dunmore", "Rookwood",
    "Ashcombe", "Greyhaven", "Penhallow", "Thistlewood", "Carrick", "Blackmoor",
]

POOLS: dict[str, list[str]] = {
    "city": [
        "Lisbon", "Oslo", "Kraków", "Valparaíso", "Nagoya", "Tbilisi", "Ljubljana", "Halifax",
        "Porto Alegre", "Bergen", "Tallinn", "Cork", "Granada", "Leipzig", "Ghent", "Utrecht",
        "Trieste", "Bologna", "Seville", "Aarhus", "Tampere", "Rotterdam", "Vilnius", "Sarajevo",
        "Thessaloniki", "Izmir", "Marrakesh", "Nairobi", "Kigali", "Accra", "Dakar",
        "Montevideo", "Cusco", "Medellín", "Oaxaca", "Quebec City", "Winnipeg", "Boise",
        "Savannah", "Asheville", "Tucson", "Hobart", "Dunedin", "Wellington", "Kyoto",
        "Busan", "Da Nang", "Chiang Mai", "Kochi", "Pune", "Kathmandu", "Almaty", "Baku",
        "Yerevan", "Plovdiv", "Cluj-Napoca", "Brno", "Graz", "Innsbruck", "Lucerne",
        "Lausanne", "Strasbourg", "Nantes", "Bordeaux", "Galway", "Inverness", "Aberdeen",
        "Bruges", "Maastricht", "Gdańsk", "Wrocław", "Zadar", "Palermo", "Naples",
        "Valencia", "Bilbao", "Salamanca", "Funchal", "Reykjavík", "Tromsø", "Uppsala",
        "Turku", "Odense", "Lyon", "Heidelberg", "Antwerp", "Bratislava", "Sintra",
        "Toulouse", "Verona", "Coimbra", "Stavanger", "Kaunas", "Ostrava", "Varna",
    ],
    "company": [
        "Brightwater Analytics", "Copperleaf Logistics", "Northgate Foods", "Halcyon Robotics",
        "Bluefern Insurance", "Ironbark Construction", "Silverline Media", "Meridian Biotech",
        "Foxglove Publishing", "Quartzite Energy", "Larkspur Health", "Tidewell Shipping",
        "Ravenstone Games", "Orchard Lane Bakery", "Kestrel Aerospace", "Saltmarsh Studios",
        "Pinecrest Software", "Harbourlight Bank", "Goldcrest Textiles", "Amberfield Farms",
        "Stonebridge Legal", "Willowmere Hotels", "Cobalt Peak Mining", "Driftwood Design",
        "Emberline Solar", "Thornfield Pharma", "Glasshouse Architects", "Redwing Airlines",
        "Moonrise Telecom", "Sableworks Furniture",
    ],
    "title": [
        "Senior Data Analyst", "Head of Procurement", "Lead Backend Engineer",
        "Regional Sales Director", "Clinical Research Coordinator", "Principal Architect",
        "Junior Copy Editor", "Chief Financial Officer", "Warehouse Operations Manager",
        "Staff Product Designer", "Quality Assurance Lead", "Customer Success Manager",
        "Machine Learning Researcher", "Payroll Specialist", "Site Reliability Engineer",
        "Marketing Coordinator", "Associate Counsel", "Head of People",
        "Supply Chain Planner", "Technical Writer", "Field Service Technician",
        "Brand Strategist", "Investment Associate", "Laboratory Supervisor",
        "Deputy Head Teacher", "Community Outreach Officer", "Interior Stylist",
        "Systems Administrator", "Event Producer", "Veterinary Nurse",
    ],
    "car": [
        "blue Volvo V60", "red Mazda MX-5", "grey Skoda Octavia", "white Tesla Model 3",
        "black Audi A4", "silver Toyota Prius", "green Subaru Outback", "yellow Fiat 500",
        "orange Kia Soul", "navy Ford Focus", "beige Honda Jazz", "maroon Peugeot 308",
        "white Renault Zoe", "black Jeep Wrangler", "teal Nissan Leaf", "grey Volkswagen Golf",
        "red Mini Cooper", "silver Hyundai Ioniq", "blue BMW i3", "bronze Lexus RX",
        "white Citroën Berlingo", "green Land Rover Defender", "black Mercedes C-Class",
        "purple Dacia Sandero", "grey Polestar 2", "red Alfa Romeo Giulia",
        "white Seat Leon", "blue Opel Corsa", "silver Suzuki Swift", "black Porsche Macan",
    ],
    "pet": [
        "tabby cat named Miso", "beagle called Biscuit", "grey parrot named Pickle",
        "border collie called Juniper", "lop-eared rabbit named Clover",
        "tortoise called Archimedes", "dachshund named Pretzel", "ginger cat called Saffron",
        "greyhound named Comet", "corn snake called Noodle", "pug named Dumpling",
        "black cat called Inkwell", "labrador named Bramble", "hamster called Peanut Butter",
        "siamese cat named Opal", "whippet called Fennel", "cockatiel named Sunny",
        "terrier called Rascal", "bearded dragon named Spike", "poodle called Truffle",
        "guinea pig named Waffle", "husky called Blizzard", "budgie named Kiwi",
        "spaniel called Marmalade", "ferret named Zigzag", "persian cat called Velvet",
        "collie named Thistle", "goldfish called Bubbles", "shiba inu named Tofu",
        "maine coon called Moose",
    ],
    "drink": [
        "matcha latte", "rooibos", "flat white", "ginger beer", "oolong", "cold brew",
        "lapsang souchong", "kombucha", "lemonade", "hot chocolate", "yerba mate",
        "sparkling water",
        "mango lassi", "iced americano", "horchata", "kefir", "root beer", "apple cider",
        "barley water", "cortado", "hibiscus iced tea", "earl grey", "macchiato",
        "elderflower cordial", "coconut water", "peppermint infusion", "golden milk",
        "tonic water", "espresso tonic", "ayran",
    ],
    "hobby": [
        "pottery", "rock climbing", "birdwatching", "the cello", "chess", "sea kayaking",
        "woodworking", "salsa dancing", "astrophotography", "beekeeping", "fencing",
        "calligraphy", "trail running", "knitting", "orienteering", "bouldering",
        "sourdough baking", "origami", "archery", "sailing", "embroidery", "cross-stitch",
        "ice skating", "the ukulele", "stand-up paddling", "bonsai", "geocaching",
        "lacrosse", "glassblowing", "mountain biking", "juggling", "watercolour painting",
        "scuba diving", "falconry", "candle making", "table tennis", "bookbinding",
        "fly fishing", "the harp", "improv theatre", "crossword setting", "fossil hunting",
        "kite surfing", "quilting", "rowing", "letterpress printing", "tap dancing",
        "stamp collecting", "wild swimming", "the bagpipes", "model railways", "parkour",
        "foraging", "cryptic puzzles", "hula hooping", "the accordion", "tai chi",
        "lino cutting", "caving", "whittling",
    ],
}
EMAIL_DOMAINS = ["fastmail.example", "proton.example", "inbox.example", "mailbox.example",
                 "post.example", "letters.example", "quill.example", "courier.example"]
