"""The judge's stress test: known-wrong answers built from real gold answers, false-accept rates, warnings.

The two end-to-end cases run a real OpenAI-protocol server on 127.0.0.1 (tests/support/openai_server.py)
through the real SDK: a judge that says CORRECT to everything is flagged, a judge that compares with the
gold passes.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import openai
import pytest
from scipy.stats import binomtest

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.memgallery import load_memgallery
from benchmarks.datasets.schema import Question
from benchmarks.judge.ask import ask_judge
from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.score import mean_scores
from benchmarks.judge.stress import (
    KINDS,
    Rate,
    StressItem,
    StressJudgement,
    build_specific,
    build_stress_items,
    build_vague,
    false_accept_rates,
    find_date,
    is_wrong,
    names_by_conversation,
    stress_judge_items,
    stress_judgements,
    stress_plan,
    stress_warnings,
    wilson_rate,
)
from benchmarks.metrics.locomo import normalize_locomo
from harness.paths import data_dir
from tests.support.openai_server import OpenAITestServer, Reply

MEMGALLERY_DIR = data_dir() / "mem-gallery" / "benchmark" / "data" / "dialog"
NAMES = frozenset({"Caroline", "Melanie", "Sweden", "Jon", "Oscar"})


def question(answer: str, text: str = "When did Caroline go to the support group?", category: str = "2") -> Question:
    return Question(id="conv-x:q0", conversation_id="conv-x", question=text, answer=answer, category=category)


def rng() -> random.Random:
    return random.Random(0)


# --- the rules on single answers ------------------------------------------------------------------
@pytest.mark.parametrize("text, form, day, month, year", [
    ("7 May 2023", "dmy", 7, 5, 2023),
    ("The week before 9 June 2023", "dmy", 9, 6, 2023),
    ("19 January, 2023", "dmy", 19, 1, 2023),
    ("13 August", "dmy", 13, 8, None),
    ("May 7, 2023", "mdy", 7, 5, 2023),
    ("January, 2023", "my", None, 1, 2023),
    ("September 2022", "my", None, 9, 2022),
    ("Since 2016", "y", None, None, 2016),
])
def test_dates_are_found(text, form, day, month, year):
    found = find_date(text)
    assert found is not None and (found.form, found.day, found.month, found.year) == (form, day, month, year)


@pytest.mark.parametrize("text", ["Cyberpunk 2077", "4 years", "yes", "she may come"])
def test_non_dates_are_not_dates(text):
    assert find_date(text) is None


def test_a_dated_day_becomes_a_season_or_a_month_pair_and_a_nearby_day():
    q = question("7 May 2023")
    assert build_vague(q, NAMES, rng())[1] in ("sometime in spring 2023", "in May or June 2023")
    rule, wrong = build_specific(q, NAMES, rng())
    assert rule == "date" and re.fullmatch(r"\d{1,2} (April|May|June) 2023", wrong) and wrong != "7 May 2023"


def test_a_relative_date_keeps_its_words_when_shifted():
    rule, wrong = build_specific(question("The week before 9 June 2023"), NAMES, rng())
    assert rule == "date" and wrong.startswith("The week before ") and not wrong.endswith(" 9 June 2023")
    assert build_vague(question("The week before 9 June 2023"), NAMES, rng())[1].startswith(("sometime in", "in June"))


def test_month_and_year_dates_move_by_months_and_years_by_years():
    wrong = build_specific(question("December 2023"), NAMES, rng())[1]
    assert re.fullmatch(r"(September|October|November) 2023|(January|February|March) 2024", wrong)
    assert build_vague(question("December 2023"), NAMES, rng())[1] == "sometime in winter 2023"
    assert build_vague(question("2022"), NAMES, rng())[1] == "sometime in the 2020s"
    assert re.fullmatch(r"20(19|20|21|23|24|25)", build_specific(question("2022"), NAMES, rng())[1])


def test_numbers_become_vague_or_change():
    q = question("4 years", "How long has Caroline had her friends?")
    assert build_vague(q, NAMES, rng())[1] in ("a few years", "several years")
    assert build_specific(q, NAMES, rng())[1] in ("5 years", "6 years", "8 years")
    assert build_specific(question("Three", "How many kids?"), NAMES, rng())[1] in ("Four", "Five", "Six")


def test_names_become_their_kind_or_another_name_from_the_conversation():
    q = question("Sweden", "Where did Caroline move from?", "4")
    assert build_vague(q, NAMES, rng()) == ("name", "a place")
    rule, wrong = build_specific(q, NAMES, rng())
    assert rule == "name" and wrong in {"Melanie", "Jon", "Oscar"}  # never the gold, never the asker's own name
    book = question("Little Women", "What book did Melanie read?", "4")
    assert build_vague(book, NAMES, rng())[1] == "a book"
    long = question("In the studio at Oscar's mansion", "Where did they record?", "4")
    assert build_vague(long, NAMES, rng())[1] == "In the studio at someone's mansion"


def test_no_rule_no_item():
    for answer in ("yes", "Likely no", "adoption agencies"):
        assert build_vague(question(answer, "Would she?"), NAMES, rng()) is None
        assert build_specific(question(answer, "Would she?"), NAMES, rng()) is None


def test_wrongness_is_checked_with_the_official_f1():
    q = question("7 May 2023")
    assert is_wrong("10 May 2023", q)
    assert not is_wrong("7 May, 2023", q)  # LoCoMo's normalisation drops the comma: the same answer
    assert not is_wrong("the 7 May 2023", q)
    multi = question("beach, mountains, forest", "Where does she like to go?", "1")
    assert is_wrong("beach, mountains", multi)
    assert not is_wrong("forest, beach, mountains", multi)


# --- on the real data -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def locomo(locomo_path):
    return load_locomo(locomo_path)


def test_real_locomo_plan_is_stratified_wrong_and_the_same_every_time(locomo):
    names = names_by_conversation(locomo.conversations)
    assert {"Caroline", "Melanie"} <= set(names["conv-26"])
    plan = stress_plan(locomo.questions, names, seed=0, size=40)
    assert plan == stress_plan(locomo.questions, names, seed=0, size=40)
    assert plan != stress_plan(locomo.questions, names, seed=1, size=40)
    by_id = {q.id: q for q in locomo.questions}
    assert plan.pool == sum(q.category != "5" for q in locomo.questions)
    for kind in KINDS:
        items = [i for i in plan.items if i.kind == kind]
        assert len(items) == 40 and len({i.qid for i in items}) == 40
        assert {i.category for i in items} == {"1", "2", "3", "4"}  # stratified: every category, no category 5
        assert plan.skipped[kind] > 0  # many golds have no date, number or name ("yes", "adoption agencies")
        for item in items:
            assert is_wrong(item.wrong_answer, by_id[item.qid])
            assert normalize_locomo(item.wrong_answer) != normalize_locomo(item.gold)
    assert build_stress_items(locomo.questions, names, 0, 40) == list(plan.items)


def test_real_locomo_dates_dominate_the_temporal_category(locomo):
    names = names_by_conversation(locomo.conversations)
    plan = stress_plan(locomo.questions, names, seed=0, size=40)
    rules = Counter(i.rule for i in plan.items if i.category == "2")
    assert rules["date"] >= sum(rules.values()) * 0.8


@pytest.mark.skipif(not MEMGALLERY_DIR.is_dir(), reason=f"Mem-Gallery data not at {MEMGALLERY_DIR}")
def test_real_memgallery_plan_is_wrong_by_its_own_f1():
    bench = load_memgallery(MEMGALLERY_DIR)
    plan = stress_plan(bench.questions, names_by_conversation(bench.conversations), seed=0, size=40)
    by_id = {q.id: q for q in bench.questions}
    assert len([i for i in plan.items if i.kind == "vague"]) == 40
    assert all(is_wrong(i.wrong_answer, by_id[i.qid]) for i in plan.items)
    assert not any(i.gold.startswith("D") and ":IMG_" in i.gold for i in plan.items)  # image ids have no rule


# --- rates and warnings ---------------------------------------------------------------------------
def judged(kind: str, scores: list[float]) -> list[StressJudgement]:
    return [StressJudgement(StressItem(f"q{i}", kind, "Q?", "7 May 2023", "x", "2"), s) for i, s in enumerate(scores)]


def test_false_accept_rates_use_scipys_wilson_interval():
    rates = false_accept_rates(judged("vague", [1.0] * 25 + [2 / 3] * 2 + [1 / 3] * 3 + [0.0] * 10)
                               + judged("specific", [0.0] * 40))
    ci = binomtest(27, 40).proportion_ci(confidence_level=0.95, method="wilson")
    assert rates["vague"] == Rate(k=27, n=40, rate=27 / 40, ci_low=ci.low, ci_high=ci.high)
    assert rates["specific"].k == 0 and rates["specific"].ci_low == 0.0 and rates["specific"].ci_high > 0
    assert false_accept_rates(judged("vague", [1.0])).keys() == {"vague"}  # a kind never judged has no rate


def test_warning_only_above_the_limit():
    high = {"vague": wilson_rate(25, 40), "specific": wilson_rate(4, 40)}
    (line,) = stress_warnings(high, max_false_accept=0.2)
    assert line.startswith("WARNING: judge accepted 62% (n=40, 95% CI ")
    assert line.endswith("of vague-but-topical wrong answers; J from this judge is lenient")
    assert stress_warnings({"vague": wilson_rate(8, 40)}, max_false_accept=0.2) == []  # 20% is not above 20%
    both = stress_warnings({"vague": wilson_rate(40, 40), "specific": wilson_rate(30, 40)}, 0.2)
    assert len(both) == 2 and "specific-but-wrong answers" in both[1]


# --- end to end against a real OpenAI-protocol server ----------------------------------------------
_FIELD = re.compile(r"^(Gold answer|Answer to grade): (?:<answer>)?(.*?)(?:</answer>)?$", re.MULTILINE)


def strict_judge(request: dict) -> Reply:
    """CORRECT when every word of the gold is in the answer (LoCoMo normalisation), else WRONG."""
    fields = dict(_FIELD.findall(request["messages"][-1]["content"]))
    gold = set(normalize_locomo(fields["Gold answer"]).split())
    answer = set(normalize_locomo(fields["Answer to grade"]).split())
    return Reply.of_json({"label": "CORRECT" if gold <= answer else "WRONG"})


def run_stress(server: OpenAITestServer, locomo, tmp_path, cfg: JudgeConfig) -> tuple[dict[str, Rate], list[str]]:
    plan = stress_plan(locomo.questions, names_by_conversation(locomo.conversations), cfg.stress_seed, cfg.stress_size)
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    verdicts = ask_judge(client, cfg, stress_judge_items(plan.items), tmp_path / "stress.jsonl")
    rates = false_accept_rates(stress_judgements(plan.items, mean_scores(verdicts)), cfg.pass_score, cfg.ci_level)
    return rates, stress_warnings(rates, cfg.max_false_accept, cfg.ci_level)


def test_a_judge_that_accepts_everything_is_flagged(locomo, tmp_path):
    cfg = JudgeConfig(runs=1, stress_size=40)
    with OpenAITestServer(lambda request: Reply.of_json({"label": "CORRECT"})) as server:
        rates, warnings = run_stress(server, locomo, tmp_path, cfg)
        assert len(server.chat_requests) == 80
    assert rates["vague"].rate == 1.0 and rates["vague"].n == 40
    assert rates["specific"].rate == 1.0
    assert warnings[0].startswith("WARNING: judge accepted 100% (n=40, 95% CI 91%-100%) of vague-but-topical")
    assert "J from this judge is lenient" in warnings[0]


def test_a_judge_that_compares_with_the_gold_passes(locomo, tmp_path):
    cfg = JudgeConfig(protocol="strict", runs=1, stress_size=40)
    with OpenAITestServer(strict_judge) as server:
        rates, warnings = run_stress(server, locomo, tmp_path, cfg)
    assert warnings == []
    assert rates["vague"].rate <= cfg.max_false_accept and rates["specific"].rate <= cfg.max_false_accept
