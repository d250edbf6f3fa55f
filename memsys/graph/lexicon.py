"""Word lists of the rule extractor (all lowercase).

Small on purpose: each list is a cue the rules in :mod:`memsys.graph.extract_rules`
name explicitly, not a lexicon that tries to be complete. Extend a list when a
measured miss on real data shows it is needed.
"""

from __future__ import annotations

#: capitalized words that never start an entity (pronouns, interjections, discourse words)
CAP_STOP = frozenset("""
i i'm im i've ive i'd id i'll ill me my mine myself we we're we've we'll us our ours you you're youre
you've you'll your yours he he's she she's they they're they've it it's its his her hers them their
this that that's these those there there's here here's what what's whats when where where's why who
who's which how how's whoa wow oh ohh ooh ah aw aww hey hi hello heya yo bye goodbye thanks thank
thx ty congrats congratulations yes yeah yep yup no nope nah ok okay sure great cool nice awesome
amazing wonderful lovely good glad haha hahaha lol lmao omg btw also and but so or because if then
just well oops hmm um uh totally definitely absolutely really sounds sounds like let let's lets
anyway anyways plus maybe perhaps sorry please same agreed exactly true right indeed of course
both all any some every each one another other most many much more such not never always often
sometimes still even though although as at in on to for from with by about after before since until
while during into onto over under up down out off again once happy hope hoping love loved like
can could would should will shall may might must do does did don't doesn't didn't is are was were be
been being have has had having get got gonna wanna
""".split())

#: words that may sit inside a multi-word proper name ("Lord of the Rings")
SPAN_CONNECTORS = frozenset({"of", "the", "de", "la", "del", "da", "von", "van", "der", "du", "for", "&", "and"})
#: "and" joins only when the span so far has two or more capitalized words
#: ("Procter and Gamble" is rare; "Caroline and Melanie" is common), see extract_rules
WEAK_CONNECTORS = frozenset({"and"})

PERSON_TITLES = frozenset({
    "dr", "mr", "mrs", "ms", "miss", "mx", "prof", "professor", "sir", "madam", "dame",
    "aunt", "auntie", "uncle", "grandma", "grandpa", "coach", "officer", "captain", "rev",
})
#: abbreviations after which a period does not end a sentence
ABBREVIATIONS = frozenset({"dr", "mr", "mrs", "ms", "mx", "prof", "st", "jr", "sr", "vs", "etc", "mt", "ft", "e.g", "i.e"})

#: words just before a capitalized name that make it a person ("Hey Mel", "thanks Jon")
VOCATIVE_CUES = frozenset({"hey", "hi", "hello", "thanks", "thank", "bye", "congrats", "congratulations", "dear", "yo", "sorry", "love"})
#: verbs whose object after "to/with/from" is a person, not a place ("talked to Jon")
PERSON_VERBS = frozenset({
    "talk", "talked", "talking", "spoke", "speak", "speaking", "said", "say", "told", "tell", "wrote",
    "write", "sent", "send", "gave", "give", "listen", "listened", "married", "met", "meet", "meeting",
    "introduced", "hang", "hung", "hanging", "chat", "chatted", "reached", "texted", "called", "visited",
})
LOCATION_PREPOSITIONS = frozenset({"in", "at", "from", "to", "near", "around", "across", "through", "visit", "visited", "visiting"})

