"""Offline entity/relation extraction with documented rules (no LLM, no model).

We use rules rather than a statistical NER because no trustworthy spaCy English
pipeline ships on PyPI here. Every rule is listed below with its confidence; word
lists live in :mod:`memsys.graph.lexicon`.

Entities
  E1  The MAU's speaker is a Person (0.95).
  E2  Runs of capitalized words (connectors "of/the/de/for/&" allowed inside) are
      candidate names. Mid-sentence runs are accepted; a run at sentence start is
      accepted only if it is a known name (speaker, title, gazetteer, holiday) or, by
      corpus statistics gathered with :meth:`RuleExtractor.observe`, it recurs
      capitalized mid-sentence and is not a common word (its lowercase form is not
      more frequent than its capitalized form). Mid-sentence single words that the
      corpus mostly writes in lowercase are dropped too (emphasis, missed splits).
  E3  Typing cues, first match wins: title before or inside ("Dr. Smith", "Aunt May")
      -> Person 0.9; a speaker name, or a unique prefix of a speaker's first name
      ("Mel" for Melanie, mapped to the speaker's name) -> Person 0.9; greeting before
      ("Hey Jon") -> Person 0.7; "with <Name>" or "talked to <Name>" -> Person 0.5; weekday -> Time 0.4; month with a date cue -> Time 0.5
      (a month without a cue, "May I", is dropped); holiday -> Event 0.7; last word
      Inc/Corp/University/School/Club/Group... -> Organization 0.8; last word an event
      word ("Pride Parade") -> Event 0.8; gazetteer place or place suffix ("Lake",
      "Street") -> Location 0.8; "in/at/from/to/near <Cap>" -> Location 0.55 (Person 0.5
      after talk/say/visit-like verbs); otherwise Concept 0.5.
      Sentence-start runs accepted by statistics get 0.8x confidence.
  E4  Event phrases: an event word ("party", "concert", "support group"...) after a
      determiner or modifiers; up to 3 modifiers are kept ("a LGBTQ support group" ->
      "LGBTQ support group", 0.7; bare "the concert" 0.5); "my birthday" is owned:
      "<Speaker>'s birthday".
  E5  Dates written out ("8 May 2023", "May 8", "May 2023", "in 2022") -> Time 0.7,
      named "8 May 2023" (the MAU's year fills a missing year); relative mentions the
      ingest resolved (``MAU.time_mentions``) -> Time 0.8 named by their resolution.
  E6  "my/our <noun phrase>" -> Object "<Speaker>'s <np>" 0.7 (adjectives like
      new/favorite dropped, abstract heads like "life" skipped); kin words ("my mom")
      -> Person "<Speaker>'s mom" 0.7 and a name right after it is a Person ("my friend
      Anna", 0.7); place nouns ("my hometown") -> Location.
      "<Name>'s <np>" does the same for the named owner (0.6).
  E7  "I painted/made/wrote/built... a <np>" -> Object "<Speaker>'s <np>" 0.6.

Relations (only the 12 released types; the mapping of what was said to a type)
  R1  speaker interacts_with each Person mentioned (0.8 when addressed, else 0.6);
      "my <kin>" -> interacts_with 0.7; "<Name>'s <kin>" -> Name interacts_with 0.6.
  R2  attending an event -> speaker occurs_at Event (the released types have no
      "attends": occurs_at reads "was present at"): 0.7 with an attendance verb
      (went/attended/joined/ran/hosted...) before the event in the sentence, 0.5 when
      the sentence is in the first person, else related_to 0.3.
  R3  "X in/at Y" with Y a Location -> X located_in Y (Event: occurs_at) 0.6;
      "I live in / moved to / am from Y" -> speaker located_in Y 0.7.
  R4  "I work at / joined / volunteer at <Organization>" -> speaker part_of it 0.6.
  R5  possession -> owns (E6, 0.7 / 0.6); creation -> <object> created_by speaker (E7).
  R6  Event occurs_at Time when both are in the MAU (0.6).
  R7  "my dog Max" (np followed by a name) -> np related_to name 0.6.
  R8  every other pair of entities in the MAU (first 8 by position) -> related_to 0.3
      (co-occurrence), and the speaker related_to every entity it has no other
      relation with (0.3), except Time entities (dates reach the speaker through
      events; a speaker adjacent to every date puts all dates one hop from any query
      that names the speaker).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from memsys.graph import lexicon as L
from memsys.graph.schema import ExtractedEntity, ExtractedRelation, Extraction, normalize_name, time_label
from memsys.graph.text import Tok, find_dates, split_sentences, tokenize
from memsys.records import MAU

_DETERMINERS = frozenset({"a", "an", "the", "my", "our", "his", "her", "their", "your", "this", "that",
                          "next", "last", "another", "every", "first", "some", "its"})
_MAX_SPAN = 6
_MAX_COOCCUR = 8

# confidences of the rules above (the rule set itself, not tuning knobs)
C_SPEAKER, C_TITLE, C_VOCATIVE, C_WEEKDAY, C_MONTH, C_HOLIDAY = 0.95, 0.9, 0.7, 0.4, 0.5, 0.7
C_SUFFIX, C_PLACE_PREP, C_PERSON_PREP, C_CONCEPT, C_INITIAL = 0.8, 0.55, 0.5, 0.5, 0.8
C_EVENT_NAMED, C_EVENT_BARE, C_DATE, C_RESOLVED_TIME = 0.7, 0.5, 0.7, 0.8
C_MY, C_POSSESSIVE, C_CREATED = 0.7, 0.6, 0.6
C_INTERACT_ADDRESSED, C_INTERACT = 0.8, 0.6
C_ATTEND_VERB, C_ATTEND_FIRST_PERSON, C_COOCCUR = 0.7, 0.5, 0.3
C_LOCATED, C_RESIDENCE, C_MEMBER, C_EVENT_TIME, C_APPOSITIVE = 0.6, 0.7, 0.6, 0.6, 0.6


@dataclass(slots=True)
class _Found:
    name: str
    type: str
    conf: float
    start: int  # token index in the sentence (for position-based rules)
    end: int
    cue: str = ""


class RuleExtractor:
    """Rule-based extractor; call :meth:`observe` on the corpus first for rule E2's statistics."""

    name = "rules"

    def __init__(self, speakers: Iterable[str] = ()):
        self._speakers: dict[str, str] = {}  # normalized name -> surface name
        self._cap_mid: Counter[str] = Counter()  # capitalized, not sentence-initial
        self._lower: Counter[str] = Counter()  # written in lowercase
        self._observed = 0
        for s in speakers:
            self.add_speaker(s)

    # ------------------------------------------------------------------ corpus stats
    def add_speaker(self, name: str) -> None:
        if name and name.strip():
            self._speakers[normalize_name(name)] = name.strip()

    def observe(self, maus: Iterable[MAU]) -> None:
        """Count how each word is written across the corpus (rule E2) and learn speakers."""
        for m in maus:
            if m.speaker:
                self.add_speaker(m.speaker)
            for sentence in split_sentences(m.full_text):
                toks = tokenize(sentence)
                for i, t in enumerate(toks):
                    word = t.lower[:-2] if t.possessive else t.lower
                    if t.cap and i > 0 and t.gap.strip() == "":
                        self._cap_mid[word] += 1
                    elif not t.cap:
                        self._lower[word] += 1
            self._observed += 1

    def _common_word(self, word: str) -> bool:
        """Mostly written in lowercase in the observed corpus (not a name)."""
        return self._observed > 0 and self._lower[word] > 3 * max(1, self._cap_mid[word])

    def _recurs_as_name(self, word: str) -> bool:
        return self._observed > 0 and self._cap_mid[word] >= 1 and self._lower[word] <= self._cap_mid[word]

    def _speaker_for(self, key: str) -> str | None:
        """The speaker a capitalized word names: the full name, or a unique first-name prefix."""
        if key in self._speakers:
            return self._speakers[key]
        if " " in key or len(key) < 2:
            return None
        firsts = [(k.split()[0], s) for k, s in self._speakers.items()]
        exact = [s for f, s in firsts if f == key]
        if exact:
            return exact[0]
        prefix = [s for f, s in firsts if f.startswith(key) and len(f) > len(key)]
        return prefix[0] if len(prefix) == 1 and key not in L.CAP_STOP else None

    # ------------------------------------------------------------------ extraction
    def extract_many(self, maus: Sequence[MAU]) -> list[Extraction]:
        return [self.extract(m) for m in maus]

    def extract(self, mau: MAU) -> Extraction:
        speaker = (mau.speaker or "").strip() or None
        if speaker:
            self.add_speaker(speaker)
        year = mau.timestamp.year if mau.timestamp else None
        out = _MauBuilder(speaker)
        if speaker:
            out.entity(speaker, "Person", C_SPEAKER)
        for sentence in split_sentences(mau.full_text):
            toks = tokenize(sentence)
            if toks:
                self._sentence(sentence, toks, speaker, year, out)
        for tm in mau.time_mentions:
            out.entity(time_label(tm), "Time", C_RESOLVED_TIME)
            out.times.append(time_label(tm))
        out.finish()
        return Extraction(mau.id, out.entities(), out.relations)

    def _sentence(self, sentence: str, toks: list[Tok], speaker: str | None, year: int | None, out: "_MauBuilder") -> None:
        lowers = [t.lower for t in toks]
        first_person = any(w in L.FIRST_PERSON for w in lowers)
        dates = self._dates(sentence, toks, year)
        covered = {i for d in dates for i in range(d.start, d.end)}
        found: list[_Found] = list(dates)
        for i, j in self._cap_spans(toks):
            if any(k in covered for k in range(i, j)):
                continue
            f = self._classify(toks, i, j)
            if f is not None:
                found.append(f)
                covered.update(range(f.start, f.end))
        found.extend(self._events(toks, covered, speaker))
        found.sort(key=lambda f: f.start)
        for f in found:
            out.entity(f.name, f.type, f.conf)
            if f.type == "Time":
                out.times.append(f.name)
        # relations that need the sentence context (R1-R4, R7)
        for n, f in enumerate(found):
            if speaker and f.name != speaker:
                before = lowers[max(0, f.start - 6):f.start]
                if f.type == "Person":
                    out.relation(speaker, f.name, "interacts_with",
                                 C_INTERACT_ADDRESSED if f.cue == "vocative" else C_INTERACT)
                elif f.type == "Event":
                    if any(w in L.ATTEND_VERBS for w in before):
                        out.relation(speaker, f.name, "occurs_at", C_ATTEND_VERB)
                    elif first_person:
                        out.relation(speaker, f.name, "occurs_at", C_ATTEND_FIRST_PERSON)
                elif f.type == "Location" and first_person and any(w in L.RESIDENCE_VERBS for w in lowers[max(0, f.start - 4):f.start]):
                    out.relation(speaker, f.name, "located_in", C_RESIDENCE)
                elif f.type == "Organization" and first_person and any(w in L.MEMBER_VERBS for w in lowers[max(0, f.start - 4):f.start]):
                    out.relation(speaker, f.name, "part_of", C_MEMBER)
            if f.type == "Location" and f.start >= 2 and lowers[f.start - 1] in ("in", "at"):
                host = next((g for g in found[:n] if g.end == f.start - 1 and g.type not in ("Time", "Location")), None)
                host = host or next((g for g in found if g.type == "Event" and g is not f), None)
                if host is not None:
                    out.relation(host.name, f.name, "occurs_at" if host.type == "Event" else "located_in", C_LOCATED)
        if speaker:
            self._noun_phrases(toks, speaker, found, out)

    # ---- E2/E3: capitalized spans
    def _cap_spans(self, toks: list[Tok]) -> list[tuple[int, int]]:
        """Token ranges [i, j) of capitalized runs; connectors only between capitalized words."""

        def name_word(t: Tok) -> bool:
            return t.cap and t.lower not in L.CAP_STOP and not t.lower.isdigit()

        spans, i = [], 0
        while i < len(toks):
            if not name_word(toks[i]):
                i += 1
                continue
            j = i + 1
            while j < len(toks) and j - i < _MAX_SPAN and not toks[j - 1].possessive and toks[j].gap.strip() == "":
                if name_word(toks[j]):
                    j += 1
                    continue
                m = j  # up to two connectors ("of the") followed by a capitalized word
                while m < len(toks) and m - j < 2 and toks[m].lower in L.SPAN_CONNECTORS and toks[m].gap.strip() == "":
                    m += 1
                weak = any(toks[x].lower in L.WEAK_CONNECTORS for x in range(j, m))
                if m > j and m < len(toks) and toks[m].gap.strip() == "" and name_word(toks[m]) and (not weak or j - i >= 2):
                    j = m + 1
                else:
                    break
            spans.append((i, j))
            i = j
        return spans

    def _classify(self, toks: list[Tok], i: int, j: int) -> _Found | None:
        span = toks[i:j]
        words = [t.lower for t in span[:-1]] + [span[-1].stem.lower()]
        name = " ".join(t.text for t in span[:-1]) + (" " if len(span) > 1 else "") + span[-1].stem
        key = " ".join(words)
        prev = toks[i - 1].lower if i > 0 else None
        prev2 = toks[i - 2].lower if i > 1 else None
        initial = i == 0 or (prev in L.PERSON_TITLES and i == 1)

        def found(n: str, typ: str, conf: float, cue: str = "") -> _Found:
            return _Found(n, typ, conf, i, j, cue)

        if prev in L.PERSON_TITLES and toks[i - 1].cap:
            title = toks[i - 1].text + ("." if toks[i].gap.startswith(".") else "")
            return _Found(f"{title} {name}", "Person", C_TITLE, i - 1, j, "title")
        if words[0] in L.PERSON_TITLES:  # "Aunt May"; a lone "Dr" is the title of the next span
            return found(name, "Person", C_TITLE, "title") if len(words) > 1 else None
        speaker = self._speaker_for(key)
        if speaker:
            return found(speaker, "Person", C_TITLE, "vocative" if prev in L.VOCATIVE_CUES else "speaker")
        if len(words) == 1 and words[0] in L.WEEKDAYS:
            return found(name, "Time", C_WEEKDAY)
        if len(words) == 1 and words[0] in L.MONTHS:
            return found(name, "Time", C_MONTH) if prev in L.MONTH_CUES else None
        if key in L.HOLIDAYS:
            return found(name, "Event", C_HOLIDAY)
        if key in L.PLACES:
            return found(name, "Location", C_SUFFIX)
        if initial and not self._recurs_as_name(words[0]):
            if len(span) > 1 and (self._observed == 0 or self._common_word(words[0])):
                return self._classify(toks, i + 1, j)  # "Visiting Paris": drop the common first word
            return None
        if len(words) == 1 and (words[0] in L.CAP_STOP or len(words[0]) < 2 or self._common_word(words[0])):
            return None
        scale = C_INITIAL if initial else 1.0
        if prev in L.VOCATIVE_CUES and len(words) <= 2:
            return found(name, "Person", C_VOCATIVE * scale, "vocative")
        if words[-1] in L.ORG_WORDS or words[0] in ("university", "college"):
            return found(name, "Organization", C_SUFFIX * scale)
        if len(words) > 1 and (words[-1] in L.EVENT_WORDS or " ".join(words[-2:]) in L.EVENT_PHRASES):
            return found(name, "Event", C_SUFFIX * scale)
        if len(words) > 1 and (words[-1] in L.LOCATION_WORDS or words[0] in ("lake", "mount", "mt")):
            return found(name, "Location", C_SUFFIX * scale)
        if prev == "the" and prev2 in L.LOCATION_PREPOSITIONS:  # "in the Louvre"
            prev, prev2 = prev2, None
        if prev == "with" and len(words) <= 2:  # "went hiking with Anna"
            return found(name, "Person", C_PERSON_PREP * scale)
        if prev in L.LOCATION_PREPOSITIONS:
            if prev in ("to", "from") and prev2 in L.PERSON_VERBS:
                return found(name, "Person", C_PERSON_PREP * scale)
            return found(name, "Location", C_PLACE_PREP * scale)
        return found(name, "Concept", C_CONCEPT * scale)

    # ---- E5: written dates
    def _dates(self, sentence: str, toks: list[Tok], year: int | None) -> list[_Found]:
        return [_Found(name, "Time", C_DATE, i, j) for name, i, j in find_dates(sentence, toks, year)]

    # ---- E4: event phrases
    def _events(self, toks: list[Tok], covered: set[int], speaker: str | None) -> list[_Found]:
        out = []
        k = 0
        while k < len(toks):
            two = f"{toks[k].lower} {toks[k + 1].lower}" if k + 1 < len(toks) and toks[k + 1].gap.strip() == "" else ""
            size = 2 if two in L.EVENT_PHRASES else 1 if toks[k].lower in L.EVENT_WORDS else 0
            if not size or k in covered:
                k += 1
                continue
            mods: list[Tok] = []
            b = k - 1
            while b >= 0 and len(mods) < 3 and toks[b + 1].gap.strip() == "":
                w = toks[b].lower
                if (w in L.NP_STOP or w in L.CAP_STOP or w in _DETERMINERS or w in L.SKIP_ADJECTIVES
                        or not w.replace("'", "").isalnum()):
                    break
                mods.insert(0, toks[b])
                b -= 1
                if toks[b + 1].possessive:
                    break
            det = toks[b].lower if b >= 0 and toks[b + 1].gap.strip() == "" else None
            while b >= 0 and det in L.SKIP_ADJECTIVES:
                b -= 1
                det = toks[b].lower if b >= 0 else None
            if not mods and det not in _DETERMINERS:
                k += size
                continue
            head = " ".join(t.lower for t in toks[k:k + size])
            name = " ".join([t.text for t in mods] + [head])
            if det in ("my", "our") and speaker and not any(t.possessive for t in mods):
                name = f"{speaker}'s {name}"
            start = k - len(mods)
            out.append(_Found(name, "Event", C_EVENT_NAMED if mods or det in ("my", "our") else C_EVENT_BARE, start, k + size))
            k += size
        return out

    # ---- E6/E7: noun phrases owned or created by someone
    def _noun_phrases(self, toks: list[Tok], speaker: str, found: list[_Found], out: "_MauBuilder") -> None:
        names_at = {f.start: f for f in found}
        for k, t in enumerate(toks):
            owner, conf = None, C_MY
            if t.lower in ("my", "our"):
                owner = speaker
            elif t.possessive and t.cap:
                f = next((g for g in found if g.end == k + 1 and g.type in ("Person", "Organization")), None)
                owner, conf = (f.name, C_POSSESSIVE) if f else (None, 0.0)
            created = False
            if owner is None and t.lower in L.CREATE_VERBS and any(w.lower in L.FIRST_PERSON for w in toks[max(0, k - 3):k]):
                owner, conf, created = speaker, C_CREATED, True
            if owner is None:
                continue
            np_ = self._noun_phrase(toks, k + 1, skip_determiner=created)
            if np_ is None:
                continue
            words, end = np_
            head = words[-1]
            if head in L.EVENT_WORDS or head in L.ABSTRACT_NOUNS or (created and words[0] in L.KIN):
                continue
            label = f"{owner}'s {' '.join(words)}"
            if words[0] in L.KIN and not created:
                label = f"{owner}'s {words[0]}"
                out.entity(label, "Person", conf)
                out.relation(owner, label, "interacts_with", conf)
            elif head in L.PLACE_NOUNS and not created:
                out.entity(label, "Location", conf)
                out.relation(owner, label, "located_in", conf)
            elif created:
                out.entity(label, "Object", conf)
                out.relation(label, owner, "created_by", conf)
            else:
                out.entity(label, "Object", conf)
                out.relation(owner, label, "owns", conf)
                made_it = k > 0 and toks[k - 1].lower in L.CREATE_VERBS and t.lower in ("my", "our")
                if made_it and any(w.lower in L.FIRST_PERSON for w in toks[max(0, k - 4):k - 1]):
                    out.relation(label, owner, "created_by", C_CREATED)
            appositive = names_at.get(end)
            if appositive is not None and appositive.type in ("Person", "Concept") and toks[end].gap.strip() in ("", ","):
                if words[0] in L.KIN and not created:  # "my friend Anna": Anna is a person
                    out.entity(appositive.name, "Person", C_MY)
                    out.relation(owner, appositive.name, "interacts_with", C_MY)
                out.relation(label, appositive.name, "related_to", C_APPOSITIVE)

    @staticmethod
    def _noun_phrase(toks: list[Tok], k: int, skip_determiner: bool) -> tuple[list[str], int] | None:
        if skip_determiner and k < len(toks) and toks[k].lower in _DETERMINERS and toks[k].gap.strip() == "":
            k += 1
        while k < len(toks) and toks[k].lower in L.SKIP_ADJECTIVES and toks[k].gap.strip() == "":
            k += 1
        words: list[str] = []
        while k < len(toks) and len(words) < 2 and toks[k].gap.strip() == "":
            t = toks[k]
            w = t.stem.lower() if t.possessive else t.lower
            if (t.cap and words) or w in L.NP_STOP or w in L.CAP_STOP and t.cap or not w.replace("-", "").isalpha():
                break
            words.append(w)
            k += 1
            if t.possessive or w in L.KIN:
                break
        return (words, k) if words else None


