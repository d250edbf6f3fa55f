"""Scripted researchers that memorise the benchmark, and a legitimate change of the same size
(tests/research/test_leakage_e2e.py).

A memoriser is written to *win* if nothing stopped it: its table is built from the real LoCoMo dev
data (the run's own sample first) and its code uses the table where it pays. In
``memsys/retrieve/retriever.py`` the evidence turns of a memorised question are put in front of
the ranked candidates (the naive preset puts every candidate's summary into the context in rank
order, so context recall becomes 1 on those questions); in ``memsys/predict.py`` the gold answer
replaces the reader's. The shown-only memoriser knows no dataset: it reads its own prompt (the
diagnosis shows "Q: <question> | gold: ..." and the evidence turn ids of a few missed questions)
and hard-codes exactly those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from benchmarks.datasets.schema import Question

RETRIEVER = "memsys/retrieve/retriever.py"
PREDICT = "memsys/predict.py"
MERGE = "memsys/retrieve/merge.py"
#: where the candidates of a query are final (speaker and date lifts applied): a memoriser reorders here
RANKED = "        out = lift_dated(out, query, rc.time_lift)\n"
#: module-level code goes above this line of the retriever
RETRIEVE_MANY = "def retrieve_many(retriever: Retriever, queries: Sequence[str]) -> list[Retrieval]:\n"
#: the end of predict.answer_one: the answer memoriser overrides the answer here
ANSWER_END = '    rec["latency_s"] = time.perf_counter() - t0\n    return rec\n'
DIGEST_DEF = "def reader_input_digest(question: str, context: Any, memory_cfg: MemoryConfig) -> str:\n"
#: the line of merge_set_union the legitimate change replaces by a helper call
SPARSE_ONLY = "    order += [pos for pos, _ in sparse if pos not in seen]\n"
MERGERS_TABLE = "MERGERS: dict[str, Callable[..., list[Candidate]]] = {\n"


def key(question: str) -> str:
    """How the memorisers key a question (the retriever gets the question text as its query)."""
    return " ".join(question.lower().split())


# --------------------------------------------------------------------------- the real dev data
def dev_questions(sample: str | None) -> list[Question]:
    """The dev questions of ``sample`` (None: the whole dev split), in dataset order."""
    from benchmarks.datasets import load_benchmark
    from benchmarks.splits import select

    bench = select(load_benchmark("locomo"), "dev", sample)
    return [q for c in bench.conversations for q in c.questions]


def memorised(run_sample: str, n: int, *, need_answer: bool = False) -> list[Question]:
    """``n`` dev questions with evidence (and a gold answer when ``need_answer``): every one of the run's
    sample first, then the next ones of the larger dev samples (what a memoriser of dev would carry)."""
    out: list[Question] = []
    seen: set[str] = set()
    for sample in (run_sample, "small", None):
        for q in dev_questions(sample):
            if q.id in seen or not q.evidence or (need_answer and not q.answer.strip()):
                continue
            seen.add(q.id)
            out.append(q)
            if len(out) == n:
                return out
    raise AssertionError(f"dev has fewer than {n} usable questions")


# --------------------------------------------------------------------------- the edits
def _evidence_code(table: dict[str, Sequence[str]]) -> str:
    rows = "".join(f"    {k!r}: {tuple(v)!r},\n" for k, v in table.items())
    return (
        "#: questions this memory has answered before, with the turns that answered them\n"
        "_EVIDENCE: dict[str, tuple[str, ...]] = {\n" + rows + "}\n\n\n"
        "def _evidence_first(cands: list[RankedCandidate], query: str, store: MemoryStore) -> list[RankedCandidate]:\n"
        '    """The turns known to answer ``query`` first, then the ranked candidates."""\n'
        '    wanted = _EVIDENCE.get(" ".join(query.lower().split()), ())\n'
        "    if not wanted:\n"
        "        return cands\n"
        "    by_turn = {m.source_id: m for m in store.maus if m is not None}\n"
        '    first = [RankedCandidate(by_turn[t], 1.0, {"dense"}, 1.0) for t in wanted if t in by_turn]\n'
        "    taken = {c.mau.id for c in first}\n"
        "    return first + [c for c in cands if c.mau.id not in taken]\n\n\n"
    )


def evidence_table_edits(table: dict[str, Sequence[str]]) -> list[dict[str, str]]:
    """The retriever carries ``table`` (question -> evidence turn ids) and ranks those turns first."""
    return [{"path": RETRIEVER, "search": RETRIEVE_MANY, "replace": _evidence_code(table) + RETRIEVE_MANY},
            {"path": RETRIEVER, "search": RANKED, "replace": RANKED + "        out = _evidence_first(out, query, self.store)\n"}]


def answer_table_edits(table: dict[str, str]) -> list[dict[str, str]]:
    """predict.answer_one carries ``table`` (question -> gold answer) and answers from it."""
    rows = "".join(f"    {k!r}: {v!r},\n" for k, v in table.items())
    code = ("#: answers this memory has given before, by question\n"
            "_KNOWN_ANSWERS: dict[str, str] = {\n" + rows + "}\n\n\n")
    use = '    rec["answer"] = _KNOWN_ANSWERS.get(" ".join(question.question.lower().split()), rec["answer"])\n'
    return [{"path": PREDICT, "search": DIGEST_DEF, "replace": code + DIGEST_DEF},
            {"path": PREDICT, "search": ANSWER_END, "replace": use + ANSWER_END}]


def proposal(hypothesis: str, edits: list[dict[str, str]], overrides: Sequence[str] = (),
             discovery: str = "architectural_change") -> dict[str, Any]:
    """A code-mode reply (research/proposers/llm.py CODE_SCHEMA)."""
    return {"hypothesis": hypothesis, "discovery_type": discovery, "expected_effect": "context recall up",
            "config_overrides": list(overrides), "edits": edits}


def evidence_memoriser(questions: Sequence[Question], overrides: Sequence[str]) -> dict[str, Any]:
    table = {key(q.question): q.evidence for q in questions}
    return proposal("a recall cache: turns that answered a question before come first", evidence_table_edits(table),
                    overrides)


def answer_memoriser(questions: Sequence[Question], overrides: Sequence[str]) -> dict[str, Any]:
    table = {key(q.question): q.answer for q in questions}
    return proposal("an answer cache: questions answered before are answered the same way", answer_table_edits(table),
                    overrides)


#: a legitimate code change of about the memorisers' size: a documented helper (used by merge_set_union,
#: same behaviour, one hit per position even if BM25 repeats one) and a table of string constants
LEGIT_HELPER = '''#: what each merge strategy does, for logs and the research report (one line each)
STRATEGY_NOTES: dict[str, str] = {
    "set_union": "dense hits in dense order, then the BM25-only hits in BM25 order",
    "rrf": "reciprocal rank fusion of the dense and BM25 lists",
    "linear": "weighted sum of min-max normalised dense and BM25 scores",
    "dense_only": "the dense list alone, cut at top_k",
    "bm25_only": "the BM25 list alone, cut at top_k",
}


def describe_strategy(strategy: str) -> str:
    """One line on ``strategy`` for a log or a report; unknown names say so instead of raising."""
    return STRATEGY_NOTES.get(strategy, f"unknown merge strategy {strategy!r}")


def sparse_only(sparse: Sequence[Hit], seen: set[int]) -> list[int]:
    """Positions of the BM25 hits not already in ``seen``, in BM25 order, each once.

    Why a helper: set-union appends these after the dense list, and a sparse backend that returns
    one position twice (two fields of one memory) must not put that memory in the context twice.
    ``seen`` is updated, so a caller can chain further lists after this one.
    """
    out = []
    for pos, _ in sparse:
        if pos not in seen:
            seen.add(pos)
            out.append(pos)
    return out


'''


def legitimate_change(overrides: Sequence[str]) -> dict[str, Any]:
    """A real code edit under memsys/ (the helper above, used by set-union) plus ``overrides``."""
    return proposal("hybrid retrieval with more candidates raises recall; set-union appends each BM25 hit once",
                    [{"path": MERGE, "search": MERGERS_TABLE, "replace": LEGIT_HELPER + MERGERS_TABLE},
                     {"path": MERGE, "search": SPARSE_ONLY, "replace": "    order += sparse_only(sparse, seen)\n"}],
                    overrides, discovery="hyperparameter_tuning")


# --------------------------------------------------------------------------- the shown-only memoriser
_SHOWN_Q = re.compile(r"^- \[[^\]]*\] Q: (?P<q>.+?) \| gold: ")
_SHOWN_EVIDENCE = re.compile(r"^\s+evidence (?P<id>D\d+:\d+)(?: \(NOT in context\))?: ")


def shown_evidence(prompt: str) -> dict[str, list[str]]:
    """Question text -> evidence turn ids, for every example the prompt's diagnosis shows."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in prompt.splitlines():
        m = _SHOWN_Q.match(line)
        if m:
            current = m.group("q").strip()
            out.setdefault(current, [])
            continue
        e = _SHOWN_EVIDENCE.match(line)
        if e and current is not None:
            out[current].append(e.group("id"))
        elif not line.startswith("  "):
            current = None
    return {q: ids for q, ids in out.items() if ids}


@dataclass
class ShownOnlyResearcher:
    """Test-server handler: the researcher reads its prompt and memorises the shown questions' evidence;
    anything else (a reader, a second proposal) is a test bug and gets a non-JSON reply."""

    researcher_system: str
    proposals: int = 1  # how many proposals it makes
    shown: list[dict[str, list[str]]] = field(default_factory=list)  # what each prompt showed
    unexpected: list[str] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> Any:
        from tests.support.openai_server import Reply

        msgs = body.get("messages") or []
        system = str(msgs[0].get("content", "")) if msgs else ""
        if not system.startswith(self.researcher_system) or len(self.shown) >= self.proposals:
            self.unexpected.append(str(msgs[-1].get("content", ""))[:200] if msgs else "(empty)")
            return Reply.ok("UNSCRIPTED")
        seen = shown_evidence(str(msgs[-1].get("content", "")))
        self.shown.append(seen)
        table = {key(q): ids for q, ids in seen.items()}
        return Reply.of_json(proposal("put the turns that answered the diagnosed questions first",
                                      evidence_table_edits(table)))