ORG_WORDS = frozenset({
    "inc", "corp", "corporation", "llc", "ltd", "co", "company", "university", "college", "school",
    "academy", "institute", "club", "group", "association", "society", "foundation", "agency",
    "department", "church", "hospital", "bank", "team", "band", "org", "organization", "organisation",
    "charity", "studio", "studios", "center", "centre", "network", "alliance", "league", "union", "council",
})
#: place-name suffixes ("Central Park", "Lake Tahoe" starts with one)
LOCATION_WORDS = frozenset({
    "city", "street", "st", "avenue", "ave", "road", "rd", "park", "lake", "river", "mountain", "mountains",
    "mount", "mt", "beach", "island", "islands", "county", "state", "valley", "canyon", "bay", "coast",
    "falls", "hill", "hills", "square", "village", "town", "forest", "desert", "harbor", "harbour",
})
#: a small gazetteer: continents, countries, US states, large cities, famous places
PLACES = frozenset("""
africa asia europe america australia antarctica usa canada mexico brazil argentina chile peru colombia
cuba jamaica uk england scotland ireland wales france germany spain portugal italy greece netherlands
holland belgium switzerland austria sweden norway denmark finland iceland poland russia ukraine turkey
egypt morocco kenya nigeria india china japan korea thailand vietnam indonesia philippines singapore
malaysia israel iran iraq dubai hawaii alaska california texas florida oregon washington colorado arizona
nevada utah michigan ohio illinois georgia virginia massachusetts maine vermont montana idaho wyoming
tennessee kentucky louisiana boston chicago seattle portland denver austin miami atlanta detroit houston
dallas phoenix nashville philadelphia brooklyn manhattan toronto vancouver montreal london paris berlin
rome madrid barcelona lisbon amsterdam dublin prague vienna athens istanbul moscow tokyo kyoto osaka
seoul beijing shanghai bangkok sydney melbourne rio galway edinburgh venice florence milan munich zurich
geneva stockholm oslo copenhagen himalayas alps rockies yellowstone yosemite disneyland
""".split()) | frozenset({
    "north america", "south america", "united states", "united kingdom", "south africa", "south korea",
    "new zealand", "new york", "north carolina", "south carolina", "las vegas", "los angeles",
    "san francisco", "san diego", "new orleans", "hong kong", "rio de janeiro", "rocky mountains",
    "grand canyon", "new jersey", "new mexico", "puerto rico", "costa rica",
})
#: common nouns for places, used in "my <place>" ("my hometown" is a Location)
PLACE_NOUNS = frozenset({"hometown", "town", "city", "neighborhood", "neighbourhood", "country", "state", "village"})

MONTHS = frozenset({
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
})
WEEKDAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "fri", "tues", "thurs"})
#: words before a bare month that make it a date ("in May", "since March")
MONTH_CUES = frozenset({"in", "on", "since", "until", "till", "by", "last", "next", "this", "early", "late", "mid", "during", "of"})
HOLIDAYS = frozenset({
    "christmas", "thanksgiving", "easter", "halloween", "hanukkah", "diwali", "ramadan", "eid",
    "new year", "new year's", "new years", "valentine's day", "mother's day", "father's day",
    "independence day", "labor day", "memorial day", "pride", "pride month",
})

#: event heads: "a LGBTQ support group", "the pride parade", "my cousin's wedding"; words that
#: are mostly something else in chat ("game", "date", "match", "march", "session") are left out
EVENT_WORDS = frozenset({
    "party", "parties", "concert", "concerts", "wedding", "parade", "conference", "trip", "race",
    "festival", "meeting", "support group", "workshop", "class", "classes", "camp", "hike", "show",
    "exhibition", "exhibit", "ceremony", "graduation", "funeral", "picnic", "reunion", "marathon",
    "tournament", "competition", "rally", "retreat", "vacation", "holiday", "performance", "recital",
    "gig", "fair", "seminar", "lecture", "meetup", "event", "fundraiser", "convention", "summit", "expo",
    "protest", "gala", "auction", "audition", "interview", "course", "tour", "cruise", "road trip",
    "camping trip", "book club", "birthday", "anniversary", "sleepover", "barbecue", "bbq", "potluck",
    "charity run", "5k", "10k", "baby shower", "bridal shower", "game night", "movie night",
})
#: multi-word event heads are matched first
EVENT_PHRASES = frozenset(w for w in EVENT_WORDS if " " in w)
#: verbs that make the speaker a participant of an event in the same sentence
ATTEND_VERBS = frozenset({
    "went", "go", "goes", "going", "attend", "attended", "attending", "join", "joined", "joining",
    "participate", "participated", "participating", "ran", "run", "running", "competed", "compete",
    "host", "hosted", "hosting", "threw", "organized", "organised", "organizing", "volunteered",
    "volunteering", "played", "perform", "performed", "performing", "visited", "took", "had", "signed",
    "registered", "been", "at",
})
FIRST_PERSON = frozenset({"i", "i'm", "im", "i've", "ive", "i'd", "i'll", "we", "we're", "we've", "my", "our", "me", "us"})