class _MauBuilder:
    """Collects one MAU's entities (deduplicated by normalized name) and relations."""

    def __init__(self, speaker: str | None):
        self.speaker = speaker
        self._ents: dict[str, ExtractedEntity] = {}
        self._order: list[str] = []
        self.relations: list[ExtractedRelation] = []
        self._pairs: set[tuple[str, str]] = set()
        self._triples: set[tuple[str, str, str]] = set()
        self.times: list[str] = []

    def entity(self, name: str, type_: str, conf: float) -> None:
        key = normalize_name(name)
        if not key:
            return
        old = self._ents.get(key)
        if old is None:
            self._order.append(key)
        if old is None or conf > old.confidence:
            self._ents[key] = ExtractedEntity(name if old is None else old.name, type_, round(conf, 4))

    def _name(self, name: str) -> str | None:
        e = self._ents.get(normalize_name(name))
        return e.name if e else None

    def relation(self, src: str, dst: str, type_: str, conf: float) -> None:
        s, d = self._name(src), self._name(dst)
        if s is None or d is None or s == d:
            return
        pair = (normalize_name(s), normalize_name(d))
        if (*pair, type_) in self._triples:
            return
        self._triples.add((*pair, type_))
        self.relations.append(ExtractedRelation(s, d, type_, round(conf, 4)))
        self._pairs.update({pair, pair[::-1]})

    def finish(self) -> None:
        """R6 (event occurs_at time) and R8 (co-occurrence) once all entities are known."""
        events = [self._ents[k] for k in self._order if self._ents[k].type == "Event"]
        for e in events:
            for t in dict.fromkeys(self.times):
                self.relation(e.name, t, "occurs_at", C_EVENT_TIME)
        speaker_key = normalize_name(self.speaker) if self.speaker else None
        others = [k for k in self._order if k != speaker_key][:_MAX_COOCCUR]
        for a_i, a in enumerate(others):
            for b in others[a_i + 1:]:
                if (a, b) not in self._pairs:
                    self.relation(self._ents[a].name, self._ents[b].name, "related_to", C_COOCCUR)
        if speaker_key in self._ents:
            for k in self._order:  # not Time: a speaker adjacent to every date would shortcut the graph
                if k != speaker_key and (speaker_key, k) not in self._pairs and self._ents[k].type != "Time":
                    self.relation(self._ents[speaker_key].name, self._ents[k].name, "related_to", C_COOCCUR)

    def entities(self) -> list[ExtractedEntity]:
        return [self._ents[k] for k in self._order]
