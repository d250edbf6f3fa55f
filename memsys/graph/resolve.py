"""Entity resolution: which surface forms name the same entity (the paper's rule).

Two surface forms of the same type merge when their hybrid similarity exceeds
``threshold`` (``GraphConfig.resolve_threshold``, strictly greater)::

    hybrid(a, b) = w * cosine(emb(a), emb(b)) + (1 - w) * S(a, b)
    S(a, b)      = Jaro-Winkler(cmp(a), cmp(b))   (rapidfuzz, normalized to [0, 1])
                 = 1.0 when the token-containment cue holds (below)

with ``w = GraphConfig.resolve_cosine_weight``. ``cmp`` is the comparison form:
``normalize_name`` (lowercase, punctuation dropped, possessive "'s" split off,
leading article dropped) then ``core_name`` (leading titles Dr/Mr/Mrs/Prof... dropped),
so "Dr. Smith" compares as "smith". Embeddings are of the comparison form.

Rules around the score, each guarding a failure measured on LoCoMo names:

- Type: only forms of the same type are compared. A form's type is voted over its
  mentions (sum of confidences; Concept votes count half because Concept is the
  rule extractor's "no cue matched" default).
- Time: dates are canonical already ("7 May 2023" vs "8 May 2023" would score 0.97),
  so Time forms merge only on equal normalized names.
- Digits: forms whose digit tokens differ never merge ("Route 66" / "Route 67").
- Owners: "Melanie's son" and "Melanie's mom" share most characters (hybrid 0.92);
  owner-qualified forms ("X's Y") merge only with forms of the same owner, and are
  compared on their heads (son / mom: 0.57).
- Token containment (Person, Organization): when the tokens of a shorter form are
  all in exactly one longer form of the block ("smith" in "john smith", "stanford" in
  "stanford university") or a single token is the prefix (>= 3 chars) of the first
  token of exactly one longer form ("jon" / "jonathan"), S = 1.0. Ambiguous
  containment ("john" in "john smith" and "john doe") is no cue.
- No chaining through conflicts: clusters grow greedily from the highest-scoring
  pair, and two clusters do not merge if they hold two multi-token forms that do
  not contain one another and do not themselves exceed the threshold ("John Smith"
  and "John Doe" stay apart even if "John" scores high with both).

Blocking keeps this near-linear: forms are compared only within blocks of the same
type sharing the first character of the comparison form, and for Person/Organization
also the last token ("dr smith" / "john smith"); owner-qualified forms are blocked by
owner. Jaro-Winkler weighs the prefix, so forms with different first characters
practically never exceed the threshold without the containment cue; last-token
blocks for other types would be huge ("... party", "... trip") for nothing. Blocks
larger than ``MAX_BLOCK`` are split by the first two characters.

The canonical name of a cluster is its most specific form for Person/Organization
(most tokens after title stripping), else its most mentioned form.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from rapidfuzz.distance import JaroWinkler
from rapidfuzz.process import cdist

from memsys.embed import Embedder
from memsys.graph.schema import Extraction, core_name, normalize_name, split_owner

MAX_BLOCK = 1500
CONCEPT_VOTE_WEIGHT = 0.5
CONTAINMENT_TYPES = frozenset({"Person", "Organization"})
EXACT_ONLY_TYPES = frozenset({"Time"})
_MIN_PREFIX = 3
_DIGITS = re.compile(r"\d+")


@dataclass(slots=True)
class SurfaceForm:
    """One normalized name with everything its mentions said about it."""

    key: str  # normalize_name(name)
    name: str  # most frequent spelling
    type: str  # voted type
    confidence: float  # noisy-or of mention confidences
    mentions: int
    mau_ids: list[str]
    spellings: list[str] = field(default_factory=list)  # every spelling seen, most frequent first


@dataclass(frozen=True, slots=True)
class Merge:
    canonical: str
    type: str
    aliases: tuple[str, ...]  # the other surface forms (most frequent spelling of each)
    score: float  # lowest hybrid score among the links that built the cluster


@dataclass(slots=True)
class Resolution:
    forms: dict[str, SurfaceForm]  # key -> form
    canonical_of: dict[str, str]  # key -> canonical key of its cluster
    clusters: dict[str, list[str]]  # canonical key -> member keys (canonical first)
    merges: list[Merge]
    pairs_compared: int

    @property
    def collapsed(self) -> int:
        """Surface forms that disappeared into another one."""
        return len(self.forms) - len(self.clusters)


def noisy_or(confidences: Iterable[float]) -> float:
    """1 - prod(1 - c): repeated independent sightings raise confidence."""
    log_miss = sum(math.log1p(-min(max(c, 0.0), 0.999)) for c in confidences)
    return 1.0 - math.exp(log_miss)


def collect_surface_forms(extractions: Iterable[Extraction]) -> dict[str, SurfaceForm]:
    """Group all extracted entities by normalized name, voting the type."""
    spell: dict[str, Counter[str]] = defaultdict(Counter)
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    confs: dict[str, list[float]] = defaultdict(list)
    maus: dict[str, dict[str, None]] = defaultdict(dict)
    for ex in extractions:
        for e in ex.entities:
            key = normalize_name(e.name)
            if not key:
                continue
            spell[key][e.name] += 1
            votes[key][e.type] += e.confidence * (CONCEPT_VOTE_WEIGHT if e.type == "Concept" else 1.0)
            confs[key].append(e.confidence)
            maus[key][ex.mau_id] = None
    out = {}
    for key, names in spell.items():
        spellings = [n for n, _ in names.most_common()]
        type_ = max(votes[key].items(), key=lambda kv: (kv[1], kv[0]))[0]
        out[key] = SurfaceForm(key, spellings[0], type_, noisy_or(confs[key]), len(confs[key]), list(maus[key]), spellings)
    return out


def _cmp_form(key: str) -> tuple[str | None, str]:
    owner, head = split_owner(core_name(key))
    return owner, head


def _digits(text: str) -> tuple[str, ...]:
    return tuple(sorted(_DIGITS.findall(text)))


class _Forms:
    """The forms of one type with their comparison strings and embeddings."""

    def __init__(self, forms: list[SurfaceForm], vecs: np.ndarray):
        self.forms = forms
        parts = [_cmp_form(f.key) for f in forms]
        self.owner = [p[0] for p in parts]
        self.cmp = [p[1] for p in parts]
        self.tokens = [tuple(c.split()) for c in self.cmp]
        self.digits = [_digits(c) for c in self.cmp]
        self.vecs = vecs

    def score(self, a: int, b: int, w: float, containment: bool = False) -> float:
        s = 1.0 if containment else JaroWinkler.normalized_similarity(self.cmp[a], self.cmp[b])
        return w * float(self.vecs[a] @ self.vecs[b]) + (1 - w) * s

    def compatible(self, a: int, b: int) -> bool:
        return self.owner[a] == self.owner[b] and self.digits[a] == self.digits[b]

    def conflict(self, a: int, b: int, w: float, threshold: float) -> bool:
        if not self.compatible(a, b):
            return True
        ta, tb = set(self.tokens[a]), set(self.tokens[b])
        if len(ta) < 2 or len(tb) < 2 or ta <= tb or tb <= ta:
            return False
        return self.score(a, b, w) <= threshold


def _blocks(fs: _Forms, by_last_token: bool) -> list[list[int]]:
    keyed: dict[tuple, list[int]] = defaultdict(list)
    for i, cmp in enumerate(fs.cmp):
        if not cmp:
            continue
        if fs.owner[i] is not None:
            keyed[("owner", fs.owner[i])].append(i)
            continue
        keyed[("first", cmp[0])].append(i)
        if by_last_token:
            keyed[("last", fs.tokens[i][-1])].append(i)
    out = []
    for members in keyed.values():
        if len(members) < 2:
            continue
        if len(members) <= MAX_BLOCK:
            out.append(members)
            continue
        sub: dict[str, list[int]] = defaultdict(list)
        for i in members:
            sub[fs.cmp[i][:2]].append(i)
        out.extend(m for m in sub.values() if len(m) >= 2)
    return out


def _containment_pairs(fs: _Forms) -> set[tuple[int, int]]:
    """(short, long) pairs where the short form is contained in exactly one longer form."""
    postings: dict[str, set[int]] = defaultdict(set)
    firsts: dict[str, list[int]] = defaultdict(list)
    for i, toks in enumerate(fs.tokens):
        if fs.owner[i] is None and toks:
            for t in toks:
                postings[t].add(i)
            firsts[toks[0][:_MIN_PREFIX]].append(i)
    pairs = set()
    for i, toks in enumerate(fs.tokens):
        if fs.owner[i] is not None or not toks:
            continue
        sets = [postings[t] for t in toks]
        containers = {j for j in set.intersection(*sets) if len(fs.tokens[j]) > len(toks)}
        if len(toks) == 1 and len(toks[0]) >= _MIN_PREFIX:
            containers |= {j for j in firsts[toks[0][:_MIN_PREFIX]]
                           if j != i and fs.tokens[j][0].startswith(toks[0]) and fs.tokens[j][0] != toks[0]}
        if len(containers) == 1:
            pairs.add((i, containers.pop()))
    return pairs


def _canonical(forms: list[SurfaceForm], type_: str) -> SurfaceForm:
    def rank(f: SurfaceForm):
        specific = len(_cmp_form(f.key)[1].split()) if type_ in CONTAINMENT_TYPES else 0
        return (specific, f.mentions, len(f.name), f.key)

    return max(forms, key=rank)


def resolve_entities(
    forms: dict[str, SurfaceForm], embedder: Embedder, *, threshold: float, cosine_weight: float,
) -> Resolution:
    """Cluster surface forms with the hybrid rule; see the module docstring."""
    w = cosine_weight
    by_type: dict[str, list[SurfaceForm]] = defaultdict(list)
    for f in forms.values():
        by_type[f.type].append(f)
    fuzzy = [f for t, fl in by_type.items() if t not in EXACT_ONLY_TYPES for f in fl]
    texts = sorted({_cmp_form(f.key)[1] or f.key for f in fuzzy})
    vec_of = dict(zip(texts, embedder.embed(texts))) if texts else {}
    canonical_of: dict[str, str] = {}
    clusters: dict[str, list[str]] = {}
    merges: list[Merge] = []
    compared = 0
    for type_, flist in sorted(by_type.items()):
        flist.sort(key=lambda f: f.key)
        if type_ in EXACT_ONLY_TYPES or len(flist) < 2:
            groups = [[i] for i in range(len(flist))]
            link_score: dict[int, float] = {}
        else:
            vecs = np.stack([vec_of[_cmp_form(f.key)[1] or f.key] for f in flist]).astype(np.float32)
            fs = _Forms(flist, vecs)
            candidates: dict[tuple[int, int], float] = {}
            for block in _blocks(fs, by_last_token=type_ in CONTAINMENT_TYPES):
                idx = np.asarray(block)
                jw = cdist([fs.cmp[i] for i in block], [fs.cmp[i] for i in block],
                           scorer=JaroWinkler.normalized_similarity, dtype=np.float32, workers=1)
                hybrid = w * (vecs[idx] @ vecs[idx].T) + (1 - w) * jw
                compared += len(block) * (len(block) - 1) // 2
                rows, cols = np.nonzero(np.triu(hybrid > threshold, k=1))
                for r, c in zip(rows.tolist(), cols.tolist()):
                    a, b = sorted((block[r], block[c]))
                    if fs.compatible(a, b):
                        candidates[(a, b)] = float(hybrid[r, c])
            if type_ in CONTAINMENT_TYPES:
                for a, b in _containment_pairs(fs):
                    s = fs.score(a, b, w, containment=True)
                    if s > threshold and fs.compatible(a, b):
                        key = tuple(sorted((a, b)))
                        candidates[key] = max(s, candidates.get(key, 0.0))
            groups, link_score = _greedy_clusters(fs, candidates, w, threshold)
        for members in groups:
            mforms = [flist[i] for i in members]
            canon = _canonical(mforms, type_)
            order = [canon.key] + sorted((f.key for f in mforms if f.key != canon.key),
                                         key=lambda k: -forms[k].mentions)
            clusters[canon.key] = order
            for k in order:
                canonical_of[k] = canon.key
            if len(members) > 1:
                merges.append(Merge(canon.name, type_, tuple(forms[k].name for k in order[1:]),
                                    min(link_score.get(i, 1.0) for i in members)))
    merges.sort(key=lambda m: (-len(m.aliases), m.type, m.canonical))
    return Resolution(forms, canonical_of, clusters, merges, compared)


def _greedy_clusters(fs: _Forms, candidates: dict[tuple[int, int], float], w: float,
                     threshold: float) -> tuple[list[list[int]], dict[int, float]]:
    parent = list(range(len(fs.forms)))
    members = {i: [i] for i in range(len(fs.forms))}
    link_score: dict[int, float] = {}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), s in sorted(candidates.items(), key=lambda kv: (-kv[1], kv[0])):
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        if any(fs.conflict(x, y, w, threshold) for x in members[ra] for y in members[rb]):
            continue
        parent[rb] = ra
        members[ra].extend(members.pop(rb))
        link_score[a] = min(link_score.get(a, 1.0), s)
        link_score[b] = min(link_score.get(b, 1.0), s)
    return [sorted(m) for m in members.values()], link_score


def merge_examples(res: Resolution, n: int = 10) -> list[dict]:
    """A few merges for reports, most aliases first."""
    return [{"canonical": m.canonical, "type": m.type, "aliases": list(m.aliases), "score": round(m.score, 3)}
            for m in res.merges[:n]]


def resolve_extractions(extractions: Sequence[Extraction], embedder: Embedder, *, threshold: float,
                        cosine_weight: float) -> Resolution:
    return resolve_entities(collect_surface_forms(extractions), embedder,
                            threshold=threshold, cosine_weight=cosine_weight)