#: family and friends: "my <kin>" is a Person, not an Object
KIN = frozenset({
    "mom", "mum", "mother", "dad", "father", "parents", "parent", "husband", "wife", "partner", "spouse",
    "son", "sons", "daughter", "daughters", "kid", "kids", "child", "children", "baby", "babies",
    "brother", "brothers", "sister", "sisters", "sibling", "siblings", "grandma", "grandmother", "grandpa",
    "grandfather", "grandparents", "grandkids", "grandchildren", "aunt", "uncle", "cousin", "cousins",
    "niece", "nephew", "friend", "friends", "bestie", "boyfriend", "girlfriend", "fiance", "fiancee",
    "family", "boss", "coworker", "coworkers", "colleague", "colleagues", "mentor", "neighbor",
    "neighbors", "neighbour", "roommate", "teammate", "teammates", "therapist", "teacher", "students",
    "hubby", "bf", "gf",
})
#: adjectives dropped from the front of "my <noun phrase>"
SKIP_ADJECTIVES = frozenset({
    "own", "new", "old", "favorite", "favourite", "dear", "lovely", "beautiful", "amazing", "awesome",
    "great", "wonderful", "sweet", "cute", "whole", "very", "little", "big", "first", "last", "best",
    "latest", "current", "recent", "entire", "precious", "beloved", "late", "younger", "older", "eldest",
    "oldest", "youngest", "two", "three", "fave", "special", "huge", "small", "safe", "fun", "nice",
    "good", "other", "awesome", "incredible", "fantastic", "cool", "next", "recent", "upcoming",
})
#: heads that are not worth an entity ("my life", "my best")
ABSTRACT_NOUNS = frozenset({
    "life", "time", "way", "mind", "heart", "best", "self", "day", "days", "week", "weekend", "year",
    "years", "side", "turn", "thing", "things", "stuff", "part", "point", "eyes", "head", "hand", "hands",
    "goal", "goals", "dream", "dreams", "journey", "experience", "opinion", "thoughts", "feelings", "own",
    "love", "pleasure", "bad", "fault", "apologies", "name", "story", "focus", "passion", "energy", "mood",
    "attention", "advice", "support", "help", "gosh", "god", "goodness", "word", "words", "bucket",
    "favorite", "favourite", "go", "plan", "plans", "kind", "lot", "end", "place", "chance", "biggest",
    "own", "spirits", "soul", "body", "health", "mental", "emotions", "world", "inspiration", "motivation",
    "therapy", "self-care", "joy", "happiness", "strength", "confidence", "identity", "values",
    "difference", "sure", "progress", "decision", "decisions", "mistake", "mistakes", "impact", "effort",
    "change", "changes", "choice", "choices", "connection", "connections", "community", "area", "lives",
    "favorites", "favourites", "work", "skills", "back", "living", "friendship", "friendships", "memories",
    "memory", "sense", "peace", "fun", "break", "space", "studies", "comfort", "purpose", "day-to-day",
})
#: function words and frequent verbs that end a noun phrase
NP_STOP = frozenset("""
a an the this that these those and or but so if then than as at in on to for from with by about of
into onto over under up down out off again is are was were be been being am has have had having do does
did will would can could should may might must shall not no never always really just too also still
very so such it its it's he she they we you i me him her them us my our your his their who what which
when where why how all any some every each both more most much many lot lots love loves loved like
likes liked got get gets getting make makes made take takes took went go goes going said says say came
come comes gave give gives give feel feels felt think thinks thought know knows knew see sees saw
want wants wanted need needs needed keep keeps kept help helps helped let lets put try tries tried
started start starts finally recently always now today yesterday tomorrow tonight ago since
because while though although until after before during here there been being doing done
sure other one two three four five six seven eight nine ten few several something anything everything
nothing someone anyone everyone ago years months weeks days
""".split())
#: "I <verb> a <thing>": the thing is an Object created by the speaker
CREATE_VERBS = frozenset({
    "painted", "paint", "made", "make", "wrote", "write", "written", "built", "build", "drew", "draw",
    "drawn", "baked", "bake", "created", "create", "designed", "design", "knitted", "knit", "crafted",
    "craft", "composed", "compose", "sculpted", "cooked", "cook", "recorded", "record", "sewed", "sewn",
    "carved", "published", "photographed", "shot", "filmed", "invented", "started", "founded", "launched",
})
#: "I live in / moved to / am from <Location>": the speaker is located in it
RESIDENCE_VERBS = frozenset({"live", "lives", "lived", "living", "moved", "move", "moving", "relocated", "grew", "born", "raised", "from", "based", "stay", "staying", "stayed"})
#: "I work at / joined / volunteer at <Organization>": the speaker is part of it
MEMBER_VERBS = frozenset({"work", "works", "worked", "working", "join", "joined", "joining", "volunteer", "volunteers", "volunteered", "volunteering", "study", "studied", "studying", "member", "intern", "interned", "interning", "employed", "hired", "enrolled", "attend", "attended", "attending", "teach", "teaches", "taught", "teaching"})
#: small query stopword list for seed matching (memsys.graph.kg)
QUERY_STOP = frozenset("""
a an the this that these those and or but of in on at to for from with by about as is are was were be
been did do does done has have had what when where who whom whose which why how much many any some
i me my we our you your he him his she her they them their it its there here would could should will
can may might must not no yes if then than so such other another kind type likely time times day
one ones think thinks feel feels like likes go went get got make made 's s
""".split())
