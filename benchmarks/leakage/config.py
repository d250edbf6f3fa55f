"""Every threshold of the leakage screen, in one place, each with the reason for its value.

The values were tuned on the repository's own history (benchmarks/perf/bench_leakage.py screens
every commit that touched the mutable surface, plus the legitimate researcher edits of the test
suite): all of it must pass (0 hits), while the synthetic attacks built from the real dev data (30
questions -> evidence ids, 30 questions -> gold answers, 30 question ids -> answers) must be caught.
"""

from __future__ import annotations

from dataclasses import dataclass

#: file endings that hold data, not code or prompts: one of them added under the surface is a hit by
#: itself (the surface is code, prompt text and YAML presets; nothing in its history ever added one)
DATA_SUFFIXES = (
    ".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".pkl", ".pickle", ".npy", ".npz", ".parquet", ".feather",
    ".arrow", ".h5", ".hdf5", ".db", ".sqlite", ".sqlite3", ".msgpack", ".joblib", ".marshal", ".shelve",
    ".bin", ".dat", ".pt", ".gz", ".zip", ".xz", ".bz2", ".tar", ".7z",
)

#: structured text whose lines are fields (answers sit in them unquoted): split at ":" "," and separators
FIELD_SUFFIXES = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".csv", ".tsv")
#: files whose "#" starts a comment, left out of the literals (not a value the code can read)
HASH_COMMENTS = (".py", ".yaml", ".yml", ".toml", ".ini", ".cfg")


@dataclass(frozen=True)
class LeakageConfig:
    # --- question text -------------------------------------------------------------------------
    #: word n-gram length matched against dev/test questions. 8 words of a question in a row do not
    #: occur by chance in code or prompts (history: 0 in 71 surface commits), yet any quoted question
    #: of 8+ words carries one, so one such n-gram is a hit
    ngram: int = 8
    #: questions shorter than ``ngram`` words are matched whole when they have at least this many
    #: words (18% of LoCoMo's questions are 5-7 words long; with 5 or fewer the whole question is a
    #: common phrase); 3,620 of the 3,697 dev+test questions are then findable by their text
    short_question_min_words: int = 6
    #: an n-gram shared by this many different questions or more is a template of the dataset, not one
    #: question (Mem-Gallery's "please answer using an arabic numeral e g 2 instead of two": 97
    #: n-grams): a prompt may well say the same, and quoting a template leaks nothing
    max_questions_per_ngram: int = 3
    #: whole short questions (fewer than ``ngram`` words) quoted before it is a hit: one is an example
    #: (history: memsys/answer/times.py's docstring asks "When did Melanie go to the museum?"), two a list
    short_questions_min: int = 2

    # --- gold answers --------------------------------------------------------------------------
    #: shortest normalised answer that can count ("2", "yes", "red" are everyone's words)
    answer_min_chars: int = 4
    #: an answer given to more than this share of all questions is common ("Not mentioned." is 5% of
    #: the questions, "Yes." 3%); 0.3% is 11 of LoCoMo + Mem-Gallery's 3,697 questions
    answer_max_share: float = 0.003
    #: an answer of plain lower-case words (no digit, no name) counts from this many words on:
    #: "beach mountains forest" is specific, "two times" or "abstract art" is prose
    answer_min_plain_words: int = 3
    #: distinct distinctive answers found as literals before it is a hit: one "Paris" or "7 May 2023"
    #: in a docstring is an example; three are a table
    answer_min_distinct: int = 3
    #: an answer literal may be a piece of a longer string split at these characters ("q|answer;...")
    answer_separators: str = "|;\t="

    # --- evidence turn ids ----------------------------------------------------------------------
    #: distinct "D12:3" ids anywhere in a diff before it is a hit whatever surrounds them: history's
    #: most in one diff is 1 (the example in memsys/memory.py's docstring), tests and examples mention
    #: one or two; the 30-question attack carries 37
    evidence_ids_min: int = 4
    #: distinct ids within ``near_lines`` of question-like text (a question literal or an n-gram hit):
    #: ids next to questions are a question -> evidence table even when small (history: 0)
    evidence_ids_near_question_min: int = 3
    #: how far (lines) question-like text may be from the ids and still count as beside them
    near_lines: int = 5

    # --- question ids ---------------------------------------------------------------------------
    #: distinct benchmark question ids ("conv-26:q12"): memsys never needs one (history: 0); a docstring
    #: may show the format once, two are a list
    question_ids_min: int = 2

    # --- data-like literals ---------------------------------------------------------------------
    #: a literal table (dict/list/set/tuple display, or a window of an unparsable hunk) this large is
    #: looked at; history's tables reach 121 literals (memsys/graph/lexicon.py's stop words), so size
    #: alone cannot tell data from code: ``table_min_record_like`` says what must be in it
    table_min_literals: int = 20
    #: record-like literals (a question of >= ``record_min_words`` words, a hash-like token, a benchmark
    #: id) the table must hold. History's tables hold at most 1 (lexicons hold single words, schemas
    #: field names); the attacks' tables 26-74. Plain sentences do not count: code keeps tables of
    #: descriptions (research's lever catalogue has 25), and few-shot prompts ask 3-5 questions
    table_min_record_like: int = 10
    #: words a question-like literal needs to be a record (96.6% of LoCoMo's questions have 6 or more)
    record_min_words: int = 6
    #: characters of a hash-like token (hex, base64, letters and digits mixed) that could stand for a
    #: hashed question (a 16-hex sha1 prefix is enough to key 3,697 questions)
    opaque_min_chars: int = 12
    #: characters of one hash-like literal that make it an encoded blob (base64 of a compressed table):
    #: history's longest hash-like literal is 64 characters (a sha256 pin); the 30-question table is 980
    blob_min_chars: int = 256
    #: lines of an unparsable hunk counted together as one table (a 30-row table spans ~32 lines)
    window_lines: int = 40

    # --- report ---------------------------------------------------------------------------------
    snippet_chars: int = 120  # longest snippet kept per hit
    example_chars: int = 60  # longest matched value quoted (a question, a table cell)
    lesson_hits: int = 3  # hits named in the lesson
    lesson_examples: int = 3  # matched values quoted per hit in the lesson
